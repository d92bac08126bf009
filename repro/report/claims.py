"""Claim verdicts: holds / fails / inconclusive, each with the statistic it rests on and its scale.

A verdict is only as strong as its evidence, so what a claim rests on decides how it is judged:

- ``theory`` claims (theorems, bounds, exact constructions, params/FLOPs; paper.yaml ``evidence``) do not
  depend on the scale: they are judged at every scale, on exact values.
- ``training`` claims need trained runs. At ``tiny`` (a smoke scale) they are shown as "smoke", not
  judged. At ``cpu`` and ``small`` they are judged only where papers/<id>/experiments.py says the scale
  is designed to resolve them (``RESOLVES``); ``full`` is designed for every claim. Elsewhere: "not
  designed". Where judged, ">" needs >= 3 seeds per side and a one-sided Welch t-test across seeds
  (holds when lhs > rhs at ``alpha``, fails when lhs < rhs at ``alpha``, else inconclusive); with fewer
  seeds a comparison is inconclusive and says which way the means lean. Every comparison states the
  smallest effect it could resolve (one-sided ``alpha``, 80 % power) from the seed spread, or with one
  seed from the binomial standard error of the test-set size. A side at chance accuracy cannot be ahead.
- ``timing`` claims are hardware claims: judged only where every side was timed in >= 3 alternated rounds
  in one process (records with ``timing_rounds``, e.g. cmhsa's time probes; ``make bench``), so machine
  load hits both sides alike; never from one timing taken while other runs share the machine.

A bound ("<=") is checked on every seed (and every element of per-layer arrays): it is a worst-case
statement, so one violation fails it. "~" (within noise) holds when the means differ by less than two
standard deviations of a single-run difference (or the claim's tolerance). A claim holds when all its
comparisons hold and fails when any fails.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from repro.report.compare import (DIVERGED, MEASURED, NOT_REPRODUCED, Cell, Comparison, binomial_se, derive,
                                  reproduce_command)
from repro.report.provenance import as_dict, data_label
from repro.runs import is_smoke
from repro.spec import Claim, Paper, Ref

HOLDS, FAILS, INCONCLUSIVE, NOT_RUN, INVALID = "holds", "fails", "inconclusive", "not run", "invalid"
SMOKE, NOT_DESIGNED, TIMING = "smoke", "not designed", "timing"
RESOLVED = (HOLDS, FAILS)
MIN_SEEDS = 3
POWER = 0.8  # the power at which the smallest resolvable effect is stated


def verdict_label(verdict: str, scale: str | None) -> str:
    """The words shown on a verdict's badge."""
    return {SMOKE: "smoke — not judged", NOT_DESIGNED: f"not designed to resolve at {scale}",
            TIMING: "timing — needs alternated timings"}.get(verdict, verdict)


@dataclass
class Check:
    """One comparison inside a claim."""
    lhs: Ref
    rhs: Ref
    relation: str
    verdict: str
    statistic: str
    method: str = ""  # "welch", "t1samp", "exact", "lean", "bound", "noise", "tolerance", "" (not run)
    effect: float | None = None      # lhs - rhs, in the cells' unit
    resolvable: float | None = None  # the smallest effect this comparison could resolve


@dataclass
class Verdict:
    """A claim's verdict at one scale."""
    claim: Claim
    scale: str | None
    verdict: str
    statistic: str
    checks: list[Check] = field(default_factory=list)
    on_paper: str = ""  # the same check on the paper's printed numbers: holds / fails / "" (cannot tell)

    @property
    def label(self) -> str:
        return verdict_label(self.verdict, self.scale)


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


def resolvable_effect(a: list, b: list, rhs_const: bool, alpha: float,
                      binomial: float | None = None) -> tuple[float | None, str]:
    """The smallest lhs - rhs a one-sided test at ``alpha`` detects with 80 % power, and its basis.

    From the seed spread when both sides have >= 2 seeds (Welch's standard error and degrees of
    freedom); else from ``binomial``, the standard error of one run's accuracy on its test set (a lower
    bound: seed-to-seed noise adds to it); else unknown.
    """
    na, nb = len(a), len(b)
    va = float(np.var(a, ddof=1)) if na >= 2 else None
    vb = 0.0 if rhs_const else (float(np.var(b, ddof=1)) if nb >= 2 else None)
    if va is not None and vb is not None and va + vb > 0:
        qa, qb = va / na, (0.0 if rhs_const else vb / nb)
        df = (qa + qb) ** 2 / ((qa ** 2 / (na - 1)) + (0.0 if rhs_const else qb ** 2 / (nb - 1)))
        t = stats.t.ppf(1 - alpha, df) + stats.t.ppf(POWER, df)
        return float(t * math.sqrt(qa + qb)), f"seed spread, n={na} vs {'const' if rhs_const else nb}"
    if binomial:
        se = binomial * math.sqrt(1 / na + (0.0 if rhs_const else 1 / nb))
        z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(POWER)
        return float(z * se), "test-set binomial error only; seed noise adds to it"
    return None, "unknown: one run per side and no test-set noise model"


