"""Verdicts say only what the evidence supports: each test uses values the old logic judged firmly.

Old logic (before power-aware verdicts): one seed per side gave holds/fails from the direction of the
means; tiny judged training claims; every printed cell got a delta and a ✓/✗ whatever the protocol;
params were agreed at half a printed unit only; a timing claim was judged from one run's timing.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from repro.models import zoo
from repro.records import load_records, write_record
from repro.report import build_report
from repro.report.claims import FAILS, HOLDS, INCONCLUSIVE, judge, judge_all
from repro.report.cells import MEASURED, Cell, Measured, compare
from repro.report.figures import draw
from repro.report.stats import resolvable_effect
from repro.paper import Ref, load_paper, parse_printed, prints_as

REPO = Path(__file__).resolve().parents[1]
PAPERS = ("convit", "cmhsa", "oversmoothing", "augvit", "respostln")

PAPER = """\
id: vp
title: Verdict paper
protocol: "ImageNet-1k at 224 px"
tables:
  - id: acc
    caption: Accuracy
    source: Table 1
    columns:
      - {key: a, label: A, unit: "%"}
      - {key: b, label: B, unit: "%"}
    rows:
      - {key: r, label: R, values: {a: "80.0", b: "70.0"}}
  - id: size
    caption: Size
    source: Table 2
    printed: truncate
    columns:
      - {key: params, label: Params, scale_free: true}
      - {key: top1, label: Top-1, unit: "%"}
    rows:
      - {key: s, label: S, values: {params: "27M", top1: "81.3"}}
  - id: speed
    caption: Speed
    source: Table 3
    columns:
      - {key: fast, label: Fast}
      - {key: slow, label: Slow}
    rows:
      - {key: r, label: R}
claims:
  - {id: a_beats_b, text: A beats B, table: acc, check: greater, columns: [a, b]}
  - {id: a_above_30, text: A is above 30, table: acc, check: greater, pairs: [[r.a, 30]]}
  - {id: bigger, text: S has more than 20M parameters, table: size, check: greater, evidence: theory,
     pairs: [[s.params, 20000000]]}
  - {id: faster, text: Fast is faster, table: speed, check: greater, evidence: timing, pairs: [[r.fast, r.slow]]}
