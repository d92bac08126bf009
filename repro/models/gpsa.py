"""Gated positional self-attention (ConViT, d'Ascoli et al. 2021, Eq. 6-7).

    A_h = (1 - sigmoid(lambda_h)) softmax(Q_h K_h^T / sqrt(d_h)) + sigmoid(lambda_h) softmax(P_h)
    P_h[i, j] = v_pos_h . r_ij,   r_ij = (dx, dy, dx^2 + dy^2)

Because P does not depend on the image, the output is computed as
(1 - g) * SDPA(q, k, v) + g * (softmax(P) @ v): the content term runs on the fused kernel and the
positional map is built once per forward, not once per image. ConViT's released code renormalises the
rows of A after gating; both terms are already row-stochastic, so that step is the identity and is
omitted here (``attention_map`` checks it).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import relative_offsets


class GPSA(nn.Module):
    """GPSA with ConViT's convolutional ("local") initialisation.

    ``locality_strength`` is alpha of the paper; ``gating_init`` the initial lambda (1 in the paper);
    ``local_init`` False gives the random-init ablation (Table 3 c/d).
    """

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False, attn_drop: float = 0.0,
                 proj_drop: float = 0.0, grid: tuple[int, int] = (14, 14), locality_strength: float = 1.0,
                 gating_init: float = 1.0, local_init: bool = True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.dim = dim
        self.scale = self.head_dim ** -0.5
        self.grid = tuple(grid)
        self.locality_strength = locality_strength
        self.qk = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.pos_proj = nn.Linear(3, num_heads)
        self.gating_param = nn.Parameter(torch.full((num_heads,), float(gating_init)))
        off = relative_offsets(self.grid).float()  # (N, N, [dy, dx])
        dy, dx = off[..., 0], off[..., 1]
        self.register_buffer("rel_indices", torch.stack([dx, dy, dx ** 2 + dy ** 2], dim=-1), persistent=False)
        self.use_local_init = local_init

    @torch.no_grad()
    def local_init(self) -> None:
        """Initialise as a convolution: v = identity; head h peaks at offset delta_h of a
        sqrt(H) x sqrt(H) kernel; pos_proj = alpha * (2 dx_h, 2 dy_h, -1) (centres are half-integers
        for even kernel sizes, as in the official code)."""
        self.v.weight.copy_(torch.eye(self.dim))
        k = int(math.isqrt(self.num_heads))
        center = (k - 1) / 2
        w = self.pos_proj.weight
        for h1 in range(k):          # h1 indexes dy, h2 indexes dx (official ordering)
            for h2 in range(k):
                h = h1 + k * h2
                w[h, 0] = 2 * (h2 - center)
                w[h, 1] = 2 * (h1 - center)
                w[h, 2] = -1
        w.mul_(self.locality_strength)

    def kernel_offsets(self) -> torch.Tensor:
        """(H, 2) offsets (dy, dx) that the conv-initialised heads are centred on (first k*k heads)."""
        k = int(math.isqrt(self.num_heads))
        c = (k - 1) / 2
        off = torch.zeros(k * k, 2)
        for h1 in range(k):
            for h2 in range(k):
                off[h1 + k * h2] = torch.tensor([h1 - c, h2 - c])
        return off

    def gate(self) -> torch.Tensor:
        """sigmoid(lambda_h): the weight each head puts on positional attention."""
        return torch.sigmoid(self.gating_param)

    def positional_attention(self) -> torch.Tensor:
        """(H, N, N) softmax(v_pos . r_ij): the same for every image."""
        return self.pos_proj(self.rel_indices).permute(2, 0, 1).softmax(dim=-1)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q, k = self.qk(x).reshape(b, n, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        v = self.v(x).reshape(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def _check_tokens(self, n: int) -> None:
        # torch._assert, not `if ...: raise`: FX tracing cannot branch on a traced token count
        torch._assert(n == self.grid[0] * self.grid[1], f"GPSA built for a {self.grid[0]}x{self.grid[1]} patch grid "
                      f"got {n} tokens; build the model with the img_size/patch_size you feed it")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_tokens(x.shape[1])
        q, k, v = self._qkv(x)
        drop = self.attn_drop if self.training else 0.0
        if drop > 0:  # one dropout mask on the gated map, as timm and the official code (so: materialised)
            out = F.dropout(self._gated(q, k), drop) @ v
        else:
            g = self.gate().view(1, -1, 1, 1).to(v.dtype)
            content = F.scaled_dot_product_attention(q, k, v)
            out = (1 - g) * content + g * (self.positional_attention().to(v.dtype) @ v)
        b, _, n, _ = out.shape
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, n, self.dim)))

    def _content(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)

    def content_attention(self, x: torch.Tensor) -> torch.Tensor:
        """(B, H, N, N) softmax(QK^T / sqrt(d)) - materialised, for probes only."""
        q, k, _ = self._qkv(x)
        return self._content(q, k)

    def _gated(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """A_h of Eq. 7 from queries and keys, renormalised as the official code does."""
        g = self.gate().view(1, -1, 1, 1).to(q.dtype)
        attn = (1 - g) * self._content(q, k) + g * self.positional_attention().to(q.dtype)
        return attn / attn.sum(dim=-1, keepdim=True)

    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """The full gated attention A_h of Eq. 7, renormalised as the official code does."""
        self._check_tokens(x.shape[1])
        q, k, _ = self._qkv(x)
        return self._gated(q, k)

    def forward_explicit(self, x: torch.Tensor) -> torch.Tensor:
        """Reference form with the attention matrix materialised (used to test ``forward``)."""
        _, _, v = self._qkv(x)
        out = self.attention_map(x) @ v
        b, _, n, _ = out.shape
        return self.proj(out.transpose(1, 2).reshape(b, n, self.dim))
