"""Load and validate ``papers/<id>/paper.yaml``: a paper's printed tables, figures and claims as data.

Why: the report puts every printed number beside the measured one, so printed numbers are data, kept exactly as
printed ("27M" is not "27.78M"); the schema is in ``repro/report/README.md``. An unreadable file raises
``SpecError``; anything narrower is a ``Problem`` with path and line, and only the entry at fault is dropped or
marked invalid, so one typo never loses a whole report."""
from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

COMPARE_MODES = ("value", "exact", "show")
DERIVED_OPS = ("rel_gap", "ratio", "diff")
FIGURE_KINDS = ("per_layer", "per_epoch", "vs_rows", "effects")
AXIS_SCALES = ("linear", "log")
CHECKS = ("greater", "ordering", "monotone", "bound", "within_noise", "rate")
EVIDENCE = ("training", "theory", "timing")  # what a claim rests on (see Claim.evidence)
READINGS = ("paper", "ours", "cited")  # whose claim: the paper's, a stricter reading of ours, another paper's
PRINTED = ("round", "truncate")  # how a table's numbers were shortened for print
SUFFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


class SpecError(ValueError):
    """A paper.yaml that cannot be read at all (not YAML, wrong top-level shape)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a paper.yaml, with the place to fix it."""
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class PaperValue:
    """A number as the paper printed it: the text, its value and the precision it was printed at."""
    text: str
    value: float | None      # None: not reported ("-", "") or not a number
    resolution: float | None  # one unit in the last printed digit, in the value's units
    suffix: str = ""          # "M", "G", "%", ...

    @property
    def reported(self) -> bool:
        return self.value is not None


_NUMBER = re.compile(r"^([+-]?)(\d+(?:\.(\d*))?|\.(\d+))\s*([KMGT%]?)$")
_NOT_REPORTED = ("", "-", "—", "–", "n/a", "na", "none")


def parse_printed(raw: Any) -> PaperValue:
    """Parse a printed value ("72.2", "27M", "4.3G", "37%", "-") keeping its printed precision."""
    text = "" if raw is None else str(raw).strip()
    if text.lower() in _NOT_REPORTED:
        return PaperValue(text or "-", None, None)
    m = _NUMBER.match(text.replace("−", "-").replace(",", ""))
    if not m:
        return PaperValue(text, None, None)
    sign, body, frac, frac_only, suffix = m.groups()
    decimals = len(frac or frac_only or "")
    mult = SUFFIXES.get(suffix, 1.0)
    value = float(body) * mult * (-1 if sign == "-" else 1)
    return PaperValue(text, value, 10.0 ** -decimals * mult, suffix)


def prints_as(measured: float, pv: PaperValue, printed: str = "round", slack: float = 0.0) -> bool:
    """Would ``measured`` (give or take ``slack``) be printed as ``pv`` under the table's convention? Rounding
    prints value ± half a unit, truncation (27M for 27.78M) [value, value + one unit) away from zero."""
    unit = pv.resolution or 0.0
    if printed == "truncate":
        lo, hi = (pv.value, pv.value + unit) if pv.value >= 0 else (pv.value - unit, pv.value)
    else:
        lo, hi = pv.value - unit / 2, pv.value + unit / 2
    eps = 1e-9 * max(1.0, abs(pv.value))
    return lo - slack - eps <= measured <= hi + slack + eps


def decimals_of(pv: PaperValue) -> int:
    """Digits after the point in the printed text (0 for "27M")."""
    mult = SUFFIXES.get(pv.suffix, 1.0)
    return max(0, round(-math.log10(pv.resolution / mult))) if pv.resolution else 0


@dataclass
class Column:
    key: str
    label: str
    unit: str = ""
    compare: str = "value"        # value: numeric within noise | exact: must equal | show: beside only
    derived: dict | None = None   # {"op": rel_gap|ratio|diff, "a": col, "b": col}
    measured_scale: float = 1.0   # multiply a record's metric by this to get the printed unit
    note: str = ""
    scale_free: bool = False      # measured on the paper's own model or construction at every scale
    line: int = 0


@dataclass
class Row:
    key: str
    label: str
    values: dict[str, PaperValue] = field(default_factory=dict)
    cited: str = ""               # where the numbers come from, for rows shown but never measured
    x: float | None = None        # position on the x axis of a vs_rows figure
    note: str = ""
    line: int = 0


