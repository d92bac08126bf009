"""One comparison inside a claim (lhs > rhs + margin, lhs <= rhs, lhs ~ rhs) at one scale, judged and in numbers.

Exact values are compared directly, seeds by a one-sided Welch test (one-sample against a flat side), a curve
element by element; ``finish`` Holm-adjusts a claim's p-values per direction (the rules: README.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from repro.report.cells import DIVERGED, MEASURED, Cell, Comparison, binomial_se, derive
from repro.report.provenance import as_dict
from repro.report.stats import Test, adjust, compare_means, rate_test, resolvable_effect
from repro.paper import Claim, Paper, Ref

HOLDS, FAILS, INCONCLUSIVE, NOT_RUN, INVALID = "holds", "fails", "inconclusive", "not run", "invalid"
SMOKE, NOT_DESIGNED, TIMING = "smoke", "not designed", "timing"
OUTSIDE, NOT_RESOLVABLE, NOT_TESTABLE = "outside regime", "not resolvable", "not testable"
RESOLVED = (HOLDS, FAILS)
JUDGED = (HOLDS, FAILS, INCONCLUSIVE, NOT_RESOLVABLE, NOT_TESTABLE)  # a result from the records of this scale
MIN_SEEDS = 3
MIN_RATE_RUNS = 10  # runs a rate check needs before it tests (fewer: which way the share leans)
MIN_ROUNDS = 3  # alternated timing rounds a speed comparison needs (papers/cmhsa/timing.py records them)


def verdict_label(verdict: str, scale: str | None) -> str:
    """The words shown on a verdict's badge."""
    return {SMOKE: "smoke — not judged", NOT_DESIGNED: f"not designed to resolve at {scale}",
            TIMING: "timing — needs alternated timings", OUTSIDE: "outside the paper's regime",
            NOT_RESOLVABLE: f"not resolvable at {scale}", NOT_TESTABLE: "not testable (both at chance)"
            }.get(verdict, verdict)


def said(verdict: str, evidence: str) -> str:
    """A verdict in its kind's words: a precondition is met / not met (a setting measured), never holds / fails."""
    if evidence == "precondition" and verdict in RESOLVED:
        return "met" if verdict == HOLDS else "not met"
    return verdict


@dataclass
class Check:
    """One comparison inside a claim: lhs > rhs + margin, lhs <= rhs (per element), or lhs ~ rhs."""
    lhs: Ref
    rhs: Ref
    relation: str
    verdict: str
    statistic: str
    method: str = ""  # "welch", "t1samp", "exact", "lean", "bound", "noise", "tolerance", "chance", "" (not run)
    effect: float | None = None      # lhs - rhs - margin, in the cells' unit
    resolvable: float | None = None  # the smallest effect this comparison could resolve
    tests: list[Test] = field(default_factory=list)  # one per compared element (per block of a curve)
    paper_effect: float | None = None  # the same difference on the paper's printed numbers
    below_mde: bool = False          # resolved, but the effect is smaller than the comparison resolves
    n: tuple | None = None           # runs per side where no test was made (fewer than MIN_SEEDS)
    margin: float = 0.0              # the claim's margin, already taken off the effect
    share: tuple | None = None       # rate checks: (runs at or below the bound, runs)
    means: tuple | None = None       # (lhs, rhs) means over seeds (None for a curve or a side not measured)


@dataclass
class Verdict:
    """A claim's verdict at one scale."""
    claim: Claim
    scale: str | None
    verdict: str
    statistic: str
    checks: list[Check] = field(default_factory=list)
    on_paper: str = ""  # the same check on the paper's printed numbers: holds / fails / "" (cannot tell)
    result: str = ""    # outside the regime / not shown by a control: what the comparisons alone said
    preconditions: list["Verdict"] = field(default_factory=list)
    controls: list[Check] = field(default_factory=list)

    @property
    def label(self) -> str:
        below = self.verdict in RESOLVED and any(c.below_mde for c in self.checks)
        text = said(verdict_label(self.verdict, self.scale), self.claim.evidence)
        return text + (" (below the resolvable effect)" if below else "")


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def decisive(c: Check) -> Test | None:
    """The test a comparison is quoted from: its only one, or a curve's block with the largest excess."""
    return max(c.tests, key=lambda t: t.effect) if c.tests else None


