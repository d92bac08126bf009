"""A verdict as numbers for summary.json, for readers and scripts that quote or collect verdicts."""
from __future__ import annotations

from repro.report.pairwise import Check, Verdict, decisive, p_sides, said
from repro.report.tally import kind


def _num(x) -> float | None:
    return None if x is None else round(float(x), 6)


def check_entry(c: Check, evidence: str = "training") -> dict:
    """One comparison: the numbers of its test (for a per-layer curve, of its block with the largest excess)."""
    t = decisive(c)
    ok, bad = p_sides(c)
    return {"lhs": str(c.lhs), "rhs": str(c.rhs), "relation": c.relation, "verdict": said(c.verdict, evidence),
            "method": c.method,
            "effect": _num(c.effect), "ci95": [_num(x) for x in t.ci] if t and t.ci else None,
            "p_holds": _num(getattr(t, ok)) if t else None, "p_fails": _num(getattr(t, bad)) if t else None,
            "p_holds_holm": _num(getattr(t, ok + "_adj")) if t else None,
            "p_fails_holm": _num(getattr(t, bad + "_adj")) if t else None,
            "n": list(t.n) if t else (list(c.n) if c.n else None), "resolvable_effect": _num(c.resolvable),
            "paper_effect": _num(c.paper_effect), "below_resolvable": c.below_mde,
            "elements": len(c.tests) or None, "margin": _num(c.margin),
            "means": [_num(x) for x in c.means] if c.means else None, "statistic": c.statistic}


def resolvability(v: Verdict) -> str:
    """resolvable / not resolvable / unknown: the paper's effect against the smallest effect we resolve."""
    pairs = [(c.paper_effect, c.resolvable) for c in v.checks
             if c.paper_effect is not None and c.resolvable is not None and c.paper_effect > 0]
    if not pairs:
        return "unknown"
    return "not resolvable" if any(p < r for p, r in pairs) else "resolvable"


def claim_entry(v: Verdict, settings: dict[str, str] | None = None) -> dict:
    """A claim's (or precondition's) verdict at one scale, with its setting and every number behind it."""
    return {"id": v.claim.id, "scale": v.scale, "setting": (settings or {}).get(v.scale or "", ""), "kind": kind(v), "evidence": v.claim.evidence,
            "reading": v.claim.reading, "verdict": said(v.verdict, v.claim.evidence), "label": v.label,
            "result": v.result or None,
            "met": v.verdict == "holds" if v.claim.evidence == "precondition" else None,
            "resolvability": resolvability(v), "statistic": v.statistic, "on_paper": v.on_paper or None,
            "requires": [{"id": p.claim.id, "text": p.claim.text, "met": p.verdict == "holds",
                          "verdict": said(p.verdict, "precondition"),
                          "comparisons": [check_entry(c, "precondition") for c in p.checks]} for p in v.preconditions],
            "controls": [check_entry(c) for c in v.controls],
            "comparisons": [check_entry(c, v.claim.evidence) for c in v.checks]}