def _lean(ma: float, mb: float) -> str:
    return "lhs > rhs" if ma > mb else "lhs < rhs" if ma < mb else "no difference"


def _greater(a: list, b: list, rhs_const: bool, alpha: float, exact: bool = False,
             binomial: float | None = None) -> tuple[str, str, str, float | None]:
    """Verdict, statistic, method and resolvable effect of lhs > rhs (see the module docstring)."""
    ma, mb = float(np.mean(a)), float(np.mean(b))
    nb = "const" if rhs_const else len(b)
    few = len(a) < MIN_SEEDS or not (rhs_const or len(b) >= MIN_SEEDS)
    if exact and few:  # theory on one run (a deterministic value) or alternated timings: the direction
        verdict = HOLDS if ma > mb else FAILS
        return verdict, f"{_fmt(ma)} vs {_fmt(mb)} (exact values, n={len(a)} vs {nb})", "exact", None
    mde, basis = resolvable_effect(a, b, rhs_const, alpha, binomial)
    res = f"resolvable ≥ {_fmt(mde)} ({basis})" if mde is not None else basis
    head = f"{_fmt(ma)} vs {_fmt(mb)}: effect {ma - mb:+.3g}, {res}"
    if few:
        return INCONCLUSIVE, f"{head}; leans {_lean(ma, mb)}, n={len(a)} vs {nb} < {MIN_SEEDS} seeds", "lean", mde
    if _flat(a) and (rhs_const or _flat(b)):  # a t statistic of rounding noise would mean nothing
        verdict = HOLDS if ma > mb else FAILS if ma < mb else INCONCLUSIVE
        return verdict, f"{head}; no spread across seeds (n={len(a)} vs {nb})", "exact", mde
    if rhs_const or _flat(b):  # one side without spread (a constant, e.g. a gate at its init): one-sample
        test = lambda alt: stats.ttest_1samp(a, mb, alternative=alt)  # noqa: E731
        name, method = "one-sample t", "t1samp"
    elif _flat(a):  # the same from the other side: a - b > 0 is -b above -a's value (same t, same sign)
        test = lambda alt: stats.ttest_1samp(np.negative(b), -ma, alternative=alt)  # noqa: E731
        name, method = "one-sample t", "t1samp"
    else:
        test = lambda alt: stats.ttest_ind(a, b, equal_var=False, alternative=alt)  # noqa: E731
        name, method = "Welch t", "welch"
    g, l_ = test("greater"), test("less")
    verdict = HOLDS if g.pvalue < alpha else FAILS if l_.pvalue < alpha else INCONCLUSIVE
    return verdict, f"{head}; one-sided {name}={g.statistic:.2f}, p={g.pvalue:.3g} (n={len(a)} vs {nb})", method, mde


def _flat(values: list) -> bool:
    """No spread across seeds beyond float rounding (relative 1e-9)."""
    v = np.asarray(values, dtype=float)
    return float(np.ptp(v)) <= 1e-9 * max(1.0, float(np.max(np.abs(v))))


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


def _within(a: list, b: list, tol: float | None, exact: bool = False) -> tuple[str, str, str]:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    d = abs(ma - mb)
    if len(a) >= MIN_SEEDS and len(b) >= MIN_SEEDS:
        noise = 2 * math.sqrt(np.var(a, ddof=1) + np.var(b, ddof=1))
        limit = max(noise, tol or 0.0)
        return (HOLDS if d <= limit else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs {_fmt(limit)} (2 sd of a one-run difference"
                f"{', or tolerance' if tol else ''}; n={len(a)} vs {len(b)})", "noise")
    if tol is not None and exact:
        return (HOLDS if d <= tol else FAILS,
                f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)} vs tolerance {_fmt(tol)} (exact values)", "tolerance")
    return INCONCLUSIVE, (f"|{_fmt(ma)} - {_fmt(mb)}| = {_fmt(d)}; fewer than {MIN_SEEDS} seeds per side "
                          f"(n={len(a)} vs {len(b)})"), "lean"


