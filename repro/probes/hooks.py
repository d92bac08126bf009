"""Read attention maps and per-block features through forward hooks, never through forward() flags.

    with record_blocks(model) as rec:
        model(images)
    rec.features[i]   # (B, N_i, D) output of block i
    rec.inputs[i]     # (B, N_i, D) input of the attention of block i (after its norm, if pre-LN)
    rec.attention(i)  # (B, H, N, N) softmax weights of block i, recomputed from its actual input
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class BlockRecord:
    attn_modules: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)

    def attention(self, i: int) -> torch.Tensor:
        """Softmax attention of block i on the input it actually received (ConViT issue #23)."""
        with torch.no_grad():
            return self.attn_modules[i].attention_map(self.inputs[i])


@contextmanager
def record_blocks(model: nn.Module):
    """Hook every block of a repro VisionTransformer (or any model with ``.blocks[i].attn``); keeps detached tensors."""
    rec = BlockRecord(attn_modules=[b.attn for b in model.blocks])
    handles = []
    for i, blk in enumerate(model.blocks):
        handles.append(blk.attn.register_forward_hook(
            lambda m, args, out, i=i: rec.inputs.__setitem__(i, args[0].detach())))
        handles.append(blk.register_forward_hook(
            lambda m, args, out, i=i: rec.features.__setitem__(i, out.detach())))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


@contextmanager
def eval_mode(model: nn.Module):
    """Run in eval mode (no drop path between the layers being probed), then restore every module's mode."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes.items():
            m.training = training
