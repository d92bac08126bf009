"""Numerical checks of CMHSA's theorems (Li et al. 2021): Theorem 1 / Corollary 4 (the transfer is exact on
interior patches), Lemma 2 (positional softmax concentrates on one offset as c grows) and Theorems 5 / 6
(head lower bounds). Each function returns table rows (dicts) for the paper's report.

Error measure, used throughout: for outputs y (reference, the convolution) and y' over patches i,
err_i = ||y'_i - y_i|| / mean_j ||y_j|| (patch norms of the reference over the whole batch). Dividing by
the mean patch norm rather than ||y_i|| keeps the measure meaningful for tiny patches (P = 1, C = 1),
where a single output value can be close to zero.

Head bounds (read by papers/cmhsa/theorems.py's ``head_bound_row``). The convolution restricted to one query
patch is a linear map T from the pixels of its neighbour patches to its own output; we compute T exactly by
convolving basis images (no index arithmetic shared with ``repro.models.transfer``). Inputs are white noise,
so least squares has a closed form:
- one-hot positional heads (head h attends only the patch at offset delta_h, value = identity, output
  projection free): the model sees exactly the pixels of the chosen patches, and the best fit leaves
  residual^2 = sum of ||T[:, patch delta]||^2 over the patches not chosen. Patches are disjoint pixel sets,
  so this objective is modular in the chosen set and the greedy choice (largest column energy first) is
  the exact optimum over every set of H offsets; ``sampled_one_hot_residual`` checks it against an
  explicit lstsq fit on sampled images. Candidates: every offset in {-(m+1)..m+1}^2, one ring more than the
  receptive field needs.
- any positional attention (softmax or not: weights a_{h,delta} on every offset, W_h = W_V^h W_O^h free):
  the map is sum_h a_h (x) W_h, so the residual is the Eckart-Young tail of the rearranged matrix
  R[delta, :] = vec(T[:, patch delta]) (Van Loan-Pitsianis): it vanishes iff H >= rank R. This is the
  rank argument of Theorems 5 / 6 for content-independent attention. For random kernels we measured
  rank R = min((2m+1)^2, D_in * D_out): 9 for patch input (2 <= P, K <= 2P + 1) and min(K^2, C_in * C_out)
  for pixel input (P = 1). Without the softmax constraint (weights >= 0, summing to 1) a single channel
  pixel conv is one positional head (a_delta = kernel); the K^2 bound then needs C_in * C_out >= K^2,
  which the head_bounds table's pixel rows use (C = K). The one-hot rows need K^2 heads for any C.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from repro.models.attention import Attention
from repro.models.conv_phase import PatchConvolution
from repro.models.patches import patchify, unpatchify
from repro.models.transfer import (BIAS_FORMS, DEFAULT_SCALE, conv_layer_to_attention, conv_patch_blocks,
                                   head_offsets, heads_required, interior_mask, neighbourhood_radius,
                                   offset_bias_table)


def patch_errors(reference: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """(B, N) per-patch error ||output_i - reference_i|| / mean patch norm of ``reference``."""
    return (output - reference).norm(dim=-1) / reference.norm(dim=-1).mean()


def random_patch_conv(kernel: int, patch: int, channels: int, grid: tuple[int, int], generator: torch.Generator,
                      dtype=torch.float64) -> PatchConvolution:
    """A conv-phase layer with N(0, 1) kernel and bias (a 'random KxK convolution')."""
    layer = PatchConvolution(patch * patch * channels, patch, grid, kernel).to(dtype)
    with torch.no_grad():
        layer.conv.weight.copy_(torch.randn(layer.conv.weight.shape, generator=generator, dtype=dtype))
        layer.conv.bias.copy_(torch.randn(layer.conv.bias.shape, generator=generator, dtype=dtype))
    return layer


def transferred_attention(layer: PatchConvolution, scale: float = DEFAULT_SCALE, bias_form: str = "one_hot",
                          num_heads: int | None = None) -> Attention:
    """A relpos Attention (head size = token dim) holding ``layer``'s convolution (Theorem 1 construction)."""
    dim = layer.conv.in_channels * layer.patch_size ** 2
    heads = num_heads or heads_required(layer.conv.kernel_size[0], layer.patch_size)
    attn = Attention(dim, heads, head_dim=dim, rel_pos_grid=layer.grid).to(layer.conv.weight)
    return conv_layer_to_attention(layer.conv, attn, layer.patch_size, scale=scale, bias_form=bias_form)


