"""The convolution phase of CMHSA (Li et al. 2021, Sec. 4.1): a ViT whose MHSA layers are KxK convolutions.

The model is the attention-phase ViT with every attention module swapped for ``PatchConvolution``:
tokens (raw flattened patches, identity patch embedding, (p1, p2, c) order) are un-patchified to a
(B, C, H, W) image, convolved with zero padding K//2 and C -> C channels plus bias, and re-patchified.
Everything else (pre-LN blocks, FFN, final norm, GAP head) is the shared ``VisionTransformer``, so its
parameter names are those of the attention phase and LN / FFN / head weights copy over by name
(``repro.models.transfer.conv_to_mhsa``). No class token (a convolution has no place for it) and no
absolute position embedding (the attention phase has none to receive it). The convolution keeps
PyTorch's default Conv2d initialisation; the paper does not state one.
"""
from __future__ import annotations

import torch
from torch import nn

from .patches import patchify, unpatchify
from .vit import VisionTransformer


class PatchConvolution(nn.Module):
    """KxK 'same' convolution over the pixel grid behind a (B, N, P*P*C) token sequence."""

    def __init__(self, dim: int, patch_size: int, grid: tuple[int, int], kernel_size: int = 3):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd integer (got {kernel_size}): zero padding "
                             "K//2 keeps the image size only for odd K")
        if dim % (patch_size * patch_size):
            raise ValueError(f"token dim {dim} is not patch_size^2 x channels for patch_size={patch_size}")
        self.patch_size = patch_size
        self.grid = tuple(grid)
        self.channels = dim // (patch_size * patch_size)
        self.conv = nn.Conv2d(self.channels, self.channels, kernel_size, padding=kernel_size // 2, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.grid[0] * self.grid[1]
        # torch._assert, not `if ...: raise`: FX tracing cannot branch on a traced token count
        torch._assert(x.shape[1] == n, f"PatchConvolution expects exactly the {n} patch tokens of a "
                      f"{self.grid[0]}x{self.grid[1]} grid, got {x.shape[1]} tokens (a class token cannot be convolved)")
        return patchify(self.conv(unpatchify(x, self.grid, self.patch_size)), self.patch_size)


def conv_phase_vit(kernel_size: int = 3, img_size: int | tuple[int, int] = 224, patch_size: int = 16,
                   in_chans: int = 3, embed_dim: int | None = None, **kwargs) -> VisionTransformer:
    """The CMHSA-K convolution-phase model: ``VisionTransformer`` with identity patch embedding, GAP head,
    no position embedding, and a ``PatchConvolution`` in place of each block's attention.

    ``embed_dim`` defaults to patch_size^2 * in_chans (the identity embedding fixes it). Other keyword
    arguments go to ``VisionTransformer`` (depth, mlp_ratio, num_classes, drop_path_rate, norm, ...).
    """
    dim = patch_size * patch_size * in_chans
    if embed_dim is not None and embed_dim != dim:
        raise ValueError(f"conv-phase tokens are raw patches: embed_dim must be {patch_size}^2 x {in_chans} = "
                         f"{dim}, got {embed_dim}; change patch_size or in_chans instead")
    for key, required in (("patch_embed", "identity"), ("pos_embed", "none"), ("class_token", False),
                          ("attn", "mhsa"), ("gpsa_layers", 0), ("aug_paths", 0)):
        if kwargs.pop(key, required) != required:
            raise ValueError(f"the conv phase needs {key}={required!r} (CMHSA Sec. 4.1)")
    global_pool = kwargs.pop("global_pool", "avg")
    if global_pool == "token":
        raise ValueError("the conv phase has no class token (CMHSA Sec. 4.1): use global_pool='avg', "
                         "or '' for the tokens")
    for key in ("num_heads", "head_dim", "qkv_bias", "attn_drop_rate"):
        kwargs.pop(key, None)  # attention-only settings: meaningless for a convolution
    return VisionTransformer(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=dim,
                             patch_embed="identity", global_pool=global_pool, class_token=False, pos_embed="none",
                             attn_layer=lambda d, grid: PatchConvolution(d, patch_size, grid, kernel_size), **kwargs)