"""


def _write(root: Path, scale: str, a: list, b: list, test_images: int = 10000, extra: tuple = ()) -> None:
    for seed, (x, y) in enumerate(zip(a, b)):
        for col, v in (("a", x), ("b", y)):
            write_record(dict(run_id=f"{scale}-{col}-{seed}", paper="vp", table="acc",
                              cell={"row": "r", "columns": {col: "top1"}}, scale=scale, seed=seed, status="finished",
                              metrics={"top1": v, "epochs": 2},
                              config={"data": {"name": "cifar10_jpeg", "img_size": 32, "num_classes": 10},
                                      "model": {"name": "repro_deit_tiny_c32", "kwargs": {"depth": 6}}},
                              provenance={"device": "cpu", "data": {"test_images": test_images}}), root=root)
    for i, (table, row, columns, metrics) in enumerate(extra):
        write_record(dict(run_id=f"{scale}-x{i}", paper="vp", table=table, cell={"row": row, "columns": columns},
                          scale=scale, seed=0, status="finished", metrics=metrics,
                          config={"args": {"model": "repro_convit_small", "img_size": 224}},
                          provenance={"device": "cpu"}), root=root)


def _judge(tmp_path: Path, scale: str, a: list, b: list, resolves=None, **kw):
    (tmp_path / "papers" / "vp").mkdir(parents=True, exist_ok=True)
    (tmp_path / "papers" / "vp" / "paper.yaml").write_text(PAPER)
    _write(tmp_path / "results", scale, a, b, **kw)
    paper = load_paper(tmp_path / "papers" / "vp" / "paper.yaml")
    assert not paper.problems
    cmp = compare(paper, load_records("vp", root=tmp_path / "results")[0], resolves=resolves)
    return cmp, {v.claim.id: v for v in judge_all(cmp) if v.scale == scale}


# ---- 1. power-aware verdicts

def test_one_seed_is_inconclusive_with_the_binomial_resolvable_effect(tmp_path):
    _, v = _judge(tmp_path, "full", [55.0], [50.0])  # old logic: holds (direction of the means)
    check = v["a_beats_b"].checks[0]
    assert v["a_beats_b"].verdict == INCONCLUSIVE and "leans lhs > rhs" in check.statistic
    se = (0.55 * 0.45 / 10000) ** 0.5 * 100  # one run's binomial standard error on 10,000 test images
    assert check.resolvable == pytest.approx(2.486 * se * 2 ** 0.5, rel=0.01)
    assert "test-set binomial error only" in check.statistic and check.effect == pytest.approx(5.0)


def test_three_seeds_resolve_and_state_the_resolvable_effect(tmp_path):
    _, v = _judge(tmp_path, "full", [55.0, 56.0, 54.0], [50.0, 51.0, 49.0])
    check = v["a_beats_b"].checks[0]
    assert v["a_beats_b"].verdict == HOLDS and "Welch" in check.statistic
    mde, basis = resolvable_effect([55, 56, 54], [50, 51, 49], False, 0.05)
    assert check.resolvable == pytest.approx(mde) and "seed spread" in basis and 1.0 < mde < 5.0
    assert "smallest resolvable" in v["a_beats_b"].statistic


def test_at_chance_cannot_be_ahead(tmp_path):
    # three seeds at exactly 10 % on a 10-class test set: the old logic said "inconclusive (no spread)", then
    # "fails"; both sides at chance is a null result: not testable, never a fail
    _, v = _judge(tmp_path, "full", [10.0, 10.0, 10.0], [10.0, 10.0, 10.0])
    assert v["a_beats_b"].verdict == "not testable" and "both sides at chance" in v["a_beats_b"].statistic
    assert v["a_above_30"].verdict == FAILS  # at chance against a number above it: it is behind


# ---- 2. each scale says what it is for

def test_tiny_training_claims_are_smoke_and_theory_is_judged_everywhere(tmp_path):
    extra = (("size", "s", {"params": "n"}, {"n": 27.78e6}),)
    _, v = _judge(tmp_path, "tiny", [60.0, 61.0, 62.0], [50.0, 51.0, 52.0], extra=extra)  # old logic: holds
    assert v["a_beats_b"].verdict == "smoke" and v["a_beats_b"].label == "smoke — not judged"
    assert v["bigger"].verdict == HOLDS  # theory: params do not depend on the scale


def test_a_scale_judges_only_the_claims_it_is_designed_for(tmp_path):
    _, v = _judge(tmp_path, "cpu", [60.0, 61.0, 62.0], [50.0, 51.0, 52.0])
    assert v["a_beats_b"].verdict == "not designed" and "designed at: full" in v["a_beats_b"].statistic
    assert v["a_beats_b"].label == "not designed to resolve at cpu"
    _, v = _judge(tmp_path / "2", "cpu", [60.0, 61.0, 62.0], [50.0, 51.0, 52.0], resolves={"cpu": {"a_beats_b"}})
    assert v["a_beats_b"].verdict == HOLDS


def test_timing_claims_are_not_judged_from_run_timings(tmp_path):
    extra = tuple(("speed", "r", {col: "ips"}, {"ips": x}) for col, x in (("fast", 300.0), ("slow", 100.0)))
    _, v = _judge(tmp_path, "full", [55.0], [50.0], extra=extra)  # old logic: holds on one timing
    assert v["faster"].verdict == "timing" and "make bench" in v["faster"].statistic
    rounds = tuple(("speed", "r", {col: "ips"}, {"ips": x, "timing_rounds": 5}) for col, x in (("fast", 300.0),
                                                                                               ("slow", 100.0)))
    _, v = _judge(tmp_path / "alternated", "full", [55.0], [50.0], extra=rounds)
    assert v["faster"].verdict == HOLDS and "exact values" in v["faster"].checks[0].statistic


# ---- 3. like for like

def test_cells_from_another_protocol_get_no_delta_and_name_what_differs(tmp_path):
    extra = (("size", "s", {"params": "n", "top1": "top1"}, {"n": 27.78e6, "top1": 81.0}),)
    cmp, _ = _judge(tmp_path, "cpu", [80.0], [70.0], extra=extra)
    cell = cmp.cell(Ref("acc", "r", "a"), "cpu")  # old logic: delta 0.0, ✓
    assert cell.status == MEASURED and cell.delta is None and cell.within_noise is None
    assert cell.within_text() == "not like for like" and "CIFAR-10 (JPEG q75)" in cell.protocol
    view = cmp.view("acc", "cpu")
    assert view.protocol_lines()[0] == "Paper: ImageNet-1k at 224 px."
    assert "depth 6" in view.protocol_lines()[1] and "without a delta" in view.protocol_lines()[1]
    params = cmp.cell(Ref("size", "s", "params"), "cpu")  # scale-free: the paper's own model
    assert params.like_for_like and params.within_noise is True
    assert "Params: the paper's model" in cmp.view("size", "cpu").mixed_row("s")
    full, _ = _judge(tmp_path / "full", "full", [80.0], [70.0])
    assert full.cell(Ref("acc", "r", "a"), "full").delta == pytest.approx(0.0)


def test_figures_never_share_an_axis_across_protocols(tmp_path):
    from repro.paper import Figure, Series
    cmp, _ = _judge(tmp_path, "cpu", [80.0], [70.0])
    table = cmp.paper.table("acc")
    table.rows[0].x = 1.0
    fig = Figure(id="f", caption="c", source="", kind="vs_rows", table="acc", series=[Series("A", column="a")])
    assert len(draw(cmp, fig, "cpu").axes) == 2  # ours, and the paper's ImageNet values in their own panel
    full, _ = _judge(tmp_path / "full", "full", [80.0], [70.0])
    full.paper.table("acc").rows[0].x = 1.0
    assert len(draw(full, fig, "full").axes) == 1


# ---- 4. printed precision both ways

def test_truncated_tables_and_the_zoo_use_one_rule():
    pv = parse_printed("27M")
    assert prints_as(27.78e6, pv, "truncate") and not prints_as(27.78e6, pv, "round")
    assert prints_as(27.4e6, pv, "round") and not prints_as(26.9e6, pv, "truncate")
    # the zoo's old rule accepted anything within one unit: 26.1M "agreed" with "27M"
    assert zoo.agrees(26.1e6, "27M") is False and zoo.agrees(27.78e6, "27M", "truncate") is True
    for m in (26.4e6, 26.6e6, 27.4e6, 27.6e6):
        assert zoo.agrees(m, "27M") == prints_as(m, pv)


def test_a_truncating_table_agrees_with_its_own_convention(tmp_path):
    extra = (("size", "s", {"params": "n"}, {"n": 27.78e6}),)
    cmp, _ = _judge(tmp_path, "cpu", [80.0], [70.0], extra=extra)
    assert cmp.cell(Ref("size", "s", "params"), "cpu").within_noise is True
    assert cmp.cell(Ref("size", "s", "params"), "cpu").within_text() == "yes (truncate)"


# ---- 5. no claim that cannot fail

class _Stub:
    """A comparison whose cells hold the values a test chooses (3 seeds each, at scale full)."""

    def __init__(self, paper, values: dict):
        self.paper, self.values, self.resolves = paper, values, {}

    def cell(self, ref: Ref, scale):
        table = self.paper.table(ref.table)
        vals = self.values.get((ref.table, ref.row, ref.column), [5.0, 5.1, 5.2])
        return Cell(ref.table, ref.row, table.column(ref.column), scale, None, MEASURED,
                    Measured(vals, [0, 1, 2], ["x", "y", "z"]))


def _failing_values(claim) -> dict:
    """Cell values that break the claim's first comparison (every other cell left neutral)."""
    lhs, rhs = claim.pairs[0]
    low, high = [1.0, 1.1, 1.2], [50.0, 50.1, 50.2]
    key = (lhs.table, lhs.row, lhs.column)
    if rhs.const is not None:
        bump = abs(rhs.const) + 100
        return {key: [rhs.const + bump, rhs.const + bump + 0.1, rhs.const + bump + 0.2]} if claim.relation == "<=" \
            else {key: [rhs.const - bump, rhs.const - bump - 0.1, rhs.const - bump - 0.2]}
    other = (rhs.table, rhs.row, rhs.column)
    if claim.relation == "<=":
        return {key: high, other: low}
    return {key: low, other: high}


