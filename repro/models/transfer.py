"""Convolution -> MHSA weight transfer of CMHSA (Li et al. 2021, Theorem 1, Lemma 2, Appendix A.1-A.2).

Construction, per layer, for a KxK convolution (odd K, zero padding K//2, C -> C channels) acting on
P x P patches with token dim D = P*P*C:

- radius m = ceil((K-1) / (2P)): every pixel's receptive field lies in the (2m+1)^2 patches at offsets
  {-m..m}^2 (Theorem 1, Eq. 13). One head per offset, so the attention needs (2m+1)^2 heads. With 9
  heads (Corollary 4) this is m <= 1, i.e. **K <= 2P + 1** (equivalently P >= (K-1)/2): K=3 needs
  P >= 1, K=5 needs P >= 2. Fewer heads raise ``ValueError``. Extra heads attend uniformly (zero bias),
  keep the identity value and get zero output weight, so they add nothing yet still receive gradients.
- W_Q = W_K = 0 (and their biases), so attention is purely positional; value = identity (head size
  d_H >= D; the first D value dims copy the token, the rest are zero).
- Lemma 2 bias (scale c = ``scale``), head h aimed at offset delta_h (key minus query):
  ``bias_form='one_hot'`` (default): B_h(delta) = c [delta == delta_h], 0 elsewhere;
  ``'quadratic'``: B_h(delta) = -c ||delta - delta_h||^2 (Cordonnier et al.'s quadratic encoding).
  The symbols of Appendix A.1 were lost in our text of the paper; both satisfy Lemma 2. For an interior
  query the off-target mass is exactly (N-1) / (e^c + N - 1) for 'one_hot' and at most
  1 - 1/theta(c)^2, theta(c) = sum_n exp(-c n^2) (about 4 e^-c), for 'quadratic'; with the default
  c = 30 both are below float32 resolution (``repro.probes.conv_theorems.lemma2_table``). 'one_hot' is
  the default because its border substitute (below) stayed closer to zero padding in every measurement.
  A saturated softmax passes almost no gradient to the bias table, and W_Q = W_K = 0 is a saddle for
  the content logits (the gradient of W_Q is proportional to K = 0 and vice versa). ``keep_qk=True``
  keeps the target's random W_Q, W_K so the content term can learn; a smaller c lets the positional
  term move. Both trade exactness for trainability: a training decision, not this module's.
- W_O, head h: the (D, D) block M_{delta_h} of the convolution's linear map from the key patch at offset
  delta_h to the query patch, by index arithmetic (``conv_patch_blocks``): output pixel (p1, p2, o)
  reads input pixel (q1, q2, i) of that patch with kernel tap (dy P + q1 - p1 + K//2, dx P + q2 - p2 +
  K//2) when both taps lie in [0, K), else 0 (the Appendix A.2 remark). Output bias = conv bias, repeated
  for every pixel of the patch.

Interior patches (receptive field inside the image: at least m patches from every edge) then match
the convolution up to Lemma 2's off-target mass and rounding (measured <= 3e-7 relative in float32 for
K in {3, 5}, P in {4, 8, 16}, C in {1, 3}: ``repro.probes.conv_theorems.transfer_error_table``).

Border patches: the neighbour at offset delta_h may not exist, and softmax weights sum to one, so the
head cannot output the zero that zero padding contributes. Measured (``transfer_error_table``, whose
``attention_vs_predicted_max`` and ``vs_predicted_max_err`` columns check these statements):
- 'one_hot': every bias in the row is 0, so the head averages all N patches uniformly: each missing
  neighbour is replaced by the mean patch of the image.
- 'quadratic': the head puts mass >= 1 - O(e^-c) on the existing patch nearest to the missing one (the
  key position clamped into the grid): patch-level replicate padding; for m = 1 at a left edge the
  missing patch is replaced by the query patch itself.
Border outputs therefore differ from the convolution by O(1): on a 4x4 grid with N(0, 1) tokens and a
N(0, 1) kernel, max per-patch error (over the mean patch norm) 0.06-0.22 for 'one_hot' and 0.25-0.90
for 'quadratic' (K in {3, 5}, P in {4, 8, 16}, C in {1, 3}); the mean patch of zero-mean tokens is
small, which flatters 'one_hot' here; through whole 6-block c32 models with random weights
(``model_transfer_gap``) 'one_hot' also had the smaller gap on smoothed, non-zero-mean images.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..functions import register
from .attention import Attention, TalkingHeadsAttention
from .conv_phase import PatchConvolution
from .vit import VisionTransformer

BIAS_FORMS = ("one_hot", "quadratic")
DEFAULT_SCALE = 30.0


def bias_scale(img_size: int, patch_size: int, mass: float = 0.9) -> float:
    """Lemma 2 scale c for training: one-hot bias putting ``mass`` of each head's attention on its target
    offset for an interior query of an N-patch grid, e^c / (e^c + N - 1) = mass."""
    n = (img_size // patch_size) ** 2
    return round(math.log(mass / (1 - mass) * (n - 1)), 2)


def neighbourhood_radius(kernel_size: int, patch_size: int) -> int:
    """m = ceil((K-1) / (2P)): the receptive field of a patch spans patch offsets {-m..m}^2 (Theorem 1)."""
    return math.ceil((kernel_size - 1) / (2 * patch_size))


def heads_required(kernel_size: int, patch_size: int) -> int:
    """(2m+1)^2 heads: 9 whenever K <= 2P + 1 (Corollary 4); K^2 for pixel input P = 1 (Corollary 3)."""
    return (2 * neighbourhood_radius(kernel_size, patch_size) + 1) ** 2


def head_offsets(radius: int) -> list[tuple[int, int]]:
    """Offsets (dy, dx) in {-m..m}^2, row-major: head h attends offset ``head_offsets(m)[h]``."""
    return [(dy, dx) for dy in range(-radius, radius + 1) for dx in range(-radius, radius + 1)]


def interior_mask(grid: tuple[int, int], patch_size: int, kernel_size: int, depth: int = 1) -> torch.Tensor:
    """(N,) bool, row-major: True where the patch's receptive field through ``depth`` stacked convolutions
    lies inside the image (at least depth * m patches from every edge)."""
    m = neighbourhood_radius(kernel_size, patch_size) * depth
    gh, gw = grid
    ys = torch.arange(gh)[:, None].expand(gh, gw)
    xs = torch.arange(gw)[None, :].expand(gh, gw)
    inside = (ys >= m) & (ys < gh - m) & (xs >= m) & (xs < gw - m)
    return inside.flatten()


def offset_bias_table(offsets: list[tuple[int, int]], grid: tuple[int, int], num_heads: int, scale: float,
                      bias_form: str = "one_hot") -> torch.Tensor:
    """(num_heads, 2gh-1, 2gw-1) relative-position table: head h peaks at ``offsets[h]`` (Lemma 2);
    heads past ``len(offsets)`` get a zero row (uniform attention)."""
    if bias_form not in BIAS_FORMS:
        raise ValueError(f"unknown bias_form {bias_form!r}; choose one of {BIAS_FORMS}")
    gh, gw = grid
    dy = torch.arange(-(gh - 1), gh, dtype=torch.float64)[:, None]
    dx = torch.arange(-(gw - 1), gw, dtype=torch.float64)[None, :]
    table = torch.zeros(num_heads, 2 * gh - 1, 2 * gw - 1, dtype=torch.float64)
    for h, (oy, ox) in enumerate(offsets):
        if bias_form == "quadratic":
            table[h] = -scale * ((dy - oy) ** 2 + (dx - ox) ** 2)
        elif abs(oy) < gh and abs(ox) < gw:  # one-hot; an offset beyond the grid never occurs
            table[h, oy + gh - 1, ox + gw - 1] = scale
    return table


def conv_patch_blocks(weight: torch.Tensor, patch_size: int, radius: int) -> torch.Tensor:
    """(len(head_offsets(radius)), P*P*C_out, P*P*C_in): block M_delta of the convolution's linear map from
    the key patch at offset delta to the query patch, tokens in (p1, p2, c) order (Appendix A.2 remark).

    ``weight`` is a Conv2d weight (C_out, C_in, K, K), cross-correlation as ``F.conv2d``: output pixel y
    reads input pixel y + t - K//2 with tap t.
    """
    c_out, c_in, k, _ = weight.shape
    p, r = patch_size, k // 2
    span = torch.arange(-radius, radius + 1, device=weight.device)  # on the weight's device (CUDA runs)
    pos = torch.arange(p, device=weight.device)
    # tap[d, p_out, q_in] = d*P + q_in - p_out + K//2, the same arithmetic for rows and columns
    tap = span[:, None, None] * p + pos[None, None, :] - pos[None, :, None] + r
    valid = (tap >= 0) & (tap < k)
    tap = tap.clamp(0, k - 1)
    w = weight.permute(2, 3, 0, 1)  # (Ky, Kx, C_out, C_in)
    ty = tap[:, None, :, None, :, None]  # (dy, ., p1, ., q1, .)
    tx = tap[None, :, None, :, None, :]  # (., dx, ., p2, ., q2)
    mask = (valid[:, None, :, None, :, None] & valid[None, :, None, :, None, :]).to(weight.dtype)
    blocks = w[ty, tx] * mask[..., None, None]  # (dy, dx, p1, p2, q1, q2, C_out, C_in)
    blocks = blocks.permute(0, 1, 2, 3, 6, 4, 5, 7)  # (dy, dx, p1, p2, C_out, q1, q2, C_in)
    n = 2 * radius + 1
    return blocks.reshape(n * n, p * p * c_out, p * p * c_in)


@torch.no_grad()
def conv_layer_to_attention(conv: nn.Conv2d, attn: Attention, patch_size: int, scale: float = DEFAULT_SCALE,
                            bias_form: str = "one_hot", keep_qk: bool = False) -> Attention:
    """Overwrite ``attn`` (relpos ``Attention`` on a patch grid) so that it computes ``conv`` on the pixels
    behind its tokens (Theorem 1 construction; module docstring). Returns ``attn``."""
    radius, offsets = _check_transfer(conv, attn, patch_size)
    dim, hd, heads = attn.proj.out_features, attn.head_dim, attn.num_heads
    inner = heads * hd
    w_qkv = attn.qkv.weight  # rows: [q heads | k heads | v heads], each head hd rows
    if not keep_qk:
        w_qkv[: 2 * inner].zero_()
    eye = torch.eye(dim, dtype=w_qkv.dtype, device=w_qkv.device)
    v = w_qkv[2 * inner:].view(heads, hd, dim)
    v.zero_()
    v[:, :dim] = eye
    if attn.qkv.bias is not None:
        if not keep_qk:
            attn.qkv.bias[: 2 * inner].zero_()
        attn.qkv.bias[2 * inner:].zero_()

    blocks = conv_patch_blocks(conv.weight.detach().to(attn.proj.weight), patch_size, radius)
    proj = attn.proj.weight.view(dim, heads, hd)
    proj.zero_()
    proj[:, : len(offsets), :dim] = blocks.permute(1, 0, 2)
    attn.proj.bias.copy_(conv.bias.detach().repeat(patch_size * patch_size) if conv.bias is not None
                         else torch.zeros_like(attn.proj.bias))

    table = offset_bias_table(offsets, attn.rel_pos.grid, heads, scale, bias_form)
    attn.rel_pos.set_offset_table(table.to(attn.rel_pos.table))
    return attn


def _check_transfer(conv: nn.Conv2d, attn: Attention, patch_size: int) -> tuple[int, list[tuple[int, int]]]:
    """The conditions of Theorem 1 on the pair, each failure one message saying what to build instead;
    returns the neighbourhood radius in patches and the head offsets."""
    if type(attn) is TalkingHeadsAttention or not isinstance(attn, Attention):
        raise TypeError(f"transfer target must be a plain repro Attention, got {type(attn).__name__}")
    if attn.rel_pos is None:
        raise ValueError("the target Attention has no relative position bias: build it with rel_pos_grid "
                         "(VisionTransformer attn='relpos'); Theorem 1 needs it (Lemma 2)")
    k = conv.kernel_size[0]
    if conv.kernel_size != (k, k) or k % 2 == 0 or conv.padding != (k // 2, k // 2) \
            or conv.stride != (1, 1) or conv.dilation != (1, 1) or conv.groups != 1:
        raise ValueError(f"transfer supports square odd-K, stride-1, undilated, ungrouped convolutions with "
                         f"padding K//2; got kernel {conv.kernel_size}, padding {conv.padding}, stride "
                         f"{conv.stride}, dilation {conv.dilation}, groups {conv.groups}")
    dim = attn.proj.out_features
    c_in, c_out = conv.in_channels, conv.out_channels
    if dim != patch_size * patch_size * c_in or dim != patch_size * patch_size * c_out:
        raise ValueError(f"token dim {dim} must equal patch_size^2 x channels = {patch_size}^2 x {c_in} "
                         f"(in) and {patch_size}^2 x {c_out} (out)")
    hd, heads = attn.head_dim, attn.num_heads
    if hd < dim:
        raise ValueError(f"head size {hd} < token dim {dim}: the construction needs an identity value "
                         "projection (d_H >= d, Theorem 1); build the attention with head_dim >= embed_dim")
    radius = neighbourhood_radius(k, patch_size)
    offsets = head_offsets(radius)
    if heads < len(offsets):
        raise ValueError(f"a {k}x{k} conv on {patch_size}x{patch_size} patches reaches patch offsets "
                         f"{{-{radius}..{radius}}}^2 and needs {len(offsets)} heads (Theorem 1: "
                         f"(2*ceil((K-1)/(2P))+1)^2; 9 iff K <= 2P+1); the attention has {heads}: "
                         f"use num_heads >= {len(offsets)} or patch_size >= {k // 2}")
    return radius, offsets


@register("models.conv_to_mhsa")
def conv_to_mhsa(conv_model: VisionTransformer, attn_model: VisionTransformer | None = None,
                 num_heads: int | None = None, scale: float = DEFAULT_SCALE, bias_form: str = "one_hot",
                 keep_qk: bool = False, **attn_kwargs) -> VisionTransformer:
    """Attention-phase model from a trained conv-phase model (CMHSA Sec. 4.1): every non-attention
    weight (LayerNorms, FFNs, final norm, head) copied by name, every conv layer transferred.

    Without ``attn_model`` one is built with the conv model's shape, ``attn='relpos'``, head size =
    embed_dim and ``num_heads`` (default: the (2m+1)^2 the kernel needs, 9 for K <= 2P+1);
    ``attn_kwargs`` (e.g. drop_path_rate) go to its constructor.
    """
    convs = [blk.attn for blk in conv_model.blocks]
    if not all(isinstance(c, PatchConvolution) for c in convs):
        raise TypeError("conv_model must be a conv-phase model (repro.models.conv_phase.conv_phase_vit)")
    patch = conv_model.patch_embed.patch_size
    kernels = {c.conv.kernel_size[0] for c in convs}
    if attn_model is None:
        blk = conv_model.blocks[0]
        need = max(heads_required(k, patch) for k in kernels)
        attn_model = VisionTransformer(
            img_size=conv_model.grid_size[0] * patch, patch_size=patch, in_chans=convs[0].channels,
            num_classes=conv_model.num_classes, embed_dim=conv_model.embed_dim, depth=len(convs),
            num_heads=num_heads or need, head_dim=conv_model.embed_dim,
            mlp_ratio=blk.mlp.fc1.out_features / conv_model.embed_dim, attn="relpos", norm=blk.norm_placement,
            global_pool="avg", patch_embed="identity", pos_embed="none", norm_eps=conv_model.norm.eps,
            **attn_kwargs).to(next(conv_model.parameters()))
    elif len(attn_model.blocks) != len(convs) or attn_model.grid_size != conv_model.grid_size:
        raise ValueError(f"attn_model has {len(attn_model.blocks)} blocks on a {attn_model.grid_size} grid; "
                         f"the conv model {len(convs)} on {conv_model.grid_size}")

    target = attn_model.state_dict()
    shared = {name: t for name, t in conv_model.state_dict().items() if ".attn." not in name}
    for name, t in shared.items():
        if name not in target or target[name].shape != t.shape:
            raise ValueError(f"conv-phase weight {name} {tuple(t.shape)} has no same-shaped counterpart in "
                             f"attn_model ({tuple(target[name].shape) if name in target else 'missing'})")
    missing = [n for n in target if ".attn." not in n and n not in shared]
    if missing:
        raise ValueError(f"attn_model weights with no conv-phase source: {missing[:5]}")
    attn_model.load_state_dict(shared, strict=False)
    for conv, blk in zip(convs, attn_model.blocks):
        conv_layer_to_attention(conv.conv, blk.attn, patch, scale=scale, bias_form=bias_form, keep_qk=keep_qk)
    return attn_model
