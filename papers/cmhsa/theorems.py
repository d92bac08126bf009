"""Probe runs for CMHSA's theorem tables: each returns one table row of numbers (CPU, under a second).

Every function takes the run's resolved config and reads its parameters from ``config["theorem"]``;
the measurements themselves are the shared ones in ``repro.probes.conv_theorems`` (whose docstring
defines the error measure and the least-squares method). Random kernels and images are drawn from a
seeded generator, so a rerun gives the same numbers.
"""
from __future__ import annotations

import torch

from repro.functions import register
from repro.models.transfer import DEFAULT_SCALE, heads_required, neighbourhood_radius
from repro.probes.conv_theorems import (centre_patch_map, fewest_exact_heads, lemma2_table, one_hot_head_residuals,
                                        positional_rank_residuals, sampled_one_hot_residual,
                                        transfer_error_table)


def _params(config: dict) -> dict:
    t = config.get("theorem")
    if not isinstance(t, dict):
        raise ValueError("a CMHSA theorem probe needs config['theorem'] = {kernel, patch, ...} "
                         "(papers/cmhsa/experiments.py sets it)")
    return t


@register("cmhsa.transfer_row")
def transfer_row(config: dict) -> dict:
    """Theorem 1 / Corollaries 3-4: a random KxK conv on P x P patches, C channels, transferred exactly
    (W_Q = W_K = 0, one-hot bias c = 30) into the (2 ceil((K-1)/2P) + 1)^2 heads the construction needs,
    against the conv on random N(0, 1) tokens (float32): max error on interior and border patches."""
    t = _params(config)
    k, p, c = int(t["kernel"]), int(t["patch"]), int(t["channels"])
    grid = max(4, 2 * neighbourhood_radius(k, p) + 2)  # the smallest (>= 4) with interior patches: m on each side
    row = transfer_error_table(kernels=(k,), patches=(p,), channels=(c,), grid=grid,
                               scale=float(t.get("scale", DEFAULT_SCALE)), bias_form=t.get("bias_form", "one_hot"),
                               seed=int(t.get("seed", 0)))[0]
    return {key: row[key] for key in ("heads", "grid", "interior_patches", "border_patches", "interior_max_err",
                                      "border_max_err", "border_mean_err", "vs_predicted_max_err",
                                      "attention_vs_predicted_max")}


@register("cmhsa.fewest_heads_row")
def fewest_heads_row(config: dict) -> dict:
    """Corollaries 3-4: fewest heads reproducing a random KxK convolution (float64, tolerance 1e-5), the
    interior error with that many heads and with one fewer (``repro.probes.conv_theorems.fewest_exact_heads``)."""
    t = _params(config)
    return fewest_exact_heads(int(t["kernel"]), int(t["patch"]), int(t["channels"]), tol=float(t.get("tol", 1e-5)),
                              scale=float(t.get("scale", DEFAULT_SCALE)), seed=int(t.get("seed", 0)))


@register("cmhsa.lemma2_row")
def lemma2_row(config: dict) -> dict:
    """Lemma 2 at one scale c (float64, 8x8 grid, K = 3 on 4x4 patches): mass off the target offset, its excess
    over the closed form, and the layer's interior output error."""
    t = _params(config)
    form = t.get("bias_form", "one_hot")
    row = lemma2_table(scales=(float(t["scale"]),), bias_form=form, seed=int(t.get("seed", 0)))[0]
    # absolute, not relative: the measured mass is 1 - (target mass), exact only to float64 eps
    return {"off_target_mass": row["off_target_mass"], "closed_form": row["bound"],
            "excess_over_closed_form": row["off_target_mass"] - row["bound"], "interior_max_err": row["interior_max_err"]}


@register("cmhsa.head_bound_row")
def head_bound_row(config: dict) -> dict:
    """Theorems 5 / 6 for one random KxK kernel: residuals of the best fits by H heads of positional attention,
    at H = bound - 1 and H = bound."""
    t = _params(config)
    k, p, c = int(t["kernel"]), int(t["patch"]), int(t["channels"])
    gen = torch.Generator().manual_seed(int(t.get("seed", 0)))
    radius = neighbourhood_radius(k, p) + 1  # one ring of patches more than the receptive field needs
    weight = torch.randn(c, c, k, k, generator=gen, dtype=torch.float64)
    tmap = centre_patch_map(weight, p, radius)
    need = heads_required(k, p)
    rank, positional = positional_rank_residuals(tmap, need)
    one_hot = one_hot_head_residuals(tmap, need)
    # explicit least squares on sampled images with the greedy offsets (a check of the closed form)
    samples = 4 * need * tmap.shape[2]
    lstsq = [sampled_one_hot_residual(weight, p, one_hot[h - 1]["offsets"], radius, samples, gen)
             for h in (need - 1, need)]
    return {"heads_needed": need, "positional_rank": rank,
            "one_hot_below": one_hot[need - 2]["residual"], "one_hot_at": one_hot[need - 1]["residual"],
            "positional_below": positional[need - 2], "positional_at": positional[need - 1],
            "lstsq_below": lstsq[0], "lstsq_at": lstsq[1],
            "input_dim": p * p * c, "candidates": (2 * radius + 1) ** 2}