def _neighbour_index(grid: tuple[int, int], offset: tuple[int, int]):
    """(N,) key index of each query's neighbour at ``offset`` clamped into the grid, and (N,) whether it exists."""
    gh, gw = grid
    ys, xs = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    ty, tx = ys.flatten() + offset[0], xs.flatten() + offset[1]
    exists = (ty >= 0) & (ty < gh) & (tx >= 0) & (tx < gw)
    return ty.clamp(0, gh - 1) * gw + tx.clamp(0, gw - 1), exists


def predicted_border_output(tokens: torch.Tensor, layer: PatchConvolution, bias_form: str) -> torch.Tensor:
    """What the transferred MHSA computes everywhere, borders included (transfer module docstring): the
    conv's patch blocks applied to each neighbour, a missing neighbour replaced by the clamped patch
    ('quadratic') or by the mean patch ('one_hot')."""
    k, p = layer.conv.kernel_size[0], layer.patch_size
    radius = neighbourhood_radius(k, p)
    blocks = conv_patch_blocks(layer.conv.weight.detach(), p, radius)
    out = layer.conv.bias.detach().repeat(p * p).expand(tokens.shape[0], tokens.shape[1], -1).clone()
    mean = tokens.mean(dim=1, keepdim=True)
    for block, offset in zip(blocks, head_offsets(radius)):
        index, exists = _neighbour_index(layer.grid, offset)
        keys = tokens[:, index]
        if bias_form == "one_hot":
            keys = torch.where(exists[None, :, None], keys, mean)
        out = out + keys @ block.T
    return out


def predicted_attention(grid: tuple[int, int], offsets: list[tuple[int, int]], bias_form: str) -> torch.Tensor:
    """(H, N, N) attention rows the border analysis predicts: one-hot on the (clamped) neighbour, or uniform
    where the neighbour is missing under 'one_hot'."""
    n = grid[0] * grid[1]
    rows = []
    for offset in offsets:
        index, exists = _neighbour_index(grid, offset)
        a = F.one_hot(index, n).double()
        if bias_form == "one_hot":
            a[~exists] = 1.0 / n
        rows.append(a)
    return torch.stack(rows)