def _cell(cmp: Comparison, ref: Ref, scale: str | None) -> Cell | None:
    """The measured cell a reference names (None for a constant or a cell not measured)."""
    cell = cmp.cell(ref, scale) if ref.const is None else None
    return cell if isinstance(cell, Cell) and cell.status == MEASURED else None


def _binomial(cmp: Comparison, refs: tuple[Ref, Ref], scale: str | None) -> float | None:
    """One run's binomial standard error for accuracy cells (the larger side's), else None."""
    cells = [c for c in (_cell(cmp, r, scale) for r in refs) if c is not None and c.chance is not None]
    ses = [binomial_se(c.mean, c.test_images) for c in cells if c.mean is not None]
    return max(ses) if ses and all(ses) else None


def _at_chance(cmp: Comparison, ref: Ref, scale: str | None) -> Cell | None:
    cell = _cell(cmp, ref, scale)
    return cell if cell is not None and cell.at_chance else None


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
    exact = claim.evidence == "theory" or (claim.evidence == "timing" and alternated(cmp, (lhs, rhs), scale))
    effect = None if arrays else float(np.mean(a) - np.mean(b))
    if claim.relation == "<=":
        return Check(lhs, rhs, claim.relation, *_bound(a, b))
    if arrays:
        return Check(lhs, rhs, claim.relation, INVALID, "per-layer arrays can only be checked against a bound")
    if claim.relation == "~":
        return Check(lhs, rhs, claim.relation, *_within(a, b, claim.tolerance, exact), effect=effect)
    chance = _at_chance(cmp, lhs, scale)
    if chance is not None and not exact:
        return Check(lhs, rhs, claim.relation, FAILS,
                     f"{lhs} is at chance ({_fmt(chance.mean)} vs chance {_fmt(chance.chance)} on "
                     f"{chance.test_images or '?'} test images): a model that learned nothing is ahead of nothing",
                     "chance", effect)
    verdict, stat, method, mde = _greater(a, b, rhs.const is not None, claim.alpha, exact,
                                          _binomial(cmp, (lhs, rhs), scale))
    return Check(lhs, rhs, claim.relation, verdict, stat, method, effect, mde)


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


_METHODS = {"welch": "one-sided Welch t-test across seeds (alpha={a:g})",
            "t1samp": "one-sided one-sample t-test across seeds (alpha={a:g})",
            "exact": "exact values", "lean": f"fewer than {MIN_SEEDS} seeds per side: which way the means lean",
            "bound": "bound checked on every seed", "noise": "difference vs 2 sd of seed noise",
            "tolerance": "difference vs the claim's tolerance", "chance": "a side at chance accuracy",
            "diverged": "a run diverged (see the table)"}


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
    used: dict[str, int] = {}
    for c in checks:
        if c.method:
            used[c.method] = used.get(c.method, 0) + 1
    parts = [f"{sum(v == HOLDS for v in verdicts)}/{len(checks)} comparisons hold"]
    parts += [f"{verdicts.count(v)} {v}" for v in (FAILS, INCONCLUSIVE, NOT_RUN, INVALID) if v in verdicts]
    how = "; ".join(_METHODS[m].format(a=alpha) + (f" x{k}" if len(used) > 1 else "") for m, k in used.items())
    effects = [(c.effect, c.resolvable) for c in checks if c.effect is not None and c.resolvable is not None]
    if effects:
        lo, hi = min(e for e, _ in effects), max(e for e, _ in effects)
        rlo, rhi = min(r for _, r in effects), max(r for _, r in effects)
        effect = f"{lo:+.3g}" if lo == hi else f"{lo:+.3g} to {hi:+.3g}"
        parts.append(f"measured effect {effect}, smallest resolvable "
                     f"{_fmt(rlo) if rlo == rhi else f'{_fmt(rlo)} to {_fmt(rhi)}'}")
    return verdict, ", ".join(parts) + (f"; {how}" if how else "")


def designed(cmp: Comparison, claim: Claim, scale: str | None) -> bool:
    """Is ``scale`` designed to resolve this training claim? tiny never (smoke), full always, others
    when papers/<id>/experiments.py lists the claim in ``RESOLVES[scale]``."""
    if scale == "full":
        return True
    return claim.id in (cmp.resolves.get(scale) or ())


