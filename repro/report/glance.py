"""The first screen: each central claim as a row of numbers, since "8 hold, 2 outside" cannot be quoted or checked."""
from __future__ import annotations

from collections import Counter

from repro.report.assess import Assessment
from repro.report.cells import Comparison, column_unit, difference_unit, order_scales
from repro.report.pairwise import (FAILS, HOLDS, INCONCLUSIVE, JUDGED, MIN_SEEDS, NOT_RESOLVABLE, NOT_RUN,
                                      NOT_DESIGNED, NOT_TESTABLE, OUTSIDE, SMOKE, Check, Verdict, decisive, p_sides,
                                      said)
from repro.report.provenance import _joined
from repro.report.setting import joined, run_setting, with_measured
from repro.report.stats import holm
from repro.report.tally import headline, headline_text, kind
from repro.runs import is_smoke
from repro.paper import Paper, Ref

CENTRAL = ("training", "ours", "cited")  # claims about training outcomes; theory and timing are counted below
SHOWN = (HOLDS, FAILS, OUTSIDE, INCONCLUSIVE, NOT_TESTABLE, "not resolvable", NOT_RUN)  # not run: still training
CHIPS = {HOLDS: ("holds", "✓"), FAILS: ("fails", "✗"), OUTSIDE: ("outside-regime", "⊘"),
         INCONCLUSIVE: ("inconclusive", "?"), "not resolvable": ("not-resolvable", "?"),
         NOT_TESTABLE: ("not-testable", "–"), "met": ("met", "✓"), "not met": ("not-met", "!")}


def chip(verdict: str, evidence: str = "training") -> dict:
    """CSS class and symbol of a verdict chip; a precondition's reads met / not met, never holds / fails."""
    verdict = said(verdict, evidence)
    cls, symbol = CHIPS.get(verdict, (verdict.replace(" ", "-"), "·"))
    return {"cls": f"v-{cls}", "symbol": symbol}


def ref_label(paper: Paper | None, ref: Ref, cmp: Comparison | None = None, scale: str | None = None) -> str:
    """'DeiT-12 · last-block CosSim' for a cell, the number for a constant; with ``cmp``, what the row measured."""
    if ref.const is not None:
        return f"{ref.const:g}"
    if paper is None:
        return str(ref)
    table = paper.table(ref.table)
    row, col = (table.row(ref.row), table.column(ref.column)) if table else (None, None)
    view = cmp.view(ref.table, scale) if cmp is not None else None
    label = with_measured(row.label if row else ref.row, view.measured_rows.get(ref.row, "") if view else "")
    return f"{label} · {col.label if col else ref.column}"


def pair_labels(paper: Paper | None, lhs: Ref, rhs: Ref, cmp: Comparison | None = None,
                scale: str | None = None) -> tuple[str, str]:
    """Both sides' labels, each with its table's id where they would otherwise read the same."""
    a, b = ref_label(paper, lhs, cmp, scale), ref_label(paper, rhs, cmp, scale)
    if a == b and lhs.const is None and rhs.const is None and lhs.table != rhs.table:
        a, b = f"{a} ({lhs.table})", f"{b} ({rhs.table})"
    return a, b


def _unit(paper: Paper | None, ref: Ref) -> str:
    """A cell's unit as printed after its value: '81.3%', '8.35 % relative', '0.29 patches'."""
    table = paper.table(ref.table) if paper is not None and ref.const is None else None
    col = table.column(ref.column) if table else None
    unit = column_unit(table, col) if col else ""
    return unit if unit in ("", "%") else f" {unit}"


def _quantity(paper: Paper | None, ref: Ref) -> str:
    """What a unitless cell measures, in a few words for a plot's axis: 'CosSim' of 'CosSim, last block'."""
    table = paper.table(ref.table) if paper is not None and ref.const is None else None
    col = table.column(ref.column) if table else None
    words = col.label.split(",")[0].split(" (")[0].split() if col else []
    return " ".join(w for i, w in enumerate(words) if len(" ".join(words[:i + 1])) <= 18) or " ".join(words[:1])


