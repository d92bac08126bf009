"""The data files (cells, claims, comparisons, values .csv), so a reader pools or plots our numbers in one line."""
from __future__ import annotations

import csv
import io
import math

from scipy import stats

from repro.report.assess import Assessment
from repro.report.cells import CITED, MEASURED, Cell, Comparison, column_unit, difference_unit
from repro.report.glance import row as claim_row
from repro.report.pairwise import said
from repro.report.setting import run_setting
from repro.paper import Ref

CELL_FIELDS = ["paper", "table", "row", "column", "scale", "dataset", "fraction", "img_size", "state", "family", "model",
               "params", "epochs", "device", "unit",
               "n", "mean", "sd", "ci_low", "ci_high", "values", "seeds", "record_ids", "paper_printed", "paper_value",
               "paper_dataset", "protocol", "like_for_like", "status", "delta", "agrees", "at_chance", "claims"]
UNITS = (("per_s", "{}/s"), ("top1", "%"), ("top5", "%"), ("loss", "nats"), ("params", "parameters"),
         ("flops", "FLOPs"), ("macs", "MACs"), ("nonlocality", "patches"), ("_s", "s"))  # read from the metric key
COUNTS = {"heads", "depth", "dim", "ffn", "exact_heads", "heads_needed", "positional_rank"}  # model structure
VALUE_FIELDS = ["paper", "table", "row", "column", "scale", "run_id", "seed", "value", "unit", "img_size", "state",
                "family", "model", "params", "epochs", "device"]
CLAIM_FIELDS = ["claim", "scale", "kind", "reading", "verdict", "label", "text", "setting", "compared", "comparisons",
                "effect", "ci95_low", "ci95_high", "p_holm", "n_lhs", "n_rhs", "margin", "lhs_mean", "rhs_mean",
                "paper_effect", "unit", "qualifier", "preconditions", "result"]
COMPARISON_FIELDS = ["claim", "scale", "setting", "kind", "reading", "verdict", "comparison", "comparison_verdict",
                     "method", "effect", "ci95_low", "ci95_high", "p_holds", "p_fails", "p_holds_holm", "p_fails_holm",
                     "n_lhs", "n_rhs", "margin", "lhs_mean", "rhs_mean", "resolvable_effect", "paper_effect",
                     "below_resolvable"]


def _claims_by_cell(cmp: Comparison) -> dict[tuple, list[str]]:
    """(table, row, column) -> the ids of the claims (and preconditions) that compare that cell."""
    out: dict = {}
    for claim in [*cmp.paper.claims, *cmp.paper.preconditions]:
        for ref in {r for pair in claim.pairs for r in pair if r.const is None}:
            out.setdefault((ref.table, ref.row, ref.column), []).append(claim.id)
    return {k: sorted(set(v)) for k, v in out.items()}


def _joined(parts: list[dict], key: str) -> str:
    return "; ".join(sorted({str(p[key]) for p in parts if p.get(key) not in (None, "")}))


def _metric_unit(metric: str) -> str:
    if metric in COUNTS:
        return "count"
    for key, name in UNITS:
        if metric.endswith(key) if key == "_s" else key in metric:
            return name.format(metric.split("_per_s")[0])
    return "dimensionless"  # a cosine, a ratio, an error or norm of activations, a gate


def unit(cmp: Comparison, cell: Cell, scale: str) -> str:
    """A measured cell's unit, 'dimensionless' where none applies: a blank would read as 'unknown'."""
    col = cell.column
    named = column_unit(cmp.paper.table(cell.table), col)
    if named:
        return named
    if col.derived:
        if col.derived["op"] == "ratio":
            return "ratio"
        operand = cmp.cell(Ref(cell.table, cell.row, col.derived["a"]), scale)
        return difference_unit(unit(cmp, operand, scale) if operand else "")
    if cell.paper is not None and cell.paper.suffix == "%":
        return "%"
    metrics = sorted({m for _, m in cmp.runs(scale, cell.table, cell.row, col.key)})
    return "; ".join(dict.fromkeys(_metric_unit(m) for m in metrics)) if cell.status == MEASURED else ""


def interval(cell: Cell) -> tuple[float | None, float | None]:
    """95 % t-interval of a cell's mean over seeds (None with fewer than two seeds)."""
    if cell.mean is None or cell.std is None or cell.n < 2:
        return None, None
    half = stats.t.ppf(0.975, cell.n - 1) * cell.std / math.sqrt(cell.n)
    return cell.mean - half, cell.mean + half


