"""Multi-head self-attention variants: plain MHSA (fused SDPA), relative-position bias, talking heads.

Every attention module here computes its output without materialising the attention matrix where a
fused kernel allows it, and exposes ``attention_map(x)`` -> (B, H, N, N) softmax weights so that
probes can read attention through forward hooks on the module's input instead of forward() flags.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def relative_offsets(grid: tuple[int, int], device=None) -> torch.Tensor:
    """(N, N, 2) integer offsets (dy, dx) from query patch i to key patch j on a row-major grid."""
    gh, gw = grid
    ys, xs = torch.meshgrid(torch.arange(gh, device=device), torch.arange(gw, device=device), indexing="ij")
    pos = torch.stack([ys.flatten(), xs.flatten()], dim=-1)  # (N, 2)
    return pos[None, :, :] - pos[:, None, :]


class RelativePositionBias(nn.Module):
    """Learned scalar bias per head and relative offset (CMHSA Eq. 4: B_h[delta(i, j)]).

    The table holds one value per (dy, dx) in [-(gh-1), gh-1] x [-(gw-1), gw-1]; ``forward`` returns the
    (H, N, N) bias for the patch grid, zero-padded in front for ``num_prefix`` tokens (e.g. a class token).
    """

    def __init__(self, num_heads: int, grid: tuple[int, int]):
        super().__init__()
        self.grid = tuple(grid)
        gh, gw = self.grid
        self.num_tokens = gh * gw
        self.table = nn.Parameter(torch.zeros(num_heads, 2 * gh - 1, 2 * gw - 1))
        off = relative_offsets(self.grid)
        self.register_buffer("index", (off[..., 0] + gh - 1) * (2 * gw - 1) + off[..., 1] + gw - 1,
                             persistent=False)

    def forward(self, num_prefix: int = 0) -> torch.Tensor:
        bias = self.table.flatten(1)[:, self.index]  # (H, N, N)
        # padded even by 0 (a copy of H x N x N): the prefix count is traced from the input under FX,
        # and a branch on it would not trace
        return F.pad(bias, (num_prefix, 0, num_prefix, 0))

    def set_offset_table(self, values: torch.Tensor) -> None:
        """Overwrite the table with (H, 2gh-1, 2gw-1) values, e.g. the one-hot offsets of CMHSA Lemma 2."""
        with torch.no_grad():
            self.table.copy_(values)


class Attention(nn.Module):
    """MHSA on ``F.scaled_dot_product_attention``; optional learned relative position bias (``relpos``).

    ``head_dim`` may differ from dim / num_heads (CMHSA uses 9 heads of size 768 at dim 768).
    """

    def __init__(self, dim: int, num_heads: int = 8, head_dim: int | None = None, qkv_bias: bool = True,
                 attn_drop: float = 0.0, proj_drop: float = 0.0, rel_pos_grid: tuple[int, int] | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        inner = self.num_heads * self.head_dim
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * inner, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(inner, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rel_pos = RelativePositionBias(num_heads, rel_pos_grid) if rel_pos_grid else None

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return q, k, v

    def _bias(self, n: int, dtype: torch.dtype) -> torch.Tensor | None:
        """The relative position bias for n tokens (the ones before the patch grid get zero bias), or None."""
        if self.rel_pos is None:
            return None
        return self.rel_pos(n - self.rel_pos.num_tokens).to(dtype)

    def _merge(self, out: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = out.shape
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, n, -1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self._bias(x.shape[1], q.dtype),
                                             dropout_p=self.attn_drop if self.training else 0.0)
        return self._merge(out)

    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """Explicit softmax(QK^T / sqrt(d) + B): for probes and reference checks, not the training path."""
        q, k, _ = self._qkv(x)
        logits = (q @ k.transpose(-2, -1)) * self.scale
        bias = self._bias(x.shape[1], logits.dtype)
        return (logits if bias is None else logits + bias).softmax(dim=-1)


class TalkingHeadsAttention(Attention):
    """Talking-heads attention (Shazeer et al. 2020), on by default in the patch-diversification release.

    Heads are mixed by learned HxH maps on the logits before the softmax and on the weights after it;
    the post-softmax mixing needs the weights themselves, so this variant materialises them.
    """

    def __init__(self, dim: int, num_heads: int = 8, **kw):
        super().__init__(dim, num_heads, **kw)
        self.mix_logits = nn.Linear(num_heads, num_heads)
        self.mix_weights = nn.Linear(num_heads, num_heads)

    def _weights(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Softmax scores, head-mixed weights and values; heads are mixed on the last axis, (B, N, N, H)."""
        q, k, v = self._qkv(x)
        logits = (q @ k.transpose(-2, -1)) * self.scale
        bias = self._bias(x.shape[1], logits.dtype)
        if bias is not None:
            logits = logits + bias
        softmax = self.mix_logits(logits.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(dim=-1)
        return softmax, self.mix_weights(softmax.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, weights, v = self._weights(x)
        weights = F.dropout(weights, self.attn_drop, self.training)
        return self._merge(weights @ v)

    def attention_map(self, x: torch.Tensor) -> torch.Tensor:
        """The softmax scores (after pre-softmax mixing): what the over-smoothing std metric reads."""
        return self._weights(x)[0]
