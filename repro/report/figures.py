"""The papers' figures redrawn from records, with matplotlib's object API: no pyplot state, so builds repeat."""
from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import MaxNLocator

from repro.report.cells import MEASURED, Comparison, reproduce_command
from repro.report.levels import draw_levels, series_arrays
from repro.report.provenance import data_label
from repro.report.stats import compare_means
from repro.paper import Figure

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
MARKERS = ("o", "s", "^", "D", "v", "P")      # with line styles, series stay apart where they overlap
LINESTYLES = ("-", "--", "-.", ":")


def _style(i: int) -> dict:
    """Colour, marker and dash per series; later ones thinner, so one lying on an earlier one still shows."""
    return {"color": COLORS[i % len(COLORS)], "marker": MARKERS[i % len(MARKERS)],
            "ls": LINESTYLES[i % len(LINESTYLES)], "lw": max(1.0, 3.0 - 0.5 * i), "ms": max(3.0, 7.0 - i)}


EXPLAINS = {  # what the marks of each kind of figure are, said in every caption
    "per_layer": "Lines: our mean over seeds (n in the legend); bands: ± 1 sd across seeds; thin lines: single heads; "
                 "dotted: the values the claims are judged against.",
    "vs_rows": "Points: our mean over seeds; bars: ± 1 sd across seeds; open markers: the paper's printed values; "
               "dotted: the values the claims are judged against.",
    "effects": "Points: the mean difference to the baseline; bars: its 95 % interval (Welch, across seeds); "
               "dotted: no difference.",
}
EXPLAINS["per_epoch"] = EXPLAINS["per_layer"]


@dataclass
class RenderedFigure:
    spec: Figure
    scale: str | None
    path: Path | None   # None: nothing to draw yet
    note: str = ""

    @property
    def explains(self) -> str:
        return EXPLAINS.get(self.spec.kind, "")


def _curves(ax, cmp: Comparison, fig: Figure, scale: str) -> int:
    drawn = 0
    for i, s in enumerate(fig.series):
        arrays = series_arrays(cmp, fig, s, scale)
        if not arrays:
            continue
        style = _style(i)
        color = style["color"]
        stack = np.stack(arrays)                      # runs x steps (x heads)
        if stack.ndim == 3:                           # per head: thin lines of the seed mean
            heads = stack.mean(axis=0)
            x = np.arange(1, heads.shape[0] + 1)
            for h in range(heads.shape[1]):
                ax.plot(x, heads[:, h], color=color, lw=0.7, alpha=0.35)
            stack = stack.mean(axis=2)
        mean, x = stack.mean(axis=0), np.arange(1, stack.shape[1] + 1)
        ax.plot(x, mean, mfc="white", label=f"{s.label} (n={len(arrays)})", **style)
        if len(arrays) > 1:
            std = stack.std(axis=0, ddof=1)
            ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)
        drawn += 1
    ax.set_xlabel(fig.x_label or ("layer" if fig.kind == "per_layer" else "epoch"))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers and epochs are counts
    return drawn


def _like_for_like(cmp: Comparison, fig: Figure, scale: str) -> bool:
    """Every measured cell of a vs_rows figure follows the paper's protocol (so one axis may hold both)."""
    view = cmp.view(fig.table, scale)
    cells = [c for c in (view.cells.values() if view else []) if c.status == MEASURED]
    return bool(cells) and all(c.like_for_like for c in cells)


def _run_x(cmp: Comparison, fig: Figure, scale: str, row, column: str) -> float | None:
    """The x a row's runs actually used (``x_from``: a dotted path in their config), when they agree."""
    values = set()
    for rec, _ in cmp.runs(scale, fig.table, row.key, column):
        node = rec.get("config") or {}
        for part in fig.x_from.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        values.add(node)
    return float(values.pop()) if len(values) == 1 and isinstance(next(iter(values)), (int, float)) else None


