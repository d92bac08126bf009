"""Res-Post-LN at initialisation: Lemma 1 (residual-stream norm) and Theorem 4 (last-layer MLP gradient).

Kim & Kim, ACCV 2022, supplement Section 1, measured on the shared model core's ``Block`` rather than
argued. Setting (the supplement's, following Xiong et al. 2020, "On layer normalization in the
transformer architecture"):

- L blocks of width d with MLP hidden width d_m = d (``mlp_ratio=1``: the supplement takes d_m = d
  "to calculate analytically"), SDPA attention (one head by default), on random tokens: each sequence is
  n tokens drawn i.i.d. N(0, I_d), so E||Y_1||^2 = d. No patch embedding: the theory is about the stack.
- Initialisation: every Linear weight N(0, 1/fan_in), every bias 0, every LayerNorm affine (1, 0). For
  the d x d matrices this is Xavier-normal, and it makes [LN(x) W^1]_p ~ N(0, 1) because ||LN(x)||^2 = d,
  which is what the proof of Theorem 4 uses.
- Final LN after the last block (Table 1) for pre_ln and res_post_ln; none for post_ln, whose blocks
  already end in an LN (a second one would be an identity map there).
- Loss: the supplement's L~ = (1/n) sum_i L(Y_Final,i) with L a per-token cross-entropy of a linear
  classifier (C classes, weight N(0, 1/d), no bias) against uniformly random labels.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from repro.models import Attention, Block

NORMS = ("pre_ln", "post_ln", "res_post_ln")

# Exponents (of L, of d) in the upper bounds ||dL~/dW^{2,L}||_F = O(L^a d^b sqrt(ln d)).
THEORY = {
    "res_post_ln": (-0.5, 0.5),  # supplement Theorem 4: sqrt(d ln d / L)
    "pre_ln": (-0.5, 1.0),       # Xiong et al. 2020, Theorem 1: d sqrt(ln d / L)
    "post_ln": (0.0, 1.0),       # Xiong et al. 2020, Theorem 1: d sqrt(ln d)
}

# Allowed gap between a fitted and a theoretical exponent, before twice the fit's standard error is
# added. The bounds are asymptotic in L: a residual stream of (c + L) d instead of L d moves the fitted
# slope of (c + L)^-0.5 over L = 6..48 from -0.5 to -0.42 for c = 3 (Pre-LN has c = 2, Res-Post-LN c = 1/2).
EXPONENT_TOL = 0.1


class TokenStack(nn.Module):
    """L shared-core blocks of width d on token inputs, the final LN and a per-token linear classifier."""

    def __init__(self, depth: int, dim: int, norm: str, num_heads: int = 1, num_classes: int = 10,
                 act: str = "gelu"):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; choose one of {NORMS}")
        if act not in ("gelu", "relu"):
            raise ValueError(f"unknown activation {act!r}; choose 'gelu' (ViT) or 'relu' (Xiong et al.)")
        self.blocks = nn.ModuleList(
            Block(dim, Attention(dim, num_heads), mlp_ratio=1.0, norm=norm) for _ in range(depth))
        if act == "relu":
            for blk in self.blocks:
                blk.mlp.act = nn.ReLU()
        self.norm = nn.Identity() if norm == "post_ln" else nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def init_as_proof(model: nn.Module, seed: int) -> nn.Module:
    """Weights N(0, 1/fan_in), biases 0, LN (1, 0): pre-activations N(0, 1) whenever ||LN(x)||^2 = d.

    Linear layers are drawn in module order from one seeded generator, so two stacks that differ only in
    their norm placement get identical weights from the same seed (paired comparisons).
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, m.in_features ** -0.5, generator=gen)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
    return model


