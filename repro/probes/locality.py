"""Nonlocality of attention and GPSA gating (ConViT, d'Ascoli et al. 2021, Sec. 4, Figs. 4-6).

Nonlocality of head h in layer l (ConViT Eq. 8):

    D_loc^{l,h} = 1/L sum_{i,j} A^{l,h}_ij ||delta_ij||

with L the number of query patches and delta_ij the offset from query patch i to key patch j measured
in patches on the patch grid (Euclidean norm). The released code uses the same unit: its GPSA reads
sqrt(dx^2 + dy^2) from ``rel_indices``, built from integer patch-grid offsets, not pixels. Values are
averaged over the images of the probe batch (the released code averages the maps first; the sum is
linear, so both orders agree).

Class tokens have no position: their query row and key column are dropped and each patch query's
weights are renormalised over the patch keys. This equals the softmax over patch keys only, which is
what the released code computed, since it never fed a class token to the probe.

Each layer is measured on the input it actually receives (hooks). ``layer_nonlocality_official_bug``
reproduces the released measurement, which fed the raw patch embeddings (no position embedding, no
LayerNorm) to every layer's attention (facebookresearch/convit issue #23).
"""
from __future__ import annotations

import torch
from torch import nn

from repro.models.attention import relative_offsets
from repro.probes.hooks import eval_mode, record_blocks


def nonlocality(attn: torch.Tensor, grid: tuple[int, int], num_prefix: int = 0) -> torch.Tensor:
    """(H,) nonlocality per head of attention weights (B, H, N, N) or (H, N, N) over a patch grid."""
    gh, gw = grid
    n = num_prefix + gh * gw
    if attn.shape[-1] != n or attn.shape[-2] != n:
        raise ValueError(f"attention of shape {tuple(attn.shape)} does not cover {num_prefix} prefix tokens "
                         f"+ a {gh}x{gw} patch grid ({n} tokens); pass the model's grid and num_prefix")
    a = attn[..., num_prefix:, num_prefix:].float()
    if num_prefix:
        a = a / a.sum(dim=-1, keepdim=True)
    distances = relative_offsets(tuple(grid), device=a.device).float().norm(dim=-1)  # ||delta_ij||, in patches
    per_query = (a * distances).sum(dim=-1)  # (..., H, L)
    return per_query.mean(dim=-1).reshape(-1, per_query.shape[-2]).mean(dim=0)


def _per_layer(model: nn.Module, attention_of, token_counts) -> list[list[float]]:
    grid = getattr(model, "grid_size", None) or getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if grid is None:
        raise ValueError(f"{type(model).__name__} has no grid_size or patch_embed.grid_size; nonlocality needs "
                         f"the patch grid")
    grid = tuple(grid)
    patches = grid[0] * grid[1]
    out = []
    for i in range(len(model.blocks)):
        a = attention_of(i)
        out.append(nonlocality(a, grid, num_prefix=token_counts(i) - patches).tolist())
    return out


@torch.no_grad()
def layer_nonlocality(model: nn.Module, images: torch.Tensor) -> list[list[float]]:
    """Nonlocality [layer][head], each layer measured on its actual input (ConViT Figs. 4-5)."""
    with eval_mode(model), record_blocks(model) as rec:
        model(images)
        return _per_layer(model, rec.attention, lambda i: rec.inputs[i].shape[1])


@torch.no_grad()
def layer_nonlocality_official_bug(model: nn.Module, images: torch.Tensor) -> list[list[float]]:
    """Nonlocality [layer][head] as the released code measured it, raw patch embeddings fed to every layer:
    kept to show the size of the difference (issue #23); use ``layer_nonlocality`` for findings."""
    with eval_mode(model):
        x = model.patch_embed(images)
        return _per_layer(model, lambda i: model.blocks[i].attn.attention_map(x), lambda i: x.shape[1])


def gpsa_modules(model: nn.Module) -> list[nn.Module]:
    """The attention modules of ``model.blocks`` that carry a GPSA gate, in depth order."""
    return [b.attn for b in model.blocks if hasattr(b.attn, "gating_param")]


@torch.no_grad()
def gating(model: nn.Module) -> list[list[float]]:
    """sigmoid(lambda) [GPSA layer][head]: the weight on positional attention (ConViT Fig. 6)."""
    return [torch.sigmoid(m.gating_param.float()).tolist() for m in gpsa_modules(model)]