def p_sides(c: Check) -> tuple[str, str]:
    """The Test fields holding p for 'holds' and for 'fails' (a '<=' bound holds on the lower side)."""
    return ("p_less", "p_greater") if c.relation == "<=" else ("p_greater", "p_less")


def numbers(c: Check, evidence: str = "training") -> str:
    """A comparison in numbers: 'effect -1.98 (95 % CI -3.12 to -0.84), one-sided p 0.004 that it fails ...'."""
    t = decisive(c)
    parts = [] if c.effect is None else [f"effect {c.effect:+.3g}"]
    if c.share and t:
        parts[-1] = f"{c.share[0]} of {c.share[1]} runs at or below {_fmt(c.rhs.const)}, share " + parts[-1]
    if parts and c.margin:  # quoted past a margin: the gap itself stays in view
        parts[-1] = f"gap {c.effect + c.margin:+.3g} against a margin of {c.margin:g}: {parts[-1]}"
    if t and t.ci:
        parts[-1] += f" (95 % CI {t.ci[0]:+.3g} to {t.ci[1]:+.3g})"
    if t and t.p_greater is not None:
        ok, bad = p_sides(c)
        side, word = (bad, "fails") if c.verdict == FAILS or (
            c.verdict != HOLDS and getattr(t, bad) < getattr(t, ok)) else (ok, "holds")
        word = {"holds": "is met", "fails": "is not met"}[word] if evidence == "precondition" else word
        parts.append(f"one-sided p {_p(getattr(t, side + '_adj'))} that it {word} (Holm; raw {_p(getattr(t, side))})")
    if t:
        parts.append(f"n {t.n[0]}/{t.n[1]}")
    if c.resolvable is not None:
        parts.append(f"smallest resolvable {_fmt(c.resolvable)}")
    if c.paper_effect is not None:
        parts.append(f"paper {c.paper_effect:+.3g}")
    return ", ".join(parts)


def _p(p: float | None) -> str:
    return "-" if p is None else "< 0.001" if p < 1e-3 else f"{p:.3f}"


def _values(cmp: Comparison, ref: Ref, scale: str | None) -> list | None:
    """Per-seed values of a cell (or [const]); None when the cell is not measured."""
    if ref.const is not None:
        return [ref.const]
    cell = _cell(cmp, ref, scale)
    return None if cell is None else list(cell.measured.values)


def _cell(cmp: Comparison, ref: Ref, scale: str | None) -> Cell | None:
    """The measured cell a reference names (None for a constant or a cell not measured)."""
    cell = cmp.cell(ref, scale) if ref.const is None else None
    return cell if isinstance(cell, Cell) and cell.status == MEASURED else None


def _diverged(cmp: Comparison, ref: Ref, scale: str | None) -> bool:
    """Every run behind the cell (or behind an operand of a derived cell) diverged."""
    cell = cmp.cell(ref, scale) if ref.const is None else None
    if cell is None:
        return False
    if cell.status == DIVERGED:
        return True
    derived = cell.column.derived
    return bool(derived) and any(_diverged(cmp, Ref(ref.table, ref.row, derived[k]), scale) for k in ("a", "b"))


def _binomial(cmp: Comparison, refs: tuple[Ref, Ref], scale: str | None) -> float | None:
    """One run's binomial standard error for accuracy cells (the larger side's), else None."""
    cells = [c for c in (_cell(cmp, r, scale) for r in refs) if c is not None and c.chance is not None]
    ses = [binomial_se(c.mean, c.test_images) for c in cells if c.mean is not None]
    return max(ses) if ses and all(ses) else None


def alternated(cmp: Comparison, refs, scale: str | None) -> bool:
    """Every record behind these cells timed >= MIN_ROUNDS alternated rounds, so load hit both sides alike."""
    recs = [rec for r in refs if r.const is None for rec, _ in cmp.runs(scale, r.table, r.row, r.column)]
    return bool(recs) and all(int(as_dict(rec.get("metrics")).get("timing_rounds") or 0) >= MIN_ROUNDS
                              for rec in recs)


def _few(a: list, b: list, rhs: Ref) -> bool:
    return len(a) < MIN_SEEDS or not (rhs.const is not None or len(b) >= MIN_SEEDS)


# ---------------------------------------------------------------- one comparison

