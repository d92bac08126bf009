"""Probe runs (kind="probe"): each takes the resolved run config and returns one record's metrics.

The measurements themselves live in ``theory.py``; these functions pick the arguments out of
``config["probe_args"]`` and shape the results into what one row of paper.yaml needs: scalars for the
table cells, per-depth arrays for the figures. In smoke mode (``config["mode"] == "smoke"``) every probe
runs the same code at toy sizes, so CI exercises it in a second.

Why arrays in log2: the report draws per-layer arrays against their index on linear axes. The probes
measure at depths L = L_0 * 2^(i-1) (and widths d = d_0 * 2^(j-1)), so log2 of the gradient norm against
the index i is a log-log plot whose slope is the exponent itself.
"""
from __future__ import annotations

import math

import numpy as np
import timm
import torch
import torch.nn.functional as F

from . import theory as th  # imports repro.models, which registers the repro_* names with timm
from repro.functions import register

SMOKE = {"lemma1": {"d": 16, "L": 4, "samples": 2},
         "theorem4": {"L_values": (2, 4), "d_values": (16, 32), "samples": 2}}


def _args(config: dict, probe: str) -> dict:
    args = dict(config.get("probe_args") or {})
    if config.get("mode") == "smoke":
        args.update(SMOKE.get(probe, {}))
    return args


def _doubling(values, what: str) -> None:
    """The log2-index figures assume each value doubles the previous one; say so if not."""
    v = list(values)
    if any(b != 2 * a for a, b in zip(v, v[1:])):
        raise ValueError(f"{what}={v}: the figures need each value twice the previous one (e.g. 6, 12, 24, 48)")


# ------------------------------------------------------------------ Table 1: the blocks as equations

def _ln(x: torch.Tensor) -> torch.Tensor:
    """LN(.) of the equations: normalisation over the feature dimension (affine (1, 0) at init)."""
    return F.layer_norm(x, x.shape[-1:], eps=1e-6)


def _ffn(blk, x: torch.Tensor) -> torch.Tensor:
    """sigma(x W^1 + b^1) W^2 + b^2 with sigma = GELU, from the block's own MLP weights."""
    fc1, fc2 = blk.mlp.fc1, blk.mlp.fc2
    return F.gelu(x @ fc1.weight.T + fc1.bias) @ fc2.weight.T + fc2.bias


def equations(blk, y: torch.Tensor, placement: str) -> torch.Tensor:
    """Y_{l+1} computed line by line from supplement Table 1 (MSA taken from the block as a whole).

    ``res_post_ln`` uses our reading Y^2 = MSA(Y^1); ``res_post_ln_literal`` the table as extracted,
    Y^2 = MSA(Y_l). ``post_ln`` is Xiong et al.'s Post-LN: Z = LN(Y + MSA(Y)), Y_{l+1} = LN(Z + FFN(Z)).
    """
    msa = blk.attn
    if placement == "pre_ln":
        y1 = _ln(y)
        y2 = msa(y1)
        y3 = y + y2
        y4 = _ln(y3)
        y5 = _ffn(blk, y4)
        return y5 + y3
    if placement in ("res_post_ln", "res_post_ln_literal"):
        y1 = _ln(y)
        y2 = msa(y1) if placement == "res_post_ln" else msa(y)
        y3 = _ln(y2)
        y4 = y + y3
        y5 = _ln(y4)
        y6 = _ffn(blk, y5)
        y7 = _ln(y6)
        return y4 + y7
    if placement == "post_ln":
        z = _ln(y + msa(y))
        return _ln(z + _ffn(blk, z))
    raise ValueError(f"unknown placement {placement!r}; choose pre_ln, res_post_ln, res_post_ln_literal or post_ln")


