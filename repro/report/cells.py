"""Paper vs measured per cell; a delta only like for like: a CIFAR-10 number says nothing of an ImageNet one."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from repro.records import RecordError
from repro.report.provenance import as_dict, hardware_label, protocol_label, protocol_parts
from repro.report.setting import counted_params, measured_row, run_setting
from repro.paper import Column, Paper, PaperValue, Ref, Table, decimals_of, prints_as

SCALE_ORDER = ("full", "small", "cpu", "tiny")  # most informative first: pages lead with it

MEASURED, NOT_RUN, CITED, NOT_REPRODUCED, DIVERGED, INVALID = (
    "measured", "not run", "cited", "not reproduced", "diverged", "invalid")


DETAIL_HEADERS = ["row", "column", "paper", "measured (mean ± std)", "n", "Δ (ours - paper)",
                  "agrees", "ours measured on", "notes"]
FULL_TEST_SET = {"cifar10": 10000, "cifar10_jpeg": 10000, "cifar100": 10000, "imagenet": 50000}
POINTS, RELATIVE = "points", "% relative"


def order_scales(scales) -> list[str]:
    """full, small, cpu, tiny (most informative first), then any other scale alphabetically."""
    scales = set(scales)
    return [s for s in SCALE_ORDER if s in scales] + sorted(scales - set(SCALE_ORDER))


def unique_scales(scales) -> list:
    """Distinct scales, most informative first (full, small, cpu, tiny); None (judged nowhere) last."""
    scales = list(scales)
    return order_scales(s for s in scales if s is not None) + ([None] if None in scales else [])


def reproduce_command(paper: str, table: str, scale: str | None) -> str:
    """The command that fills a table's missing cells."""
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
    like_for_like: bool = False  # our protocol is the paper's for this cell (scale full, or scale-free)
    printed: str = "round"       # the table's print convention (round | truncate)
    protocol: str = ""           # what our runs behind the cell were measured on
    runs_protocol: list = field(default_factory=list)  # per run: protocol_parts
    chance: float | None = None  # chance level of an accuracy cell, in its printed unit
    test_images: int | None = None  # test-set size behind an accuracy cell (binomial noise)

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
        """A delta and agree/disagree are meaningful: measured, printed, compared and like for like."""
        return (self.status == MEASURED and self.mean is not None and self.paper is not None
                and self.paper.reported and self.column.compare != "show" and self.like_for_like)

    @property
    def at_chance(self) -> bool:
        """Every run at chance level: within 2 binomial standard errors of 1/classes (accuracy cells)."""
        if self.chance is None or self.status != MEASURED or self.measured.is_array:
            return False
        se = binomial_se(self.chance, self.test_images)
        return all(v <= self.chance + 2 * se for v in self.measured.values)

    @property
    def delta(self) -> float | None:
        return self.mean - self.paper.value if self.comparable else None

    @property
    def tolerance(self) -> float | None:
        """Two seed standard deviations beyond the printed interval (just the printing when n < 2)."""
        if not self.comparable:
            return None
        return 0.0 if self.column.compare == "exact" else 2 * (self.std or 0.0)

    @property
    def within_noise(self) -> bool | None:
        if not self.comparable:
            return None
        if self.column.compare == "exact":
            return abs(self.delta) <= 1e-9 * max(1.0, abs(self.paper.value))
        return prints_as(self.mean, self.paper, self.printed, self.tolerance)

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
        if m.std is not None and m.std > 1e-9 * max(1.0, abs(m.mean)):  # identical seeds: no "± 0" or "± 1e-16"
            printed = self.paper is not None and self.paper.resolution is not None
            std = format_number(m.std, self.paper, extra=self._extra) if printed else f"{m.std:.2g}"
            text += f" ± {std}"
        return text

    @property
    def _extra(self) -> int:
        """Digits shown beyond the printed precision: none for exact (configuration) columns."""
        return 0 if self.column.compare == "exact" else 1

    def delta_text(self) -> str:
        d = self.delta
        return "" if d is None else format_number(d, self.paper, sign=True, extra=self._extra)

    def within_text(self) -> str:
        """'yes (round)', 'no (round + 2 sd)': the verdict and the band it used; why a cell has none."""
        w = self.within_noise
        if w is None:
            return "not like for like" if self.status == MEASURED and not self.like_for_like else ""
        band = self.printed if self.std is None or self.column.compare == "exact" else f"{self.printed} + 2 sd"
        return f"{'yes' if w else 'no'} ({band})"