def cell_rows(cmp: Comparison) -> list[dict]:
    """One row per measured-or-scheduled cell and scale: the paper's value beside ours, with the setting."""
    rows, claims = [], _claims_by_cell(cmp)
    for view in cmp.views:
        if not view.table.reproduced or view.scale is None:
            continue
        for r in view.table.rows:
            for col in view.table.columns:
                c = view.cells[(r.key, col.key)]
                if c.status == CITED:
                    continue
                runs, low_high = c.runs_protocol, interval(c)
                rows.append({"paper": cmp.paper.id, "table": view.table.id, "row": r.key, "column": col.key,
                             "scale": view.scale, "dataset": _joined(runs, "data"),
                             **{k: _joined(runs, k) for k in ("fraction", "img_size", "state", "family", "device")},
                             "model": _joined(runs, "label") or _joined(runs, "model"), "params": _joined(runs, "params"),
                             "epochs": _joined(runs, "epochs"), "unit": unit(cmp, c, view.scale), "n": c.n,
                             "mean": c.mean, "sd": c.std, "ci_low": low_high[0], "ci_high": low_high[1],
                             "values": ";".join(f"{v:.6g}" for v in c.measured.values)
                             if c.measured and not c.measured.is_array else "",
                             "seeds": ";".join(map(str, c.measured.seeds)) if c.measured else "",
                             "record_ids": ";".join(c.measured.run_ids) if c.measured else "",
                             "paper_printed": c.paper_text(), "paper_value": c.paper.value if c.paper else None,
                             "paper_dataset": view.paper_protocol, "protocol": c.protocol,
                             "like_for_like": c.like_for_like, "status": c.status, "delta": c.delta,
                             "agrees": c.within_noise, "at_chance": c.at_chance,
                             "claims": " ".join(claims.get((view.table.id, r.key, col.key), []))})
    return rows


def cells_csv(rows: list[dict]) -> str:
    return _csv(rows, CELL_FIELDS)


def values_csv(cmp: Comparison) -> str:
    """values.csv, the long table: one row per record and measured cell, with that one run's setting."""
    rows = []
    for view in cmp.views:
        for c in view.cells.values():
            if c.status != MEASURED or c.measured is None or not c.measured.run_ids:
                continue
            runs = {rec.get("run_id"): rec for rec, _ in cmp.runs(view.scale, c.table, c.row, c.column.key)}
            for value, seed, rid in zip(c.measured.values, c.measured.seeds, c.measured.run_ids):
                s = run_setting(runs.get(rid) or {}, cmp.models, cmp.counted)
                rows.append({"paper": cmp.paper.id, "table": c.table, "row": c.row, "column": c.column.key,
                             "scale": view.scale, "run_id": rid, "seed": seed, "unit": unit(cmp, c, view.scale),
                             "value": f"array[{len(value)}]" if isinstance(value, list) else f"{value:.10g}",
                             **{k: s[k] for k in VALUE_FIELDS[9:] if k != "model"}, "model": s["label"]})
    return _csv(rows, VALUE_FIELDS)


def claims_csv(a: Assessment) -> str:
    """claims.csv: one row per claim and precondition at each scale, quoted from its deciding comparison; its
    effect, interval and paper effect signed as the READMEs and the first screen sign them (+ = the claim's
    direction: below a bound, how far), where comparisons.csv keeps lhs - rhs - margin."""
    rows = []
    for v in a.verdicts + a.preconditions:
        r = claim_row(a.cmp, v)
        toward = r["toward"]
        ci, means = toward["ci"] or [None, None], r["means"] or [None, None]
        rows.append({"claim": r["id"], "scale": v.scale or "", "kind": r["kind"], "reading": v.claim.reading,
                     "verdict": said(v.verdict, v.claim.evidence), "label": v.label, "text": v.claim.text,
                     "setting": r["setting"]["text"] if v.scale else "", "compared": r["compared"],
                     "comparisons": r["comparisons"], "effect": toward["effect"], "ci95_low": ci[0], "ci95_high": ci[1],
                     "p_holm": r["p"], **_sides(r["n"]), "margin": r["margin"], "lhs_mean": means[0],
                     "rhs_mean": means[1],
                     "paper_effect": toward["paper"], "unit": r["unit"], "qualifier": r["qualifier"],
                     "preconditions": "; ".join(f"{p['id']}: {p['label']}" + (f" ({p['measured']})" if p["measured"]
                                                                              else "") for p in r["preconditions"]),
                     "result": v.result})
    return _csv(rows, CLAIM_FIELDS)


def comparisons_csv(summary: dict) -> str:
    """comparisons.csv: every comparison of every claim and precondition at every scale (summary.json's numbers)."""
    rows = []
    for entry in summary["claims"] + summary["preconditions"]:
        head = {"claim": entry["id"], "scale": entry["scale"], "setting": entry["setting"], "kind": entry["kind"],
                "reading": entry["reading"], "verdict": entry["verdict"]}
        for c in entry["comparisons"] or [{}]:
            ci, n, means = c.get("ci95") or [None, None], c.get("n") or [None, None], c.get("means") or [None, None]
            rows.append({**head, "comparison": f"{c['lhs']} {c['relation']} {c['rhs']}" if c else "",
                         "comparison_verdict": c.get("verdict"), "method": c.get("method"), "effect": c.get("effect"),
                         "ci95_low": ci[0], "ci95_high": ci[1], **{k: c.get(k) for k in (
                             "p_holds", "p_fails", "p_holds_holm", "p_fails_holm", "resolvable_effect", "paper_effect",
                             "below_resolvable", "margin")}, "n_lhs": n[0], "n_rhs": n[1],
                         "lhs_mean": means[0], "rhs_mean": means[1]})
    return _csv(rows, COMPARISON_FIELDS)


def _sides(n: str) -> dict:
    """'3/3' -> seeds per side as numbers; a constant side (a bound, a chance level) is blank."""
    parts = (n.split("/") + ["", ""])[:2] if n else ["", ""]
    return {f"n_{side}": int(x) if x.isdigit() else None for side, x in zip(("lhs", "rhs"), parts)}


def _csv(rows: list[dict], fields: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r[k]) for k in fields} for r in rows)
    return out.getvalue()