@dataclass
class Table:
    id: str
    caption: str
    source: str
    columns: list[Column]
    rows: list[Row]
    reproduced: bool = True
    reason: str = ""              # why a table is listed but not reproduced
    note: str = ""
    protocol: str = ""            # what the paper measured on ("ImageNet-1k, 224 px, 300 epochs")
    printed: str = "round"        # round | truncate: how the paper shortened its numbers (27M for 27.78M)
    scale_free: bool = False      # every column scale_free (theorem checks, exact constructions)
    measured_label: str = ""      # a row's own setting from its records' metrics: "k = {k} of {gpsa_layers}"
    line: int = 0

    def column(self, key: str) -> Column | None:
        return next((c for c in self.columns if c.key == key), None)

    def is_scale_free(self, key: str) -> bool:
        """The column measures the paper's own model or construction, the same at every scale."""
        col = self.column(key)
        return self.scale_free or bool(col and col.scale_free)

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.key == key), None)

    @property
    def measured_rows(self) -> list[Row]:
        return [r for r in self.rows if not r.cited]


@dataclass
class Series:
    label: str
    row: str = ""
    column: str = ""
    metric: str = ""


@dataclass
class Figure:
    id: str
    caption: str
    source: str
    kind: str
    table: str
    series: list[Series]
    x_label: str = ""
    y_label: str = ""
    x_scale: str = "linear"
    y_scale: str = "linear"
    line: int = 0
    x_from: str = ""   # vs_rows: dotted config path giving the x our runs used (else the paper's row x)
    reference: tuple = ()  # what the claims test, drawn: {y, label} a level; {slope, series, label} a slope
    baseline: str = ""     # effects: the row every series' row is compared with (same column)


@dataclass(frozen=True)
class Ref:
    """A measured cell (table, row, column) or a constant, as used in a claim's check."""
    table: str = ""
    row: str = ""
    column: str = ""
    const: float | None = None

    def __str__(self) -> str:
        return f"{self.const:g}" if self.const is not None else f"{self.table}.{self.row}.{self.column}"


@dataclass
class Claim:
    id: str
    text: str
    source: str
    table: str
    check: str
    pairs: list[tuple[Ref, Ref]]  # every check is a list of (lhs, rhs) comparisons
    relation: str                 # ">" (greater/ordering/monotone), "<=" (bound), "~" (within_noise),
                                  # "rate" (the share of runs at or below rhs exceeds ``rate``)
    scales: list[str] | None = None
    alpha: float = 0.05
    tolerance: float | None = None
    invalid: str = ""             # why the claim cannot be checked (shown in the report)
    evidence: str = "training"    # training: needs trained runs and seeds | theory: scale-free (theorems,
                                  # bounds, constructions, params/FLOPs) | timing: needs the benchmark protocol
                                  # | precondition: a measured condition of the paper's regime
    reading: str = "paper"        # paper | ours (a stricter reading) | cited (another paper's claim)
    margin: float = 0.0           # greater: lhs - rhs > margin
    requires: list[str] = field(default_factory=list)  # ids of the preconditions that define its regime
    control: list[tuple[Ref, Ref]] = field(default_factory=list)  # negative control: the same check must reject it
    similarity: bool = False      # "similar", "no worse": holds only if a negative control is rejected
    rate: float | None = None     # rate: the share of runs the claim says end at or below the bound (exceeded)
    somewhere: bool = False       # holds when any comparison holds, fails when all fail ("at some lr of the grid")
    budget: bool = False          # a precondition that the training budget is enough: not met, its claims are
                                  # shown "under-trained" (an accuracy floor is one already)
    line: int = 0


@dataclass
class Paper:
    id: str
    title: str
    path: Path
    authors: list[str] = field(default_factory=list)
    venue: str = ""
    year: int | None = None
    arxiv: str = ""
    url: str = ""
    code: str = ""
    source: str = ""
    notes: str = ""
    protocol: str = ""            # the paper's main protocol; a table's own protocol overrides it
    index_table: str = ""         # a table shown at the top of results/index.html (e.g. the cross-paper table)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    preconditions: list[Claim] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def table(self, tid: str) -> Table | None:
        return next((t for t in self.tables if t.id == tid), None)

    def precondition(self, pid: str) -> Claim | None:
        return next((p for p in self.preconditions if p.id == pid), None)