def binomial_se(p_percent: float, n: int | None) -> float:
    """Standard error of an accuracy (in %) measured on n test images; 0 when n is unknown."""
    if not n:
        return 0.0
    p = min(max(p_percent / 100, 0.0), 1.0)
    return 100 * math.sqrt(p * (1 - p) / n)


def format_number(x: float | None, like: PaperValue | None = None, sign: bool = False, extra: int = 1) -> str:
    """Format in the paper's units and suffix, ``extra`` digits finer than printed ("27.4M" beside "27M")."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    plus = "+" if sign else ""
    if like is None or like.resolution is None:  # nothing printed to match: significant digits
        return f"{x:{plus},.0f}" if abs(x) >= 1e4 else f"{x:{plus}.4g}"  # counts without e-notation
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
    paper_protocol: str = ""  # what the paper's numbers in this table were measured on
    measured_rows: dict = field(default_factory=dict)  # row -> what it measured here (setting.measured_row)

    def _measured(self) -> list[Cell]:
        return [c for c in self.cells.values() if c.status == MEASURED and not c.column.derived]

    def protocol_lines(self) -> list[str]:
        """What the paper measured on beside what we measured on, and whether cells are compared."""
        cells = [c for c in self._measured() if c.column.compare != "show"]
        if not cells:
            return []
        paper = f"Paper: {self.paper_protocol or 'protocol not stated'}."
        differ = [c for c in cells if not c.like_for_like]
        free = sorted({c.column.label for c in cells if c.like_for_like and self.scale != "full"})
        if not differ:
            why = "scale full" if self.scale == "full" else f"{', '.join(free)}: the paper's own models or constructions"
            return [paper, f"Ours: like for like ({why}): deltas and agreement marks apply."]
        other = protocol_label([p for c in differ for p in c.runs_protocol]) or "a different protocol"
        lines = [paper, f"Ours at scale {self.scale}: {other}. "
                        "Protocols differ: ours is shown beside the paper's, without a delta or an agreement mark."]
        if free:
            lines.append(f"Compared like for like: {', '.join(free)} (measured on the paper's own models).")
        return lines

    def datasets(self) -> tuple[str, str]:
        """(the paper's dataset, ours) for the two sides of every cell: a cell never mixes datasets."""
        paper = (self.paper_protocol or "as printed").split(",")[0]
        ours = sorted({p["data"] for c in self._measured() for p in c.runs_protocol if p.get("data")})
        return paper, "; ".join(ours) or (f"scale {self.scale}" if self.scale else "not run")

    def mixed_row(self, row: str) -> str:
        """A row whose numbers come from two architectures says so (params of ConViT-Ti, top-1 of a stand-in)."""
        cells = [c for c in self._measured() if c.row == row]
        if self.scale == "full" or not any(c.like_for_like for c in cells) or all(c.like_for_like for c in cells):
            return ""
        same = ", ".join(c.column.label for c in cells if c.like_for_like)
        other = protocol_label([p for c in cells if not c.like_for_like and c.column.compare != "show"
                                for p in c.runs_protocol])
        if not other:
            return ""
        return f"{same}: the paper's model; the rest: {other}"

    def detail_rows(self) -> list[list]:
        """One line per cell that has something measured or something wrong (see DETAIL_HEADERS)."""
        cells = [(row, col, self.cells[(row.key, col.key)]) for row in self.table.rows for col in self.table.columns]
        return [[row.label, col.label, c.paper_text(), c.measured_text(), c.n or "", c.delta_text(), c.within_text(),
                 c.protocol, "; ".join(c.notes)] for row, col, c in cells
                if c.status in (MEASURED, INVALID, DIVERGED) or (c.notes and c.status != CITED)]

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
    resolves: dict[str, set] = field(default_factory=dict)  # scale -> training claims it is designed to resolve
    defined: dict[str, set] = field(default_factory=dict)   # scale -> (table, row, column) cells its runs fill
    models: dict = field(default_factory=dict)  # registered model name -> its constructor arguments (the plans)
    counted: dict = field(default_factory=dict)  # architecture -> parameters counted on some record (setting.py)

    def runs_table(self, table: str, scale: str | None) -> bool:
        """Do this scale's experiments run any cell of the table? (True when unknown)"""
        cells = self.defined.get(scale)
        return cells is None or any(t == table for t, _, _ in cells)

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
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v) * col.measured_scale if math.isfinite(v) else None
    if isinstance(v, list) and _numeric_list(v):
        try:
            return (np.asarray(v, dtype=float) * col.measured_scale).tolist()
        except ValueError:  # ragged nested lists
            return None
    return None