def check_pair(cmp: Comparison, claim: Claim, lhs: Ref, rhs: Ref, scale: str | None) -> Check:
    """Judge one comparison of a claim at one scale (before Holm), with the claim's margin and both means."""
    a, b = _values(cmp, lhs, scale), _values(cmp, rhs, scale)
    c = _check_pair(cmp, claim, lhs, rhs, scale, a, b)
    c.margin = claim.margin if c.relation == ">" else 0.0
    if all(v and not any(isinstance(x, list) for x in v) for v in (a, b)):
        c.means = tuple(float(np.mean(v)) for v in (a, b))
    return c


def _check_pair(cmp: Comparison, claim: Claim, lhs: Ref, rhs: Ref, scale: str | None, a: list | None,
                b: list | None) -> Check:
    if a is None or b is None:
        missing = [r for r, v in ((lhs, a), (rhs, b)) if v is None]
        diverged = [str(r) for r in missing if _diverged(cmp, r, scale)]
        if diverged:  # ran, but left no value: not something a rerun of the same config fills
            return Check(lhs, rhs, claim.relation, INCONCLUSIVE,
                         f"training diverged for {', '.join(diverged)}: no final value to compare", "diverged")
        return Check(lhs, rhs, claim.relation, NOT_RUN, f"not measured: {', '.join(map(str, missing))}")
    exact = claim.evidence == "theory" or (claim.evidence == "timing" and alternated(cmp, (lhs, rhs), scale))
    if claim.relation == "<=":
        try:
            return _bound_exact(lhs, rhs, a, b) if exact else _bound_tested(claim, lhs, rhs, a, b)
        except ValueError:  # ragged runs or shapes that do not broadcast
            return Check(lhs, rhs, "<=", INVALID, f"shapes differ: measured {np.shape(a[0])} vs bound {np.shape(b[0])}",
                         "bound")
    if claim.relation == "rate":
        return _rate(claim, lhs, rhs, a)
    if any(isinstance(v, list) for v in a + b):
        return Check(lhs, rhs, claim.relation, INVALID, "per-layer arrays can only be checked against a bound")
    effect = float(np.mean(a) - np.mean(b)) - claim.margin
    if claim.relation == "~":
        verdict, statistic, method = _within(a, b, claim.tolerance, exact)
        return Check(lhs, rhs, claim.relation, verdict, statistic, method, effect,
                     n=(len(a), len(b)) if method == "lean" else None)
    chance = [c if c is not None and c.at_chance else None for c in (_cell(cmp, r, scale) for r in (lhs, rhs))]
    if not exact and chance[0] is not None and (chance[1] is not None or rhs.const is not None
                                                and rhs.const <= chance[0].chance):
        return Check(lhs, rhs, claim.relation, NOT_TESTABLE,
                     f"both sides at chance ({_fmt(chance[0].mean)} vs {_fmt(float(np.mean(b)))}, chance "
                     f"{_fmt(chance[0].chance)}): neither learned anything to compare", "chance", effect)
    check = _greater(lhs, rhs, a, b, claim, exact, _binomial(cmp, (lhs, rhs), scale))
    pa, pb = _paper_value(cmp.paper, lhs), _paper_value(cmp.paper, rhs)
    check.paper_effect = None if pa is None or pb is None else pa - pb - claim.margin
    return check