@pytest.mark.parametrize("paper_id", PAPERS)
def test_every_claim_can_fail(paper_id):
    paper = load_paper(REPO / "papers" / paper_id / "paper.yaml")
    for claim in paper.claims:
        if claim.invalid or claim.evidence == "timing" or not any(
                paper.table(r.table).reproduced for p in claim.pairs for r in p if r.const is None):
            continue  # timing claims need alternated timings (test_timing_claims_...), not these cells
        lhs, rhs = claim.pairs[0]
        assert (lhs.table, lhs.row, lhs.column) != (rhs.table, rhs.row, rhs.column), f"{claim.id} compares a cell to itself"
        verdict = judge(_Stub(paper, _failing_values(claim)), claim, "full")
        assert verdict.verdict == FAILS, (claim.id, verdict.verdict, verdict.statistic)


# ---- 6-7. headline, cells.csv, summary

def test_headline_cells_csv_and_attempted(tmp_path):
    (tmp_path / "papers" / "vp").mkdir(parents=True)
    (tmp_path / "papers" / "vp" / "paper.yaml").write_text(PAPER)
    _write(tmp_path / "results", "full", [55.0, 56.0, 54.0], [50.0, 51.0, 49.0],
           extra=(("size", "s", {"params": "n"}, {"n": 27.78e6}),))
    build_report("vp", tmp_path / "papers", tmp_path / "results", notebook_execute=None)
    out = tmp_path / "results" / "vp"
    s = json.loads((out / "summary.json").read_text())
    assert s["headline"][0]["text"].startswith("full (") and s["settings"]["full"] in s["headline"][0]["text"]
    assert "): the paper's training claims: 2 hold, 0 fail (of 2 designed" in s["headline"][0]["text"]
    assert "theory: 1 hold, 0 fail (of 1)" in s["headline"][0]["text"] and "3 seed(s) per cell" in s["headline"][0]["text"]
    assert "attempted" in s["tables"]["acc"] and "reproduced" not in s["tables"]["acc"]
    rows = list(csv.DictReader((out / "cells.csv").open()))
    a = next(r for r in rows if (r["table"], r["row"], r["column"]) == ("acc", "r", "a"))
    assert (a["paper_printed"], a["n"], a["like_for_like"], a["status"]) == ("80.0", "3", "True", "measured")
    assert a["paper"] == "vp"
    assert float(a["mean"]) == pytest.approx(55.0) and a["dataset"] == "CIFAR-10 (JPEG q75) (32 px)"
    assert len(rows) == len(s["cells"])
    page = (out / "report.html").read_text()
    assert "Did it reproduce?" in page and 'href="#acc"' in page and 'id="claim-a_beats_b-full"' in page


