"""Holm across a table's rows compared with one baseline: five ideas against it are five chances of a "holds"."""
from __future__ import annotations

from repro.report.pairwise import FAILS, Check, decisive, p_sides
from repro.report.stats import holm


def _member(r: dict, c: Check | None) -> bool:
    """'A row > the baseline' in one table, the claim's only comparison, tested."""
    t = decisive(c) if c is not None else None
    return (t is not None and t.p_greater is not None and c.relation == ">" and c.rhs.const is None
            and c.lhs.table == c.rhs.table and r["comparisons"] == 1)


def correct(members: list[tuple[dict, Check | None]], baseline_label) -> None:
    """Set ``family`` on first-screen rows sharing a table and baseline: the row's p, Holm-adjusted across them."""
    groups: dict[tuple, list] = {}
    for r, c in members:
        if _member(r, c):
            groups.setdefault((c.lhs.table, str(c.rhs)), []).append((r, c))
    for (table, _), rows in groups.items():
        if len(rows) < 2:
            continue
        tests = [(decisive(c), *p_sides(c)) for _, c in rows]
        held = holm([getattr(t, ok + "_adj") for t, ok, _ in tests])
        failed = holm([getattr(t, bad + "_adj") for t, _, bad in tests])
        for (r, c), (t, ok, bad), h, f in zip(rows, tests, held, failed):
            fails = c.verdict == FAILS or getattr(t, bad) < getattr(t, ok)
            r["family"] = {"table": table, "size": len(rows), "baseline": baseline_label(c.rhs),
                           "side": "fails" if fails else "holds",
                           "p": round(getattr(t, (bad if fails else ok) + "_adj"), 4), "p_holm": round(f if fails else h, 4)}
