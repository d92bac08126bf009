"""The committed pages a reader opens: one full page per paper (report.html), REPORT.md its short summary."""
import csv
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAPERS = ["convit", "cmhsa", "oversmoothing", "augvit", "respostln", "crosspaper"]


@pytest.mark.parametrize("paper", PAPERS)
def test_report_md_is_a_summary_linked_into_the_one_full_page(paper):
    """REPORT.md quotes the first screen's rows and links into report.html, whose anchors exist; neither file
    embeds a figure a second time (the PNGs are committed beside them)."""
    out = REPO / "results" / paper
    md, page = (out / "REPORT.md").read_text(), (out / "report.html").read_text()
    assert len(md) < 40_000 and "## Runs" not in md
    anchors = re.findall(r"\(report\.html#([^)]+)\)", md)
    ids = set(re.findall(r'id="([^"]+)"', page))
    assert anchors and set(anchors) <= ids, set(anchors) - ids
    assert "data:image" not in page
    for src in re.findall(r'<img src="([^"]+)"', page):
        assert (out / src).is_file(), src


@pytest.mark.parametrize("paper", PAPERS)
def test_every_row_and_column_note_of_paper_yaml_is_on_its_page(paper):
    """A note on a row or column (the cross-paper rows' own papers' numbers in their own setting, a name as
    printed, ours beside the paper's) is what a reader needs beside that table, so report.html shows it."""
    import html

    from repro.paper import load_paper
    page = html.unescape((REPO / "results" / paper / "report.html").read_text())
    spec = load_paper(REPO / "papers" / paper / "paper.yaml")
    notes = [f"{e.label}: {e.note}" for t in spec.tables for e in [*t.columns, *t.rows] if e.note]
    assert not [n for n in notes if n not in page]


def test_committed_pages_are_a_fraction_of_their_embedded_size():
    """Every report page, REPORT.md and the index together: under 2.5 MB (8.96 MB when each page embedded its
    figures and REPORT.md rendered the whole report again)."""
    pages = [*REPO.glob("results/*/report.html"), *REPO.glob("results/*/REPORT.md"), REPO / "results" / "index.html"]
    assert len(pages) == 2 * len(PAPERS) + 1
    assert sum(p.stat().st_size for p in pages) < 2_500_000


def test_convit_table6_rows_name_the_k_measured_on_the_depth_6_model():
    """Table 6's "k = 10" is of ConViT-Ti's 10 GPSA layers; at cpu the model has 5 and masks k of them: the
    compared cells, the setting (first screen, README, claims.csv) and the table's row read the k of the records."""
    records = [json.loads(p.read_text()) for p in (REPO / "results" / "convit" / "cpu" / "records").glob("table6-*")]
    measured = {r["cell"]["row"]: f"k = {r['metrics']['k']} of {r['metrics']['gpsa_layers']} GPSA" for r in records}
    assert measured["k10"] == "k = 5 of 5 GPSA"
    summary = json.loads((REPO / "results" / "convit" / "summary.json").read_text())
    rows = {r["id"]: r for b in summary["first_screen"] if b["scale"] == "cpu" for r in b["rows"]}
    hurts_less, more_layers = rows["t6_position_masking_hurts_less"], rows["t6_more_masked_layers_hurt_more"]
    assert hurts_less["compared"].startswith(f"k = 10 (ours: {measured['k10']}) · ")
    assert measured["k10"] in hurts_less["setting"]["text"] and measured["k10"] in hurts_less["setting"]["short"]
    assert f"{measured['k3']} vs {measured['k5']}" in more_layers["setting"]["text"]
    claims = {(r["claim"], r["scale"]): r for r in csv.DictReader((REPO / "results" / "convit" / "claims.csv").open())}
    assert measured["k10"] in claims[("t6_position_masking_hurts_less", "cpu")]["setting"]
    assert f"0.86M; {measured['k3']}" in (REPO / "results" / "convit" / "report.html").read_text()
    assert "0.86M, k = 5 of 5 GPSA |" in (REPO / "papers" / "convit" / "README.md").read_text()


@pytest.mark.parametrize("paper", PAPERS)
def test_data_files_give_every_measured_cell_a_unit_and_numbers_as_numbers(paper):
    """cells.csv: a unit on every measured cell (no blank to read as 'unknown'), n a count; claims.csv: seeds
    per side as two numbers, not '3/3'; values.csv: one row per record of each measured cell, in its unit."""
    out = REPO / "results" / paper
    cells = [r for r in csv.DictReader((out / "cells.csv").open()) if r["status"] == "measured"]
    assert cells and all(r["unit"] for r in cells), [(r["table"], r["column"]) for r in cells if not r["unit"]][:5]
    assert all(r["n"].isdigit() for r in cells)
    claims = list(csv.DictReader((out / "claims.csv").open()))
    assert "n" not in claims[0] and all(r[k] == "" or r[k].isdigit() for r in claims for k in ("n_lhs", "n_rhs"))
    values = list(csv.DictReader((out / "values.csv").open()))
    per_cell = {(r["table"], r["row"], r["column"], r["scale"]): r for r in cells if r["record_ids"]}
    assert len(values) == sum(len(r["record_ids"].split(";")) for r in per_cell.values())
    assert all(v["unit"] == per_cell[(v["table"], v["row"], v["column"], v["scale"])]["unit"] for v in values)