# ---- YAML with line numbers ---------------------------------------------------------------------

class _Map(dict):
    """A mapping that remembers the line it starts on and the line of each key."""
    line: int = 0
    key_lines: dict


class _Loader(yaml.SafeLoader):
    pass


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    m = _Map()
    m.line, m.key_lines = node.start_mark.line + 1, {}
    for k_node, v_node in node.value:
        key = loader.construct_object(k_node, deep=True)
        if key in m:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k_node.start_mark)
        m[key] = loader.construct_object(v_node, deep=True)
        m.key_lines[key] = k_node.start_mark.line + 1
    return m


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)


def _read_yaml(path: Path) -> _Map:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read ({e})") from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        raise SpecError(f"{path}:{line}: invalid YAML: {e.problem or e.context}") from None
    except (yaml.YAMLError, TypeError) as e:  # TypeError: a list or mapping used as a key
        raise SpecError(f"{path}: invalid YAML: {e}") from None
    if not isinstance(data, _Map):
        raise SpecError(f"{path}:1: the top level must be a mapping with id, title, tables, claims")
    return data


# ---- validation ---------------------------------------------------------------------------------

class _Checker:
    """Collects problems with their line numbers while turning the YAML into dataclasses."""

    def __init__(self, path: Path):
        self.path, self.problems = path, []

    def problem(self, line: int, message: str) -> None:
        self.problems.append(Problem(str(self.path), line, message))

    def keys(self, m: _Map, allowed: tuple[str, ...], required: tuple[str, ...], what: str) -> bool:
        """Flag unknown keys; return False when a required key is missing."""
        for k in m:
            if k not in allowed:
                self.problem(m.key_lines.get(k, m.line), f"{what}: unknown key {k!r} (allowed: {', '.join(allowed)})")
        missing = [k for k in required if m.get(k) in (None, "")]
        if missing:
            self.problem(m.line, f"{what}: missing {', '.join(missing)}")
        return not missing

    def mappings(self, parent: _Map, key: str, what: str) -> list[_Map]:
        items = parent.get(key) or []
        if not isinstance(items, list):
            self.problem(parent.key_lines.get(key, parent.line), f"{what}: {key!r} must be a list")
            return []
        good = [i for i in items if isinstance(i, _Map)]
        if len(good) != len(items):
            self.problem(parent.key_lines.get(key, parent.line), f"{what}: every entry of {key!r} must be a mapping")
        return good

    def entries(self, parent: _Map, key: str, what: str, build: Callable[[_Map], Any], kind: str) -> list:
        """What ``build`` makes of each mapping under ``parent[key]`` (None: dropped); an entry whose key (or id)
        repeats an earlier one's is flagged and dropped."""
        items = [x for x in map(build, self.mappings(parent, key, what)) if x]
        seen, out = set(), []
        for it in items:
            name = getattr(it, "key", None) or it.id
            if name in seen:
                self.problem(it.line, f"{kind} {name!r} is defined twice; the second is ignored")
            else:
                seen.add(name)
                out.append(it)
        return out


def _str(v: Any) -> str:
    return "" if v is None else str(v).strip()


def _flag(c: _Checker, m: _Map, key: str, what: str) -> bool:
    v = m.get(key, False)
    if not isinstance(v, bool):
        c.problem(m.key_lines.get(key, m.line), f"{what}: {key} must be true or false, got {v!r}")
        return False
    return v


def _choice(c: _Checker, m: _Map, key: str, allowed: tuple[str, ...], what: str) -> str:
    """``m[key]`` if it is one of ``allowed``; else a problem, and the default (``allowed[0]``) in its place."""
    v = _str(m.get(key)) or allowed[0]
    if v not in allowed:
        c.problem(m.key_lines.get(key, m.line), f"{what}: {key} {v!r} is not one of {allowed}; using {allowed[0]!r}")
        return allowed[0]
    return v