def deciding(checks: list[Check], somewhere: bool = False) -> Check | None:
    """The comparison a verdict rests on: failing first, then open, then the one closest to failing; for a
    claim that holds somewhere (any comparison holding suffices), holding first, then open, then the failing
    one closest to holding."""
    order = (HOLDS, INCONCLUSIVE, NOT_TESTABLE, FAILS) if somewhere else (FAILS, INCONCLUSIVE, NOT_TESTABLE, HOLDS)
    shown = [c for c in checks if c.effect is not None]
    sign = -1 if somewhere else 1  # toward holding: the largest effect in the claim's direction
    return min(shown, key=lambda c: (order.index(c.verdict) if c.verdict in order else len(order),
                                     sign * (-c.effect if c.relation == "<=" else c.effect)), default=None)


def _records(cmp: Comparison, ref: Ref, scale: str) -> list[dict]:
    """The records behind a cell (behind both operands of a derived cell)."""
    if ref.const is not None:
        return []
    cell = cmp.cell(ref, scale)
    derived = cell.column.derived if cell is not None else None
    if derived:
        return [r for k in ("a", "b") for r in _records(cmp, Ref(ref.table, ref.row, derived[k]), scale)]
    return [rec for rec, _ in cmp.runs(scale, ref.table, ref.row, ref.column)]


def cells(checks: list[Check]) -> list:
    """The measured cells ``checks`` compare (constants left out), each once, in order."""
    return list(dict.fromkeys(r for c in checks for r in (c.lhs, c.rhs) if r.const is None))


def setting(cmp: Comparison, checks: list[Check], scale: str) -> dict:
    """What the compared runs measured, from their own records (setting.py), with seeds per cell."""
    recs = {r.get("run_id"): r for c in checks for ref in (c.lhs, c.rhs) for r in _records(cmp, ref, scale)}
    out = joined([run_setting(r, cmp.models, cmp.counted) for r in recs.values() if r.get("status") == "finished"])
    refs = cells(checks)
    seeds = _joined(c.n for c in (cmp.cell(ref, scale) for ref in refs) if c is not None and c.n)
    out["seeds"] = seeds
    out["text"] += f" · {seeds} seed{'s' if seeds != '1' else ''}" if seeds else ""
    views = [(ref, cmp.view(ref.table, scale)) for ref in refs]
    rows = [m for ref, view in views if view and (m := view.measured_rows.get(ref.row))]
    if rows:  # the rows' own setting where the scale changes it: "k = 5 of 5 GPSA"
        measured = " vs ".join(dict.fromkeys(rows))
        out.update(rows=measured, text=f"{out['text']} · {measured}", short=f"{out['short']}, {measured}")
    return out


def short(text: str, limit: int = 90) -> str:
    """A claim's first sentence, cut at a word near ``limit`` characters (the full text is one click away)."""
    first = text.split(". ")[0].rstrip(".")
    if len(first) <= limit:
        return first + "."
    return first[:limit].rsplit(" ", 1)[0] + " …"


def _num(x) -> float | None:
    return None if x is None else round(float(x), 4)


def _measured(paper: Paper | None, c: Check) -> str:
    """'DeiT-12 · CosSim 0.29 vs 0.5', or both cells' means (and the margin) when the right side is a cell."""
    a, b = pair_labels(paper, c.lhs, c.rhs)
    rhs = f"{c.means[1]:.3g}" if c.rhs.const is not None else f"{b} {c.means[1]:.3g}{_unit(paper, c.rhs)}"
    return f"{a} {c.means[0]:.3g}{_unit(paper, c.lhs)} vs {rhs}" + (f" + margin {c.margin:g}" if c.margin else "")


def precondition_row(paper: Paper | None, p: Verdict) -> dict:
    """A precondition with the values it measured beside its threshold ('DeiT-12 · CosSim 0.29 vs 0.5')."""
    measured = [f"{ref_label(paper, c.lhs)}: {c.share[0]} of {c.share[1]} runs at or below {c.rhs.const:g}"
                f"{_unit(paper, c.lhs)} (a share above {p.claim.rate:g} needed)" if c.share else
                _measured(paper, c) for c in p.checks if c.means]
    return {"id": p.claim.id, "text": p.claim.text, "verdict": said(p.verdict, "precondition"), "met": p.verdict == HOLDS,
            "label": p.label, **chip(p.verdict, "precondition"), "measured": "; ".join(measured)}


