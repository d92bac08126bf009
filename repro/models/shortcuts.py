"""Augmented shortcuts (Aug-ViT, Tang et al. 2021): parallel paths T_i(Z) = GELU(Z Theta_i) beside the
identity shortcut, with Theta_i block-circulant so that each path costs O(d log d) per token.

The official release materialises each block-circulant matrix as a dense d x d weight (about +1.4
GMACs for Aug-ViT-S); the paper's +0.1G assumes an FFT product. ``CirculantLinear(fft=True)`` computes
the FFT product, ``fft=False`` the release's dense one; both give the same function (tested).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CirculantLinear(nn.Module):
    """y = W x + b with W a (out/b x in/b) grid of b x b circulant blocks, each C[i, j] = c[(i - j) mod b].

    ``num_blocks`` is the grid size along the smaller side (the release uses 4, i.e. 4 x 4 blocks
    for a square projection).
    """

    def __init__(self, in_features: int, out_features: int, num_blocks: int = 4, bias: bool = True,
                 fft: bool = True):
        super().__init__()
        self.block = min(in_features, out_features) // num_blocks
        if in_features % self.block or out_features % self.block:
            raise ValueError(f"CirculantLinear: {in_features}->{out_features} is not divisible into "
                             f"{num_blocks} circulant blocks")
        self.n_in, self.n_out = in_features // self.block, out_features // self.block
        self.in_features, self.out_features = in_features, out_features
        self.fft = fft
        self.weight = nn.Parameter(torch.randn(self.n_out, self.n_in, self.block) * (in_features ** -0.5))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def dense_weight(self) -> torch.Tensor:
        """The (out, in) matrix the blocks stand for."""
        b = self.block
        idx = (torch.arange(b)[:, None] - torch.arange(b)[None, :]) % b  # C[i, j] = c[(i - j) mod b]
        blocks = self.weight[:, :, idx]  # (n_out, n_in, b, b)
        return blocks.permute(0, 2, 1, 3).reshape(self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fft:
            return F.linear(x, self.dense_weight(), self.bias)
        b = self.block
        xf = torch.fft.rfft(x.float().unflatten(-1, (self.n_in, b)), dim=-1)  # (..., n_in, b/2+1)
        wf = torch.fft.rfft(self.weight.float(), dim=-1)                      # (n_out, n_in, b/2+1)
        yf = torch.einsum("...if,oif->...of", xf, wf)
        y = torch.fft.irfft(yf, n=b, dim=-1).flatten(-2).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(y.dtype)


class AugmentedShortcut(nn.Module):
    """Sum of T parallel paths GELU(C_i(x)) with block-circulant C_i (Aug-ViT Eq. 8/10)."""

    def __init__(self, dim: int, num_paths: int = 2, num_blocks: int = 4, fft: bool = True):
        super().__init__()
        self.paths = nn.ModuleList(CirculantLinear(dim, dim, num_blocks, fft=fft) for _ in range(num_paths))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(())  # a loop, not sum(generator): TorchScript compiles no generators
        for path in self.paths:
            out = out + F.gelu(path(x))
        return out
