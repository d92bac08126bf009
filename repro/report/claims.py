"""Claim verdicts: holds / fails / inconclusive, each with the statistic it rests on and its scale.

Every check in paper.yaml expands into (lhs, rhs) comparisons (see repro.spec). For ">" with at least
3 seeds on each side, a one-sided Welch t-test across seeds decides (holds when lhs > rhs at
``alpha``, fails when lhs < rhs at ``alpha``, else inconclusive); with fewer seeds only the direction
of the means is used, and the statistic says so. A bound ("<=") is checked on every seed (and every
element of per-layer arrays): it is a worst-case statement, so one violation fails it. "~" (within
noise) holds when the means differ by less than two standard deviations of a single-run difference
(or the claim's tolerance). A claim holds when all its comparisons hold and fails when any fails.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from repro.report.compare import DIVERGED, MEASURED, NOT_REPRODUCED, Comparison, derive, reproduce_command
from repro.spec import Claim, Paper, Ref

HOLDS, FAILS, INCONCLUSIVE, NOT_RUN, INVALID = "holds", "fails", "inconclusive", "not run", "invalid"
MIN_SEEDS = 3


@dataclass
class Check:
    """One comparison inside a claim."""
    lhs: Ref
    rhs: Ref
    relation: str
    verdict: str
    statistic: str
    method: str = ""  # "welch", "t1samp", "direction", "bound", "noise", "tolerance", "" (not run)


@dataclass
class Verdict:
    """A claim's verdict at one scale."""
    claim: Claim
    scale: str | None
    verdict: str
    statistic: str
    checks: list[Check] = field(default_factory=list)
    on_paper: str = ""  # the same check on the paper's printed numbers: holds / fails / "" (cannot tell)


def _values(cmp: Comparison, ref: Ref, scale: str | None) -> list | None:
    """Per-seed values of a cell (or [const]); None when the cell is not measured."""
    if ref.const is not None:
        return [ref.const]
    cell = cmp.cell(ref, scale)
    if cell is None or cell.status != MEASURED:
        return None
    return list(cell.measured.values)


def _diverged(cmp: Comparison, ref: Ref, scale: str | None) -> bool:
    """Every run behind the cell (or behind an operand of a derived cell) diverged."""
    if ref.const is not None:
        return False
    cell = cmp.cell(ref, scale)
    if cell is None:
        return False
    if cell.status == DIVERGED:
        return True
    derived = cell.column.derived
    return bool(derived) and any(_diverged(cmp, Ref(ref.table, ref.row, derived[k]), scale) for k in ("a", "b"))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _greater(a: list, b: list, rhs_const: bool, alpha: float) -> tuple[str, str, str]:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    nb = "const" if rhs_const else len(b)
    if len(a) >= MIN_SEEDS and (rhs_const or len(b) >= MIN_SEEDS):
        if np.std(a) == 0 and (rhs_const or np.std(b) == 0):
            verdict = HOLDS if ma > mb else FAILS if ma < mb else INCONCLUSIVE
            return verdict, f"{_fmt(ma)} vs {_fmt(mb)}, no spread across seeds (n={len(a)} vs {nb})", "direction"
        if rhs_const:
            test = lambda alt: stats.ttest_1samp(a, b[0], alternative=alt)  # noqa: E731
            name, method = "one-sample t", "t1samp"
        else:
            test = lambda alt: stats.ttest_ind(a, b, equal_var=False, alternative=alt)  # noqa: E731
            name, method = "Welch t", "welch"
        g, l_ = test("greater"), test("less")
        verdict = HOLDS if g.pvalue < alpha else FAILS if l_.pvalue < alpha else INCONCLUSIVE
        return verdict, (f"{_fmt(ma)} vs {_fmt(mb)}; one-sided {name}={g.statistic:.2f}, "
                         f"p={g.pvalue:.3g} (n={len(a)} vs {nb})"), method
    verdict = HOLDS if ma > mb else FAILS if ma < mb else INCONCLUSIVE
    return verdict, f"{_fmt(ma)} vs {_fmt(mb)}, direction only (n={len(a)} vs {nb} < {MIN_SEEDS} seeds)", "direction"