def _vs_rows(ax, cmp: Comparison, fig: Figure, scale: str, ours: bool = True, paper: bool = True) -> int:
    """Our means (± std) and/or the paper's values against the rows' x (``x_from``: the x our runs used)."""
    view = cmp.view(fig.table, scale)
    table = cmp.paper.table(fig.table)
    rows = [r for r in table.measured_rows if r.x is not None]
    drawn, ticks = 0, {}
    for i, s in enumerate(fig.series):
        style = _style(i)
        printed = [(r.x, r.values[s.column].value) for r in rows
                   if s.column in r.values and r.values[s.column].reported]
        if paper and printed:
            ax.plot(*zip(*printed), alpha=0.6, mfc="none", label=f"{s.label} (paper)", **{**style, "ls": "--"})
            drawn += not ours
            ticks.update({r.x: r.label for r in rows})
        cells = [(r, view.cells[(r.key, s.column)]) for r in rows] if view and ours else []
        pts = []
        for r, c in cells:
            if c.status != MEASURED or c.mean is None:
                continue
            x = _run_x(cmp, fig, scale, r, s.column) if fig.x_from else r.x
            pts.append((x if x is not None else r.x, c.mean, c.std or 0.0))
            ticks[pts[-1][0]] = f"{pts[-1][0]:g}" if fig.x_from and x is not None else r.label
        if pts:
            xs, ms, ss = map(np.asarray, zip(*pts))
            ax.errorbar(xs, ms, yerr=ss, capsize=3, label=f"{s.label} (measured)", **style)
            drawn += 1
    ax.set_xlabel(fig.x_label or "x")
    if fig.x_scale == "log":
        ax.set_xscale("log")
    ax.set_xticks(list(ticks), list(ticks.values()), minor=False)  # the paper's row labels, or our runs' x
    ax.minorticks_off()
    return drawn


def _effects(ax, cmp: Comparison, fig: Figure, scale: str) -> int:
    """Each series row minus the baseline row, with its 95 % Welch interval across seeds, highest on top."""
    view = cmp.view(fig.table, scale)
    cells = view.cells if view else {}
    points = []
    for s in fig.series:
        a, b = cells.get((s.row, s.column)), cells.get((fig.baseline, s.column))
        if not (a and b and a.status == MEASURED and b.status == MEASURED) or a.measured.is_array:
            continue
        t = compare_means(a.measured.values, b.measured.values, rhs_const=False, alpha=0.05)
        ok = t.ci is not None and min(a.measured.n, b.measured.n) >= 2
        points.append((t.effect, t.ci if ok else None, f"{s.label} (n={a.measured.n} vs {b.measured.n})"))
    points.sort(key=lambda p: p[0])
    for y, (effect, ci, label) in enumerate(points):
        err = [[effect - ci[0]], [ci[1] - effect]] if ci else None
        ax.errorbar([effect], [y], xerr=err, fmt="o", color=COLORS[0], capsize=4, lw=2)
    ax.set_yticks(range(len(points)), [p[2] for p in points])
    ax.axvline(0.0, color="0.2", ls=":", lw=1.2)
    ax.set_xlabel(fig.x_label or "difference to the baseline")
    ax.set_ylim(-0.7, len(points) - 0.3)
    return len(points)


def _finish(ax, fig: Figure, title: str) -> None:
    if fig.x_scale == "log" and fig.kind != "vs_rows":
        ax.set_xscale("log")
    if fig.y_scale == "log":  # e.g. a collapse to 1e-8 next to values near 1
        ax.set_yscale("log")
    _references(ax, fig)
    ax.set_ylabel("\n".join(textwrap.wrap(fig.y_label, 40)))  # no taller than the axes
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # beside the axes, never over the data
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