MIN_ROUNDS = 3  # alternated timing rounds a speed comparison needs (papers/cmhsa/timing.py records them)


def alternated(cmp: Comparison, refs, scale: str | None) -> bool:
    """Every record behind these cells timed its models in >= MIN_ROUNDS alternated rounds in one
    process (metric ``timing_rounds``), so machine load hit both sides alike."""
    recs = [rec for r in refs if r.const is None for rec, _ in cmp.runs(scale, r.table, r.row, r.column)]
    return bool(recs) and all(int(as_dict(rec.get("metrics")).get("timing_rounds") or 0) >= MIN_ROUNDS
                              for rec in recs)


def _not_judged(cmp: Comparison, claim: Claim, scale: str | None, checks: list[Check]) -> tuple[str, str] | None:
    """(verdict, statistic) for a claim this scale does not judge, or None when it judges it."""
    measured = _summary(checks, claim.alpha)[1]
    if is_smoke(scale) and claim.evidence != "theory":  # stand-in models: neither accuracy nor speed is the paper's
        return SMOKE, f"{scale} is a smoke scale (a few hundred steps at most): it proves the pipeline runs; {measured}"
    if claim.evidence == "timing" and all(c.method == "exact" for c in checks):
        return None  # every side timed in alternated rounds: a verdict on that hardware
    if claim.evidence == "timing":
        return TIMING, ("a speed claim is a hardware claim: judged only from timings taken in >= "
                        f"{MIN_ROUNDS} alternated rounds in one process (`make bench`, benchmarks/README.md; "
                        f"cmhsa's time probes), never from one timing of a run; from the runs: {measured}")
    if claim.evidence != "training" or scale is None:
        return None
    if not designed(cmp, claim, scale):
        where = sorted(s for s, ids in cmp.resolves.items() if claim.id in (ids or ())) + ["full"]
        return NOT_DESIGNED, (f"scale {scale} is not designed to resolve this claim (designed at: "
                              f"{', '.join(where)}); {measured}")
    return None


def judge(cmp: Comparison, claim: Claim, scale: str | None) -> Verdict:
    """A claim's verdict at one scale."""
    if claim.invalid:
        return Verdict(claim, scale, INVALID, claim.invalid)
    tables = {r.table for pair in claim.pairs for r in pair if r.const is None}
    if any(not cmp.paper.table(t).reproduced for t in tables):
        return Verdict(claim, scale, NOT_REPRODUCED, "the table is listed but not reproduced",
                       on_paper=on_paper(cmp.paper, claim))
    pairs, dropped = scheduled_pairs(cmp, claim, scale)
    if not pairs and claim.evidence != "timing":  # a timing claim says where it is judged at every scale
        return Verdict(claim, scale, NOT_DESIGNED, f"scale {scale} runs none of the cells this claim compares",
                       on_paper=on_paper(cmp.paper, claim))
    pairs = pairs or claim.pairs
    checks = [check_pair(cmp, claim, lhs, rhs, scale) for lhs, rhs in pairs]
    verdict, statistic = _summary(checks, claim.alpha)
    if dropped:
        statistic += f"; {dropped} comparison(s) on cells this scale does not run left out"
    if (skip := _not_judged(cmp, claim, scale, checks)) is not None:
        verdict, statistic = skip
    elif verdict == NOT_RUN:
        where = scale or _first_scale(cmp, claim)
        cmds = sorted({reproduce_command(cmp.paper.id, t, where) for t in tables})
        statistic = f"none of its {len(checks)} comparison(s) measured yet; fill with {' and '.join(cmds)}"
    return Verdict(claim, scale, verdict, statistic, checks, on_paper(cmp.paper, claim))


def scheduled_pairs(cmp: Comparison, claim: Claim, scale: str | None) -> tuple[list, int]:
    """The claim's comparisons on cells this scale's experiments run, and how many were left out. A chain
    (monotone, ordering) is re-linked over the rows that are run: f10 > f100 when f30 and f50 are not."""
    def run_here(ref: Ref) -> bool:
        if ref.const is not None:
            return True
        cell = cmp.cell(ref, scale)
        return cell.scheduled if cell is not None else cmp.runs_table(ref.table, scale)

    pairs = list(claim.pairs)
    if claim.check in ("monotone", "ordering") and len(pairs) > 1:
        down = all(a[1] == b[0] for a, b in zip(pairs, pairs[1:]))
        up = all(a[0] == b[1] for a, b in zip(pairs, pairs[1:]))
        if down or up:
            chain = [pairs[0][0], *(p[1] for p in pairs)] if down else [pairs[0][1], *(p[0] for p in pairs)]
            kept = [r for r in chain if run_here(r)]
            links = list(zip(kept, kept[1:]))
            return (links if down else [(b, a) for a, b in links]), len(pairs) - len(links)
    kept = [(lhs, rhs) for lhs, rhs in pairs if run_here(lhs) and run_here(rhs)]
    return kept, len(pairs) - len(kept)