def _greater(lhs: Ref, rhs: Ref, a: list, b: list, claim: Claim, exact: bool, binomial: float | None) -> Check:
    """lhs > rhs + margin: exact direction (theory, alternated timings), else a test across seeds."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    effect, nb = ma - mb - claim.margin, "const" if rhs.const is not None else len(b)
    if _few(a, b, rhs):
        if exact:  # a deterministic value, or timings alternated in rounds: the direction
            return Check(lhs, rhs, ">", HOLDS if effect > 0 else FAILS,
                         f"{_fmt(ma)} vs {_fmt(mb)}{_margin(claim)} (exact values, n={len(a)} vs {nb})", "exact",
                         effect)
        mde, basis = resolvable_effect(a, b, rhs.const is not None, claim.alpha, binomial)
        res = f"resolvable ≥ {_fmt(mde)} ({basis})" if mde is not None else basis
        return Check(lhs, rhs, ">", INCONCLUSIVE,
                     f"{_fmt(ma)} vs {_fmt(mb)}{_margin(claim)}: effect {effect:+.3g}, {res}; leans "
                     f"{_lean(effect)}, n={len(a)} vs {nb} < {MIN_SEEDS} seeds", "lean", effect, mde, n=(len(a), nb))
    test = compare_means(a, b, rhs.const is not None, claim.alpha, claim.margin, binomial)
    method = {"Welch t": "welch", "one-sample t": "t1samp"}.get(test.name, "exact")
    return Check(lhs, rhs, ">", INCONCLUSIVE, "", method, effect, test.mde, [test])


def _margin(claim: Claim) -> str:
    return f" + {_fmt(claim.margin)}" if claim.margin else ""


def _lean(effect: float) -> str:
    return "lhs > rhs" if effect > 0 else "lhs < rhs" if effect < 0 else "no difference"


def _bound_exact(lhs: Ref, rhs: Ref, a: list, b: list) -> Check:
    """A worst-case statement on exact values (theory, a bound evaluated per model): every seed, element."""
    bound = np.mean(np.asarray(b, dtype=float), axis=0)
    excess = max(float(np.max(np.asarray(v, dtype=float) - bound)) for v in a)
    worst = max(float(np.max(v)) for v in a)
    return Check(lhs, rhs, "<=", HOLDS if excess <= 0 else FAILS,
                 f"every seed and element checked (n={len(a)}): largest measured - bound = {excess:.4g} "
                 f"(largest measured {worst:.4g})", "bound", excess)


def _bound_tested(claim: Claim, lhs: Ref, rhs: Ref, a: list, b: list) -> Check:
    """lhs <= rhs for stochastic runs: a one-sided test per element (per block of a curve) across seeds."""
    la, lb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if lb.shape[1:] != la.shape[1:]:
        lb = np.broadcast_to(lb.reshape(len(b), *([1] * (la.ndim - 1))), (len(b), *la.shape[1:]))
    if _few(a, b, rhs):  # no test: the largest excess of the mean curve over the bound, and which way it leans
        nb = "const" if rhs.const is not None else len(b)
        effect = float(np.max(la.mean(axis=0) - lb.mean(axis=0)))
        return Check(lhs, rhs, "<=", INCONCLUSIVE,
                     f"largest excess of the mean over the bound {effect:+.3g}; leans "
                     f"{'inside' if effect <= 0 else 'outside'} it, n={len(a)} vs {nb} < {MIN_SEEDS} seeds", "lean",
                     effect, n=(len(a), nb))
    cols = la.reshape(len(a), -1).T, lb.reshape(len(b), -1).T
    tests = [compare_means(x, y, rhs.const is not None, claim.alpha) for x, y in zip(*cols)]
    effect = max(t.effect for t in tests)  # the largest excess over the bound (negative: inside it)
    return Check(lhs, rhs, "<=", INCONCLUSIVE, "", "welch", effect, max((t.mde or 0.0) for t in tests), tests)


def _rate(claim: Claim, lhs: Ref, rhs: Ref, a: list) -> Check:
    """The share of runs at or below rhs exceeds claim.rate: an exact binomial test over >= MIN_RATE_RUNS runs."""
    k, n = sum(float(v) <= rhs.const for v in a), len(a)
    if n < MIN_RATE_RUNS:
        effect = k / n - claim.rate
        return Check(lhs, rhs, "rate", INCONCLUSIVE,
                     f"{k} of {n} runs at or below {_fmt(rhs.const)} (share {k / n:.2f} vs {claim.rate:g}); leans "
                     f"{'above' if effect > 0 else 'below'} it, n={n} < {MIN_RATE_RUNS} runs", "rate_lean", effect,
                     n=(n, "const"), share=(k, n))
    test = rate_test(a, rhs.const, claim.rate, claim.alpha)
    return Check(lhs, rhs, "rate", INCONCLUSIVE, "", "binomial", test.effect, test.mde, [test], share=(k, n))


def _within(a: list, b: list, tol: float | None, exact: bool = False) -> tuple[str, str, str]:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    d = abs(ma - mb)
    if len(a) >= MIN_SEEDS and len(b) >= MIN_SEEDS:
        noise = 2 * float(np.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1)))
        limit = max(noise, tol or 0.0)
        return (HOLDS if d <= limit else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs {_fmt(limit)} (2 sd of a one-run difference"
                f"{', or tolerance' if tol else ''}; n={len(a)} vs {len(b)})", "noise")
    if tol is not None and exact:
        return (HOLDS if d <= tol else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs tolerance {_fmt(tol)} (exact values)", "tolerance")
    return INCONCLUSIVE, f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)}; n={len(a)} vs {len(b)} < {MIN_SEEDS} seeds", "lean"


# ---------------------------------------------------------------- Holm, then the words

def finish(checks: list[Check], alpha: float) -> None:
    """Holm across every tested comparison of a claim, then each check's verdict and statistic."""
    adjust([t for c in checks for t in c.tests])
    for c in checks:
        if not c.tests:
            continue
        parts = [_part_verdict(t, c, alpha) for t in c.tests]
        c.verdict = FAILS if FAILS in parts else HOLDS if all(p == HOLDS for p in parts) else INCONCLUSIVE
        c.below_mde = c.verdict in RESOLVED and len(c.tests) == 1 and c.resolvable is not None \
            and abs(c.effect) < c.resolvable
        c.statistic = _test_text(c, parts)