@contextmanager
def single_thread():
    """One intra-op thread: for matmuls of n = 16 tokens, thread hand-off costs more than it saves, and on a
    shared, busy CPU oversubscribed threads made each op ~50x slower in our runs."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def random_tokens(n_tokens: int, dim: int, num_classes: int, seed: int):
    """One sequence (1, n, d) of N(0, I_d) tokens and n uniformly random labels."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n_tokens, dim, generator=gen)
    y = torch.randint(num_classes, (1, n_tokens), generator=gen)
    return x, y


def lemma1_bound(l: int, d: int) -> float:
    """Lemma 1: E||Y_{l+1,i}||^2 <= 2[(2l - 1) d^2 + l d] for the output of block l."""
    return 2.0 * ((2 * l - 1) * d * d + l * d)


def lemma1(d_values=(64, 128, 256, 512), L: int = 48, n_tokens: int = 16, samples: int = 8, seed: int = 0,
           num_heads: int = 1, act: str = "gelu") -> dict:
    """Measured E||Y_{l+1,i}||^2 of a Res-Post-LN stack at init beside Lemma 1's bound, l = 1..L.

    Y_1 is the first block's input (the tokens) and Y_{l+1} the output of block l (supplement Table 1).
    ``mean``/``std`` run over all tokens of all samples (fresh weights and tokens per sample).
    ``orthogonal`` = E||Y_1||^2 + 2 l d is what the norm would be if Y_1 and the 2l increments, each of
    squared norm d after its LN, were mutually orthogonal: the scale the proof's first step assumes.
    """
    rows = []
    for d in d_values:
        sq = torch.empty(samples, L + 1, n_tokens)  # ||Y_l,i||^2 for l = 1..L+1 (index 0 is the input Y_1)
        with single_thread(), torch.no_grad():
            model = TokenStack(L, d, "res_post_ln", num_heads=num_heads, act=act)
            for s in range(samples):
                init_as_proof(model, _seed(seed, L, d, s))
                x, _ = random_tokens(n_tokens, d, 2, _seed(seed, d, s, 1))
                sq[s, 0] = x[0].pow(2).sum(-1)
                for l, blk in enumerate(model.blocks, start=1):
                    x = blk(x)
                    sq[s, l] = x[0].pow(2).sum(-1)
        y1 = sq[:, 0].mean().item()
        for l in range(1, L + 1):
            mean, std = sq[:, l].mean().item(), sq[:, l].std().item()
            bound = lemma1_bound(l, d)
            rows.append({"d": d, "l": l, "mean": mean, "std": std, "bound": bound, "holds": mean <= bound,
                         "ratio": mean / bound, "orthogonal": y1 + 2 * l * d})
    return {"config": {"d_values": list(d_values), "L": L, "n_tokens": n_tokens, "samples": samples,
                       "seed": seed, "num_heads": num_heads, "act": act}, "rows": rows}


def last_layer_grad_norm(model: TokenStack, x: torch.Tensor, y: torch.Tensor) -> float:
    """||dL~/dW^{2,L}||_F: gradient of the token-mean cross-entropy w.r.t. the last block's fc2 weight."""
    w = model.blocks[-1].mlp.fc2.weight
    for p in model.parameters():
        p.requires_grad_(p is w)  # nothing upstream of fc2 needs a gradient: backward stays short
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    (grad,) = torch.autograd.grad(loss, w)
    return grad.norm().item()