def _column(c: _Checker, m: _Map, tid: str) -> Column | None:
    what = f"table {tid!r} column {m.get('key')!r}"
    if not c.keys(m, ("key", "label", "unit", "compare", "derived", "measured_scale", "note", "scale_free"),
                  ("key",), what):
        return None
    col = Column(key=_str(m["key"]), label=_str(m.get("label")) or _str(m["key"]), unit=_str(m.get("unit")),
                 note=_str(m.get("note")), scale_free=_flag(c, m, "scale_free", what),
                 compare=_choice(c, m, "compare", COMPARE_MODES, what), line=m.line)
    try:
        col.measured_scale = float(m.get("measured_scale", 1.0))
    except (TypeError, ValueError):
        c.problem(m.line, f"{what}: measured_scale must be a number")
    d = m.get("derived")
    if d is not None:
        if not isinstance(d, _Map) or d.get("op") not in DERIVED_OPS or not d.get("a") or not d.get("b"):
            c.problem(m.line, f"{what}: derived must be {{op: {'|'.join(DERIVED_OPS)}, a: <column>, b: <column>}}")
            return None
        col.derived = {"op": d["op"], "a": _str(d["a"]), "b": _str(d["b"])}
    return col


def _row(c: _Checker, m: _Map, table: Table) -> Row | None:
    what = f"table {table.id!r} row {m.get('key')!r}"
    if not c.keys(m, ("key", "label", "values", "cited", "x", "note"), ("key",), what):
        return None
    row = Row(key=_str(m["key"]), label=_str(m.get("label")) or _str(m["key"]), cited=_str(m.get("cited")),
              note=_str(m.get("note")), line=m.line)
    if m.get("x") is not None:
        try:
            row.x = float(m["x"])
        except (TypeError, ValueError):
            c.problem(m.key_lines["x"], f"{what}: x must be a number, got {m['x']!r}")
    values = m.get("values") or _Map()
    if not isinstance(values, _Map):
        c.problem(m.line, f"{what}: values must be a mapping column -> printed value")
        return row
    for key, raw in values.items():
        line = values.key_lines.get(key, m.line)
        col = table.column(str(key))
        if col is None:
            c.problem(line, f"{what}: unknown column {key!r} (columns: {', '.join(x.key for x in table.columns)})")
            continue
        if isinstance(raw, float):
            c.problem(line, f"{what}: {key}: quote printed numbers ({raw!r}) so the printed precision is kept")
        row.values[str(key)] = parse_printed(raw)
    return row


def _table(c: _Checker, m: _Map) -> Table | None:
    what = f"table {m.get('id')!r}"
    if not c.keys(m, ("id", "caption", "source", "reproduced", "reason", "note", "columns", "rows", "protocol",
                      "printed", "scale_free", "measured_label"), ("id", "caption", "source", "columns"), what):
        return None
    t = Table(id=_str(m["id"]), caption=_str(m["caption"]), source=_str(m["source"]), columns=[], rows=[],
              reproduced=bool(m.get("reproduced", True)), reason=_str(m.get("reason")), note=_str(m.get("note")),
              protocol=_str(m.get("protocol")), scale_free=_flag(c, m, "scale_free", what),
              printed=_choice(c, m, "printed", PRINTED, what), measured_label=_str(m.get("measured_label")),
              line=m.line)
    t.columns = c.entries(m, "columns", what, lambda cm: _column(c, cm, t.id), f"{what}: column")
    for col in list(t.columns):
        if col.derived and not all(t.column(k) and not t.column(k).derived
                                   for k in (col.derived["a"], col.derived["b"])):
            c.problem(col.line, f"{what}: derived column {col.key!r} needs measured columns a and b of the same "
                                f"table, got {col.derived['a']!r}, {col.derived['b']!r}")
            t.columns.remove(col)
    t.rows = c.entries(m, "rows", what, lambda rm: _row(c, rm, t), f"{what}: row")
    if not t.reproduced and not t.reason:
        c.problem(m.line, f"{what}: reproduced: false needs a reason")
    return t


def _reference(c: _Checker, m: _Map, what: str) -> list[dict]:
    """A figure's reference lines: each {y: number, label} or {slope: number, series: <series label>, label}."""
    out = []
    for r in m.get("reference") or []:
        ok = isinstance(r, dict) and isinstance(r.get("label"), str) and (
            isinstance(r.get("y"), (int, float)) or (isinstance(r.get("slope"), (int, float)) and r.get("series")))
        if not ok:
            c.problem(m.key_lines["reference"], f"{what}: reference {r!r} needs a label and y, or slope and series")
            continue
        out.append(dict(r))
    return out