def test_a_rate_per_second_is_not_read_as_seconds():
    """images_per_s was read as seconds ('_s'); the metric names its own unit."""
    from repro.report.datafiles import _metric_unit

    assert _metric_unit("images_per_s") == "images/s" and _metric_unit("epoch_s") == "s"
    assert _metric_unit("heads") == "count" and _metric_unit("cossim_last") == "dimensionless"


def _glance_rows(page: str) -> list[list[str]]:
    """The rows of each first-screen table of a page, table by table."""
    return [re.findall(r'<tr class="glance-row".*?</tr>', t, re.S)
            for t in re.findall(r'<table class="glance.*?</table>', page, re.S)]


@pytest.mark.parametrize("page", [f"{p}/report.html" for p in PAPERS] + ["index.html"])
def test_effect_columns_read_one_way(page):
    """Each forest plot prints its ticks and unit, and the rows of one table in one unit share that axis; the
    column names p (one-sided, Holm); an open row says why on the row, not in a tooltip."""
    text = (REPO / "results" / page).read_text()
    tables = _glance_rows(text)
    assert (tables or "No training claim is judged at this scale." in text) and "(why?)" not in text
    for rows in tables:
        axes: dict[str, set] = {}
        for row in rows:
            svg = re.search(r'<svg class="forest".*?</svg>', row, re.S)
            if svg is None:
                continue
            unit = re.search(r'<text [^>]*class="unit">([^<]+)</text>', svg.group(0))
            ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', svg.group(0))
            assert unit and ticks, row[:300]
            axes.setdefault(unit.group(1), set()).add(tuple(ticks))
            if re.search(r'class="verdict v-(inconclusive|not-resolvable|not-testable)"', row):
                assert '<span class="stat why">why: ' in row, row[:300]
        assert all(len(ticks) == 1 for ticks in axes.values()), axes  # one axis per unit within a table
    assert all("p (one-sided, Holm)</th>" in t for t in re.findall(r'<table class="glance.*?</tr>', text, re.S))


def test_axis_ticks_are_round_values_inside_the_range():
    """At most five ticks, 1, 2, 2.5 or 5 times a power of ten apart, never outside the plotted range."""
    from repro.report.forest import ticks

    assert ticks(-0.06, 0.25) == [0.0, 0.1, 0.2] and ticks(-5.9, 0.6) == [-4, -2, 0]
    assert all(len(ticks(lo, lo + span)) <= 5 for lo in (-3.3, 0.0, 7.1) for span in (0.013, 1.0, 42.0))


def test_a_difference_of_accuracies_and_a_relative_gap_get_their_own_unit_and_axis():
    """'%' covered both top-1 differences (points) and relative gaps (percent of a value), and one axis held both:
    each now names its quantity, and convit's relative gaps get an axis of their own."""
    rows = {r["id"]: r for b in json.loads((REPO / "results" / "convit" / "summary.json").read_text())["first_screen"]
            for r in b["rows"] + b["preconditions"]}
    assert rows["t2_convit_ahead_top1"]["unit"] == "points" and rows["pre_data_limited"]["unit"] == "points"
    assert rows["t2_gap_shrinks_top1"]["unit"] == "% relative"
    page = (REPO / "results" / "convit" / "report.html").read_text()
    plot = {claim: next(r for rows in _glance_rows(page) for r in rows if f"#claim-{claim}-cpu" in r)
            for claim in ("t2_convit_ahead_top1", "t2_gap_shrinks_top1")}
    ticks = {k: re.findall(r'text-anchor="middle">([^<]+)</text>', v) for k, v in plot.items()}
    assert ">points</text>" in plot["t2_convit_ahead_top1"] and ">% relative</text>" in plot["t2_gap_shrinks_top1"]
    assert ticks["t2_convit_ahead_top1"] != ticks["t2_gap_shrinks_top1"], ticks
    cells = {(r["table"], r["column"]): r["unit"] for r in csv.DictReader((REPO / "results/convit/cells.csv").open())}
    assert cells[("table2", "gap_top1")] == "% relative" and cells[("table2", "deit_top1")] == "%"
    md = (REPO / "papers" / "convit" / "README.md").read_text()
    assert re.search(r"`t2_convit_ahead_top1` \| holds \| \+[\d.]+ \[[^]]*\] points", md)