def _part_verdict(t: Test, c: Check, alpha: float) -> str:
    """One tested element: ">" holds on p(>) and fails on p(<); "<=" the other way round (p_sides)."""
    if t.p_greater is None:  # exact values: the direction ("<=" holds at equality)
        ok = t.effect <= 0 if c.relation == "<=" else t.effect > 0
        bad = t.effect > 0 if c.relation == "<=" else t.effect < 0
        return HOLDS if ok else FAILS if bad else INCONCLUSIVE
    ok, bad = p_sides(c)
    return HOLDS if getattr(t, ok + "_adj") < alpha else FAILS if getattr(t, bad + "_adj") < alpha else INCONCLUSIVE


def _test_text(c: Check, parts: list[str]) -> str:
    t = c.tests[0]
    if len(c.tests) > 1:
        worst = max(c.tests, key=lambda x: x.effect)
        return (f"{len(c.tests)} blocks tested across seeds (n={t.n[0]} vs {t.n[1]}): {parts.count(HOLDS)} hold, "
                f"{parts.count(FAILS)} exceed the bound, {parts.count(INCONCLUSIVE)} inconclusive (Holm); largest "
                f"excess {worst.effect:+.3g}" + (f", p(>)={worst.p_greater:.3g}, Holm {worst.p_greater_adj:.3g}"
                                                 if worst.p_greater is not None else ""))
    res = f"resolvable ≥ {_fmt(t.mde)} ({t.basis})" if t.mde is not None else t.basis
    if c.share:
        res = f"{c.share[0]} of {c.share[1]} runs at or below {_fmt(c.rhs.const)}; " + res
    head = f"effect {t.effect:+.3g}" + (f" [95% CI {t.ci[0]:+.3g}, {t.ci[1]:+.3g}]" if t.ci else "") + f", {res}"
    if t.p_greater is None:
        return f"{head}; no spread across seeds (n={t.n[0]} vs {t.n[1]})"
    ok, bad = p_sides(c)
    p, p_adj, q, q_adj = (getattr(t, side) for side in (ok, ok + "_adj", bad, bad + "_adj"))
    below = "; significant but below the resolvable effect: the estimate is likely inflated" if c.below_mde else ""
    paper = f"; paper's effect {c.paper_effect:+.3g}" if c.paper_effect is not None else ""
    if c.paper_effect is not None and t.ci and not t.ci[0] <= c.paper_effect <= t.ci[1]:
        paper += " (outside our 95% interval)"
    return (f"{head}; one-sided {t.name}={t.statistic:.2f}, p(holds)={p:.3g} (Holm {p_adj:.3g}), "
            f"p(fails)={q:.3g} (Holm {q_adj:.3g}), n={t.n[0]} vs {t.n[1]}{paper}{below}")


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
    if claim.relation == "rate":  # a share of runs: a paper prints no such thing per cell
        return ""
    sides = [(_paper_value(paper, lhs), _paper_value(paper, rhs)) for lhs, rhs in claim.pairs]
    if not sides or any(a is None or b is None for a, b in sides):
        return ""
    ok = [a - b > claim.margin if claim.relation == ">" else a <= b if claim.relation == "<=" else
          abs(a - b) <= (claim.tolerance or 0.0) for a, b in sides]
    return said(HOLDS if (any(ok) if claim.somewhere else all(ok)) else FAILS, claim.evidence)