def fit_exponents(L, d, g, ln_power: float = 0.5) -> dict:
    """Least squares log g - ln_power log ln d = a log L + b log d + c, with standard errors and R^2.

    ``ln_power=0.5`` takes the sqrt(ln d) factor of every bound out first, so b compares directly with the
    bounds' powers of d. A variable with a single value gets no column (its exponent is reported as nan).
    """
    L, d, g = (np.asarray(v, dtype=float) for v in (L, d, g))
    if np.any(g <= 0):
        raise ValueError("fit_exponents needs positive values g; got a zero or negative entry")
    target = np.log(g) - ln_power * np.log(np.log(d))
    names = [n for n, v in (("a", L), ("b", d)) if np.unique(v).size > 1]
    cols = [np.log(L) if n == "a" else np.log(d) for n in names] + [np.ones_like(g)]
    X = np.column_stack(cols)
    coef, *_ = np.linalg.lstsq(X, target, rcond=None)
    resid = target - X @ coef
    dof = len(g) - X.shape[1]
    cov = (resid @ resid / dof) * np.linalg.inv(X.T @ X) if dof > 0 else np.full((X.shape[1],) * 2, np.nan)
    se = np.sqrt(np.diag(cov))
    spread = ((target - target.mean()) ** 2).sum()
    out = {"a": math.nan, "b": math.nan, "se_a": math.nan, "se_b": math.nan, "c": float(coef[-1]),
           "r2": float(1 - resid @ resid / spread) if spread > 0 else 1.0, "ln_power": ln_power}
    for i, n in enumerate(names):
        out[n], out["se_" + n] = float(coef[i]), float(se[i])
    return out


def theorem4(L_values=(6, 12, 24, 48), d_values=(64, 128, 256, 512), blocks=NORMS, samples: int = 8,
             seed: int = 0, n_tokens: int = 16, num_heads: int = 1, num_classes: int = 10,
             act: str = "gelu") -> dict:
    """||dL~/dW^{2,L}||_F at init over a depth x width grid, per block type, plus power-law fits.

    Sample s at (L, d) uses the same weights and tokens for every block type (paired); ``grid`` holds the
    per-sample norms, ``fits`` one fit per block type over the whole grid and the L-slope at each d.
    """
    grid = []
    for d in d_values:
        data = [random_tokens(n_tokens, d, num_classes, _seed(seed, d, s, 1)) for s in range(samples)]
        for L in L_values:
            for norm in blocks:
                with single_thread():
                    model = TokenStack(L, d, norm, num_heads=num_heads, num_classes=num_classes, act=act)
                    norms = [last_layer_grad_norm(init_as_proof(model, _seed(seed, L, d, s)), *data[s])
                             for s in range(samples)]
                grid.append({"norm": norm, "L": L, "d": d, "samples": norms,
                             "mean": float(np.mean(norms)), "std": float(np.std(norms, ddof=1)) if samples > 1 else 0.0})
    fits = {}
    for norm in blocks:
        cells = [c for c in grid if c["norm"] == norm]
        fit = fit_exponents([c["L"] for c in cells], [c["d"] for c in cells], [c["mean"] for c in cells])
        fit["a_at_d"] = {d: fit_exponents([c["L"] for c in cells if c["d"] == d], [d] * len(L_values),
                                          [c["mean"] for c in cells if c["d"] == d])["a"]
                         for d in d_values} if len(L_values) > 1 else {}
        fits[norm] = fit
    return {"config": {"L_values": list(L_values), "d_values": list(d_values), "blocks": list(blocks),
                       "samples": samples, "seed": seed, "n_tokens": n_tokens, "num_heads": num_heads,
                       "num_classes": num_classes, "act": act},
            "grid": grid, "fits": fits, "theory": {n: THEORY[n] for n in blocks}}


def _cell(result: dict, norm: str, L: int, d: int) -> dict:
    return next(c for c in result["grid"] if (c["norm"], c["L"], c["d"]) == (norm, L, d))


def paired_log_ratio(result: dict, num: str, den: str, L: int, d: int) -> tuple[float, float]:
    """Mean and standard error over samples of log(g_num / g_den) at (L, d); samples share weights."""
    r = np.log(_cell(result, num, L, d)["samples"]) - np.log(_cell(result, den, L, d)["samples"])
    return float(r.mean()), float(r.std(ddof=1) / math.sqrt(len(r))) if len(r) > 1 else math.inf


