"""A paper's index_table atop results/index.html, read from summary.json: the index never computes its own numbers."""
from __future__ import annotations

from pathlib import Path

from repro.report.figures import EXPLAINS
from repro.report.readme import qualifiers
from repro.runs import is_smoke
from repro.paper import Paper

ALPHA = 0.05  # family-wise, as within a claim


def number(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1e5:
        return f"{v / 1e6:.2f}M"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _cell_text(cell: dict | None, with_n: bool) -> str:
    """mean ± sd over seeds (n in the first column only: a row's columns come from the same runs)."""
    if not cell or cell.get("status") != "measured" or not isinstance(cell.get("mean"), (int, float)):
        return (cell or {}).get("status") or "-"
    sd = f" ± {number(cell['sd'])}" if isinstance(cell.get("sd"), (int, float)) else ""
    return f"{number(cell['mean'])}{sd}" + (f" (n={cell['n']})" if with_n else "")


def _comparison(claim: dict, qualifier: str = "", row: dict | None = None) -> dict:
    """Effect, interval, p and verdict of a one-comparison claim as text, with its family's p where it has one."""
    c = (claim.get("comparisons") or [{}])[0]
    ci, family = c.get("ci95"), (row or {}).get("family") or {}
    p = family.get("p", c.get("p_holds_holm"))
    return {"claim": claim["id"], "verdict": claim["verdict"], "label": claim["label"], "qualifier": qualifier,
            "text": (row or {}).get("text", ""),
            "effect": f"{c['effect']:+.2f}" if isinstance(c.get("effect"), (int, float)) else "-",
            "ci": f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "-", "p": f"{p:.3g}" if p is not None else "-",
            "side": family.get("side", "holds"),
            "p_family": f"{family['p_holm']:.3g}" if family else "-",
            "family_note": "holds on its own p, not across the family" if family and claim["verdict"] == "holds"
            and family["p_holm"] > ALPHA else ""}


def _at_scale(paper: Paper, summary: dict, scale: str, results_dir: Path) -> dict:
    table = paper.table(paper.index_table)
    cells = {(c["row"], c["column"]): c for c in summary.get("cells", [])
             if c["table"] == table.id and c["scale"] == scale}
    columns = [c for c in table.columns if any(isinstance(cells.get((r.key, c.key), {}).get("mean"), (int, float))
                                               for r in table.rows)]
    claims, marks = {}, qualifiers(summary)
    screen = {(r["id"], b["scale"]): r for b in summary.get("first_screen") or [] for r in b["rows"]}
    for cl in summary.get("claims", []):
        comps = cl.get("comparisons") or []
        if cl.get("scale") == scale and len(comps) == 1 and comps[0]["lhs"].startswith(f"{table.id}."):
            claims[comps[0]["lhs"].split(".")[1]] = _comparison(cl, marks.get((cl["id"], scale), ""),
                                                               screen.get((cl["id"], scale)))
    rows = [{"label": r.label, "cells": [_cell_text(cells.get((r.key, c.key)), i == 0) for i, c in enumerate(columns)],
             "claim": claims.get(r.key)} for r in table.rows]
    pngs = [(f, results_dir / paper.id / "figures" / f"{f.id}-{scale}.png") for f in paper.figures
            if f.table == table.id]
    figures = [{"id": f.id, "caption": f"{f.caption} {EXPLAINS.get(f.kind, '')}",
                "src": p.relative_to(results_dir).as_posix()} for f, p in pngs if p.is_file()]  # drawn ones only
    own = (((summary.get("tables") or {}).get(table.id) or {}).get("by_scale") or {}).get(scale) or {}
    setting = own.get("setting") or (summary.get("settings") or {}).get(scale, "")  # the table's runs, else the scale's
    family = [x["claim"] for x in rows if x["claim"] and x["claim"]["p_family"] != "-"]
    return {"scale": scale, "smoke": is_smoke(scale), "setting": setting, "family": len(family),
            "columns": [c.label for c in columns], "rows": rows, "figures": figures}


def featured(paper: Paper, summary: dict, results_dir: Path) -> dict | None:
    """The index block of a paper with an ``index_table``, one entry per scale that measured it; else None."""
    if not paper.index_table or paper.table(paper.index_table) is None:
        return None
    scales = sorted(summary.get("scales") or [], key=is_smoke)  # strongest evidence first (cells.order_scales)
    table = paper.table(paper.index_table)
    blocks = [b for b in (_at_scale(paper, summary, s, Path(results_dir)) for s in scales)
              if b["columns"]]  # a scale that does not measure the table shows nothing
    if not blocks:
        return None
    return {"id": paper.id, "title": paper.title, "caption": table.caption, "note": table.note,
            "source": table.source, "scales": blocks}