def _figure(c: _Checker, m: _Map, paper: Paper) -> Figure | None:
    what = f"figure {m.get('id')!r}"
    if not c.keys(m, ("id", "caption", "source", "kind", "table", "series", "x_label", "y_label", "x_scale", "y_scale",
                      "x_from", "reference", "baseline"), ("id", "caption", "kind", "table", "series"), what):
        return None
    f = Figure(id=_str(m["id"]), caption=_str(m["caption"]), source=_str(m.get("source")), kind=_str(m["kind"]),
               table=_str(m["table"]), series=[], x_label=_str(m.get("x_label")), y_label=_str(m.get("y_label")),
               x_scale=_str(m.get("x_scale")) or "linear", y_scale=_str(m.get("y_scale")) or "linear", line=m.line,
               x_from=_str(m.get("x_from")), reference=tuple(_reference(c, m, what)), baseline=_str(m.get("baseline")))
    for axis in ("x_scale", "y_scale"):
        if getattr(f, axis) not in AXIS_SCALES:
            c.problem(m.key_lines[axis], f"{what}: {axis} {getattr(f, axis)!r} is not one of {AXIS_SCALES}")
            return None
    if f.kind not in FIGURE_KINDS:
        c.problem(m.key_lines["kind"], f"{what}: kind {f.kind!r} is not one of {FIGURE_KINDS}")
        return None
    table = paper.table(f.table)
    if table is None:
        c.problem(m.key_lines["table"], f"{what}: unknown table {f.table!r}")
        return None
    for sm in c.mappings(m, "series", what):
        if not c.keys(sm, ("label", "row", "column", "metric"), ("label", "column"), f"{what} series"):
            continue
        s = Series(label=_str(sm["label"]), row=_str(sm.get("row")), column=_str(sm["column"]),
                   metric=_str(sm.get("metric")))
        if table.column(s.column) is None or (s.row and table.row(s.row) is None):
            c.problem(sm.line, f"{what}: series {s.label!r} names a cell that does not exist in {table.id} "
                               f"(row {s.row!r}, column {s.column!r})")
            continue
        if f.kind == "effects" and not s.row:
            c.problem(sm.line, f"{what}: an effects series needs the row compared with the baseline row")
            continue
        if f.kind in ("per_layer", "per_epoch") and not (s.row and s.metric):
            c.problem(sm.line, f"{what}: a {f.kind} series needs row, column and metric (an array in the records)")
            continue
        f.series.append(s)
    if f.kind == "effects" and table.row(f.baseline) is None:
        c.problem(m.line, f"{what}: an effects figure needs baseline: <a row of {table.id}>")
        return None
    if f.kind == "vs_rows" and any(r.x is None for r in table.measured_rows):
        c.problem(m.line, f"{what}: vs_rows needs an x value on every measured row of {table.id}")
    return f if f.series else None


