"""Paper vs measured, cell by cell: mean, std and n over seeds, delta, and whether the paper lies in the noise.

A cell's noise band is ``half a unit of the printed precision + 2 std over seeds`` (std needs n >= 2):
a paper printing "27M" agrees with anything that rounds to 27M, and a paper value within two seed
standard deviations of our mean is as close as a single run of ours would be. Records are grouped by
(scale, table, row, column); a record naming a cell that paper.yaml does not have is reported, not
dropped silently, and never stops the rest of the comparison.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repro.records import RecordError
from repro.report.provenance import as_dict, hardware_label
from repro.spec import Column, Paper, PaperValue, Ref, Table, decimals_of

SCALE_ORDER = ("tiny", "small", "full")

MEASURED, NOT_RUN, CITED, NOT_REPRODUCED, DIVERGED, INVALID = (
    "measured", "not run", "cited", "not reproduced", "diverged", "invalid")


DETAIL_HEADERS = ["row", "column", "paper", "measured (mean ± std)", "n", "Δ (ours - paper)",
                  "paper within noise", "notes"]


def order_scales(scales) -> list[str]:
    """tiny, small, full first, then any other scale alphabetically."""
    scales = set(scales)
    return [s for s in SCALE_ORDER if s in scales] + sorted(scales - set(SCALE_ORDER))


def reproduce_command(paper: str, table: str, scale: str | None) -> str:
    """The command that fills a table's missing cells (keys.md)."""
    return f"make reproduce PAPER={paper}" + (f" SCALE={scale}" if scale else "") + f" TABLES={table}"


