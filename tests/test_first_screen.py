"""A report read at one glance and impossible to misread: the first screen's rows, and the five misreadings
fixed where they arose (a data subset labelled as the whole set, a precondition without its measured value, a
hidden margin, a precondition not met wearing the red 'fails', a model named by the paper's size)."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from repro.paper import load_paper
from repro.records import load_records, write_record
from repro.report import build_index, build_report, figures
from repro.report.cells import compare
from repro.report.glance import lead
from repro.report.provenance import data_label, model_label
from repro.report.readme import write_readmes

PAPER = """\
id: gl
title: Glance paper
protocol: "ImageNet-1k at 224 px"
tables:
  - id: acc
    caption: Accuracy
    source: Table 1
    columns:
      - {key: top1, label: Top-1, unit: "%"}
      - {key: cossim, label: CosSim}
    rows:
      - {key: base, label: DeiT-S, values: {top1: "79.8"}}
      - {key: ours, label: ConViT-S, values: {top1: "81.3"}}
  - id: wide
    caption: Many columns
    source: Table 2
    columns: [{key: c1, label: C1}, {key: c2, label: C2}, {key: c3, label: C3}, {key: c4, label: C4},
              {key: c5, label: C5}, {key: c6, label: C6}]
    rows:
      - {key: r, label: R, values: {c1: "1"}}
figures:
  - {id: sim, caption: "CosSim per layer", kind: per_layer, table: acc,
     series: [{label: DeiT-S, row: base, column: cossim, metric: cossim_curve}]}
preconditions:
  - {id: pre_floor, text: "The baseline learns: top-1 above 60 %.", table: acc, check: greater, pairs: [[base.top1, 60]]}
  - {id: pre_smooth, text: "The baseline over-smooths: CosSim above 0.5.", table: acc, check: greater,
     pairs: [[base.cossim, 0.5]]}
claims:
  - {id: ahead, text: "ConViT-S is ahead of DeiT-S by more than 2 points.", table: acc, check: greater, margin: 2,
     pairs: [[ours.top1, base.top1]]}
  - {id: ahead_learnt, text: "Ahead, where the baseline learns.", table: acc, check: greater, requires: [pre_floor],
     pairs: [[ours.top1, base.top1]]}
"""

DATA = {"name": "cifar10_jpeg", "img_size": 32, "num_classes": 10, "fraction": 0.2}


def _model(name: str, heads: int) -> dict:
    return {"name": name, "kwargs": {"depth": 6, "embed_dim": 48 * heads // 3, "num_heads": heads}}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glance")
    papers, results = root / "papers", root / "results"
    (papers / "gl").mkdir(parents=True)
    (papers / "gl" / "paper.yaml").write_text(PAPER)
    for seed in range(3):
        for row, top1, model, params in (("base", 50.0, _model("repro_deit_tiny_c32", 3), 348_000),
                                         ("ours", 53.0, _model("repro_convit_tiny_c32", 9), 861_000)):
            write_record(dict(run_id=f"{row}-s{seed}", paper="gl", table="acc", scale="full", seed=seed,
                              cell={"row": row, "columns": {"top1": "top1", "cossim": "cossim_last"}},
                              status="finished", config={"data": DATA, "model": model, "recipe": {"epochs": 10}},
                              metrics={"top1": top1 + seed * 0.5, "cossim_last": 0.29 + 0.01 * seed, "epochs": 10,
                                       "params": params, "cossim_curve": [0.1, 0.2, 0.29 + 0.01 * seed]},
                              provenance={"device": "cpu", "data": {"test_images": 10000}}), root=results)
    build_report("gl", papers, results, notebook_execute=None)
    build_index(papers, results)
    return results


def test_a_subset_of_the_data_is_labelled_with_its_share(built):
    """Misreading 1: cmhsa's runs on 20 % of CIFAR-10 were labelled "CIFAR-10 (JPEG q75)"."""
    assert data_label({"data": DATA}) == "20 % of CIFAR-10 (JPEG q75) (32 px)"
    rows = list(csv.DictReader((built / "gl" / "cells.csv").open()))
    top1 = next(r for r in rows if (r["row"], r["column"]) == ("base", "top1"))
    assert top1["dataset"].startswith("20 % of CIFAR-10") and top1["fraction"] == "0.2"
    screen = json.loads((built / "gl" / "summary.json").read_text())["first_screen"][0]
    assert all(r["setting"]["data"].startswith("20 % of") for r in screen["rows"])