def _numeric_list(v: list) -> bool:
    return all(_numeric_list(x) if isinstance(x, list) else isinstance(x, (int, float)) for x in v)


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


def _accuracy_context(cell: Cell, runs) -> None:
    """Chance level and test-set size of an accuracy cell (metric top1* / top5*, in %)."""
    recs = [(r, m) for r, m in runs if m.startswith(("top1", "top5")) and cell.column.measured_scale == 1.0]
    if not recs:
        return
    rec, metric = recs[0]
    data = as_dict(as_dict(rec.get("config")).get("data"))
    classes = data.get("num_classes")
    if isinstance(classes, int) and classes > 0:
        cell.chance = min(100.0, (5 if metric.startswith("top5") else 1) * 100.0 / classes)
    seen = as_dict(as_dict(rec.get("provenance")).get("data")).get("test_images")
    cell.test_images = seen if isinstance(seen, int) else test_set_size(data)


def _pooled_torch(runs) -> list[str]:
    """A note where a cell's seeds ran under several torch versions (they differ in the 8th digit of a loss)."""
    seeds: dict[str, list[str]] = {}
    for rec, _ in runs:
        seeds.setdefault(str(as_dict(rec.get("provenance")).get("torch") or "unknown"), []).append(str(rec.get("seed")))
    if len(seeds) < 2:
        return []
    return ["seeds pool torch versions: " + "; ".join(f"{v} (seed {', '.join(s)})" for v, s in sorted(seeds.items()))]


def test_set_size(data: dict) -> int | None:
    """Test images a run evaluated on, from its data config (limit, per-class cap, or the full set)."""
    if data.get("test_limit"):
        return int(data["test_limit"])
    if data.get("test_max_per_class") and data.get("num_classes"):
        return int(data["test_max_per_class"]) * int(data["num_classes"])
    return FULL_TEST_SET.get(str(data.get("name")))


def _measured_cell(table: Table, row, col: Column, scale: str | None, runs, models: dict | None = None,
                   counted: dict | None = None) -> Cell:
    paper = row.values.get(col.key)
    cell = Cell(table.id, row.key, col, scale, paper, NOT_RUN, printed=table.printed,
                like_for_like=scale == "full" or table.is_scale_free(col.key))
    if row.cited or not table.reproduced:
        cell.status = CITED if row.cited else NOT_REPRODUCED
        cell.notes += [f"cited from {row.cited}; never measured"] if row.cited else []
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
    parts = [{**protocol_parts(rec, models), **{k: v for k, v in run_setting(rec, models, counted).items()
                                                 if v is not None}} for rec, _ in finished]
    sources: dict[str, list[str]] = {}
    for (rec, _), part in zip(finished, parts):
        sources.setdefault(protocol_label([part]), []).append(rec["run_id"])
    if len(sources) > 1:  # one cell, one protocol: seeds of different data or models are not one mean
        cell.status = INVALID
        cell.notes.append("runs of this cell were measured on different data or models, not averaged: " +
                          "; ".join(f"{k or 'unspecified'} ({', '.join(v[:3])})" for k, v in sources.items()))
        return cell
    unfinished = [r for r, _ in runs if r["status"] != "finished"]
    cell.notes += [f"run {rec['run_id']} (seed {rec.get('seed')}) {rec['status']}; excluded" for rec in unfinished]
    dup = {s for s in seeds if seeds.count(s) > 1}
    if dup:
        cell.notes.append(f"seed(s) {sorted(dup, key=str)} measured more than once; all runs averaged")
    if values:
        cell.status, cell.measured = MEASURED, Measured(values, seeds, ids)
        cell.runs_protocol, cell.protocol = parts, next(iter(sources), "")
        _accuracy_context(cell, finished)
        cell.notes += _pooled_torch(finished)
    elif unfinished:
        cell.status = DIVERGED if any(r["status"] == "diverged" for r in unfinished) else INVALID
    elif finished:
        cell.status = INVALID
    return cell


def difference_unit(unit: str) -> str:
    """The unit of a - b for a and b in ``unit``: two percentages differ by percentage points, not by a percent."""
    return POINTS if unit == "%" else unit