@dataclass
class Measured:
    """The finished values of one cell at one scale: one per run (scalars or per-layer arrays)."""
    values: list[Any]
    seeds: list[Any]
    run_ids: list[str]
    from_means: bool = False  # a derived cell whose operands share no seed: computed from the means

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def is_array(self) -> bool:
        return any(isinstance(v, list) for v in self.values)

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.values)) if self.values and not self.is_array else None

    @property
    def std(self) -> float | None:
        """Sample std over seeds (ddof=1); None with fewer than two runs."""
        return float(np.std(self.values, ddof=1)) if self.n >= 2 and not self.is_array else None

    def array_stats(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Element-wise mean and std over runs of an array cell (None when shapes differ)."""
        try:
            arr = np.asarray(self.values, dtype=float)
        except (TypeError, ValueError):
            return None
        if arr.ndim < 2:
            return None
        return arr.mean(axis=0), (arr.std(axis=0, ddof=1) if len(arr) > 1 else np.zeros(arr.shape[1:]))


@dataclass
class Cell:
    """One (row, column) of one table at one scale: what the paper printed beside what we measured."""
    table: str
    row: str
    column: Column
    scale: str | None
    paper: PaperValue | None
    status: str
    measured: Measured | None = None
    notes: list[str] = field(default_factory=list)
    paper_computed: float | None = None  # a derived cell computed from the paper's printed operands
    scheduled: bool = True  # False: the paper's experiments define no run for it at this scale

    @property
    def mean(self) -> float | None:
        return self.measured.mean if self.measured else None

    @property
    def std(self) -> float | None:
        return self.measured.std if self.measured else None

    @property
    def n(self) -> int:
        return self.measured.n if self.measured else 0

    @property
    def comparable(self) -> bool:
        return (self.status == MEASURED and self.mean is not None and self.paper is not None
                and self.paper.reported and self.column.compare != "show")

    @property
    def delta(self) -> float | None:
        return self.mean - self.paper.value if self.comparable else None

    @property
    def tolerance(self) -> float | None:
        """Half a printed unit plus two seed standard deviations (just the rounding when n < 2)."""
        if not self.comparable:
            return None
        if self.column.compare == "exact":
            return 0.0
        return self.paper.resolution / 2 + 2 * (self.std or 0.0)

    @property
    def agrees_at_printed_precision(self) -> bool | None:
        return None if not self.comparable else abs(self.delta) <= self.paper.resolution / 2 * (1 + 1e-9)

    @property
    def within_noise(self) -> bool | None:
        if not self.comparable:
            return None
        return abs(self.delta) <= self.tolerance + 1e-9 * max(1.0, abs(self.paper.value))

    # ---- text shown in the tables (shared by Markdown, HTML and the notebook) ----
    def paper_text(self) -> str:
        """As printed; a derived value the paper did not print is shown computed, in parentheses."""
        if self.paper is not None and self.paper.reported:
            return self.paper.text
        if self.paper_computed is not None:
            return f"({self.paper_computed:.3g})"
        return self.paper.text if self.paper else "-"

    def measured_text(self) -> str:
        if self.status != MEASURED:
            return self.status
        m = self.measured
        if m.is_array:
            lengths = sorted({len(v) for v in m.values if isinstance(v, list)})
            return f"array[{'/'.join(map(str, lengths))}] x{m.n}"
        text = format_number(m.mean, self.paper, extra=self._extra)
        if m.std is not None:
            std = format_number(m.std, self.paper, extra=self._extra) if self.paper_printed else f"{m.std:.2g}"
            text += f" ± {std}"
        return text

    @property
    def paper_printed(self) -> bool:
        return self.paper is not None and self.paper.resolution is not None

    @property
    def _extra(self) -> int:
        """Digits shown beyond the printed precision: none for exact (configuration) columns."""
        return 0 if self.column.compare == "exact" else 1

    def delta_text(self) -> str:
        d = self.delta
        return "" if d is None else format_number(d, self.paper, sign=True, extra=self._extra)

    def within_text(self) -> str:
        w = self.within_noise
        return "" if w is None else ("yes" if w else "no")


def format_number(x: float | None, like: PaperValue | None = None, sign: bool = False, extra: int = 1) -> str:
    """Format in the paper's units and suffix, ``extra`` digits finer than printed ("27.4M" beside "27M")."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    plus = "+" if sign else ""
    if like is None or like.resolution is None:  # nothing printed to match: significant digits
        return f"{x:{plus}.4g}"
    mult = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(like.suffix, 1.0)
    suffix = like.suffix if like.suffix != "%" else ""
    return f"{x / mult:{plus}.{decimals_of(like) + extra}f}{suffix}"


@dataclass
class TableView:
    """A table at one scale (scale None: nothing measured yet)."""
    table: Table
    scale: str | None
    cells: dict[tuple[str, str], Cell]
    command: str
    cost: dict = field(default_factory=dict)  # time to table: see table_cost
    paper_id: str = ""

    def detail_rows(self) -> list[list]:
        """One line per cell that has something measured or something wrong (see DETAIL_HEADERS)."""
        rows = []
        for row in self.table.rows:
            for col in self.table.columns:
                c = self.cells[(row.key, col.key)]
                if not (c.status in (MEASURED, INVALID, DIVERGED) or (c.notes and c.status != CITED)):
                    continue
                rows.append([row.label, col.label, c.paper_text(), c.measured_text(), c.n or "",
                             c.delta_text(), c.within_text(), "; ".join(c.notes)])
        return rows

    def counts(self) -> dict[str, int]:
        """Measured, not run and invalid among the table's measurable (non-derived, non-cited) cells."""
        own = [c for c in self.cells.values() if not c.column.derived and c.status != CITED]
        return {"cells": len(own), "measured": sum(c.status == MEASURED for c in own),
                "not_run": sum(c.status == NOT_RUN for c in own),
                "invalid": sum(c.status in (INVALID, DIVERGED) for c in own)}

    def unscheduled(self) -> int:
        """Cells not run that this scale's experiments never run (no command would fill them)."""
        return sum(c.status == NOT_RUN and not c.scheduled for c in self.cells.values()
                   if not c.column.derived and c.status != CITED)


@dataclass
class Comparison:
    """Everything the renderers and claim checks need about one paper at every measured scale."""
    paper: Paper
    scales: list[str]
    views: list[TableView]
    records: list[dict]
    index: dict[tuple[str, str, str, str], list[tuple[dict, str]]]
    problems: list[str]

    def view(self, table: str, scale: str | None) -> TableView | None:
        return next((v for v in self.views if v.table.id == table and v.scale == scale), None)

    def cell(self, ref: Ref, scale: str | None) -> Cell | None:
        v = self.view(ref.table, scale)
        return v.cells.get((ref.row, ref.column)) if v else None

    def runs(self, scale: str, table: str, row: str, column: str) -> list[tuple[dict, str]]:
        """(record, metric key) of every record filling this cell at this scale."""
        return self.index.get((scale, table, row, column), [])


def _metric(rec: dict, key: str, col: Column) -> Any:
    """A record's metric in the printed unit (measured_scale applied), or None when absent."""
    v = rec["metrics"].get(key)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) * col.measured_scale if math.isfinite(v) else None
    if isinstance(v, list) and _numeric_list(v):
        try:
            return (np.asarray(v, dtype=float) * col.measured_scale).tolist()
        except ValueError:  # ragged nested lists
            return None
    return None


