"""Every idea's own diagnostic, measured on every row's trained model (so each row can be read against
the baseline on the same scale), plus the run's training throughput.

- nonlocality (ConViT Figs. 4-5): mean attention distance in patches, per layer (mean over heads) and
  over the whole model, each layer on its actual input.
- CosSim (patch diversification Fig. 2a): cosine similarity of the last block's patch tokens.
- r(Z_L)/r(Z_0) (Aug-ViT Eq. 4, Dong et al.): feature diversity of the last block's output relative to
  the embedded tokens; below 1 means the tokens became more alike.
- ||dL/dW2_L||_F at initialisation (Res-Post-LN Theorem 4): the last MLP weight's gradient of the row's
  model freshly initialised with the run's seed, cross-entropy on the probe batch.
- images/s: training images per second over the run's epochs; for a run started from another (CMHSA's
  attention phase) over both phases, from the source's record.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from repro.functions import register
from repro.probes.diversity import diversity_curve, oversmoothing_metrics
from repro.probes.locality import layer_nonlocality
from repro.runs import RunSpec, source_spec
from repro.train.model import create_model


def grad_norm_at_init(config: dict, seed: int, images: torch.Tensor, labels: torch.Tensor) -> float:
    """||dL/dW2_L||_F of the last block's MLP output weight, for the run's model at initialisation."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = create_model(config, int(config["data"]["num_classes"])).to(images.device).train()
    finally:
        torch.random.set_rng_state(state)
    F.cross_entropy(model(images), labels).backward()
    return float(model.blocks[-1].mlp.fc2.weight.grad.norm())


def images_per_s(run: RunSpec, history: list, source: dict | None = None) -> float | None:
    """Training images/s of this run, with the phase of the run it started from included (``source``: that run's
    record, loaded by the run stage: ProbeContext.source)."""
    if source is None and source_spec(run) is not None:
        return None  # a dry run: no source phase to add
    rows = [*history, *((source["metrics"].get("history") or []) if source else [])]
    rows = [r for r in rows if isinstance(r, dict) and r.get("epoch_s") and r.get("images_per_s")]
    seconds = sum(r["epoch_s"] for r in rows)
    return sum(r["images_per_s"] * r["epoch_s"] for r in rows) / seconds if seconds else None


@register("crosspaper.diagnostics")
def diagnostics(model: torch.nn.Module, ctx) -> dict:
    """Training probe (config['probes']): the diagnostics above on the engine's fixed test batch."""
    layers = [sum(h) / len(h) for h in layer_nonlocality(model, ctx.images)]
    smooth = oversmoothing_metrics(model, ctx.images)
    ratio = diversity_curve(model, ctx.images)["ratio"]
    cfg, run = ctx.config, ctx.run
    return {"nonlocality": sum(layers) / len(layers), "nonlocality_layers": layers,
            "cossim_last": smooth["cossim_last"], "cossim_layers": smooth["cossim_layers"],
            "diversity_ratio": ratio[-1], "diversity_layers": ratio[1:],
            "grad_norm_init": grad_norm_at_init(cfg, run.seed, ctx.images, ctx.labels),
            "images_per_s": images_per_s(run, ctx.history, ctx.source)}
