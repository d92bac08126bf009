"""How alike a ViT's tokens are, layer by layer: feature diversity, patch cosine similarity, attention std.

The three statistics are batched and take ``num_prefix_tokens`` (class/distillation tokens at the front
of the sequence) so that one ``layerwise`` loop can drive all of them. ``diversity_curve`` (Aug-ViT
Figs. 2-3) and ``oversmoothing_metrics`` (patch diversification Fig. 2) put them together per model; the
cross-paper table measures both on every model, so they live here.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .hooks import eval_mode, record_blocks


def _drop_prefix(x: torch.Tensor, num_prefix_tokens: int) -> torch.Tensor:
    if not 0 <= num_prefix_tokens < x.shape[-2]:
        raise ValueError(f"num_prefix_tokens={num_prefix_tokens} leaves no tokens of the {x.shape[-2]} given")
    return x[..., num_prefix_tokens:, :]


def feature_diversity(z: torch.Tensor, num_prefix_tokens: int = 0) -> torch.Tensor:
    """r(Z) = min_z ||Z - 1 z^T||_F (Dong et al. 2021; Aug-ViT Eq. 4) for (..., N, D) tokens -> (...,): the
    minimiser is the token mean, so r(Z) = ||Z - 1 mean(Z)^T||_F, 0 exactly when all tokens are equal."""
    z = _drop_prefix(z, num_prefix_tokens).float()
    return (z - z.mean(dim=-2, keepdim=True)).flatten(-2).norm(dim=-1)


def relative_diversity(z: torch.Tensor, num_prefix_tokens: int = 0) -> torch.Tensor:
    """r(Z) / ||Z||_F in [0, 1]: the share of the features not explained by one common token.

    Unlike r(Z) it does not move when the whole residual stream is rescaled, which a pre-LN stack does
    freely, so it separates "tokens became alike" from "features shrank".
    """
    z = _drop_prefix(z, num_prefix_tokens).float()
    return feature_diversity(z) / z.flatten(-2).norm(dim=-1).clamp_min(torch.finfo(z.dtype).tiny)


def patch_cosine_similarity(h: torch.Tensor, num_prefix_tokens: int = 0) -> torch.Tensor:
    """CosSim(h) = 1/(n(n-1)) sum_{i != j} cos(h_i, h_j) over the n >= 2 patch tokens of (B, N, D) features
    -> (B,) (patch diversification Fig. 2a), in O(n d) through ||sum_i u_i||^2 = sum_i ||u_i||^2 + sum_{i!=j}
    u_i.u_j. A zero token has no direction; it counts as cosine 0 with every other token.
    """
    u = F.normalize(_drop_prefix(h, num_prefix_tokens).float(), dim=-1)
    n = u.shape[-2]
    if n < 2:
        raise ValueError(f"patch_cosine_similarity needs at least 2 patch tokens, got {n}")
    total = u.sum(dim=-2).pow(2).sum(dim=-1)   # sum over all ordered pairs, diagonal included
    diagonal = u.pow(2).sum(dim=(-2, -1))      # = n unless a token is zero
    return (total - diagonal) / (n * (n - 1))


def attention_std(attn: torch.Tensor, num_prefix_tokens: int = 0, unbiased: bool = False) -> torch.Tensor:
    """Mean over heads and queries of std(S(h_i)) for (B, H, N, N) softmax weights -> (B,) (Fig. 2b).

    The poster takes S(h_i) in R^n over the n patches, so the rows *and* columns of the first
    ``num_prefix_tokens`` tokens are dropped (the patch entries are not renormalised; pass 0 to keep the
    class token's row and column). Population std (ddof 0) unless ``unbiased``: a uniform row gives 0 and a
    one-hot row over m entries gives sqrt(m - 1) / m.
    """
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"attention_std expects (B, H, N, N) weights, got shape {tuple(attn.shape)}")
    p = num_prefix_tokens
    a = _drop_prefix(attn, p)[..., p:].float()
    return a.std(dim=-1, correction=1 if unbiased else 0).mean(dim=(-2, -1))


def num_patches(model: nn.Module) -> int:
    """Patch tokens the model makes per image (timm-style ``patch_embed.num_patches``)."""
    pe = getattr(model, "patch_embed", None)
    if pe is None or not hasattr(pe, "num_patches"):
        raise TypeError(f"{type(model).__name__} has no patch_embed.num_patches; layerwise probes need a "
                        "ViT with a timm-style patch embedding")
    return int(pe.num_patches)


@contextmanager
def block_input(block: nn.Module):
    """Record the tensor entering ``block`` (Z_0 when it is the first block) in ``out['z']``."""
    out = {}
    handle = block.register_forward_pre_hook(lambda m, args: out.__setitem__("z", args[0].detach()))
    try:
        yield out
    finally:
        handle.remove()


def layerwise(model: nn.Module, images: torch.Tensor, fn: Callable[..., torch.Tensor], on: str = "features",
              include_input: bool = False, drop_prefix: bool = True) -> list[float]:
    """[fn(block l's output or attention, num_prefix_tokens=p_l).mean() for each block l], as floats.

    ``on``: 'features' (block outputs) or 'attention' (softmax weights recomputed on each block's actual
    input). ``include_input`` puts fn(Z_0) first, Z_0 being the embedded tokens that enter block 0, so a
    depth-L model gives L + 1 values. ``drop_prefix`` passes each block's number of class tokens (its
    token count minus the patch count, so ConViT's late class token is handled) or 0 to keep every token.
    The model runs in eval mode (no drop path) under no_grad; its mode is restored.
    """
    if on not in ("features", "attention"):
        raise ValueError(f"layerwise: on={on!r}; choose 'features' or 'attention'")
    if include_input and on == "attention":
        raise ValueError("layerwise: include_input applies to features only (Z_0 has no attention)")
    patches = num_patches(model)

    def value(x: torch.Tensor) -> float:
        p = x.shape[-2] - patches if drop_prefix else 0
        return float(fn(x, num_prefix_tokens=p).mean())

    with eval_mode(model):
        with torch.no_grad(), record_blocks(model) as rec, block_input(model.blocks[0]) as first:
            model(images)
        out = [value(first["z"])] if include_input else []
        for i in range(len(model.blocks)):
            out.append(value(rec.features[i] if on == "features" else rec.attention(i)))
    return out


def diversity_curve(model: nn.Module, images: torch.Tensor) -> dict[str, list[float]]:
    """r(Z_l)/r(Z_0) for l = 0..L over all tokens (class token included: it is a row of Z), and r(Z_l)/||Z_l||_F
    (batch means), of any repro ViT, trained or not, from one forward pass."""
    relative = []

    def both(z: torch.Tensor, num_prefix_tokens: int = 0) -> torch.Tensor:
        relative.append(float(relative_diversity(z, num_prefix_tokens).mean()))
        return feature_diversity(z, num_prefix_tokens)

    r = layerwise(model, images, both, include_input=True, drop_prefix=False)
    return {"ratio": [v / r[0] for v in r], "relative": relative}


def oversmoothing_metrics(model: nn.Module, images: torch.Tensor) -> dict:
    """Figure 2's two curves and their final-layer values for ``model`` on ``images``."""
    cos = layerwise(model, images, patch_cosine_similarity)
    std = layerwise(model, images, attention_std, on="attention")
    with eval_mode(model), torch.no_grad():
        tokens = model.forward_features(images)
    n = num_patches(model)
    return {"cossim_layers": cos, "attn_std_layers": std, "cossim_last": cos[-1], "attn_std_last": std[-1],
            "cossim_norm": float(patch_cosine_similarity(tokens, tokens.shape[1] - n).mean())}