def _numeric_list(v: list) -> bool:
    return all(_numeric_list(x) if isinstance(x, list) else isinstance(x, (int, float)) and x is not None
               for x in v)


def index_records(paper: Paper, records: list[dict]) -> tuple[dict, list[str]]:
    """Group records by (scale, table, row, column); describe every record that names no known cell."""
    index: dict[tuple[str, str, str, str], list[tuple[dict, str]]] = {}
    problems = []
    for rec in records:
        where = f"record {rec.get('run_id')!r} ({rec.get('scale')})"
        table = paper.table(str(rec.get("table")))
        cell = rec.get("cell") or {}
        row = table.row(str(cell.get("row"))) if table else None
        if not isinstance(rec.get("scale"), str) or not rec["scale"]:
            problems.append(f"{where}: scale must be a name such as tiny, small or full; ignored")
            continue
        if rec.get("paper") != paper.id:
            problems.append(f"{where}: paper {rec.get('paper')!r} is not {paper.id!r}; ignored")
            continue
        if table is None or row is None:
            problems.append(f"{where}: table {rec.get('table')!r} row {cell.get('row')!r} is not in "
                            f"{paper.path}; ignored")
            continue
        columns = cell.get("columns")
        if not isinstance(columns, dict) or not columns:
            problems.append(f"{where}: cell.columns must map table columns to metric keys; ignored")
            continue
        for ck, metric in columns.items():
            col = table.column(ck)
            if col is None or col.derived:
                problems.append(f"{where}: column {ck!r} is not a measured column of {table.id}; ignored")
                continue
            index.setdefault((rec["scale"], table.id, row.key, ck), []).append((rec, str(metric)))
    return index, problems


def _measured_cell(table: Table, row, col: Column, scale: str | None, runs) -> Cell:
    paper = row.values.get(col.key)
    cell = Cell(table.id, row.key, col, scale, paper, NOT_RUN)
    if row.cited:
        cell.status = CITED
        cell.notes.append(f"cited from {row.cited}; never measured")
        return cell
    if not table.reproduced:
        cell.status = NOT_REPRODUCED
        return cell
    finished = [(r, m) for r, m in runs if r["status"] == "finished"]
    values, seeds, ids = [], [], []
    for rec, metric in finished:
        v = _metric(rec, metric, col)
        if v is None:
            cell.notes.append(f"record {rec['run_id']} has no numeric metric {metric!r}")
        else:
            values.append(v)
            seed = rec.get("seed")
            seeds.append(seed if isinstance(seed, (int, str)) or seed is None else repr(seed))
            ids.append(rec["run_id"])
    unfinished = [r for r, _ in runs if r["status"] != "finished"]
    for rec in unfinished:
        cell.notes.append(f"run {rec['run_id']} (seed {rec.get('seed')}) {rec['status']}; excluded")
    dup = {s for s in seeds if seeds.count(s) > 1}
    if dup:
        cell.notes.append(f"seed(s) {sorted(dup, key=str)} measured more than once; all runs averaged")
    if values:
        cell.status, cell.measured = MEASURED, Measured(values, seeds, ids)
    elif unfinished:
        cell.status = DIVERGED if any(r["status"] == "diverged" for r in unfinished) else INVALID
    elif finished:
        cell.status = INVALID
    return cell


def derive(op: str, a: float, b: float) -> float | None:
    """rel_gap = (a / b - 1) in percent, ratio = a / b, diff = a - b."""
    if op == "diff":
        return a - b
    if b == 0:
        return None
    return (a / b - 1) * 100 if op == "rel_gap" else a / b