def _floor(p: Verdict) -> bool:
    """An accuracy floor: every comparison a top-1/top-5 cell above a constant."""
    return bool(p.checks) and p.claim.relation == ">" and all(
        c.rhs.const is not None and c.lhs.const is None and any(k in c.lhs.column for k in ("top1", "top5"))
        for c in p.checks)


def scope(paper: Paper | None, v: Verdict) -> str:
    """'tested at 10%, 100% (2 of 5 rows the paper prints)' for a claim judged on fewer rows than printed."""
    table = paper.table(v.claim.table) if paper is not None and v.claim.table else None
    cols = {c.lhs.column for c in v.checks if c.lhs.table == v.claim.table}
    if table is None or len(cols) != 1 or len(v.checks) < 1:
        return ""
    col = next(iter(cols))
    printed = [r for r in table.rows if not r.cited and r.values.get(col) is not None and r.values[col].reported]
    tested = [r for r in table.rows if any((ref.row, ref.table, ref.column) == (r.key, table.id, col)
                                           for c in v.checks for ref in (c.lhs, c.rhs))]
    if len(printed) < 2 or len(tested) >= len(printed) or not set(r.key for r in tested) <= {r.key for r in printed}:
        return ""
    return f"tested at {', '.join(r.label for r in tested)} ({len(tested)} of {len(printed)} rows the paper prints)"


def toward(c: Check | None, t) -> dict:
    """The effect, its interval and the paper's, signed so that + is the claim's direction."""
    if c is None or c.effect is None:
        return {"effect": None, "ci": None, "paper": None}
    s = -1 if c.relation == "<=" else 1
    ci = sorted(s * x for x in t.ci) if t is not None and t.ci else None
    return {"effect": _num(s * c.effect), "ci": [_num(x) for x in ci] if ci else None,
            "paper": _num(s * c.paper_effect) if c.paper_effect is not None else None}


def why(v: Verdict, c: Check | None) -> str:
    """Why a row is open: a precondition unresolved, too few seeds, an effect below the resolvable, a wide interval."""
    if v.verdict == NOT_TESTABLE:
        return "both sides at chance"
    if v.verdict not in (INCONCLUSIVE, NOT_RESOLVABLE):
        return ""
    open_ = [p.claim.id for p in v.preconditions if p.verdict not in (HOLDS, FAILS)]
    if open_:
        return "precondition not resolved: " + ", ".join(open_)
    unrun = sum(x.verdict == NOT_RUN for x in v.checks)
    if unrun:  # a claim over several comparisons waits for all of them, whatever the measured ones say
        return f"{unrun} of {len(v.checks)} comparisons not run yet"
    if c is None or c.effect is None:
        return "not measured"
    if v.controls and v.result == HOLDS:
        return "its negative control passes the same check"
    if v.verdict == NOT_RESOLVABLE and c.paper_effect is not None and c.resolvable is not None:
        return f"the paper's effect {c.paper_effect:+.3g} is below the resolvable {c.resolvable:.3g}"
    t = decisive(c)
    if t is None:
        return f"fewer than {MIN_SEEDS} seeds a side"
    s = -1 if c.relation == "<=" else 1  # as shown: + is the claim's direction
    lean = "leans against the claim; " if s * c.effect < 0 else ""
    if c.resolvable is not None and abs(c.effect) < c.resolvable:
        why_open = f"{lean}effect below the resolvable {c.resolvable:.3g}"
    else:
        why_open = f"{lean}the 95 % interval crosses the threshold"
    if c.paper_effect is not None and t.ci and not t.ci[0] <= c.paper_effect <= t.ci[1]:
        why_open += f"; the interval excludes the paper's {s * c.paper_effect:+.3g}"
    return why_open


def unrecorded(cmp: Comparison, v: Verdict) -> str:
    """Why a claim designed for this scale has no verdict yet: the cells its comparisons read that hold no run."""
    empty = [ref_label(cmp.paper, r) for r in cells(v.checks) if not getattr(cmp.cell(r, v.scale), "n", 0)]
    return f"no record yet of {', '.join(empty)}" if v.verdict == NOT_RUN and empty else ""


