"""Verdict counts by kind of evidence: only the paper's own training claims make the "did it reproduce?" count."""
from __future__ import annotations

from repro.report.cells import Comparison
from repro.report.pairwise import (FAILS, HOLDS, INCONCLUSIVE, NOT_DESIGNED, NOT_RESOLVABLE, NOT_RUN,
                                      NOT_TESTABLE, OUTSIDE, SMOKE, JUDGED, Verdict, _cell, said)
from repro.report.provenance import as_dict, data_label
from repro.runs import is_smoke

KINDS = ("training", "theory", "timing", "precondition", "ours", "cited")
KIND_LABELS = {"training": "the paper's training claims", "theory": "theory (inequalities, constructions, counts)",
               "timing": "timing", "precondition": "preconditions (the paper's regime, measured)",
               "ours": "stricter readings (ours, not the paper's)", "cited": "cited (another paper's claims)"}
ORDER = (HOLDS, FAILS, OUTSIDE, NOT_RESOLVABLE, NOT_TESTABLE, INCONCLUSIVE, SMOKE, NOT_DESIGNED, "timing", NOT_RUN,
         "not reproduced", "invalid")


def kind(v: Verdict) -> str:
    """training / theory / timing / precondition, or ours / cited for claims that are not the paper's."""
    return v.claim.reading if v.claim.reading != "paper" else v.claim.evidence


def tally(verdicts: list[Verdict]) -> dict[str, dict[str, dict[str, int]]]:
    """Per scale ("none": judged at no scale) and kind, how many claims got each verdict."""
    out: dict = {}
    for v in sorted(verdicts, key=lambda v: ORDER.index(v.verdict) if v.verdict in ORDER else len(ORDER)):
        counts, word = out.setdefault(v.scale or "none", {}).setdefault(kind(v), {}), said(v.verdict, v.claim.evidence)
        counts[word] = counts.get(word, 0) + 1
    return {s: {k: by[k] for k in KINDS if k in by} for s, by in out.items()}


def headline(cmp: Comparison, verdicts: list[Verdict], preconditions: list[Verdict] = (),
             settings: dict[str, str] | None = None) -> list[dict]:
    """"Did it reproduce?" per scale: the paper's designed training claims by verdict, other kinds apart."""
    out = []
    for scale in cmp.scales:
        at = [v for v in verdicts if v.scale == scale]
        train = [v for v in at if kind(v) == "training"]
        aimed = [v for v in train if v.verdict not in (SMOKE, NOT_DESIGNED)]
        count = lambda vs, verdict: sum(v.verdict == verdict for v in vs)  # noqa: E731
        h = {"scale": scale, "training_total": len(train), "training_designed": len(aimed),
             "resolved": count(aimed, HOLDS) + count(aimed, FAILS), "hold": count(aimed, HOLDS),
             "fail": count(aimed, FAILS), "outside_regime": count(aimed, OUTSIDE),
             "not_resolvable": count(aimed, NOT_RESOLVABLE), "not_testable": count(aimed, NOT_TESTABLE),
             "inconclusive": count(aimed, INCONCLUSIVE), "not_run": count(aimed, NOT_RUN)}
        for k in KINDS[1:]:
            group = [v for v in (preconditions if k == "precondition" else at)  # as the READMEs' tallies count
                     if kind(v) == k and v.scale == scale and v.verdict not in (SMOKE, NOT_DESIGNED)]
            h[k] = {"total": len(group), "hold": count(group, HOLDS), "fail": count(group, FAILS),
                    "other": len(group) - count(group, HOLDS) - count(group, FAILS),
                    "others": {said(w, k): count(group, w) for w in ORDER[2:] if count(group, w)}}
        h["theory_total"], h["theory_hold"] = h["theory"]["total"], h["theory"]["hold"]
        cells = [_cell(cmp, r, scale) for v in aimed for ch in v.checks for r in (ch.lhs, ch.rhs)]
        h["seeds"] = sorted({len(c.measured.values) for c in cells if c is not None})
        configs = [as_dict(r.get("config")) for r in cmp.records if r.get("scale") == scale]
        h["data"] = sorted({data_label(c) for c in configs if as_dict(c.get("data"))})
        h["setting"] = (settings or {}).get(scale, "")
        out.append(h)
    return out


def headline_text(h: dict) -> str:
    """One line: 'cpu: the paper's training claims: 2 hold, 3 fail ... (of 12 designed for cpu; 17 in all); ...'."""
    if is_smoke(h["scale"]):
        train = f"{h['training_total']} training claims not judged (smoke scale)"
    elif not h["training_total"]:
        train = "no training claim of the paper's"
    elif not h["training_designed"]:
        train = f"no training claim designed for this scale ({h['training_total']} not designed)"
    else:
        parts = [f"{h['hold']} hold", f"{h['fail']} fail"] + [
            f"{h[k]} {label}" for k, label in (("outside_regime", "outside the paper's regime"),
                                               ("not_resolvable", "not resolvable"),
                                               ("not_testable", "not testable"), ("inconclusive", "inconclusive"),
                                               ("not_run", "not run")) if h[k]]
        train = (f"the paper's training claims: {', '.join(parts)} (of {h['training_designed']} designed for "
                 f"{h['scale']}; {h['training_total']} in all)")
    others = []
    for k, word in (("theory", "hold"), ("timing", "hold"), ("precondition", "met"), ("ours", "hold"),
                    ("cited", "hold")):
        g = h.get(k) or {}
        if g.get("total"):
            name = {"precondition": "preconditions", "ours": "stricter readings (ours)"}.get(k, k)
            rest = "".join(f", {n} {w}" for w, n in (g.get("others") or {}).items())  # outside regime, inconclusive
            fail = f"{g['fail']} {'not met' if k == 'precondition' else 'fail'}"
            others.append(f"{name}: {g['hold']} {word}, {fail}{rest} (of {g['total']})")
    seeds = f"{'/'.join(map(str, h['seeds']))} seed(s) per cell" if h["seeds"] else ""
    where = f"{h['scale']} ({h['setting']})" if h.get("setting") else h["scale"]
    data = "" if h.get("setting") else "; ".join(h["data"])  # the setting names the data
    return f"{where}: " + "; ".join(x for x in (train, *others, data, seeds) if x)