def _ordering(result: dict, low: str, high: str) -> dict:
    """Claim g_low < g_high at the largest L, for every d: holds / fails / inconclusive on 2 SE."""
    L = max(result["config"]["L_values"])
    parts, verdicts = [], []
    for d in result["config"]["d_values"]:
        m, se = paired_log_ratio(result, low, high, L, d)
        verdicts.append("holds" if m + 2 * se < 0 else "fails" if m - 2 * se > 0 else "inconclusive")
        parts.append(f"d={d}: {math.exp(m):.3f}")
    verdict = "fails" if "fails" in verdicts else "holds" if all(v == "holds" for v in verdicts) else "inconclusive"
    return {"claim": f"{low} gradient below {high} at L={L}", "expected": "ratio < 1 at every d",
            "measured": f"{low}/{high} = " + ", ".join(parts), "verdict": verdict}


def theorem4_verdicts(result: dict, tol: float = EXPONENT_TOL) -> list[dict]:
    """Each measured exponent or ordering beside the theory's, with holds / fails / inconclusive.

    The theorems are O() upper bounds, so each fitted exponent, of L and of d (after sqrt(ln d)), holds
    when it does not exceed the bound's by more than tol + 2 SE; whether the bound is tight is said in the
    detail. The orderings are the papers' point: Res-Post-LN below Pre-LN, whose gradient is below
    Post-LN's at depth.
    """
    out = []
    for norm in result["config"]["blocks"]:
        fit, (a_th, b_th) = result["fits"][norm], result["theory"][norm]
        for axis, value, se, bound, what in (("L", fit["a"], fit["se_a"], a_th, "exponent of L (upper bound)"),
                                              ("d", fit["b"], fit["se_b"], b_th,
                                               "exponent of d beyond sqrt(ln d) (upper bound)")):
            if math.isnan(value):
                continue
            slack = tol + 2 * se
            tight = "tight" if abs(value - bound) <= slack else f"loose by {axis}^{bound - value:.2f}"
            out.append({"claim": f"{norm}: {what}", "expected": f"<= {bound:+.2f}",
                        "measured": f"{value:+.3f} +- {se:.3f} ({tight})",
                        "verdict": "holds" if value <= bound + slack else "fails"})
    blocks = result["config"]["blocks"]
    if {"res_post_ln", "pre_ln"} <= set(blocks):
        out.append(_ordering(result, "res_post_ln", "pre_ln"))
        if len(result["config"]["d_values"]) > 1:
            L = max(result["config"]["L_values"])
            ds = result["config"]["d_values"]
            ratios = [math.exp(paired_log_ratio(result, "res_post_ln", "pre_ln", L, d)[0]) for d in ds]
            fit = fit_exponents([L] * len(ds), ds, ratios, ln_power=0.0)
            slack = tol + 2 * fit["se_b"] if not math.isnan(fit["se_b"]) else tol
            out.append({"claim": f"res_post_ln / pre_ln shrinks like d^-0.5 at L={L} (ratio of the two bounds)",
                        "expected": "-0.50", "measured": f"{fit['b']:+.3f} +- {fit['se_b']:.3f}",
                        "verdict": "holds" if abs(fit["b"] + 0.5) <= slack else "fails"})
    if {"pre_ln", "post_ln"} <= set(blocks):
        out.append(_ordering(result, "pre_ln", "post_ln"))
    return out