def column_unit(table: Table, col: Column) -> str:
    """A column's unit as its numbers read: '% relative' for a rel_gap, points for a diff of percentages."""
    op = (col.derived or {}).get("op")
    if op == "rel_gap":
        return RELATIVE
    if op == "diff":
        operand = table.column(col.derived["a"])
        return difference_unit(col.unit or (column_unit(table, operand) if operand else ""))
    return col.unit


def derive(op: str, a: float, b: float) -> float | None:
    """rel_gap = (a / b - 1) in percent, ratio = a / b, diff = a - b."""
    if op == "diff":
        return a - b
    if b == 0:
        return None
    return (a / b - 1) * 100 if op == "rel_gap" else a / b


def _derived_cell(table: Table, row, col: Column, scale, cells) -> Cell:
    """Computed per seed where both operands share seeds, else from the operands' means."""
    cell = Cell(table.id, row.key, col, scale, row.values.get(col.key), NOT_RUN, printed=table.printed)
    pa, pb = row.values.get(col.derived["a"]), row.values.get(col.derived["b"])
    if pa is not None and pb is not None and pa.reported and pb.reported:
        cell.paper_computed = derive(col.derived["op"], pa.value, pb.value)
    if row.cited or not table.reproduced:
        cell.status = CITED if row.cited else NOT_REPRODUCED
        return cell
    a, b = cells[(row.key, col.derived["a"])], cells[(row.key, col.derived["b"])]
    cell.like_for_like, cell.scheduled = a.like_for_like and b.like_for_like, a.scheduled and b.scheduled
    cell.protocol = "; ".join(sorted({a.protocol, b.protocol} - {""}))
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


def table_view(paper: Paper, table: Table, scale: str | None, index, defined: set | None = None,
               models: dict | None = None, counted: dict | None = None) -> TableView:
    """Every cell of one table at one scale; ``defined``: the cells this scale's experiments run, when known."""
    cells: dict[tuple[str, str], Cell] = {}
    for row in table.rows:
        for col in table.columns:
            if not col.derived:
                runs = index.get((scale, table.id, row.key, col.key), [])
                cells[(row.key, col.key)] = cell = _measured_cell(table, row, col, scale, runs, models, counted)
                if defined is not None and cell.status == NOT_RUN:
                    cell.scheduled = (table.id, row.key, col.key) in defined
        for col in table.columns:
            if col.derived:
                cells[(row.key, col.key)] = _derived_cell(table, row, col, scale, cells)
    command = reproduce_command(paper.id, table.id, scale) if table.reproduced else ""
    measured = {r.key: text for r in table.rows if (text := measured_row(table, r.key, scale, index))}
    return TableView(table, scale, cells, command, table_cost(table, scale, index), paper.id,
                     table.protocol or paper.protocol, measured)


def table_cost(table: Table, scale: str | None, index) -> dict:
    """Time to table: its distinct runs, their summed wall time and hardware (a rerun costs machine hours)."""
    recs = {rec.get("run_id"): rec for row in table.rows for col in table.columns
            for rec, _ in index.get((scale, table.id, row.key, col.key), [])}
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
        amount = "under 1 s" if s < 0.5 else f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.2f} h"
        untimed = cost["runs"] - cost["timed"]
        text += f", {amount} of compute" + (f" ({untimed} untimed)" if untimed else "")
    if cost.get("hardware"):
        text += " on " + "; ".join(cost["hardware"])
    return text


def compare(paper: Paper, records: list[dict], bad: list[RecordError] | None = None,
            defined: dict[str, set] | None = None, resolves: dict[str, set] | None = None,
            models: dict | None = None, filled: list[dict] = ()) -> Comparison:
    """Compare a paper's printed tables with its records (``defined``: scale -> the cells its plan runs)."""
    index, problems = index_records(paper, [*records, *filled])
    problems = [str(p) for p in paper.problems] + [str(e) for e in (bad or [])] + problems
    used, counted = {s for (s, *_rest) in index}, counted_params(records, models)
    scales = order_scales(used)
    own = {t.id: order_scales({s for (s, tid, *_r) in index if tid == t.id}) if t.reproduced else []
           for t in paper.tables}
    views = [table_view(paper, table, scale, index, (defined or {}).get(scale), models, counted)
             for table in paper.tables for scale in own[table.id] or [None]]
    return Comparison(paper, scales, views, records, index, problems, dict(resolves or {}), dict(defined or {}),
                      dict(models or {}), counted)