def row(cmp: Comparison, v: Verdict, drawn: set | frozenset = frozenset()) -> dict:
    """One claim at one scale as the first screen shows it, linking the drawn figures of its tables."""
    paper, c = cmp.paper, deciding(v.checks, v.claim.somewhere)
    tables = {r.table for r in cells(v.checks)}
    t = decisive(c) if c else None
    ok, bad = p_sides(c) if c else ("", "")
    side = bad if c and (c.verdict == FAILS or (t and t.p_greater is not None and getattr(t, bad) < getattr(t, ok))) else ok
    pre = [precondition_row(paper, p) for p in v.preconditions]
    under = [p for p, r in zip(v.preconditions, pre) if not r["met"] and (_floor(p) or p.claim.budget)
             and v.verdict != NOT_RUN]  # a row without a verdict is not under-trained
    return {"id": v.claim.id, "text": v.claim.text, "kind": kind(v), "scale": v.scale,
            "verdict": said(v.verdict, v.claim.evidence), "label": v.label, **chip(v.verdict, v.claim.evidence),
            "result": v.result or None, "toward": toward(c, t), "why": why(v, c) or unrecorded(cmp, v),
            "scope": scope(paper, v),
            "setting": setting(cmp, [c] if c else v.checks, v.scale),
            "compared": f" {c.relation} ".join(pair_labels(paper, c.lhs, c.rhs, cmp, v.scale)) if c else "",
            "comparisons": len(v.checks), "relation": c.relation if c else "",
            "unit": _difference_unit(paper, c),
            "quantity": _quantity(paper, c.lhs) if c else "",
            "means": [_num(x) for x in c.means] if c and c.means else None, "margin": _num(c.margin) if c else None,
            "effect": _num(c.effect) if c else None, "ci": [_num(x) for x in t.ci] if t and t.ci else None,
            "p": _num(getattr(t, side + "_adj")) if t and t.p_greater is not None else None,
            "p_side": "fails" if c and side == bad else "holds",
            "n": "/".join(map(str, t.n if t else c.n or ())) if c else "",
            "paper_effect": _num(c.paper_effect) if c else None, "preconditions": pre,
            "figures": [f.id for f in paper.figures if f.table in tables and (f.id, v.scale) in drawn],
            "qualifier": f"under-trained ({', '.join(p.claim.id for p in under)} not met)" if under else ""}


def _difference_unit(paper: Paper, c: Check | None) -> str:
    """The effect's unit: lhs - rhs of accuracies is in points, not %; a rate's effect is a share of runs."""
    if c is None:
        return ""
    return "of runs" if c.relation == "rate" else difference_unit(_unit(paper, c.lhs).strip())


def tallies(a: Assessment, screen: list[dict]) -> dict[str, dict]:
    """Per scale, the counts every block quotes, by the kinds REPORT.md's headline counts (``tally.kind``: the
    paper's training claims, cited, ours, theory, timing, preconditions), each claim designed for the scale
    once, not-run ones included; theory with its fails named; under-trained rows per kind."""
    rows = {b["scale"]: b["rows"] for b in screen}
    out = {}
    for scale in order_scales(a.cmp.scales):
        aimed = [v for v in a.verdicts + a.preconditions if v.scale == scale and v.verdict not in (SMOKE, NOT_DESIGNED)]
        t = {k: _count(said(v.verdict, v.claim.evidence) for v in aimed if kind(v) == k)
             for k in ("training", "cited", "ours", "theory", "timing", "precondition")}
        t["theory_fails"] = [v.claim.id for v in aimed if kind(v) == "theory" and v.verdict == FAILS]
        t["under_trained"] = dict(Counter(r["kind"] for r in rows.get(scale, []) if r["qualifier"]))
        t["smoke"] = is_smoke(scale)
        out[scale] = t
    return out


def _count(verdicts) -> dict[str, int]:
    return dict(sorted(Counter(verdicts).items(), key=lambda kv: (-kv[1], kv[0])))