def _log_axes(ax, ticks, xlabel, title) -> None:
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set(xscale="log", yscale="log", xlabel=xlabel, title=title)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def loglog_figure(result: dict, path) -> None:
    """Gradient norm vs L per d (one line per block type) and vs d at the largest L, log-log, with the
    theory's slopes as dashed reference lines anchored at each curve's first point."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg = result["config"]
    Ls, ds, blocks = cfg["L_values"], cfg["d_values"], cfg["blocks"]
    colors = dict(zip(NORMS, ("tab:blue", "tab:red", "tab:green")))
    fig, axes = plt.subplots(1, len(ds) + 1, figsize=(3.2 * (len(ds) + 1), 3.2), squeeze=False)
    axes = axes[0]

    def draw(ax, xs, cells, norm, slope, extra=lambda x: 1.0):
        mean = np.array([c["mean"] for c in cells])
        std = np.array([c["std"] for c in cells])
        ax.errorbar(xs, mean, yerr=std, color=colors[norm], marker="o", ms=3, capsize=2, label=norm)
        xs_a = np.asarray(xs, dtype=float)
        ref = mean[0] * (xs_a / xs_a[0]) ** slope * np.array([extra(x) / extra(xs_a[0]) for x in xs_a])
        ax.plot(xs_a, ref, color=colors[norm], ls="--", lw=1)

    for ax, d in zip(axes, ds):
        for norm in blocks:
            draw(ax, Ls, [_cell(result, norm, L, d) for L in Ls], norm, result["theory"][norm][0])
        _log_axes(ax, Ls, "depth L", f"d = {d}")
    axes[0].set_ylabel("||dL/dW^{2,L}||_F at init")
    ax, L = axes[-1], max(Ls)
    for norm in blocks:
        draw(ax, ds, [_cell(result, norm, L, d) for d in ds], norm, result["theory"][norm][1],
             extra=lambda x: math.sqrt(math.log(x)))
    _log_axes(ax, ds, "width d", f"L = {L}")
    axes[0].legend(fontsize=7)
    fig.suptitle("last-layer MLP gradient at init (solid: measured mean +- std; dashed: theory slope)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    """Run both measurements at the given sizes, print them, write the figure (and JSON if asked)."""
    import argparse
    import json
    import time

    from tabulate import tabulate

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--L", type=int, nargs="+", default=[6, 12, 24, 48])
    p.add_argument("--d", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--act", default="gelu", help="gelu (the core's MLP) or relu (Xiong et al.)")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--figure", default="respostln_theorem4.png")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    t0 = time.time()
    kw = dict(samples=args.samples, seed=args.seed, act=args.act, num_heads=args.heads, n_tokens=args.tokens)
    lem = lemma1(args.d, max(args.L), **kw)
    t1 = time.time()
    show = {1, 2, 6, 12, 24, 48, max(args.L)}
    print(tabulate([[r["d"], r["l"], f"{r['mean']:.1f} +- {r['std']:.1f}", f"{r['orthogonal']:.0f}",
                     f"{r['bound']:.0f}", f"{r['ratio']:.2e}", r["holds"]]
                    for r in lem["rows"] if r["l"] in show],
                   headers=["d", "l", "E||Y_{l+1}||^2", "||Y1||^2+2ld", "Lemma 1 bound", "ratio", "holds"]))
    print(f"lemma1: {t1 - t0:.1f} s; bound holds in {sum(r['holds'] for r in lem['rows'])}/{len(lem['rows'])} rows\n")
    res = theorem4(args.L, args.d, **kw)
    t2 = time.time()
    print(tabulate([[c["norm"], c["L"], c["d"], f"{c['mean']:.4f}", f"{c['std']:.4f}"] for c in res["grid"]],
                   headers=["block", "L", "d", "mean ||grad||_F", "std"]))
    print(tabulate([[n, f"{f['a']:+.3f} +- {f['se_a']:.3f}", f"{f['b']:+.3f} +- {f['se_b']:.3f}", f"{f['r2']:.3f}",
                     " ".join(f"{v:+.2f}" for v in f["a_at_d"].values()), f"{res['theory'][n][0]:+.1f} / {res['theory'][n][1]:+.1f}"]
                    for n, f in res["fits"].items()],
                   headers=["block", "a (L)", "b (d, after sqrt ln d)", "R^2", "a at each d", "theory a / b"]))
    print(tabulate([[v["claim"], v["expected"], v["measured"], v["verdict"]] for v in theorem4_verdicts(res)],
                   headers=["claim", "expected", "measured", "verdict"]))
    print(f"theorem4: {t2 - t1:.1f} s")
    loglog_figure(res, args.figure)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"lemma1": lem, "theorem4": res}, f, indent=1)


if __name__ == "__main__":
    main()