def test_committed_reports_judge_no_training_claim_at_tiny():
    for pid in PAPERS:
        s = json.loads((REPO / "results" / pid / "summary.json").read_text())
        tiny = [c for c in s["claims"] if c["scale"] == "tiny" and c["evidence"] == "training"]
        # smoke where tiny has runs for the claim's table; "not designed" where it has none (respostln's
        # cpu-only grid): judged in neither case
        assert any(c["verdict"] == "smoke" for c in tiny), pid
        assert all(c["verdict"] in ("smoke", "not designed") for c in tiny), pid
        assert (REPO / "results" / pid / "cells.csv").is_file()
        cells = [c for c in s["cells"] if c["delta"] is not None]
        assert all(c["like_for_like"] for c in cells), pid


def test_a_chain_is_relinked_over_the_rows_a_scale_runs():
    """cpu runs Table 2 at 10 % and 100 % only: "the gap shrinks" becomes gap(10 %) > gap(100 %), not
    four comparisons that are never measured."""
    from repro.report.claims import scheduled_pairs
    paper = load_paper(REPO / "papers" / "convit" / "paper.yaml")
    claim = next(c for c in paper.claims if c.id == "t2_gap_shrinks_top1")
    run = {("table2", r) for r in ("f10", "f100")}
    stub = _Stub(paper, {})
    stub.cell = lambda ref, scale: _scheduled_cell(paper, ref, (ref.table, ref.row) in run)
    pairs, dropped = scheduled_pairs(stub, claim, "cpu")
    assert [(a.row, b.row) for a, b in pairs] == [("f10", "f100")] and dropped == 3
    ahead = next(c for c in paper.claims if c.id == "t2_convit_ahead_top1")
    pairs, dropped = scheduled_pairs(stub, ahead, "cpu")
    assert sorted(a.row for a, _ in pairs) == ["f10", "f100"] and dropped == 3


