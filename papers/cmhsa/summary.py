"""End-of-training probe for CMHSA runs: the architecture trained, the training seconds spent, and the
per-epoch validation curves that Figure 2 draws (from the engine's epoch history, ``ctx.history``)."""
from __future__ import annotations

import math

import numpy as np
from repro.functions import register


@register("cmhsa.run_summary")
def run_summary(model, ctx, early_fraction: float = 0.5) -> dict:
    """Architecture, seconds of training (sum and mean of the epochs' ``epoch_s``), and the curves.

    ``eval_loss_early`` is the mean validation loss over the first ``early_fraction`` of the epochs
    (Figure 2's "first part of training"; None unless every one of those epochs was evaluated).
    """
    rows, block = ctx.history, model.blocks[0]
    epoch_s = [r["epoch_s"] for r in rows]
    evaluated = [r for r in rows if r.get("eval_loss") is not None]
    # Table 1's architecture columns: layers, attention heads (0 for a convolution phase), width, FFN width
    out = {"depth": len(model.blocks), "heads": getattr(block.attn, "num_heads", 0), "dim": model.embed_dim,
           "ffn": block.mlp.fc1.out_features, "train_s": float(np.sum(epoch_s)) if epoch_s else None,
           "epoch_s": float(np.mean(epoch_s)) if epoch_s else None,
           "eval_loss_curve": [r["eval_loss"] for r in evaluated], "top1_curve": [r["top1"] for r in evaluated],
           "train_loss_curve": [r["train_loss"] for r in rows]}
    early = rows[:max(1, math.ceil(early_fraction * len(rows)))]
    out["eval_loss_early"] = (float(np.mean([r["eval_loss"] for r in early]))
                              if early and all(r.get("eval_loss") is not None for r in early) else None)
    return out
