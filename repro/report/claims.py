"""Claim verdicts per scale (README.md: the rules), in one place: report, index and notebook all call judge_all."""
from __future__ import annotations

from repro.report.cells import NOT_REPRODUCED, Comparison, reproduce_command
from repro.report.pairwise import (FAILS, HOLDS, INCONCLUSIVE, INVALID, JUDGED, MIN_ROUNDS, MIN_SEEDS, NOT_DESIGNED,
                                      NOT_RESOLVABLE, NOT_RUN, NOT_TESTABLE, OUTSIDE, SMOKE, TIMING, Check, Verdict,
                                      _fmt, numbers, check_pair, finish, on_paper, said)
from repro.runs import is_smoke
from repro.paper import Claim, Ref

_METHODS = {"welch": "one-sided Welch t-test across seeds",
            "t1samp": "one-sided one-sample t-test across seeds",
            "exact": "exact values", "lean": f"fewer than {MIN_SEEDS} seeds per side: which way the means lean",
            "bound": "bound checked on every seed", "noise": "difference vs 2 sd of seed noise",
            "tolerance": "difference vs the claim's tolerance", "chance": "both sides at chance accuracy",
            "diverged": "a run diverged (see the table)",
            "binomial": "exact binomial test of the share of runs at or below the bound",
            "rate_lean": "fewer than 10 runs: which way the share of runs at or below the bound leans"}
MAX_SHOWN = 3  # comparisons quoted in a claim's statistic; all of them are in summary.json


def combine(checks: list[Check], somewhere: bool = False) -> str:
    """One verdict from a claim's comparisons (after Holm); ``somewhere``: holds if any holds, fails if all fail."""
    verdicts = [c.verdict for c in checks]
    if INVALID in verdicts:
        return INVALID
    if somewhere and HOLDS in verdicts:
        return HOLDS
    if somewhere and FAILS in verdicts:
        return FAILS if all(v == FAILS for v in verdicts) else INCONCLUSIVE
    if FAILS in verdicts:
        return FAILS
    if all(v == HOLDS for v in verdicts):
        return HOLDS
    if all(v == NOT_RUN for v in verdicts):
        return NOT_RUN
    if NOT_TESTABLE in verdicts and all(v in (HOLDS, NOT_TESTABLE) for v in verdicts):
        return NOT_TESTABLE
    open_ = [c for c in checks if c.verdict == INCONCLUSIVE]
    if open_ and all(c.method in ("welch", "t1samp") and c.paper_effect is not None and c.resolvable is not None
                     and 0 < c.paper_effect < c.resolvable for c in open_):
        return NOT_RESOLVABLE
    return INCONCLUSIVE


def _summary(checks: list[Check], alpha: float, evidence: str = "training") -> str:
    """Counts, then each tested comparison in numbers (failing first), then alpha and the methods."""
    verdicts = [c.verdict for c in checks]
    parts = [f"{verdicts.count(HOLDS)}/{len(checks)} comparisons {said(HOLDS, evidence).replace('holds', 'hold')}"]
    parts += [f"{verdicts.count(v)} {said(v, evidence)}" for v in (FAILS, INCONCLUSIVE, NOT_TESTABLE, NOT_RUN, INVALID)
              if v in verdicts]
    used = sorted({c.method for c in checks if c.method}, key=list(_METHODS).index)
    how = "; ".join(_METHODS[m] for m in used)
    if any(c.tests for c in checks):
        how = f"Holm, family-wise alpha={alpha:g}" + ("; " + how if how else "")
    order = (FAILS, INCONCLUSIVE, HOLDS)
    shown = sorted((c for c in checks if c.effect is not None), key=lambda c: order.index(c.verdict)
                   if c.verdict in order else len(order))
    lines = [f"{c.lhs} {c.relation} {c.rhs}: {numbers(c, evidence)}" for c in shown[:MAX_SHOWN]]
    if len(shown) > MAX_SHOWN:
        lines.append(f"{len(shown) - MAX_SHOWN} more in the comparisons list")
    return ", ".join(parts) + "".join(f"; {x}" for x in lines) + (f"; {how}" if how else "")


def designed(cmp: Comparison, claim: Claim, scale: str | None) -> bool:
    """Is ``scale`` designed to resolve this training claim? full always, others when its plan's RESOLVES says so."""
    return scale == "full" or claim.id in (cmp.resolves.get(scale) or ())


def _not_judged(cmp: Comparison, claim: Claim, scale: str | None, checks: list[Check],
                measured: str) -> tuple[str, str] | None:
    """(verdict, statistic) for a claim this scale does not judge, or None when it judges it."""
    if is_smoke(scale) and claim.evidence != "theory":  # stand-in models: neither accuracy nor speed is the paper's
        return SMOKE, f"{scale} is a smoke scale (a few hundred steps at most): it proves the pipeline runs; {measured}"
    if claim.evidence == "timing" and not all(c.method == "exact" for c in checks):
        return TIMING, ("a speed claim is a hardware claim: judged only from timings taken in >= "
                        f"{MIN_ROUNDS} alternated rounds in one process (`make bench`, benchmarks/README.md; "
                        f"cmhsa's time probes), never from one timing of a run; from the runs: {measured}")
    if claim.evidence != "training" or scale is None or designed(cmp, claim, scale):
        return None
    where = sorted(s for s, ids in cmp.resolves.items() if claim.id in (ids or ())) + ["full"]
    return NOT_DESIGNED, f"scale {scale} is not designed to resolve this claim (designed at: {', '.join(where)}); {measured}"