def _bound(a: list, b: list) -> tuple[str, str, str]:
    try:
        bound = np.mean(np.asarray(b, dtype=float), axis=0)
        excess = max(float(np.max(np.asarray(v, dtype=float) - bound)) for v in a)
        worst = max(float(np.max(v)) for v in a)
    except ValueError:  # ragged runs or shapes that do not broadcast
        return INVALID, f"shapes differ: measured {np.shape(a[0])} vs bound {np.shape(b[0])}", "bound"
    verdict = HOLDS if excess <= 0 else FAILS
    return verdict, (f"every seed and element checked (n={len(a)}): largest measured - bound = {excess:.4g} "
                     f"(largest measured {worst:.4g})"), "bound"


def _within(a: list, b: list, tol: float | None) -> tuple[str, str, str]:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    d = abs(ma - mb)
    if len(a) >= MIN_SEEDS and len(b) >= MIN_SEEDS:
        noise = 2 * math.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1))
        limit = max(noise, tol or 0.0)
        return (HOLDS if d <= limit else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs {_fmt(limit)} (2 sd of a one-run difference"
                f"{', or tolerance' if tol else ''}; n={len(a)} vs {len(b)})", "noise")
    if tol is not None:
        return (HOLDS if d <= tol else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs tolerance {_fmt(tol)} (n={len(a)} vs {len(b)} "
                f"< {MIN_SEEDS} seeds)", "tolerance")
    return INCONCLUSIVE, f"fewer than {MIN_SEEDS} seeds and no tolerance given (n={len(a)} vs {len(b)})", "direction"


def check_pair(cmp: Comparison, claim: Claim, lhs: Ref, rhs: Ref, scale: str | None) -> Check:
    """Judge one (lhs, rhs) comparison of a claim at one scale."""
    a, b = _values(cmp, lhs, scale), _values(cmp, rhs, scale)
    if a is None or b is None:
        missing = [r for r, v in ((lhs, a), (rhs, b)) if v is None]
        diverged = [str(r) for r in missing if _diverged(cmp, r, scale)]
        if diverged:  # ran, but left no value: not something a rerun of the same config fills
            return Check(lhs, rhs, claim.relation, INCONCLUSIVE,
                         f"training diverged for {', '.join(diverged)}: no final value to compare", "diverged")
        return Check(lhs, rhs, claim.relation, NOT_RUN, f"not measured: {', '.join(map(str, missing))}")
    arrays = any(isinstance(v, list) for v in a + b)
    if claim.relation == "<=":
        verdict, stat, method = _bound(a, b)
    elif arrays:
        verdict, stat, method = INVALID, "per-layer arrays can only be checked against a bound", ""
    elif claim.relation == "~":
        verdict, stat, method = _within(a, b, claim.tolerance)
    else:
        verdict, stat, method = _greater(a, b, rhs.const is not None, claim.alpha)
    return Check(lhs, rhs, claim.relation, verdict, stat, method)


def _paper_value(paper: Paper, ref: Ref) -> float | None:
    """The printed value of a cell, or for an unprinted derived cell the value computed from its operands."""
    if ref.const is not None:
        return ref.const
    table = paper.table(ref.table)
    row, col = table.row(ref.row), table.column(ref.column)
    pv = row.values.get(col.key)
    if pv is not None and pv.reported:
        return pv.value
    if col.derived:
        a, b = row.values.get(col.derived["a"]), row.values.get(col.derived["b"])
        if a is not None and b is not None and a.reported and b.reported:
            return derive(col.derived["op"], a.value, b.value)
    return None


def on_paper(paper: Paper, claim: Claim) -> str:
    """Does the claim hold on the paper's own printed numbers? (a check of the claim's transcription)"""
    ok = []
    for lhs, rhs in claim.pairs:
        a, b = _paper_value(paper, lhs), _paper_value(paper, rhs)
        if a is None or b is None:
            return ""
        ok.append(a > b if claim.relation == ">" else a <= b if claim.relation == "<=" else
                  abs(a - b) <= (claim.tolerance or 0.0))
    return "" if not ok else HOLDS if all(ok) else FAILS


def _summary(checks: list[Check], alpha: float) -> tuple[str, str]:
    verdicts = [c.verdict for c in checks]
    if INVALID in verdicts:
        verdict = INVALID
    elif FAILS in verdicts:
        verdict = FAILS
    elif all(v == HOLDS for v in verdicts):
        verdict = HOLDS
    elif all(v == NOT_RUN for v in verdicts):
        verdict = NOT_RUN
    else:
        verdict = INCONCLUSIVE
    methods = {"welch": f"one-sided Welch t-test across seeds (alpha={alpha:g})",
               "t1samp": f"one-sided one-sample t-test across seeds (alpha={alpha:g})",
               "direction": f"direction of the means only (fewer than {MIN_SEEDS} seeds)",
               "bound": "bound checked on every seed", "noise": "difference vs 2 sd of seed noise",
               "tolerance": "difference vs the claim's tolerance",
               "diverged": "a run diverged (see the table)"}
    used = {}
    for c in checks:
        if c.method:
            used[c.method] = used.get(c.method, 0) + 1
    parts = [f"{sum(v == HOLDS for v in verdicts)}/{len(checks)} comparisons hold"]
    for v in (FAILS, INCONCLUSIVE, NOT_RUN, INVALID):
        k = verdicts.count(v)
        if k:
            parts.append(f"{k} {v}")
    how = "; ".join(f"{methods[m]}" + (f" x{k}" if len(used) > 1 else "") for m, k in used.items())
    return verdict, ", ".join(parts) + (f"; {how}" if how else "")


def judge(cmp: Comparison, claim: Claim, scale: str | None) -> Verdict:
    """A claim's verdict at one scale."""
    if claim.invalid:
        return Verdict(claim, scale, INVALID, claim.invalid)
    tables = {r.table for pair in claim.pairs for r in pair if r.const is None}
    if any(not cmp.paper.table(t).reproduced for t in tables):
        return Verdict(claim, scale, NOT_REPRODUCED, "the table is listed but not reproduced",
                       on_paper=on_paper(cmp.paper, claim))
    checks = [check_pair(cmp, claim, lhs, rhs, scale) for lhs, rhs in claim.pairs]
    verdict, statistic = _summary(checks, claim.alpha)
    if verdict == NOT_RUN:
        where = scale or (claim.scales[0] if claim.scales else None)  # judged only at some scales: the first
        cmds = sorted({reproduce_command(cmp.paper.id, t, where) for t in tables})
        statistic = f"none of its {len(checks)} comparison(s) measured yet; fill with {' and '.join(cmds)}"
    return Verdict(claim, scale, verdict, statistic, checks, on_paper(cmp.paper, claim))


def judge_all(cmp: Comparison) -> list[Verdict]:
    """Every claim at every scale it applies to (scales with records, restricted by the claim's scales)."""
    out = []
    for claim in cmp.paper.claims:
        scales = [s for s in cmp.scales if claim.scales is None or s in claim.scales] or [None]
        out.extend(judge(cmp, claim, s) for s in scales)
    return out


def tally(verdicts: list[Verdict]) -> dict[str, dict[str, int]]:
    """Per scale, how many claims got each verdict ("none" for claims judged at no scale)."""
    order = (HOLDS, FAILS, INCONCLUSIVE, NOT_RUN, NOT_REPRODUCED, INVALID)
    out: dict[str, dict[str, int]] = {v.scale or "none": {} for v in verdicts}
    for v in sorted(verdicts, key=lambda v: order.index(v.verdict)):
        counts = out.setdefault(v.scale or "none", {})
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return out
