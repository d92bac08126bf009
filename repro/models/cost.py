"""Parameter counts and FLOPs as the papers report them (GMACs = multiply-adds / 1e9).

FLOPs come from ``torch.utils.flop_counter`` with two additions: the CPU fused-attention kernel
(counted by recent torch, not by older releases) and FFTs (never counted), so that attention
matmuls and Aug-ViT's FFT circulant products are in the total. FFT cost uses the usual
5/2 N log2 N real FLOPs for a length-N real transform.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry

aten = torch.ops.aten


def _sdpa_cpu_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    b, h, n, d = query_shape
    m, dv = key_shape[-2], value_shape[-1]
    return 2 * b * h * n * m * d + 2 * b * h * n * m * dv


def _fft_flops(x_shape, dim, *args, out_shape=None, **kwargs) -> int:
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    n = math.prod(x_shape[d] for d in dims)
    if n <= 1:
        return 0
    batch = math.prod(x_shape) // n
    return int(batch * 2.5 * n * math.log2(n))


def _fft_c2r_flops(x_shape, dim, normalization, last_dim_size, *args, out_shape=None, **kwargs) -> int:
    return _fft_flops(out_shape, dim)


def _custom_mapping() -> dict:
    extra = {aten._fft_r2c: _fft_flops, aten._fft_c2c: _fft_flops, aten._fft_c2r: _fft_c2r_flops}
    cpu_sdpa = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_sdpa is not None and cpu_sdpa not in flop_registry:
        extra[cpu_sdpa] = _sdpa_cpu_flops
    return extra


def count_params(model: nn.Module) -> int:
    """All parameters, trainable or frozen (as the papers count them)."""
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def count_macs(model: nn.Module, img_size: int, in_chans: int = 3, by_op: bool = False):
    """Multiply-adds of one forward pass of one image (what papers print as 'FLOPs').

    The image is made on the model's device, so a model built on the meta device is counted from
    shapes alone, without allocating its weights (ViT-L, 1000-class heads).
    """
    was_training = model.training
    model.eval()
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    x = torch.randn(1, in_chans, img_size, img_size, device=device)
    with FlopCounterMode(display=False, custom_mapping=_custom_mapping()) as fc:
        model(x)
    model.train(was_training)
    macs = fc.get_total_flops() / 2
    if by_op:
        return macs, {str(k): v / 2 for k, v in fc.get_flop_counts()["Global"].items()}
    return macs


ATTENTION_OPS = ("scaled_dot_product", "bmm")  # attention matmuls: fused SDPA, explicit (attn @ v)


def macs_without_attention(by_op: dict) -> float:
    """MACs of the linear layers and patch embedding only: the convention ConViT's Table 1 follows
    (its DeiT-S is 4.3G where DeiT's own paper, counting the attention matmuls, prints 4.6G)."""
    return sum(v for k, v in by_op.items() if not any(a in k for a in ATTENTION_OPS) and "fft" not in k)
