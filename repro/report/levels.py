"""The levels a figure's claims judge its series against, drawn so the reader sees the line a verdict is about."""
from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np

from repro.paper import Figure
from repro.report.cells import MEASURED, Comparison


def series_arrays(cmp: Comparison, fig: Figure, series, scale: str) -> list[np.ndarray]:
    """The metric array of every finished record of the series' cell, of the most common shape."""
    out = []
    for rec, _ in cmp.runs(scale, fig.table, series.row, series.column):
        v = rec["metrics"].get(series.metric)
        if fig.kind == "per_epoch":  # an every-epoch probe's values, one per epoch, live in the history rows
            v = [row[series.metric] for row in rec["metrics"].get("history") or []
                 if isinstance(row, dict) and series.metric in row] or v
        if rec["status"] != "finished" or not isinstance(v, list) or not v:
            continue
        try:
            arr = np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            continue
        if arr.ndim in (1, 2):
            out.append(arr)
    shapes = [a.shape for a in out]
    common = max(set(shapes), key=shapes.count, default=None)
    return [a for a in out if a.shape == common]


def _level(cmp: Comparison, ref, scale: str) -> float | None:
    """A comparison side as one number: a constant, or a scalar cell's mean at this scale."""
    if ref.const is not None:
        return ref.const
    cell = cmp.cell(ref, scale)
    return cell.mean if cell is not None and cell.status == MEASURED else None


def _near(v, target: float):
    """Where ``v`` equals ``target`` up to float rounding: a cell read off a curve is the same number."""
    return np.abs(v - target) <= 1e-6 * max(1.0, abs(target))


def _curve(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The seed mean of a series' arrays, and its curve (a 2-D array's mean over heads)."""
    mean = np.stack(arrays).mean(axis=0)
    return mean, mean.mean(axis=1) if mean.ndim == 2 else mean


def _read_off(cmp: Comparison, fig: Figure, scale: str, ref) -> tuple[int, int, int] | None:
    """Where a cell is read off a figure's curve: (series, first x, last x), a point or an early mean; else None."""
    cell = cmp.cell(ref, scale) if ref.const is None else None
    if cell is None or cell.mean is None:
        return None
    close = lambda v: _near(v, cell.mean)  # noqa: E731
    for i, s in enumerate(fig.series):
        if not s.metric or (ref.table == fig.table and s.row not in ("", ref.row)):
            continue
        arrays = series_arrays(cmp, fig, s, scale)
        if not arrays:
            continue
        mean, curve = _curve(arrays)
        hits = np.flatnonzero(close(curve))
        if not hits.size and mean.ndim == 2:
            hits = np.argwhere(close(mean))[:, 0]
        if hits.size:
            return i, int(hits[0]) + 1, int(hits[0]) + 1
        early = np.flatnonzero(close(np.cumsum(curve) / np.arange(1, len(curve) + 1)))
        if early.size and fig.kind == "per_epoch":
            return i, 1, int(early[0]) + 1
    return None


def _label(cmp: Comparison, ref) -> str:
    """A cell in words: its table's row and column labels."""
    table = cmp.paper.table(ref.table)
    row, col = table.row(ref.row), table.column(ref.column)
    return f"{row.label if row else ref.row}, {col.label if col else ref.column}"


def _operands(cmp: Comparison, ref):
    """A derived difference's two cells (a - b), else None."""
    table = cmp.paper.table(ref.table) if ref.const is None else None
    col = table.column(ref.column) if table else None
    if col is None or not col.derived or col.derived["op"] != "diff":
        return None
    return replace(ref, column=col.derived["a"]), replace(ref, column=col.derived["b"])


