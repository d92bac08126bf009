"""report.html and results/index.html from autoescaped jinja2 templates: paper text must show as text."""
from __future__ import annotations

from pathlib import Path

import jinja2

from repro.report.assess import Assessment
from repro.report.cells import DETAIL_HEADERS, MEASURED, Cell, Comparison, column_unit, cost_text, unique_scales
from repro.report.figures import RenderedFigure
from repro.report.forest import forest_svg
from repro.report.glance import chip, first_screen, precondition_row, row_models, short
from repro.report.pairwise import verdict_label
from repro.report.provenance import describe
from repro.report.tally import KIND_LABELS, kind, tally
from repro.runs import is_smoke

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
                          autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True, keep_trailing_newline=True)


def cell_class(cell: Cell) -> str:
    """CSS class of a table cell: agrees / off / measured / not-run / invalid / cited."""
    if cell.status == MEASURED:
        return {True: "agrees", False: "off"}.get(cell.within_noise, "measured")
    return {"not run": "not-run", "diverged": "invalid", "invalid": "invalid"}.get(cell.status, "cited")


def cell_title(cell: Cell, command: str) -> str:
    """Hover text: n, delta, tolerance, notes, or the command that fills the cell."""
    if cell.status == "not run":
        if not cell.scheduled:
            return "not run: this scale's experiments define no run for it"
        return f"not run: {command}" if command else "not run"
    parts = []
    if cell.status == MEASURED:
        parts.append(f"n={cell.n}")
        if cell.delta is not None:
            parts.append(f"delta {cell.delta_text()}")
        elif not cell.like_for_like and cell.protocol:
            parts.append(f"ours: {cell.protocol}")
        if cell.at_chance:
            parts.append("at chance")
        if cell.measured and cell.measured.from_means:
            parts.append("from means")
    return "; ".join(parts + cell.notes)


_ENV.filters["unique_scales"] = unique_scales
_ENV.filters["short"] = short
_ENV.filters["p_value"] = lambda p: "< 0.0001" if p < 0.0001 else f"{p:.2g}"  # summary.json keeps 4 decimals
_ENV.globals.update(is_smoke=is_smoke, cell_class=cell_class, cell_title=cell_title, cost_text=cost_text, detail_headers=DETAIL_HEADERS,
                    verdict_label=verdict_label, kind=kind, kind_labels=KIND_LABELS, chip=chip, forest_svg=forest_svg,
                    precondition_row=precondition_row, row_models=row_models, column_unit=column_unit)


def render(a: Assessment, figures: list[RenderedFigure]) -> str:
    """The whole report.html as a string."""
    cmp = a.cmp
    return _ENV.get_template("report.html.j2").render(
        paper=cmp.paper, cmp=cmp, runs=describe(cmp.records, cmp.scales), verdicts=a.verdicts,
        preconditions=a.preconditions, tally=tally(a.verdicts + a.preconditions), settings=a.settings,
        first_screen=first_screen(a, {(f.spec.id, f.scale) for f in figures if f.path}),
        **_placed([{"fig": f, "src": f"{f.path.parent.name}/{f.path.name}" if f.path else ""} for f in figures], cmp))


def _placed(figures: list[dict], cmp: Comparison) -> dict:
    """Each figure under its table's view at its scale; those with no such view at the end."""
    views = {(v.table.id, v.scale) for v in cmp.views}
    placed: dict = {}
    for f in figures:
        key = (f["fig"].spec.table, f["fig"].scale)
        if key in views:
            placed.setdefault(key, []).append(f)
    return {"placed": placed, "loose": [f for f in figures if (f["fig"].spec.table, f["fig"].scale) not in views]}


def component_style() -> str:
    """The table and badge styles alone, for report blocks shown outside report.html (the notebook)."""
    # JupyterLab right-aligns every output table cell; put ours back to the report's alignment.
    jupyter = (".jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th { text-align: left; }\n"
               ".jp-RenderedHTMLCommon td.num, .jp-RenderedHTMLCommon th.num { text-align: right; }\n")
    return "<style>" + _ENV.get_template("_components.css.j2").render() + jupyter + "</style>"


def fragment(macro: str, *args) -> str:
    """One block of the report (runs_table, claims_table, table_view, figure_block) as HTML."""
    return str(getattr(_ENV.get_template("_tables.html.j2").module, macro)(*args))


def render_index(entries: list[dict]) -> str:
    """results/index.html from each paper's summary (or the error that stopped its report)."""
    return _ENV.get_template("index.html.j2").render(entries=entries)