def _derived_cell(table: Table, row, col: Column, scale, cells) -> Cell:
    """Computed per seed where both operands share seeds, else from the operands' means."""
    cell = Cell(table.id, row.key, col, scale, row.values.get(col.key), NOT_RUN)
    pa, pb = row.values.get(col.derived["a"]), row.values.get(col.derived["b"])
    if pa is not None and pb is not None and pa.reported and pb.reported:
        cell.paper_computed = derive(col.derived["op"], pa.value, pb.value)
    if row.cited or not table.reproduced:
        cell.status = CITED if row.cited else NOT_REPRODUCED
        return cell
    a, b = cells[(row.key, col.derived["a"])], cells[(row.key, col.derived["b"])]
    if a.status != MEASURED or b.status != MEASURED or a.mean is None or b.mean is None:
        return cell
    sa = dict(zip(a.measured.seeds, a.measured.values))
    sb = dict(zip(b.measured.seeds, b.measured.values))
    common = [s for s in sa if s in sb and s is not None]
    pairs = [(s, derive(col.derived["op"], sa[s], sb[s])) for s in common]
    pairs = [(s, v) for s, v in pairs if v is not None]
    if pairs and len(common) == len(set(a.measured.seeds)) == len(set(b.measured.seeds)):
        cell.measured = Measured([v for _, v in pairs], [s for s, _ in pairs], [])
    else:
        v = derive(col.derived["op"], a.mean, b.mean)
        if v is None:
            cell.status = INVALID
            cell.notes.append(f"{col.derived['b']} is zero")
            return cell
        cell.measured = Measured([v], [], [], from_means=True)
        cell.notes.append("computed from the operands' means (their seeds differ)")
    cell.status = MEASURED
    return cell


def table_view(paper: Paper, table: Table, scale: str | None, index, defined: set | None = None) -> TableView:
    """Every cell of one table at one scale; ``defined``: the (table, row, column) cells this scale's
    experiments run, when known."""
    cells: dict[tuple[str, str], Cell] = {}
    for row in table.rows:
        for col in table.columns:
            if not col.derived:
                runs = index.get((scale, table.id, row.key, col.key), [])
                cells[(row.key, col.key)] = cell = _measured_cell(table, row, col, scale, runs)
                if defined is not None and cell.status == NOT_RUN:
                    cell.scheduled = (table.id, row.key, col.key) in defined
        for col in table.columns:
            if col.derived:
                cells[(row.key, col.key)] = _derived_cell(table, row, col, scale, cells)
    command = reproduce_command(paper.id, table.id, scale) if table.reproduced else ""
    return TableView(table, scale, cells, command, table_cost(table, scale, index), paper.id)


def table_cost(table: Table, scale: str | None, index) -> dict:
    """Time to table: the distinct runs filling its cells at this scale, their summed wall time and where
    they ran. Why: regenerating a table costs machine hours, and a reader planning a rerun needs them."""
    recs = {}
    for row in table.rows:
        for col in table.columns:
            for rec, _ in index.get((scale, table.id, row.key, col.key), []):
                recs[rec.get("run_id")] = rec
    provs = [as_dict(r.get("provenance")) for r in recs.values()]
    walls = [float(p["wall_s"]) for p in provs if isinstance(p.get("wall_s"), (int, float))]
    return {"runs": len(recs), "timed": len(walls), "compute_s": round(sum(walls), 1) if walls else None,
            "hardware": sorted({hardware_label(p) for p in provs})}


def cost_text(cost: dict) -> str:
    """'12 runs, 4.2 min of compute on cpu (x86_64, 1 threads)' (empty when nothing ran)."""
    if not cost.get("runs"):
        return ""
    text = f"{cost['runs']} run{'s' if cost['runs'] != 1 else ''}"
    if cost.get("compute_s") is not None:
        s = cost["compute_s"]
        amount = f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h"
        untimed = cost["runs"] - cost["timed"]
        text += f", {amount} of compute" + (f" ({untimed} untimed)" if untimed else "")
    if cost.get("hardware"):
        text += " on " + "; ".join(cost["hardware"])
    return text


def compare(paper: Paper, records: list[dict], bad: list[RecordError] | None = None,
            defined: dict[str, set] | None = None) -> Comparison:
    """Compare a paper's printed tables with its records, at every scale that has records.

    ``defined`` maps a scale to the (table, row, column) cells its experiments run (see
    build.defined_cells); cells outside it are marked as never run at that scale.
    """
    index, problems = index_records(paper, records)
    problems = [str(p) for p in paper.problems] + [str(e) for e in (bad or [])] + problems
    used = {s for (s, *_rest) in index}
    scales = order_scales(used)
    views = []
    for table in paper.tables:
        own = order_scales({s for (s, t, *_r) in index if t == table.id}) if table.reproduced else []
        for scale in own or [None]:
            views.append(table_view(paper, table, scale, index, (defined or {}).get(scale)))
    return Comparison(paper, scales, views, records, index, problems)