def test_a_precondition_shows_the_value_it_measured(built):
    """Misreading 2: a precondition was named (met / not met) without the baseline's measured value."""
    page = (built / "gl" / "report.html").read_text()
    assert "DeiT-S · Top-1 50.5% vs 60" in page  # beside the claim that requires it, on the first screen
    claims = {r["claim"]: r for r in csv.DictReader((built / "gl" / "claims.csv").open())}
    assert claims["ahead_learnt"]["preconditions"] == "pre_floor: not met (DeiT-S · Top-1 50.5% vs 60)"
    assert "DeiT-S · CosSim 0.3 vs 0.5" in page  # the preconditions table gives every measured value


def test_a_margin_is_shown_and_stored(built):
    """Misreading 3: an effect quoted past a hidden 2-point margin (-3.23 where the gap was -1.23)."""
    claims = {r["claim"]: r for r in csv.DictReader((built / "gl" / "claims.csv").open())}
    row = claims["ahead"]
    assert float(row["margin"]) == 2 and float(row["effect"]) == pytest.approx(1.0)
    assert (float(row["lhs_mean"]), float(row["rhs_mean"])) == pytest.approx((53.5, 50.5))
    comps = list(csv.DictReader((built / "gl" / "comparisons.csv").open()))
    assert {float(r["margin"]) for r in comps if r["claim"] == "ahead"} == {2.0}
    summary = json.loads((built / "gl" / "summary.json").read_text())
    ahead = next(c for c in summary["claims"] if c["id"] == "ahead")
    assert "gap +3 against a margin of 2: effect +1" in ahead["statistic"]
    assert "past a margin of 2: gap +3" in (built / "gl" / "report.html").read_text()


def test_a_precondition_not_met_has_its_own_chip(built):
    """Misreading 4: a precondition not met wore the red 'fails' chip of a failed claim."""
    page = (built / "gl" / "report.html").read_text()
    row = page[page.index('<tr id="claim-pre_floor-full">'):page.index('<tr id="claim-pre_smooth-full">')]
    assert 'class="verdict v-not-met"' in row and "not met · full" in row and "v-fails" not in row
    summary = json.loads((built / "gl" / "summary.json").read_text())
    assert next(p for p in summary["preconditions"] if p["id"] == "pre_floor")["label"] == "not met"


def test_models_are_named_by_measured_size(built):
    """Misreading 5: 0.7M-parameter models were called by the paper's row names ("DeiT-S", "ConViT-S")."""
    rec = {"config": {"model": _model("repro_convit_tiny_c32", 9)}, "metrics": {"params": 861_000}}
    assert model_label(rec) == "ConViT, depth 6, 9 heads, 0.86M"
    rows = list(csv.DictReader((built / "gl" / "cells.csv").open()))
    assert next(r for r in rows if r["row"] == "ours" and r["column"] == "top1")["model"] == \
        "ConViT, depth 6, 9 heads, 0.86M"
    page = (built / "gl" / "report.html").read_text()
    assert "ours: DeiT, depth 6, 3 heads, 0.35M" in page  # under the paper's "DeiT-S" row


