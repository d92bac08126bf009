"""ConViT's evaluation-time interventions (Tables 5 and 6) and per-epoch locality records (Figs. 4-6).

Interventions swap parameters for the duration of a ``with`` block and put the original Parameter
objects back afterwards, so weights, optimizer references and forward() stay untouched:

- Table 5: the absolute position embedding is zeroed at test time.
- Table 6: in the first k GPSA layers the gate sigmoid(lambda) is forced to exactly 1 (content
  attention masked, only positional attention left) or exactly 0 (positional attention masked).
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from timm.utils import accuracy
from torch import nn

from repro.functions import register
from repro.probes.hooks import eval_mode
from repro.probes.locality import gating, gpsa_modules, layer_nonlocality, layer_nonlocality_official_bug

MASKS = {"content": float("inf"), "position": float("-inf")}  # lambda giving sigmoid(lambda) = 1 or 0


@contextmanager
def swapped_parameters(swaps: list[tuple[nn.Module, str, torch.Tensor]]):
    """Replace ``module.<name>`` by a frozen Parameter holding ``value`` inside the block, then restore."""
    originals = []
    try:
        for module, name, value in swaps:
            old = getattr(module, name)
            if not isinstance(old, nn.Parameter):
                raise ValueError(f"{type(module).__name__}.{name} is not a Parameter; nothing to swap")
            originals.append((module, name, old))
            setattr(module, name, nn.Parameter(value.to(old).expand_as(old).clone(), requires_grad=False))
        yield
    finally:
        for module, name, old in reversed(originals):
            setattr(module, name, old)


def pos_embed_masked(model: nn.Module):
    """Context: the absolute position embedding set to zero (ConViT Table 5)."""
    if not isinstance(getattr(model, "pos_embed", None), nn.Parameter):
        raise ValueError(f"{type(model).__name__} has no learned pos_embed to mask; Table 5 needs a model "
                         f"built with an absolute position embedding")
    return swapped_parameters([(model, "pos_embed", torch.zeros(()))])


def gpsa_attention_masked(model: nn.Module, k: int, mask: str):
    """Context: in the first ``k`` GPSA layers mask 'content' (gate = 1) or 'position' (gate = 0) (Table 6)."""
    if mask not in MASKS:
        raise ValueError(f"unknown mask {mask!r}; choose one of {tuple(MASKS)}")
    layers = gpsa_modules(model)
    if not 1 <= k <= len(layers):
        raise ValueError(f"k={k} GPSA layers requested but the model has {len(layers)}; pick k in "
                         f"[1, {len(layers)}]")
    return swapped_parameters([(m, "gating_param", torch.tensor(MASKS[mask])) for m in layers[:k]])


@torch.no_grad()
def evaluate(model: nn.Module, data, labels: torch.Tensor | None = None, batch_size: int = 256) -> dict:
    """Top-1/top-5 accuracy (%) on a loader of (images, labels), or on tensors ``data`` and ``labels``.

    A minimal stand-in for the engine's evaluation; the table functions take ``evaluate_fn`` to swap it.
    """
    batches = data if labels is None else zip(data.split(batch_size), labels.split(batch_size))
    device = next(model.parameters()).device
    hits1 = hits5 = total = 0
    with eval_mode(model):
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            top1, top5 = accuracy(model(x), y, topk=(1, 5))
            hits1 += round(top1.item() * len(y) / 100)  # timm gives per-batch percentages
            hits5 += round(top5.item() * len(y) / 100)
            total += len(y)
    if not total:
        raise ValueError("evaluate got no images; check the loader or tensors passed as data")
    return {"top1": 100 * hits1 / total, "top5": 100 * hits5 / total}


def table5_pos_embed(model: nn.Module, data, labels=None, evaluate_fn=evaluate) -> dict:
    """ConViT Table 5: top-1 as trained and with the position embedding zeroed at test time."""
    top1 = evaluate_fn(model, data, labels)["top1"]
    with pos_embed_masked(model):
        masked = evaluate_fn(model, data, labels)["top1"]
    return {"top1": top1, "top1_pos_masked": masked}


def table6_masked_attention(model: nn.Module, data, labels=None, ks=(3, 5, 10), evaluate_fn=evaluate) -> list[dict]:
    """ConViT Table 6: top-1 with content or positional attention masked in the first k GPSA layers.

    k larger than the number of GPSA layers (reduced depth) is clipped to it; ``k_used`` says so.
    """
    n = len(gpsa_modules(model))
    if n == 0:
        raise ValueError(f"{type(model).__name__} has no GPSA layers; Table 6 masks GPSA attention")
    none = evaluate_fn(model, data, labels)["top1"]
    scores = {}
    rows = []
    for k in ks:
        k_used = min(k, n)
        for mask in MASKS:
            if (k_used, mask) not in scores:
                with gpsa_attention_masked(model, k_used, mask):
                    scores[k_used, mask] = evaluate_fn(model, data, labels)["top1"]
        rows.append({"k": k, "k_used": k_used, "top1_content_masked": scores[k_used, "content"],
                     "top1_position_masked": scores[k_used, "position"], "top1_none": none})
    return rows


class LocalityTracker:
    """End-of-epoch records for ConViT Figs. 4-6 on a fixed probe batch.

    ``tracker(model, epoch)`` returns (and appends to ``history``) plain lists: nonlocality [layer][head]
    on each layer's actual input, the released code's measurement (issue #23) beside it, and
    sigmoid(lambda) [GPSA layer][head].
    """

    def __init__(self, images: torch.Tensor):
        self.images = images
        self.history: list[dict] = []

    def __call__(self, model: nn.Module, epoch: int) -> dict:
        model = getattr(model, "module", model)  # the plain model under DistributedDataParallel
        model = getattr(model, "_orig_mod", model)  # and under torch.compile
        images = self.images.to(next(model.parameters()).device)
        record = {
            "epoch": epoch,
            "nonlocality": layer_nonlocality(model, images),
            "nonlocality_official_bug": layer_nonlocality_official_bug(model, images),
            "gating": gating(model),
        }
        self.history.append(record)
        return record


# ---------------------------------------------------------------- entry points named in experiments.py

@register("convit.locality")
def locality(model: nn.Module, ctx) -> dict:
    """Train-time probe (every epoch and at the end) for Figs. 4-6 on the engine's fixed test batch: the
    ``LocalityTracker`` record and ``*_layers``, its head means per layer, which the report draws against the epoch."""
    rec = LocalityTracker(ctx.images)(model, ctx.epoch)
    out = {"nonlocality": rec["nonlocality"], "nonlocality_official_bug": rec["nonlocality_official_bug"],
           "nonlocality_layers": [sum(h) / len(h) for h in rec["nonlocality"]]}
    if rec["gating"]:
        out.update(gating=rec["gating"], gating_layers=[sum(h) / len(h) for h in rec["gating"]])
    return out


@register("convit.table5_run")
def table5_run(config: dict, source) -> dict:
    """Probe run (Table 5): the source run's model with and without its position embedding."""
    from .reuse import trained

    t = trained(source)
    out = table5_pos_embed(t.model, None, evaluate_fn=lambda m, *_: t.evaluate(m))
    return {**out, "source_run_id": t.spec.run_id}


@register("convit.table6_run")
def table6_run(config: dict, source) -> dict:
    """Probe run (Table 6, one row): content or position attention masked in the first ``args.k`` GPSA layers
    of this model; ``args.k_paper`` is the paper's row (3, 5, 10 of 10 GPSA layers), mapped to the same share of
    a shallower model at reduced scales."""
    from .reuse import trained

    args = config.get("args") or {}
    if "k" not in args:
        raise ValueError("table6_run needs config['args']['k'], the number of GPSA layers to mask")
    t = trained(source)
    (row,) = table6_masked_attention(t.model, None, ks=(int(args["k"]),), evaluate_fn=lambda m, *_: t.evaluate(m))
    return {**row, "k_paper": args.get("k_paper"), "gpsa_layers": len(gpsa_modules(t.model)),
            "source_run_id": t.spec.run_id}


@register("convit.locality_change")
def locality_change(config: dict, source) -> dict:
    """Probe run (Figs. 4-6 as claims): mean nonlocality of the source's attention layers (DeiT: every SA
    layer; ConViT: its GPSA layers) at initialisation and after training, and ConViT's gates.

    "At initialisation" is a fresh model from the run's config, seeded with the run's seed: drawn from
    the same distribution as the run's own starting point (ConViT's local init is deterministic).
    Nonlocality is measured on each layer's actual input, on the probe batch the engine uses.
    """
    from timm.utils import random_seed

    from repro.train.model import create_model

    from .reuse import trained

    t = trained(source)
    images, _ = t.test.sample(int((config.get("args") or {}).get("images", 64)))
    random_seed(t.spec.seed)
    init = create_model(t.spec.config, t.model.num_classes).to(images.device).eval()
    gpsa = len(gpsa_modules(t.model))

    def mean_nonlocality(model: nn.Module) -> float:
        layers = [sum(h) / len(h) for h in layer_nonlocality(model, images)]
        chosen = layers[:gpsa] if gpsa else layers
        return sum(chosen) / len(chosen)

    out = {"nonlocality_init": mean_nonlocality(init), "nonlocality_final": mean_nonlocality(t.model),
           "layers": gpsa or len(t.model.blocks), "source_run_id": t.spec.run_id}
    if gpsa:
        gates, gates0 = ([sum(h) / len(h) for h in gating(m)] for m in (t.model, init))
        out.update(gate_first=gates[0], gate_last=gates[-1], gate_init=sum(gates0) / len(gates0))
    return out