def _first_scale(cmp: Comparison, claim: Claim) -> str | None:
    """Where a claim not measured anywhere is first judged: its own scales, else the first designed scale."""
    if claim.scales:
        return claim.scales[0]
    if claim.evidence == "training":
        return next((s for s in ("cpu", "small") if claim.id in (cmp.resolves.get(s) or ())), "full")
    return None


def judge_all(cmp: Comparison) -> list[Verdict]:
    """Every claim at every scale it applies to (scales with records, restricted by the claim's scales)."""
    out = []
    for claim in cmp.paper.claims:
        scales = [s for s in cmp.scales if claim.scales is None or s in claim.scales] or [None]
        out.extend(judge(cmp, claim, s) for s in scales)
    return out


ORDER = (HOLDS, FAILS, INCONCLUSIVE, SMOKE, NOT_DESIGNED, TIMING, NOT_RUN, NOT_REPRODUCED, INVALID)


def tally(verdicts: list[Verdict]) -> dict[str, dict[str, int]]:
    """Per scale, how many claims got each verdict ("none" for claims judged at no scale)."""
    out: dict[str, dict[str, int]] = {v.scale or "none": {} for v in verdicts}
    for v in sorted(verdicts, key=lambda v: ORDER.index(v.verdict)):
        counts = out.setdefault(v.scale or "none", {})
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    return out


def headline(cmp: Comparison, verdicts: list[Verdict]) -> list[dict]:
    """"Did it reproduce?" per scale with records: training claims resolved (hold / fail) of those the
    scale is designed for, theory claims holding, with the data and seeds behind them."""
    out = []
    for scale in cmp.scales:
        at = [v for v in verdicts if v.scale == scale]
        train = [v for v in at if v.claim.evidence == "training"]
        aimed = [v for v in train if v.verdict not in (SMOKE, NOT_DESIGNED)]
        theory = [v for v in at if v.claim.evidence == "theory"]
        seeds = sorted({len(c.measured.values) for v in aimed for ch in v.checks for c in _cells(cmp, ch, scale)})
        out.append({"scale": scale, "training_total": len(train), "training_designed": len(aimed),
                    "resolved": sum(v.verdict in RESOLVED for v in aimed),
                    "hold": sum(v.verdict == HOLDS for v in aimed), "fail": sum(v.verdict == FAILS for v in aimed),
                    "theory_total": len(theory), "theory_hold": sum(v.verdict == HOLDS for v in theory),
                    "data": sorted({lbl for r in cmp.records if r.get("scale") == scale
                                    for lbl in [_data(r)] if lbl}),
                    "seeds": seeds})
    return out


def headline_text(h: dict) -> str:
    """One line: 'cpu: 5 of 9 training claims resolved (3 hold, 2 fail); theory: 4 of 4 hold; ...'."""
    if is_smoke(h["scale"]):
        train = f"{h['training_total']} training claims not judged (smoke scale)"
    elif not h["training_designed"]:
        train = f"no training claim designed for this scale ({h['training_total']} not designed)"
    else:
        train = (f"{h['resolved']} of {h['training_designed']} training claims resolved ({h['hold']} hold, "
                 f"{h['fail']} fail)")
        if h["training_total"] > h["training_designed"]:
            train += f", {h['training_total'] - h['training_designed']} not designed for this scale"
    seeds = f"{'/'.join(map(str, h['seeds']))} seed(s) per cell" if h["seeds"] else ""
    theory = f"theory: {h['theory_hold']} of {h['theory_total']} hold" if h["theory_total"] else ""
    data = "; ".join(h["data"])
    return f"{h['scale']}: " + "; ".join(x for x in (train, theory, data, seeds) if x)


def _cells(cmp: Comparison, check: Check, scale: str) -> list[Cell]:
    return [c for c in (_cell(cmp, r, scale) for r in (check.lhs, check.rhs)) if c is not None]


def _data(rec: dict) -> str:
    config = as_dict(rec.get("config"))
    return data_label(config) if as_dict(config.get("data")) else ""