def test_first_screen_rows_carry_setting_effects_interval_and_verdict(built):
    """Each central claim as one row, first on the page and in the index: setting, paper's effect, ours with its
    95 % interval and a forest plot, verdict; an accuracy floor not met says 'under-trained'."""
    page = (built / "gl" / "report.html").read_text()
    first = page.index('<table class="glance"')
    assert first < page.index('id="runs"') and first < page.index('id="claims"')
    rows = re.findall(r'<tr class="glance-row".*?</tr>', page, re.S)
    assert len(rows) == 2 and all('<svg class="forest"' in r for r in rows)
    ahead, learnt = rows
    assert ">-0.5<" in ahead and "<b>+1</b>" in ahead  # past the margin: paper 81.3 - 79.8 - 2, ours 53.5 - 50.5 - 2
    assert "10 epochs · " in ahead and "3 seeds" in ahead and "ConViT, depth 6, 9 heads, 0.86M" in ahead
    assert "v-outside-regime" in learnt and "under-trained" in learnt
    index = (built / "index.html").read_text()
    assert index.index('id="glance-gl"') < index.index('id="papers"') and "gl/report.html#claim-ahead-full" in index
    md = (built / "gl" / "REPORT.md").read_text()
    assert md.index("The central claims at a glance") < md.index("(report.html#runs)")


def test_figures_draw_the_judged_threshold_and_say_what_their_bands_are(built):
    from matplotlib.text import Text

    paper = load_paper(built.parent / "papers" / "gl" / "paper.yaml")
    mpl = figures.draw(compare(paper, *load_records("gl", root=built)), paper.figures[0], "full")
    assert "pre_smooth: > 0.5" in [t.get_text() for t in mpl.findobj(Text)]
    page = (built / "gl" / "report.html").read_text()
    assert "bands: ± 1 sd across seeds" in page
    rows = re.findall(r'<tr class="glance-row".*?</tr>', page, re.S)
    assert all('href="#fig-sim-full"' in r for r in rows) and 'id="fig-sim-full"' in page  # beside each claim


def test_pages_have_no_dead_notebook_link_no_none_header_and_read_wide_tables_long(built):
    page = (built / "gl" / "report.html").read_text()
    assert 'href="notebook.html"' not in page  # a build output, absent in a fresh clone
    assert "ours at None" not in page and "ours at None" not in (built / "gl" / "REPORT.md").read_text()
    assert 'class="compare-table long" data-table="wide"' in page and '<details class="section" id="acc">' in page


BUDGET_PAPER = """\
id: bud
title: Budget paper
index_table: short
tables:
  - id: short
    caption: Two epochs
    source: Ours
    columns: [{key: top1, label: Top-1, unit: "%"}]
    rows: [{key: base, label: Baseline, values: {top1: "-"}}, {key: idea, label: Idea, values: {top1: "-"}}]
  - id: long
    caption: Ten epochs
    source: Ours
    columns: [{key: top1, label: Top-1, unit: "%"}]
    rows: [{key: base, label: Baseline, values: {top1: "-"}}]
preconditions:
  - {id: pre_enough, text: "5x the epochs raise the baseline by less than 2 points.", table: short, check: greater,
     margin: -2, budget: true, pairs: [[short.base.top1, long.base.top1]]}
  - {id: pre_headroom, text: "Top-1 leaves headroom: at most 60 %.", table: long, check: bound,
     pairs: [[base.top1, 60]]}
claims:
  - {id: idea_ahead, text: "The idea is ahead of the baseline.", table: short, check: greater, requires: [pre_enough],
     pairs: [[idea.top1, base.top1]]}
  - {id: longer_ahead, text: "Ten epochs beat two, with headroom.", table: long, check: greater,
     requires: [pre_headroom], pairs: [[long.base.top1, short.base.top1]]}
"""