def _ref(text: Any, default_table: str, paper: Paper) -> Ref | str:
    """Parse "row.column", "table.row.column" or a number; return an error message when it does not exist."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return Ref(const=float(text))
    parts = _str(text).split(".")
    if len(parts) == 2:
        parts = [default_table, *parts]
    if len(parts) != 3:
        return f"cell {text!r} is not 'row.column' or 'table.row.column'"
    tid, rk, ck = parts
    t = paper.table(tid)
    if t is None:
        return f"cell {text!r}: unknown table {tid!r}"
    row, col = t.row(rk), t.column(ck)
    if row is None or col is None:
        return f"cell {text!r} does not exist in {tid} (rows: {', '.join(r.key for r in t.rows)}; " \
               f"columns: {', '.join(k.key for k in t.columns)})"
    if row.cited:
        return f"cell {text!r} is a cited row, never measured"
    return Ref(tid, rk, ck)


def _claim_pairs(m: _Map, table: Table | None, paper: Paper) -> tuple[list[tuple], str, str]:
    """Expand a claim's check into (lhs, rhs) references and a relation; the str is an error or ''."""
    check, tid = _str(m.get("check")), table.id if table else ""
    rows = [_str(r) for r in m["rows"]] if m.get("rows") else [r.key for r in table.measured_rows] if table else []
    if check in ("greater", "bound", "within_noise", "rate") and m.get("pairs"):
        raw = [tuple(p) for p in m["pairs"] if isinstance(p, list) and len(p) == 2]
        if len(raw) != len(m["pairs"]):
            return [], "", "pairs must be a list of [lhs, rhs]"
    elif check == "greater" and m.get("columns"):
        a, b = m["columns"]
        raw = [(f"{r}.{a}", f"{r}.{b}") for r in rows]
    elif check == "ordering" and m.get("cells"):
        cells = list(m["cells"])
        raw = list(zip(cells, cells[1:]))
    elif check == "monotone" and m.get("column"):
        direction = _str(m.get("direction")) or "increasing"
        if direction not in ("increasing", "decreasing"):
            return [], "", f"direction {direction!r} must be increasing or decreasing"
        cells = [f"{r}.{m['column']}" for r in rows]
        pairs = list(zip(cells, cells[1:]))
        raw = [(b, a) for a, b in pairs] if direction == "increasing" else pairs
    elif check == "bound" and m.get("cell") is not None and m.get("bound") is not None:
        raw = [(m["cell"], m["bound"])]
    else:
        need = {"greater": "pairs, or columns [a, b] (+ rows)", "ordering": "cells (highest first)",
                "monotone": "column (+ rows, direction)", "bound": "cell and bound, or pairs",
                "within_noise": "pairs", "rate": "pairs [cell, bound] and rate"}
        return [], "", f"check {check!r} needs {need.get(check, 'one of ' + ', '.join(CHECKS))}"
    if not raw:
        return [], "", "the check expands to no comparison"
    relation = {"bound": "<=", "within_noise": "~", "rate": "rate"}.get(check, ">")
    out = []
    for lhs, rhs in raw:
        a, b = _ref(lhs, tid, paper), _ref(rhs, tid, paper)
        for r in (a, b):
            if isinstance(r, str):
                return [], relation, r
        if a.const is not None:
            return [], relation, f"the left side {lhs!r} must be a cell"
        if relation == "rate" and b.const is None:
            return [], relation, f"a rate check counts runs at or below a number; {rhs!r} is not one"
        out.append((a, b))
    return out, relation, ""


def _claim(c: _Checker, m: _Map, paper: Paper, kind: str = "claim") -> Claim | None:
    what = f"{kind} {m.get('id')!r}"
    allowed = ("id", "text", "source", "table", "check", "scales", "alpha", "tolerance", "pairs", "cells",
               "columns", "rows", "column", "direction", "cell", "bound", "evidence", "reading", "margin",
               "requires", "control", "similarity", "rate", "somewhere", "budget")
    if not c.keys(m, allowed, ("id", "text", "check"), what):
        return None
    cl = Claim(id=_str(m["id"]), text=_str(m["text"]), source=_str(m.get("source")), table=_str(m.get("table")),
               check=_str(m["check"]), pairs=[], relation="", similarity=_flag(c, m, "similarity", what),
               somewhere=_flag(c, m, "somewhere", what), budget=_flag(c, m, "budget", what),
               evidence=_choice(c, m, "evidence", EVIDENCE, what), line=m.line)
    if kind == "precondition":
        cl.evidence = "precondition"
    elif cl.budget:
        c.problem(m.key_lines["budget"], f"{what}: budget is a precondition's key (a claim names the precondition "
                                         f"in requires); ignored")
        cl.budget = False
    cl.reading = _choice(c, m, "reading", READINGS, what)
    requires = m.get("requires") or []
    cl.requires = [_str(r) for r in (requires if isinstance(requires, list) else [requires])]
    if m.get("scales") is not None:
        cl.scales = [_str(s) for s in (m["scales"] if isinstance(m["scales"], list) else [m["scales"]])]
    try:
        cl.alpha = float(m.get("alpha", 0.05))
        cl.tolerance = None if m.get("tolerance") is None else float(m["tolerance"])
        cl.margin = float(m.get("margin", 0.0))
        cl.rate = None if m.get("rate") is None else float(m["rate"])
    except (TypeError, ValueError):
        cl.invalid = "alpha, tolerance, margin and rate must be numbers"
    if not cl.invalid and (cl.check == "rate") != (cl.rate is not None and 0 < cl.rate < 1):
        cl.invalid = "a rate check needs rate, a share strictly between 0 and 1 (and only a rate check takes one)"
    table = paper.table(cl.table) if cl.table else None
    if cl.check not in CHECKS:
        cl.invalid = f"check {cl.check!r} is not one of {', '.join(CHECKS)}"
    elif cl.table and table is None:
        cl.invalid = f"unknown table {cl.table!r}"
    elif not cl.invalid:
        try:
            cl.pairs, cl.relation, err = _claim_pairs(m, table, paper)
        except (TypeError, ValueError):
            cl.pairs, err = [], "malformed check arguments (see the schema in repro/report/README.md)"
        cl.invalid = err
    if not cl.invalid and m.get("control"):
        control = _Map({"check": "greater" if cl.relation == ">" else m["check"], "pairs": m["control"]})
        control.line, control.key_lines = m.line, {}
        cl.control, _, err = _claim_pairs(control, table, paper)
        cl.invalid = f"control: {err}" if err else ""
    if cl.invalid:
        c.problem(m.line, f"{what}: {cl.invalid}; the claim is shown as invalid")
    return cl