@torch.no_grad()
def transfer_error_table(kernels=(3, 5), patches=(4, 8, 16), channels=(1, 3), grid: int = 4,
                         scale: float = DEFAULT_SCALE, bias_form: str = "one_hot", batch: int = 4,
                         dtype=torch.float32, seed: int = 0) -> list[dict]:
    """Theorem 1 check: transferred MHSA vs its convolution, interior and border patches, per (K, P, C)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for k in kernels:
        for p in patches:
            for c in channels:
                g = (grid, grid)
                layer = random_patch_conv(k, p, c, g, gen, dtype)
                attn = transferred_attention(layer, scale, bias_form)
                x = torch.randn(batch, grid * grid, p * p * c, generator=gen, dtype=dtype)
                y_conv, y_attn = layer(x), attn(x)
                err = patch_errors(y_conv, y_attn)
                inside = interior_mask(g, p, k)
                predicted = predicted_border_output(x, layer, bias_form)
                offsets = head_offsets(neighbourhood_radius(k, p))
                amap = attn.attention_map(x)[0, : len(offsets)].double()
                amap_dev = (amap - predicted_attention(g, offsets, bias_form)).abs().max().item()
                rows.append({
                    "kernel": k, "patch": p, "channels": c, "heads": attn.num_heads, "grid": grid,
                    "interior_patches": int(inside.sum()), "border_patches": int((~inside).sum()),
                    "interior_max_err": err[:, inside].max().item() if inside.any() else float("nan"),
                    "border_max_err": err[:, ~inside].max().item() if (~inside).any() else float("nan"),
                    "border_mean_err": err[:, ~inside].mean().item() if (~inside).any() else float("nan"),
                    "vs_predicted_max_err": patch_errors(predicted, y_attn).max().item(),
                    "attention_vs_predicted_max": amap_dev,
                })
    return rows


def offset_attention(layer: PatchConvolution, offsets: list[tuple[int, int]], blocks: torch.Tensor,
                     scale: float = DEFAULT_SCALE) -> Attention:
    """A relpos Attention with one head per entry of ``offsets``: W_Q = W_K = 0, value = identity, one-hot
    bias c = ``scale`` on the head's offset (Lemma 2), output block ``blocks[h]`` and the conv's bias. The
    Theorem 1 construction for any head count and any set of offsets (``transferred_attention`` always
    takes the offsets the kernel needs, and refuses fewer heads)."""
    dim = layer.conv.in_channels * layer.patch_size ** 2
    heads = len(offsets)
    w = layer.conv.weight
    attn = Attention(dim, heads, head_dim=dim, rel_pos_grid=layer.grid).to(w)
    inner = heads * dim
    attn.qkv.weight.zero_()
    attn.qkv.bias.zero_()
    attn.qkv.weight[2 * inner:].view(heads, dim, dim).copy_(torch.eye(dim, dtype=w.dtype))
    attn.proj.weight.copy_(blocks.to(w).permute(1, 0, 2).reshape(dim, inner))
    attn.proj.bias.copy_(layer.conv.bias.detach().repeat(layer.patch_size ** 2))
    attn.rel_pos.set_offset_table(offset_bias_table(offsets, layer.grid, heads, scale).to(w))
    return attn


@torch.no_grad()
def fewest_exact_heads(kernel: int, patch: int, channels: int, tol: float = 1e-5, scale: float = DEFAULT_SCALE,
                       batch: int = 4, seed: int = 0, dtype=torch.float64) -> dict:
    """Corollaries 3 / 4 measured rather than computed: the fewest heads of an MHSA layer built from a random
    KxK convolution that reproduce it (interior max error <= ``tol``), with the error at that count and
    at one head fewer.

    Nothing here uses ``heads_required`` or the radius m: the candidate offsets are every patch offset in
    {-R..R}^2 with R = K//2 (a pixel's receptive field reaches K//2 pixels, hence at most K//2 patches
    for any P >= 1); head h copies the candidate whose block of the convolution's map has the h-th
    largest energy (the best choice of H one-hot heads, module doc); H = 1, 2, ... heads are tried until
    the layer matches the convolution (``F.conv2d``) on the patches at least R from every edge. When no
    H <= (2R+1)^2 does, ``exact_heads`` is (2R+1)^2 + 1.
    """
    gen = torch.Generator().manual_seed(seed)
    reach = kernel // 2
    side = 2 * reach + 3  # a 3 x 3 block of interior patches
    layer = random_patch_conv(kernel, patch, channels, (side, side), gen, dtype)
    x = torch.randn(batch, side * side, patch * patch * channels, generator=gen, dtype=dtype)
    y = layer(x)
    pos = torch.arange(side)
    edge = (pos >= reach) & (pos < side - reach)
    inside = (edge[:, None] & edge[None, :]).flatten()
    candidates = head_offsets(reach)  # all of {-R..R}^2, row-major
    blocks = conv_patch_blocks(layer.conv.weight.detach(), patch, reach)
    order = torch.argsort(blocks.pow(2).sum(dim=(1, 2)), descending=True, stable=True).tolist()
    errors = []
    for h in range(1, len(order) + 1):
        attn = offset_attention(layer, [candidates[i] for i in order[:h]], blocks[order[:h]], scale)
        errors.append(patch_errors(y, attn(x))[:, inside].max().item())
        if errors[-1] <= tol:
            break
    exact = len(errors) if errors[-1] <= tol else len(order) + 1
    return {"exact_heads": exact, "err_exact_heads": errors[-1],
            "err_one_fewer": errors[-2] if len(errors) > 1 else float("nan"),
            "errors_by_heads": errors, "candidates": len(order), "tolerance": tol}


@torch.no_grad()
def lemma2_table(scales=(0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0), grid: int = 8, bias_form: str = "one_hot",
                 kernel: int = 3, patch: int = 4, channels: int = 1, seed: int = 0) -> list[dict]:
    """Lemma 2 check (float64): mass of each head on its target offset, for interior queries, vs the scale c;
    error = 1 - mass (max over heads and queries), beside a closed-form bound, and the interior output
    error of the transferred layer at that c."""
    if bias_form not in BIAS_FORMS:
        raise ValueError(f"unknown bias_form {bias_form!r}; choose one of {BIAS_FORMS}")
    gen = torch.Generator().manual_seed(seed)
    g = (grid, grid)
    n = grid * grid
    layer = random_patch_conv(kernel, patch, channels, g, gen)
    x = torch.randn(2, n, patch * patch * channels, generator=gen, dtype=torch.float64)
    inside = interior_mask(g, patch, kernel)
    offsets = head_offsets(neighbourhood_radius(kernel, patch))
    rows = []
    for c in scales:
        attn = transferred_attention(layer, c, bias_form)
        amap = attn.attention_map(x)[0]  # (H, N, N); W_Q = W_K = 0, so the same for every image
        mass = torch.stack([amap[h, torch.arange(n), _neighbour_index(g, off)[0]]
                            for h, off in enumerate(offsets)])  # (H, N)
        if bias_form == "one_hot":  # exact for an interior query: e^c / (e^c + N - 1)
            bound = (n - 1) / (math.exp(c) + n - 1)
        else:  # S <= theta(c)^2 - 1 over all of Z^2, error = S / (1 + S); theta(c) = sum over integers n of e^(-c n^2)
            bound = 1.0 - 1.0 / (1.0 + 2.0 * sum(math.exp(-c * n * n) for n in range(1, 64))) ** 2
        rows.append({"scale": c, "off_target_mass": (1 - mass[:, inside]).max().item(), "bound": bound,
                     "interior_max_err": patch_errors(layer(x), attn(x))[:, inside].max().item()})
    return rows


@torch.no_grad()
def centre_patch_map(weight: torch.Tensor, patch: int, radius: int) -> torch.Tensor:
    """(P*P*C_out, (2R+1)^2, P*P*C_in): the convolution's map from the patches at offsets {-R..R}^2 (row-major)
    to the centre patch's output, by convolving every basis image of a (2R+1)P-pixel square."""
    c_out, c_in, k, _ = weight.shape
    side = 2 * radius + 1
    d_in = patch * patch * c_in
    n_basis = side * side * d_in
    columns = []
    for start in range(0, n_basis, 1024):
        idx = torch.arange(start, min(start + 1024, n_basis))
        basis = torch.zeros(len(idx), side * side * d_in, dtype=weight.dtype)
        basis[torch.arange(len(idx)), idx] = 1.0
        img = unpatchify(basis.view(len(idx), side * side, d_in), (side, side), patch)
        out = patchify(F.conv2d(img, weight, padding=k // 2), patch)
        columns.append(out[:, (side * side) // 2])  # centre patch, (n, P*P*C_out)
    return torch.cat(columns).T.reshape(-1, side * side, d_in)


def one_hot_head_residuals(t: torch.Tensor, max_heads: int) -> list[dict]:
    """Best relative residual of one-hot positional heads for H = 1..max_heads (exact greedy; module doc)."""
    energy = t.pow(2).sum(dim=(0, 2))  # per candidate offset
    order = torch.argsort(energy, descending=True)
    total = energy.sum()
    rows = []
    for h in range(1, max_heads + 1):
        rest = energy[order[h:]].sum()  # summing what is left, not total minus kept: no cancellation
        rows.append({"heads": h, "residual": math.sqrt(rest.item() / total.item()),
                     "offsets": order[:h].tolist()})
    return rows


def positional_rank_residuals(t: torch.Tensor, max_heads: int, rtol: float = 1e-10) -> tuple[int, list[float]]:
    """rank of R[delta] = vec(T[:, delta]) and the Eckart-Young relative residual of the best H-head
    positional attention for H = 1..max_heads."""
    s = torch.linalg.svdvals(t.permute(1, 0, 2).reshape(t.shape[1], -1))
    rank = int((s > rtol * s[0]).sum())
    energy = s.pow(2)
    return rank, [math.sqrt(max((energy[h:].sum() / energy.sum()).item(), 0.0)) for h in range(1, max_heads + 1)]


def sampled_one_hot_residual(weight: torch.Tensor, patch: int, offsets: list[int], radius: int,
                             samples: int, generator: torch.Generator) -> float:
    """Relative residual of an explicit least-squares fit of the centre-patch conv output from the patches
    at the candidate ``offsets`` (indices into {-R..R}^2) over sampled N(0, 1) images: checks the closed form."""
    t = centre_patch_map(weight, patch, radius)
    x = torch.randn(samples, t.shape[1], t.shape[2], generator=generator, dtype=weight.dtype)
    y = torch.einsum("oni,sni->so", t, x)
    feats = x[:, offsets].reshape(samples, -1)
    coef = torch.linalg.lstsq(feats, y).solution
    return ((y - feats @ coef).norm() / y.norm()).item()


@torch.no_grad()
def model_transfer_gap(conv_model, attn_model, images: torch.Tensor) -> list[dict]:
    """How closely a transferred attention-phase model follows its conv-phase source, block by block: the
    max error on patches whose receptive field after l blocks is inside the image (at least l*m patches
    from every edge) and the mean error over all patches; a last row compares the logits."""
    conv_model.eval(), attn_model.eval()
    patch = conv_model.patch_embed.patch_size
    grid = conv_model.grid_size
    xc = xa = conv_model.patch_embed(images)
    rows = []
    for depth, (bc, ba) in enumerate(zip(conv_model.blocks, attn_model.blocks), start=1):
        xc, xa = bc(xc), ba(xa)
        err = patch_errors(xc, xa)
        inside = interior_mask(grid, patch, bc.attn.conv.kernel_size[0], depth)
        rows.append({"block": depth, "interior_patches": int(inside.sum()),
                     "interior_max_err": err[:, inside].max().item() if inside.any() else float("nan"),
                     "all_mean_err": err.mean().item()})
    lc, la = conv_model(images), attn_model(images)
    rows.append({"block": "logits", "interior_patches": 0, "interior_max_err": float("nan"),
                 "all_mean_err": ((la - lc).norm(dim=-1) / lc.norm(dim=-1)).mean().item()})
    return rows