def test_a_budget_precondition_not_met_says_under_trained_and_names_both_tables(tmp_path):
    """Two cells of one row at two budgets read 'Baseline · Top-1 vs Baseline · Top-1' and a budget shown too
    short did not say 'under-trained' (only an accuracy floor did), in the report or the index's table."""
    papers, results = tmp_path / "papers", tmp_path / "results"
    (papers / "bud").mkdir(parents=True)
    (papers / "bud" / "paper.yaml").write_text(BUDGET_PAPER)
    for seed in range(3):
        for table, row, top1 in (("short", "base", 50.0), ("short", "idea", 47.0), ("long", "base", 67.0)):
            write_record(dict(run_id=f"{table}-{row}-s{seed}", paper="bud", table=table, scale="full", seed=seed,
                              cell={"row": row, "columns": {"top1": "top1"}}, status="finished",
                              config={"data": DATA, "model": _model("repro_deit_tiny_c32", 3), "recipe": {"epochs": 2}},
                              metrics={"top1": top1 + seed * 0.5, "epochs": 2, "params": 348_000},
                              provenance={"device": "cpu", "data": {"test_images": 10000}}), root=results)
    build_report("bud", papers, results, notebook_execute=None)
    summary = json.loads((results / "bud" / "summary.json").read_text())
    rows = {r["id"]: r for r in summary["first_screen"][0]["rows"]}
    row, ceiling = rows["idea_ahead"], rows["longer_ahead"]
    assert row["cls"] == ceiling["cls"] == "v-outside-regime" and not ceiling["qualifier"]  # a ceiling: not under-trained
    measured = "Baseline · Top-1 (short) 50.5% vs Baseline · Top-1 (long) 67.5% + margin -2"
    assert row["qualifier"] == "under-trained (pre_enough not met)"  # its measured values beside it, once
    assert measured in (results / "bud" / "report.html").read_text()
    claims = {r["claim"]: r for r in csv.DictReader((results / "bud" / "claims.csv").open())}
    assert claims["idea_ahead"]["preconditions"] == f"pre_enough: not met ({measured})"
    featured = build_index(papers, results).read_text().split('class="featured-table"', 1)[1].split("</table>")[0]
    assert "under-trained (pre_enough not met)" in featured  # the index's table says it too
    for readme in (tmp_path / "README.md", papers / "bud" / "README.md"):
        readme.write_text("<!-- results:begin -->\n<!-- results:end -->\n")
    write_readmes(papers, results)
    assert "; under-trained (pre_enough not met) |" in (papers / "bud" / "README.md").read_text()
    assert "| 2 outside regime (1 under-trained) |" in (tmp_path / "README.md").read_text()  # and the README's table


def test_budget_is_a_preconditions_key_only(tmp_path):
    from repro.paper import load_paper
    path = tmp_path / "paper.yaml"
    path.write_text(BUDGET_PAPER.replace('requires: [pre_enough],', 'requires: [pre_enough], budget: true,'))
    paper = load_paper(path)
    claim = next(c for c in paper.claims if c.id == "idea_ahead")
    assert not claim.budget and paper.precondition("pre_enough").budget
    assert any("budget is a precondition's key" in p.message for p in paper.problems)


def test_a_claim_whose_runs_are_still_training_is_on_the_first_screen_as_not_run(tmp_path):
    """A central claim with one side unrecorded (its runs still training) was missing from the first screen and
    the README block while the counts said "1 not run": its row now says which cell has no record, carries no
    under-trained qualifier (it has no verdict), and is never the paper's line on the index."""
    papers, results = tmp_path / "papers", tmp_path / "results"
    (papers / "gl").mkdir(parents=True)
    (papers / "gl" / "paper.yaml").write_text(PAPER)
    for seed in range(3):
        write_record(dict(run_id=f"base-s{seed}", paper="gl", table="acc", scale="full", seed=seed,
                          cell={"row": "base", "columns": {"top1": "top1"}}, status="finished",
                          config={"data": DATA, "model": _model("repro_deit_tiny_c32", 3), "recipe": {"epochs": 10}},
                          metrics={"top1": 50.0 + seed, "epochs": 10, "params": 348_000},
                          provenance={"device": "cpu", "data": {"test_images": 10000}}), root=results)
    build_report("gl", papers, results, notebook_execute=None)
    summary = json.loads((results / "gl" / "summary.json").read_text())
    rows = {r["id"]: r for r in summary["first_screen"][0]["rows"]}
    assert set(rows) == {"ahead", "ahead_learnt"}
    for r in rows.values():
        assert (r["verdict"], r["cls"]) == ("not run", "v-not-run") and r["toward"]["effect"] is None
        assert r["why"] == "no record yet of ConViT-S · Top-1" and not r["qualifier"]  # pre_floor not met: no verdict
    assert lead(summary) is None
    assert "· not run (why: no record yet of ConViT-S · Top-1)" in (results / "gl" / "REPORT.md").read_text()