def load_paper(path: Path) -> Paper:
    """Read papers/<id>/paper.yaml; SpecError if unreadable, else a Paper whose .problems lists what to fix."""
    path = Path(path)
    data = _read_yaml(path)
    c = _Checker(path)
    top = ("id", "title", "authors", "venue", "year", "arxiv", "url", "code", "source", "notes", "protocol",
           "index_table", "tables", "figures", "claims", "preconditions")
    c.keys(data, top, ("id", "title"), "paper")
    authors = data.get("authors") or []
    texts = {k: _str(data.get(k)) for k in ("venue", "arxiv", "url", "code", "source", "notes", "protocol",
                                            "index_table")}
    paper = Paper(id=_str(data.get("id")) or path.parent.name, title=_str(data.get("title")) or path.parent.name,
                  path=path, authors=[_str(a) for a in (authors if isinstance(authors, list) else [authors])],
                  year=data.get("year"), **texts)
    if paper.id != path.parent.name:
        c.problem(data.key_lines.get("id", 1), f"id {paper.id!r} differs from the folder name {path.parent.name!r}")
    paper.tables = c.entries(data, "tables", "paper", lambda m: _table(c, m), "table")
    if paper.index_table and paper.table(paper.index_table) is None:
        c.problem(data.key_lines.get("index_table", 1), f"index_table {paper.index_table!r} is not a table of the paper")
    paper.figures = c.entries(data, "figures", "paper", lambda m: _figure(c, m, paper), "figure")
    paper.claims = c.entries(data, "claims", "paper", lambda m: _claim(c, m, paper), "claim")
    paper.preconditions = c.entries(data, "preconditions", "paper", lambda m: _claim(c, m, paper, "precondition"),
                                    "precondition")
    for cl in paper.claims:
        _check_claim(c, cl, paper)
    paper.problems = c.problems
    return paper


def _check_claim(c: _Checker, cl: Claim, paper: Paper) -> None:
    """Cross-checks of a claim against the rest of the paper: theory reads the paper's own models (or
    bounds every seed), preconditions exist, a similarity claim names its negative control."""
    scaled = [str(r) for pair in cl.pairs for r in pair
              if r.const is None and not paper.table(r.table).is_scale_free(r.column)]
    if cl.evidence == "theory" and scaled and cl.relation != "<=":
        c.problem(cl.line, f"claim {cl.id!r}: evidence theory, but {', '.join(scaled)} is not scale_free "
                           f"(mark the column or table scale_free, make it a bound checked on every seed, or make "
                           f"the claim evidence: training)")
    for pid in cl.requires:
        if paper.precondition(pid) is None:
            c.problem(cl.line, f"claim {cl.id!r} requires {pid!r}, which is not in preconditions "
                               f"({', '.join(p.id for p in paper.preconditions) or 'none'})")


def paper_ids(papers_dir: Path) -> list[str]:
    """Ids of the papers that have a paper.yaml under papers_dir."""
    return sorted(p.parent.name for p in Path(papers_dir).glob("*/paper.yaml"))


def main(argv: list[str]) -> int:
    """`python -m repro.paper papers/*/paper.yaml`: print every problem; exit 1 if there is any."""
    bad = 0
    for arg in argv or [str(p) for p in sorted(Path("papers").glob("*/paper.yaml"))]:
        try:
            paper = load_paper(Path(arg))
        except SpecError as e:
            print(e)
            bad += 1
            continue
        for p in paper.problems:
            print(p)
        bad += bool(paper.problems)
        print(f"{arg}: {len(paper.tables)} tables, {len(paper.figures)} figures, {len(paper.claims)} claims, "
              f"{len(paper.problems)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
