"""The report's data files: cells.csv (one row per table cell and scale) and claims.csv (one row per
comparison of every claim), for readers who collect numbers across papers. Kept apart from build.py so that
the notebook can rebuild the same rows without importing the builder."""
from __future__ import annotations

import csv
import io

from repro.report.cells import CITED, Comparison


CELL_FIELDS = ["table", "row", "column", "unit", "scale", "paper", "paper_value", "paper_dataset", "mean", "sd", "n",
               "dataset", "model", "epochs", "params", "protocol", "like_for_like", "status", "delta", "agrees",
               "at_chance", "claims"]


def _claims_by_cell(cmp: Comparison) -> dict[tuple, list[str]]:
    """(table, row, column) -> the ids of the claims (and preconditions) that compare that cell."""
    out: dict = {}
    for claim in [*cmp.paper.claims, *cmp.paper.preconditions]:
        for ref in {r for pair in claim.pairs for r in pair if r.const is None}:
            out.setdefault((ref.table, ref.row, ref.column), []).append(claim.id)
    return {k: sorted(set(v)) for k, v in out.items()}


def _joined(parts: list[dict], key: str) -> str:
    return "; ".join(sorted({str(p[key]) for p in parts if p.get(key) not in (None, "")}))


def cell_rows(cmp: Comparison) -> list[dict]:
    """One row per measured-or-scheduled cell and scale: the paper's value beside ours (cells.csv)."""
    rows, claims = [], _claims_by_cell(cmp)
    for view in cmp.views:
        if not view.table.reproduced or view.scale is None:
            continue
        for row in view.table.rows:
            for col in view.table.columns:
                c = view.cells[(row.key, col.key)]
                if c.status == CITED:
                    continue
                runs = c.runs_protocol
                rows.append({"table": view.table.id, "row": row.key, "column": col.key, "unit": col.unit,
                             "scale": view.scale, "paper": c.paper_text(),
                             "paper_value": c.paper.value if c.paper else None, "paper_dataset": view.paper_protocol,
                             "mean": c.mean, "sd": c.std, "n": c.n, "dataset": _joined(runs, "data"),
                             "model": "; ".join(sorted({f"{p['model']} ({p['shape']})" if p.get("shape") else p["model"]
                                                        for p in runs if p.get("model")})),
                             "epochs": _joined(runs, "epochs"), "params": _joined(runs, "params"),
                             "protocol": c.protocol, "like_for_like": c.like_for_like, "status": c.status,
                             "delta": c.delta, "agrees": c.within_noise, "at_chance": c.at_chance,
                             "claims": " ".join(claims.get((view.table.id, row.key, col.key), []))})
    return rows


def cells_csv(rows: list[dict]) -> str:
    return _csv(rows, CELL_FIELDS)


CLAIM_FIELDS = ["claim", "scale", "setting", "kind", "reading", "verdict", "comparison", "comparison_verdict",
                "method", "effect", "ci95_low", "ci95_high", "p_holds", "p_fails", "p_holds_holm", "p_fails_holm",
                "n_lhs", "n_rhs", "resolvable_effect", "paper_effect", "below_resolvable"]


def claims_csv(summary: dict) -> str:
    """claims.csv: one row per comparison of every claim and precondition at every scale, in numbers (the
    fields of summary.json), for a reader who collects verdicts across papers."""
    rows = []
    for entry in summary["claims"] + summary["preconditions"]:
        head = {"claim": entry["id"], "scale": entry["scale"], "setting": entry["setting"], "kind": entry["kind"],
                "reading": entry["reading"], "verdict": entry["verdict"]}
        for c in entry["comparisons"] or [{}]:
            ci, n = c.get("ci95") or [None, None], c.get("n") or [None, None]
            rows.append({**head, "comparison": f"{c['lhs']} {c['relation']} {c['rhs']}" if c else "",
                         "comparison_verdict": c.get("verdict"), "method": c.get("method"), "effect": c.get("effect"),
                         "ci95_low": ci[0], "ci95_high": ci[1], **{k: c.get(k) for k in (
                             "p_holds", "p_fails", "p_holds_holm", "p_fails_holm", "resolvable_effect", "paper_effect",
                             "below_resolvable")}, "n_lhs": n[0], "n_rhs": n[1]})
    return _csv(rows, CLAIM_FIELDS)


def _csv(rows: list[dict], fields: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r[k]) for k in fields} for r in rows)
    return out.getvalue()