def judge(cmp: Comparison, claim: Claim, scale: str | None, preconditions: dict | None = None) -> Verdict:
    """A claim's verdict at one scale (``preconditions``: id -> that precondition's Verdict at this scale)."""
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
    checks = [check_pair(cmp, claim, lhs, rhs, scale) for lhs, rhs in pairs or claim.pairs]
    finish(checks, claim.alpha)
    verdict, statistic = combine(checks, claim.somewhere), _summary(checks, claim.alpha, claim.evidence)
    if claim.somewhere:
        statistic = "holds if any one comparison holds, fails if all fail; " + statistic
    if dropped:
        statistic += f"; {dropped} comparison(s) on cells this scale does not run left out"
    v = Verdict(claim, scale, verdict, statistic, checks, on_paper(cmp.paper, claim))
    if (skip := _not_judged(cmp, claim, scale, checks, statistic)) is not None:
        v.verdict, v.statistic = skip
    elif verdict == NOT_RUN:
        where = scale or _first_scale(cmp, claim)
        cmds = sorted({reproduce_command(cmp.paper.id, t, where) for t in tables})
        v.statistic = f"none of its {len(checks)} comparison(s) measured yet; fill with {' and '.join(cmds)}"
    elif verdict == NOT_RESOLVABLE:
        v.statistic = (f"the paper's effect is below the smallest effect {scale} resolves (paper's "
                       f"{', '.join(f'{c.paper_effect:+.3g}' for c in checks if c.verdict == INCONCLUSIVE)} vs "
                       f"resolvable {', '.join(_fmt(c.resolvable) for c in checks if c.verdict == INCONCLUSIVE)}); "
                       + statistic)
    _control(cmp, v)
    _regime(v, preconditions or {})
    return v


def _control(cmp: Comparison, v: Verdict) -> None:
    """A similarity claim ("similar", "no worse") holds only where the same check rejects its negative control."""
    claim = v.claim
    if v.verdict != HOLDS or not (claim.control or claim.similarity):
        return
    v.controls = [check_pair(cmp, claim, lhs, rhs, v.scale) for lhs, rhs in claim.control]
    finish(v.controls, claim.alpha)
    passed = [c for c in v.controls if c.verdict != FAILS]
    if v.controls and not passed:
        v.statistic += "; negative control rejected by the same check: " + "; ".join(
            f"{c.lhs}: {c.statistic}" for c in v.controls)
        return
    v.result, v.verdict = v.verdict, INCONCLUSIVE
    why = ("no negative control: a similarity check that nothing fails cannot tell" if not v.controls else
           "the negative control is not rejected by the same check, so the check cannot tell: " +
           "; ".join(f"{c.lhs} {c.verdict} ({c.statistic})" for c in passed))
    v.statistic = f"{why}; the claim's own comparison: {v.statistic}"


def _regime(v: Verdict, pre: dict) -> None:
    """Outside the paper's regime where a required precondition fails; inconclusive while one is unresolved."""
    if v.verdict not in JUDGED or not v.claim.requires:
        return
    v.preconditions = [pre[p] for p in v.claim.requires if p in pre]
    unmet = [p for p in v.preconditions if p.verdict != HOLDS]
    if not unmet:
        v.statistic = "preconditions met (" + ", ".join(p.claim.id for p in v.preconditions) + "); " + v.statistic
        return
    failed = [p for p in unmet if p.verdict == FAILS]
    v.result, v.verdict = v.result or v.verdict, OUTSIDE if failed else INCONCLUSIVE
    v.statistic = (("outside the paper's regime: " + "; ".join(
        f"{p.claim.id} not met ({p.statistic})" for p in failed)) if failed else
        ("the paper's regime not yet resolved: " + "; ".join(
            f"{p.claim.id} {p.label} ({p.statistic})" for p in unmet))) + (
        f" | the comparisons themselves ({v.result}): {v.statistic}")


def scheduled_pairs(cmp: Comparison, claim: Claim, scale: str | None) -> tuple[list, int]:
    """The comparisons on cells this scale runs, and how many were left out; a chain is re-linked over them."""
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


def _scales(cmp: Comparison, claim: Claim) -> list:
    return [s for s in cmp.scales if claim.scales is None or s in claim.scales] or [None]


def judge_all(cmp: Comparison) -> list[Verdict]:
    """Every claim at every scale it applies to, after the preconditions it requires at that scale."""
    pre = {s: {p.id: judge(cmp, p, s) for p in cmp.paper.preconditions if p.scales is None or s in p.scales}
           for s in [*cmp.scales, None]}  # a precondition limited to some scales applies only there
    return [judge(cmp, claim, s, pre[s]) for claim in cmp.paper.claims for s in _scales(cmp, claim)]


def judge_preconditions(cmp: Comparison) -> list[Verdict]:
    """Every precondition at every scale with records (shown in their own table, counted apart)."""
    return [judge(cmp, p, s) for p in cmp.paper.preconditions for s in _scales(cmp, p)]
