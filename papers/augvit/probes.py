"""What the Aug-ViT runs measure: cost (Table 2), feature diversity of the shortcut variants and the Eq. S.4
bound, at initialisation (probe runs) and on trained models (``probes`` entries of train runs).

Every diversity measurement goes through ``shortcut_analysis``, so init and trained numbers are the same
statistic on the same kind of images. Its metric keys, per variant v of the model's own weights:
  v = d: the model as it is          c: MLP's augmented shortcuts removed
  v = b: every augmented shortcut removed (DeiT)   a: every shortcut removed (attention only)
For an Aug-ViT with shortcuts on MSA and MLP these are the supplement's variants (a)-(d); for a DeiT,
d = c = b. ``div_v`` = r(Z_L)/r(Z_0) and ``rel_v`` = r(Z_L)/||Z_L||_F at the last block (scalars, the
table cells), ``ratio_v`` / ``relative_v`` the per-block curves (l = 1..L, for the figures; r(Z_0)/r(Z_0)
is 1 by definition and r(Z_0)/||Z_0||_F is ``relative_input``).
"""
from __future__ import annotations

import copy

import timm
import torch
import torch.nn.functional as F
from torch import nn

from repro.data import build_data
from repro.functions import register
from repro.models import CirculantLinear
from repro.models.cost import count_macs, count_params, macs_without_attention
from repro.probes.budget import probe_images
from repro.train.model import create_model

from . import models  # noqa: F401  (registers augvit_dense_proj)
from .diversity import cut_shortcuts, diversity_curve, s4_bound, s6_s7_bound

# paper's variant letter -> the name cut_shortcuts gives it
VARIANTS = {"d": "augvit_msa_mlp", "c": "augvit_msa", "b": "deit", "a": "attention_only"}


def shortcut_analysis(model: nn.Module, images: torch.Tensor) -> dict:
    """Diversity of the four shortcut variants of ``model`` and Eq. S.4 layer by layer (see module doc).

    S.4 is evaluated in the supplement's setting (an AugMSA stack without LayerNorm built from the
    model's own modules: ``s4_*``) and on the deployed pre-LN blocks (``s4_model_*``, where the branches
    see LN(Z_l) and S.4's hypothesis holds only approximately). ``s4_worst`` is the largest
    r(Z_{l+1}) / (H alpha_l r(Z_l)) over layers and images (``s4_ratio``: per block, over images): the linear
    term bounds every step when <= 1.
    """
    out: dict = {}
    cuts = cut_shortcuts(model)
    for v, name in VARIANTS.items():
        curve = diversity_curve(cuts[name], images)
        out[f"ratio_{v}"], out[f"relative_{v}"] = curve["ratio"][1:], curve["relative"][1:]
        out[f"div_{v}"], out[f"rel_{v}"] = curve["ratio"][-1], curve["relative"][-1]
    out["relative_input"] = curve["relative"][0]
    for setting, prefix in (("stack", "s4"), ("model", "s4_model")):
        rows = s4_bound(model, images, setting=setting)
        out[f"{prefix}_r_out"] = [r["r_out"] for r in rows]
        out[f"{prefix}_linear"] = [r["linear_term"] for r in rows]
        out[f"{prefix}_ratio"] = [r["worst_ratio"] for r in rows]
        out[f"{prefix}_worst"] = max(out[f"{prefix}_ratio"])
    out["s4_alpha"] = [r["alpha"] for r in rows]
    out["s4_lipschitz"] = rows[0]["lipschitz"]
    s2 = s6_s7_bound(model, images)  # Eq. S.6 / S.7 in the supplement's AugMSA + AugMLP stack
    for key in ("s6_ratio", "s7_ratio"):
        out[key] = [r[key] for r in s2]
        out[key.replace("ratio", "worst")] = max(out[key])
    return out


@register("augvit.diversity_at_init")
def diversity_at_init(config: dict) -> dict:
    """Probe run: ``shortcut_analysis`` of a freshly initialised config['model'] (probe_args: ``seed`` of the
    weights) on ``images`` test images spread over the test set, as the engine hands them to a train run's probes."""
    args = config.get("probe_args") or {}
    torch.manual_seed(int(args.get("seed", 0)))
    model = create_model(config, int(config["data"]["num_classes"])).eval()
    size = model.patch_embed.img_size[0]
    n = probe_images(config, int(args.get("images", 64)))
    images = build_data(config["data"], config["recipe"], seed=0).test.sample(n)[0]
    if images.shape[-1] != size:  # bicubic to the model's resolution (Aug-ViT-S at 224 px on CIFAR images)
        images = F.interpolate(images, size=size, mode="bicubic", align_corners=False)
    return shortcut_analysis(model, images)


@register("augvit.cost")
def cost(config: dict) -> dict:
    """Probe run (Table 2): parameters and MACs of config['model'] at probe_args.img_size.

    ``macs`` counts the circulant paths as FFT products (the paper's convention), ``macs_dense`` builds
    the same model with ``aug_fft=False``, the release's dense materialised matrix; for a model without
    augmented shortcuts the two are equal. ``macs_no_attn`` leaves out the attention matmuls.
    """
    args, spec = config.get("probe_args") or {}, config["model"]
    size = int(args.get("img_size", 224))
    kwargs = {**(spec.get("kwargs") or {}), "img_size": size}
    model = timm.create_model(spec["name"], **kwargs)
    macs, by_op = count_macs(model, size, by_op=True)
    out = {"params": count_params(model), "macs": macs, "macs_no_attn": macs_without_attention(by_op)}
    has_aug = any(getattr(b, "aug_attn", None) is not None for b in model.blocks)
    out["macs_dense"] = count_macs(timm.create_model(spec["name"], **kwargs, aug_fft=False), size) if has_aug else macs
    return out


@register("augvit.trained_analysis")
def trained_analysis(model: nn.Module, ctx) -> dict:
    """Probe of a train run: ``shortcut_analysis`` on the trained model (the engine's fixed test batch)
    and its MACs at the run's resolution, every block-circulant path counted as an FFT product (the paper's
    convention) whichever product the model computes; dense Theta (1 x 1 blocks) stays a matrix product."""
    out = shortcut_analysis(model, ctx.images)
    counted = copy.deepcopy(model).float().cpu()  # the counter feeds a CPU input
    for m in counted.modules():
        if isinstance(m, CirculantLinear):
            m.fft = m.block > 1
    return {**out, "macs": count_macs(counted, int(ctx.config["data"]["img_size"]))}