def draw_levels(ax, cmp: Comparison, fig: Figure, scale: str) -> None:
    """Draw, dotted and named, the level each claim or precondition judges one of the figure's series against."""
    def same_quantity(s, ref) -> bool:  # the cell is a point of the curve (last-block CosSim of the CosSim curve)
        cell, arrays = cmp.cell(ref, scale), series_arrays(cmp, fig, s, scale)
        if cell is None or cell.mean is None or not arrays:
            return False
        return bool(np.any(_near(_curve(arrays)[1], cell.mean)))

    def drawn(ref) -> bool:  # the series is the cell, or a curve of that cell's runs of which it is a point
        return ref.const is None and ref.table == fig.table and any(
            s.column == ref.column and s.row in ("", ref.row) and (not s.metric or same_quantity(s, ref))
            for s in fig.series)

    seen: set = set()
    preconditions = {p.id for p in cmp.paper.preconditions}
    for claim in [*cmp.paper.claims, *cmp.paper.preconditions]:
        for lhs, rhs in claim.pairs:
            _means(ax, cmp, fig, scale, [r for ref in (lhs, rhs) for r in (_operands(cmp, ref) or (ref,))], seen)
            # a - b <= c is a <= b + c: a level beside a's curve; against 0 it compares a and b themselves
            if rhs.const and (ops := _operands(cmp, lhs)) and _level(cmp, ops[1], scale) is not None:
                lhs, rhs = ops[0], replace(rhs, const=rhs.const + _level(cmp, ops[1], scale))
            span = {id(r): drawn(r) or _read_off(cmp, fig, scale, r) for r in (lhs, rhs)}
            read_off = any(v not in (None, False, True) for v in span.values())
            if bool(span[id(lhs)]) == bool(span[id(rhs)]) or (claim.id not in preconditions and not read_off and
                                                                lhs.const is None and rhs.const is None):
                continue  # a claim's line against a number, or a value off the axes; a precondition's also its baseline
            judged = lhs if span[id(lhs)] else rhs
            if lhs.const is None and rhs.const is None and span[id(judged)] is True and \
                    not any((s.row, s.column) == (judged.row, judged.column) for s in fig.series):
                continue
            other = _level(cmp, rhs if judged is lhs else lhs, scale)
            if other is not None:
                _draw_level(ax, cmp, claim, judged, judged is lhs, other, span[id(judged)], seen)


def _draw_level(ax, cmp: Comparison, claim, judged, on_left: bool, other: float, where, seen: set) -> None:
    """The level ``judged`` must pass, across the axes or over its span; far off the axes: skipped or named."""
    margin = claim.margin if claim.relation == ">" else 0.0
    level = other + margin if on_left else other - margin
    lo, hi = ax.get_ylim()
    off = not lo - (hi - lo) <= level <= hi + (hi - lo)
    if round(level, 9) in seen or (where is True and off):
        return
    seen.add(round(level, 9))
    side = claim.relation if on_left else {">": "<", "<=": ">="}.get(claim.relation, claim.relation)
    label = f"{claim.id}: {side} {level:.3g}"
    if where is not True:  # read off a curve: which point, and whether the axes show the level
        point = f"{_label(cmp, judged)} " if where[1] == where[2] else ""
        label = "\n".join(textwrap.wrap(f"{claim.id}: {point}{side} {level:.3g}" + " (off the axes)" * off, 40,
                                         break_long_words=False))
    if off and where is not True:
        ax.plot([], [], color="0.35", ls=":", lw=1.4, label=label)
    elif where is True or where[1] == where[2]:
        ax.axhline(level, color="0.35", ls=":", lw=1.4, label=label)
    else:
        ax.plot(where[1:], [level, level], color="0.35", ls=":", lw=1.4, label=label)


def _means(ax, cmp: Comparison, fig: Figure, scale: str, refs, seen: set) -> None:
    """Each cell that is a curve's early mean, dotted over those points in the curve's colour."""
    for ref in refs:
        where = _read_off(cmp, fig, scale, ref)
        if where is None or where[1] == where[2] or (ref, "mean") in seen:
            continue
        seen.add((ref, "mean"))
        label = f"mean of {fig.x_label or 'epoch'}s {where[1]}-{where[2]}, as compared"
        if label not in [ln.get_label() for ln in ax.get_lines()]:  # one legend entry for all of them, in grey
            ax.plot([], [], color="0.35", ls=":", lw=2.2, label=label)
        curve = next(ln for ln in ax.get_lines() if ln.get_label().startswith(f"{fig.series[where[0]].label} (n="))
        ax.plot(where[1:], [cmp.cell(ref, scale).mean] * 2, color=curve.get_color(), ls=":", lw=2.2)