def _scheduled_cell(paper, ref, scheduled):
    cell = _Stub(paper, {}).cell(ref, "cpu")
    cell.scheduled = scheduled
    return cell


# ---- a failure judged as a rate over many runs (all-or-nothing outcomes)

RATE_CLAIM = "  - {id: a_stuck, text: A stays at chance in most runs, table: acc, check: rate, rate: 0.5, pairs: [[r.a, 15]]}\n"


def _judge_rate(tmp_path: Path, a: list) -> tuple:
    (tmp_path / "papers" / "vp").mkdir(parents=True, exist_ok=True)
    (tmp_path / "papers" / "vp" / "paper.yaml").write_text(PAPER + RATE_CLAIM)
    _write(tmp_path / "results", "full", a, [50.0] * len(a))
    paper = load_paper(tmp_path / "papers" / "vp" / "paper.yaml")
    assert not paper.problems
    cmp = compare(paper, load_records("vp", root=tmp_path / "results")[0])
    return {v.claim.id: v for v in judge_all(cmp) if v.scale == "full"}["a_stuck"]


def test_a_failure_rate_is_an_exact_binomial_test_over_ten_or_more_runs(tmp_path):
    stuck, escaped = [10.0] * 11, [25.0]  # 11 of 12 at chance: p = P(X >= 11 | n 12, 0.5) = 13 / 4096
    v = _judge_rate(tmp_path / "a", stuck + escaped)
    check = v.checks[0]
    assert v.verdict == HOLDS and check.method == "binomial"
    assert check.tests[0].p_greater == pytest.approx(13 / 4096)
    assert check.effect == pytest.approx(11 / 12 - 0.5) and "11 of 12 runs at or below 15" in check.statistic
    # the mean of these runs (11.25) is within 5 points of chance too, but a 3-seed t-test on
    # [10, 15.34, 10] could not tell a stuck run from an escaped one: the same runs as a rate can
    v = _judge_rate(tmp_path / "b", [10.0] + [30.0] * 11)  # mostly escaped: P(X <= 1) = 13 / 4096, it fails
    assert v.verdict == FAILS
    v = _judge_rate(tmp_path / "c", [10.0, 15.34, 10.0])  # three runs: no test, which way it leans
    assert v.verdict == INCONCLUSIVE and v.checks[0].method == "rate_lean" and "n=3 < 10 runs" in v.checks[0].statistic


def test_a_rate_check_needs_a_share_and_a_number_to_count_against(tmp_path):
    for bad in ("rate: 1.5, pairs: [[r.a, 15]]", "pairs: [[r.a, 15]]", "rate: 0.5, pairs: [[r.a, r.b]]"):
        (tmp_path / "vp").mkdir(exist_ok=True)
        (tmp_path / "vp" / "paper.yaml").write_text(PAPER + "  - {id: x, text: X, table: acc, check: rate, " + bad + "}\n")
        paper = load_paper(tmp_path / "vp" / "paper.yaml")
        assert next(c for c in paper.claims if c.id == "x").invalid, bad
