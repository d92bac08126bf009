"""Patchify / unpatchify on a row-major patch grid; a token is the flattened patch in (p1, p2, c) order
(Dosovitskiy et al. 2021: x_p in R^{N x (P^2 C)}). The CMHSA conv phase and the weight transfer both
rely on this one layout."""
from __future__ import annotations

import torch
from timm.layers import to_2tuple
from torch import nn


def patchify(img: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/P)(W/P), P*P*C)."""
    b, c, h, w = img.shape
    # torch._assert, not `if ...: raise`: FX tracing cannot branch on a traced shape
    torch._assert((h % patch == 0) & (w % patch == 0),
                  f"image {h}x{w} is not divisible into {patch}x{patch} patches; resize it or change patch_size")
    x = img.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch) * (w // patch), patch * patch * c)


def unpatchify(tokens: torch.Tensor, grid: tuple[int, int], patch: int) -> torch.Tensor:
    """(B, N, P*P*C) -> (B, C, H, W), the inverse of ``patchify``."""
    b, n, d = tokens.shape
    gh, gw = grid
    c = d // (patch * patch)
    x = tokens.reshape(b, gh, gw, patch, patch, c)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(b, c, gh * patch, gw * patch)


class IdentityPatchEmbed(nn.Module):
    """Tokens are the raw flattened patches (CMHSA: 'the patch projection layer is fixed as identity')."""

    def __init__(self, img_size: int | tuple[int, int], patch_size: int, in_chans: int):
        super().__init__()
        self.patch_size = patch_size
        self.img_size = to_2tuple(img_size)
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.embed_dim = patch_size * patch_size * in_chans

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return patchify(x, self.patch_size)