def _references(ax, fig: Figure) -> None:
    """Draw what the claims test, dotted: a level (S.4 <= 1) or a slope through a series' first point."""
    for r in fig.reference:
        if "y" in r:
            ax.axhline(r["y"], color="0.2", ls=":", lw=1.2, label=r["label"])
            continue
        line = next((ln for ln in ax.get_lines() if ln.get_label().startswith(r["series"])), None)
        if line is None or not len(line.get_xdata()):
            continue
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        ax.plot(x, y[0] + r["slope"] * (x - x[0]), color=line.get_color(), ls=":", lw=1.2, label=r["label"])


def _title(cmp: Comparison, fig: Figure, scale: str) -> str:
    """What is plotted, from which runs: the caption, then scale and data of the records behind it."""
    data = sorted({data_label(rec.get("config") or {}) for rec in cmp.records
                   if rec.get("scale") == scale and rec.get("table") == fig.table and rec.get("config")})
    where = f"ours at scale {scale}" + (f", {', '.join(data)}" if data else "")
    return "\n".join(textwrap.wrap(fig.caption, 90) + [where])  # the whole caption: no title cut mid-sentence


def draw(cmp: Comparison, fig: Figure, scale: str | None) -> MplFigure | None:
    """The figure at one scale, or None without records; the paper's values get their own panel unless like for like."""
    if scale is None:
        return None
    printed = fig.kind == "vs_rows" and any(s.column in r.values and r.values[s.column].reported
                                             for s in fig.series for r in cmp.paper.table(fig.table).rows)
    split = printed and not _like_for_like(cmp, fig, scale)  # the paper's values get their own panel
    mpl = MplFigure(figsize=(12.4, 4.2) if split else (8.0, 4.2))
    left = 0.34 if fig.kind == "effects" else 0.08 if split else 0.1  # effects: row labels on the y axis
    mpl.subplots_adjust(left=left, right=0.78 if not split else 0.85, top=0.84, bottom=0.14,
                        wspace=0.9)
    axes = mpl.subplots(1, 2) if split else [mpl.subplots()]
    if fig.kind == "effects":
        drawn = _effects(axes[0], cmp, fig, scale)
    elif fig.kind != "vs_rows":
        drawn = _curves(axes[0], cmp, fig, scale)
    else:
        drawn = _vs_rows(axes[0], cmp, fig, scale, paper=not split)
    if not drawn:
        return None
    if fig.kind != "effects":
        draw_levels(axes[0], cmp, fig, scale)
    _finish(axes[0], fig, _title(cmp, fig, scale))
    if split:
        _vs_rows(axes[1], cmp, fig, scale, ours=False)
        protocol = cmp.paper.table(fig.table).protocol or cmp.paper.protocol or "the paper's protocol"
        _finish(axes[1], fig, "\n".join(textwrap.wrap(f"paper's values ({protocol})", 70)))
    return mpl


def png_bytes(mpl: MplFigure) -> bytes:
    """PNG without a software tag, so rebuilding from the same records gives the same bytes."""
    buf = io.BytesIO()
    mpl.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})  # no clipped labels
    return buf.getvalue()


def render_all(cmp: Comparison, out_dir: Path) -> list[RenderedFigure]:
    """Write figures/<id>-<scale>.png where there is data, else say what is missing (PNG only: nothing reads a 2nd)."""
    out = []
    for fig in cmp.paper.figures:
        for scale in cmp.scales or [None]:
            mpl = draw(cmp, fig, scale)
            if mpl is None:
                if not cmp.runs_table(fig.table, scale):
                    note = f"scale {scale} does not run {fig.table} (python -m repro list paper={cmp.paper.id} " \
                           f"scale=<scale> shows where it runs)"
                else:
                    note = f"no records feed this figure yet: {reproduce_command(cmp.paper.id, fig.table, scale)}"
                out.append(RenderedFigure(fig, scale, None, note))
                continue
            path = Path(out_dir) / f"{fig.id}-{scale}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png_bytes(mpl))
            out.append(RenderedFigure(fig, scale, path))
    return out