def _family_member(r: dict, c: Check | None) -> bool:
    """'A row > the baseline' in one table, the claim's only comparison, tested."""
    t = decisive(c) if c is not None else None
    return (t is not None and t.p_greater is not None and c.relation == ">" and c.rhs.const is None
            and c.lhs.table == c.rhs.table and r["comparisons"] == 1)


def correct_family(members: list[tuple[dict, Check | None]], paper: Paper) -> None:
    """Holm across a table's rows compared with one baseline (five ideas against it are five chances of a
    "holds"): set ``family`` on those first-screen rows, with the row's p Holm-adjusted across them."""
    groups: dict[tuple, list] = {}
    for r, c in members:
        if _family_member(r, c):
            groups.setdefault((c.lhs.table, str(c.rhs)), []).append((r, c))
    for (table, _), rows in groups.items():
        if len(rows) < 2:
            continue
        tests = [(decisive(c), *p_sides(c)) for _, c in rows]
        held = holm([getattr(t, ok + "_adj") for t, ok, _ in tests])
        failed = holm([getattr(t, bad + "_adj") for t, _, bad in tests])
        for (r, c), (t, ok, bad), h, f in zip(rows, tests, held, failed):
            fails = c.verdict == FAILS or getattr(t, bad) < getattr(t, ok)
            r["family"] = {"table": table, "size": len(rows), "baseline": ref_label(paper, c.rhs),
                           "side": "fails" if fails else "holds",
                           "p": round(getattr(t, (bad if fails else ok) + "_adj"), 4), "p_holm": round(f if fails else h, 4)}


def first_screen(a: Assessment, drawn: set | frozenset = frozenset()) -> list[dict]:
    """Per non-smoke scale: the setting, the budget caveat, each central claim as a row, and the other counts."""
    cmp, out = a.cmp, []
    heads = {h["scale"]: headline_text(h) for h in headline(cmp, a.verdicts, a.preconditions, a.settings)}
    for scale in order_scales(cmp.scales):
        if is_smoke(scale):
            continue
        central = [v for v in a.verdicts
                   if v.scale == scale and kind(v) in CENTRAL and v.claim.evidence == "training" and v.verdict in SHOWN]
        rows = [row(cmp, v, drawn) for v in central]
        correct_family([(r, deciding(v.checks, v.claim.somewhere)) for r, v in zip(rows, central)], cmp.paper)
        budget = "" if scale == "full" else ("at this budget, not the paper's protocol: each row names its own "
                                             "runs' setting, and its verdict is a finding about that setting")
        pre = [row(cmp, p, drawn) for p in a.preconditions if p.scale == scale and p.verdict in (*JUDGED, OUTSIDE)]
        out.append({"scale": scale, "setting": a.settings.get(scale, ""), "budget": budget, "rows": rows,
                    "preconditions": pre, "counts": heads.get(scale, "")})
    return sorted(out, key=lambda b: not b["rows"])  # scales that judge a claim first


def lead(summary: dict) -> dict | None:
    """A paper's line on the index, at the scale that judges most: its first training claim judged in the paper's
    regime (else its first judged one), so a central claim tested where the paper makes it leads; with its counts."""
    judged = [dict(b, rows=[r for r in b["rows"] if r["verdict"] != NOT_RUN])
              for b in summary.get("first_screen") or []]
    block = next((b for b in judged if b["rows"]), None)
    if block is None:
        return None
    training = [r for r in block["rows"] if r["kind"] == "training"] or block["rows"]
    r = next((r for r in training if r["verdict"] in JUDGED), training[0])
    t = (summary.get("tallies") or {}).get(block["scale"]) or {}
    own = ", ".join(f"{n} {v}" for v, n in (t.get("training") or {}).items())
    ours = ", ".join(f"{n} {v}" for v, n in (t.get("ours") or {}).items())
    return {"scale": block["scale"], "row": r, "counts": own or (f"none; ours: {ours}" if ours else "")}


def row_models(view, row: str) -> str:
    """The models a table row's runs trained, by measured size, and what the row measured at this scale."""
    models = " / ".join(sorted({p["label"] for c in view.cells.values() if c.row == row
                                for p in c.runs_protocol if p.get("label")}))
    return "; ".join(x for x in (models, view.measured_rows.get(row, "")) if x)