@register("respostln.table1")
def table1(config: dict) -> dict:
    """Largest deviation of a registered model's block from Table 1's equations, on random tokens.

    probe_args: placement (which equations), norm (the block built), dim, heads, tokens, seed. The block
    comes from ``timm.create_model(model.name, norm=..., depth=1)`` (the models the stability runs train),
    with N(0, 1/fan_in) weights and random biases, so every term of the equations is exercised.
    """
    a = _args(config, "table1")
    placement, norm = a["placement"], a.get("norm", a["placement"])
    dim, heads, n, seed = int(a.get("dim", 64)), int(a.get("heads", 2)), int(a.get("tokens", 17)), int(a.get("seed", 0))
    model = timm.create_model(config["model"]["name"], norm=norm, depth=1, embed_dim=dim, num_heads=heads,
                              num_classes=10)
    blk = th.init_as_proof(model.blocks[0], seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in blk.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0.0, 0.5, generator=gen)
        y = 3.0 * torch.randn(4, n, dim, generator=gen) + 1.0
        with th.single_thread():
            got, want = blk(y), equations(blk, y, placement)
    err = (got - want).abs().max().item()
    return {"max_abs_err": err, "rel_err": err / want.abs().max().item(), "out_norm": want.norm(dim=-1).mean().item(),
            "placement": placement, "norm": norm}


# ------------------------------------------------------------------ Lemma 1

@register("respostln.lemma1")
def lemma1(config: dict) -> dict:
    """E||Y_{l+1,i}||^2 of a Res-Post-LN stack at init for l = 1..L at one width d, beside Lemma 1's bound.

    probe_args: d, L, samples, tokens, seed. Arrays run over l = 1..L (index = l).
    """
    a = _args(config, "lemma1")
    d = int(a["d"])
    res = th.lemma1(d_values=(d,), L=int(a["L"]), n_tokens=int(a.get("tokens", 16)), samples=int(a["samples"]),
                    seed=int(a.get("seed", 0)))
    rows = res["rows"]
    mean = np.array([r["mean"] for r in rows])
    bound = np.array([r["bound"] for r in rows])
    orth = np.array([r["orthogonal"] for r in rows])
    return {
        "sq_norm": mean.tolist(), "sq_norm_std": [r["std"] for r in rows], "bound": bound.tolist(),
        "sq_norm_over_d": (mean / d).tolist(), "orthogonal_over_d": (orth / d).tolist(),
        "log2_ratio": np.log2(mean / bound).tolist(),
        "sq_norm_first": float(mean[0]), "sq_norm_last": float(mean[-1]),
        "bound_first": float(bound[0]), "bound_last": float(bound[-1]),
        "ratio_max": float((mean / bound).max()), "orth_ratio_last": float(mean[-1] / orth[-1]),
        "holds_everywhere": bool((mean <= bound).all()), "config": res["config"],
    }


# ------------------------------------------------------------------ Theorem 4

@register("respostln.theorem4")
def theorem4(config: dict) -> dict:
    """||dL~/dW^{2,L}||_F at init over a depth x width grid for one placement, and its power-law fit.

    probe_args: norm, L_values, d_values, samples, tokens, heads, seed. Samples are paired across
    placements (the same seed gives the same weights and tokens), so rows of one seed compare directly.
    """
    a = _args(config, "theorem4")
    norm = a["norm"]
    Ls, ds = [int(v) for v in a["L_values"]], [int(v) for v in a["d_values"]]
    _doubling(Ls, "L_values")
    _doubling(ds, "d_values")
    res = th.theorem4(L_values=Ls, d_values=ds, blocks=(norm,), samples=int(a["samples"]), seed=int(a.get("seed", 0)),
                      n_tokens=int(a.get("tokens", 16)), num_heads=int(a.get("heads", 1)))
    fit = res["fits"][norm]
    g = {(c["L"], c["d"]): c["mean"] for c in res["grid"]}
    out = {"a": fit["a"], "b": fit["b"], "se_a": fit["se_a"], "se_b": fit["se_b"], "r2": fit["r2"],
           "a_at_d": {str(k): v for k, v in fit["a_at_d"].items()},
           "g_deep_wide": g[max(Ls), max(ds)], "g_shallow_wide": g[min(Ls), max(ds)],
           "g_deep_narrow": g[max(Ls), min(ds)],
           "log2_g_vs_d_deepest": [math.log2(g[max(Ls), d]) for d in ds],
           "grid": [{k: c[k] for k in ("L", "d", "mean", "std")} for c in res["grid"]],
           "config": res["config"]}
    for d in ds:
        out[f"log2_g_vs_L_d{d}"] = [math.log2(g[L, d]) for L in Ls]
    return out
