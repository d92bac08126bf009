"""Transformer blocks: where the LayerNorms sit, and what runs beside the identity shortcut.

``norm`` selects the placement:
- ``pre_ln`` (ViT/DeiT): x = x + Attn(LN(x)); x = x + MLP(LN(x))
- ``post_ln`` (original Transformer): x = LN(x + Attn(x)); x = LN(x + MLP(x))
- ``res_post_ln`` (Kim & Kim 2022, supplement Table 1): x = x + LN(Attn(LN(x))); x = x + LN(MLP(LN(x))).
  As extracted, the table feeds Y (not Y1 = LN(Y)) to the MSA and leaves Y1 unused; we read it as
  MSA(Y1), the only reading in which Y1 has a use and which matches Lemma 1's ||LN(.)||^2 = d steps.

``aug_paths`` > 0 adds Aug-ViT's augmented shortcuts beside both sub-layers (or only the MSA with
``aug_mlp=False``); the release scales each sub-layer's sum by ``aug_scale`` (3/4 for Aug-ViT-S).
"""
from __future__ import annotations

from typing import Callable

import torch
from timm.layers import DropPath, Mlp
from torch import nn

from .shortcuts import AugmentedShortcut

NORMS = ("pre_ln", "post_ln", "res_post_ln")


class Block(nn.Module):
    def __init__(self, dim: int, attn: nn.Module, mlp_ratio: float = 4.0, norm: str = "pre_ln",
                 drop_path: float = 0.0, proj_drop: float = 0.0, norm_layer: Callable[[int], nn.Module] | None = None,
                 aug_paths: int = 0, aug_mlp: bool = True, aug_scale: float = 1.0, aug_fft: bool = True):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"unknown block norm placement {norm!r}; choose one of {NORMS}")
        norm_layer = norm_layer or (lambda d: nn.LayerNorm(d, eps=1e-6))
        self.norm_placement = norm
        self.norm1 = norm_layer(dim)
        self.attn = attn
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, drop=proj_drop)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        # None rather than absent: TorchScript drops the branches of a None attribute at compile time
        self.post_norm1 = norm_layer(dim) if norm == "res_post_ln" else None
        self.post_norm2 = norm_layer(dim) if norm == "res_post_ln" else None
        self.aug_attn = AugmentedShortcut(dim, aug_paths, fft=aug_fft) if aug_paths else None
        self.aug_mlp = AugmentedShortcut(dim, aug_paths, fft=aug_fft) if aug_paths and aug_mlp else None
        self.aug_scale = aug_scale

    def _residual(self, x: torch.Tensor, out: torch.Tensor, aug: torch.Tensor | None) -> torch.Tensor:
        """x + DropPath(out), plus the augmented paths' sum scaled as the Aug-ViT release does."""
        y = x + self.drop_path(out)
        if aug is not None:
            y = (y + aug) * self.aug_scale
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Both sub-layers written out (timm's Block does the same): TorchScript cannot pass modules to a helper.
        if self.norm_placement == "post_ln":
            x = self.norm1(self._residual(x, self.attn(x), None if self.aug_attn is None else self.aug_attn(x)))
            return self.norm2(self._residual(x, self.mlp(x), None if self.aug_mlp is None else self.aug_mlp(x)))
        h = self.norm1(x)
        out = self.attn(h)
        if self.post_norm1 is not None:
            out = self.post_norm1(out)
        x = self._residual(x, out, None if self.aug_attn is None else self.aug_attn(h))
        h = self.norm2(x)
        out = self.mlp(h)
        if self.post_norm2 is not None:
            out = self.post_norm2(out)
        return self._residual(x, out, None if self.aug_mlp is None else self.aug_mlp(h))
