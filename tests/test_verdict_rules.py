"""The verdict rules a reviewer asked for (repro/report/README.md, "How a claim is judged"): each test
feeds values that trigger one rule and shows what the rule changes.

Preconditions (outside the paper's regime), resolvability, Holm across a claim's comparisons, both sides
at chance, significant-but-below-the-resolvable-effect, per-block tests of stochastic curves, negative
controls for similarity claims, and evidence kinds counted apart in the headline.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from repro.records import load_records, write_record
from repro.report import build_report
from repro.report.claims import (FAILS, HOLDS, INCONCLUSIVE, NOT_RESOLVABLE, NOT_TESTABLE, OUTSIDE, judge_all)
from repro.report.cells import compare
from repro.report.stats import compare_means, holm
from repro.report.tally import headline, headline_text
from repro.paper import load_paper

PAPER = """\
id: rp
title: Rules paper
protocol: "ImageNet-1k at 224 px"
tables:
  - id: t
    caption: Accuracy and curves
    source: Table 1
    columns:
      - {key: top1, label: Top-1, unit: "%"}
      - {key: curve, label: "per-block curve"}
      - {key: gap, label: "loss gap"}
    rows:
      - {key: base10, label: "baseline, 10 %", values: {top1: "48.0"}}
      - {key: base100, label: "baseline, 100 %", values: {top1: "79.8"}}
      - {key: ours10, label: "ours, 10 %", values: {top1: "59.6"}}
      - {key: r1, label: R1, values: {top1: "70.5"}}
      - {key: r2, label: R2, values: {top1: "70.0"}}
      - {key: x1, label: X1}
      - {key: x2, label: X2}
      - {key: x3, label: X3}
      - {key: x4, label: X4}
      - {key: x5, label: X5}
      - {key: x6, label: X6}
      - {key: conv, label: "conv init"}
      - {key: rand, label: "random init"}
preconditions:
  - {id: pre_limited, text: "baseline gains > 5 points from 10x data", table: t, check: greater, margin: 5,
     pairs: [[base100.top1, base10.top1]]}
claims:
  - {id: ahead_low_data, text: ours ahead at 10 %, table: t, check: greater, pairs: [[ours10.top1, base10.top1]],
     requires: [pre_limited]}
  - {id: small_gain, text: R1 above R2, table: t, check: greater, pairs: [[r1.top1, r2.top1]]}
  - {id: six, text: x1 above x2..x6 and x2 above x1, table: t, check: greater,
     pairs: [[x1.top1, x3.top1], [x1.top1, x4.top1], [x1.top1, x5.top1], [x1.top1, x6.top1], [x2.top1, x6.top1],
             [x3.top1, x2.top1]]}
  - {id: curve_below, text: x1's curve stays at or below x2's, table: t, check: bound, pairs: [[x1.curve, x2.curve]]}
  - {id: similar, text: conv gap small, table: t, check: bound, pairs: [[conv.gap, 0.05]], similarity: true,
     control: [[rand.gap, 0.05]]}
  - {id: similar_no_control, text: conv gap small, table: t, check: bound, pairs: [[conv.gap, 0.05]],
     similarity: true}
  - {id: ours_reading, text: a stricter reading, table: t, check: greater, pairs: [[r1.top1, 10]], reading: ours}
  - {id: cited_claim, text: another paper's claim, table: t, check: greater, pairs: [[r2.top1, 10]], reading: cited}
"""


def _records(root: Path, cells: dict, scale: str = "full") -> None:
    """cells: {(row, column): [value per seed]}; top1 cells are accuracies on 10,000 test images."""
    for (row, col), values in cells.items():
        for seed, v in enumerate(values):
            write_record(dict(run_id=f"{row}-{col}-{seed}", paper="rp", table="t",
                              cell={"row": row, "columns": {col: "top1" if col == "top1" else "m"}}, scale=scale, seed=seed, status="finished",
                              metrics={"top1" if col == "top1" else "m": v},
                              config={"data": {"name": "cifar10_jpeg", "img_size": 32, "num_classes": 10}},
                              provenance={"device": "cpu", "data": {"test_images": 10000}}), root=root)


def _verdicts(tmp_path: Path, cells: dict, scale: str = "full"):
    (tmp_path / "papers" / "rp").mkdir(parents=True, exist_ok=True)
    (tmp_path / "papers" / "rp" / "paper.yaml").write_text(PAPER)
    _records(tmp_path / "results", cells, scale)
    paper = load_paper(tmp_path / "papers" / "rp" / "paper.yaml")
    assert not paper.problems, paper.problems
    cmp = compare(paper, load_records("rp", root=tmp_path / "results")[0])
    return cmp, {v.claim.id: v for v in judge_all(cmp) if v.scale == scale}


LIMITED = {("base10", "top1"): [48.0, 49.0, 47.5], ("base100", "top1"): [70.0, 71.0, 69.5]}
NOT_LIMITED = {("base10", "top1"): [51.1, 50.0, 52.2], ("base100", "top1"): [52.7, 52.3, 53.0]}


def test_a_claim_whose_precondition_is_not_met_is_outside_the_regime_and_not_tallied(tmp_path):
    ours = {("ours10", "top1"): [44.0, 44.5, 43.8]}  # behind the baseline: would fail
    _, v = _verdicts(tmp_path / "a", {**NOT_LIMITED, **ours})
    assert v["ahead_low_data"].verdict == OUTSIDE and v["ahead_low_data"].result == FAILS
    assert "pre_limited" in v["ahead_low_data"].statistic and v["ahead_low_data"].preconditions[0].verdict != HOLDS
    cmp, v2 = _verdicts(tmp_path / "b", {**LIMITED, **ours})
    assert v2["ahead_low_data"].verdict == FAILS  # the same comparison, inside the regime: a finding
    h = headline(cmp, list(v2.values()))[0]
    assert h["fail"] == 1 and h["outside_regime"] == 0
    cmp, v = _verdicts(tmp_path / "c", {**NOT_LIMITED, **ours})
    h = headline(cmp, list(v.values()))[0]
    assert h["fail"] == 0 and h["outside_regime"] == 1 and "1 outside the paper's regime" in headline_text(h)


def test_a_precondition_not_yet_resolved_leaves_the_claim_inconclusive_not_outside(tmp_path):
    """One seed a side (a campaign committed as it runs): the precondition is inconclusive, so the claim is
    neither judged in the regime nor outside it; its comparisons are kept as the result."""
    one_seed = {("base10", "top1"): [48.0], ("base100", "top1"): [70.0], ("ours10", "top1"): [59.0]}
    _, v = _verdicts(tmp_path, one_seed)
    claim = v["ahead_low_data"]
    assert claim.preconditions[0].verdict == INCONCLUSIVE
    assert claim.verdict == INCONCLUSIVE and claim.result == INCONCLUSIVE
    assert claim.statistic.startswith("the paper's regime not yet resolved: pre_limited inconclusive")


def test_a_paper_effect_below_what_the_scale_resolves_is_not_resolvable(tmp_path):
    # the paper's R1 - R2 is +0.5; three noisy seeds resolve only several points
    _, v = _verdicts(tmp_path, {("r1", "top1"): [60.0, 63.0, 57.5], ("r2", "top1"): [59.5, 62.0, 58.0]})
    c = v["small_gain"].checks[0]
    assert c.paper_effect == pytest.approx(0.5) and c.resolvable > 0.5
    assert v["small_gain"].verdict == NOT_RESOLVABLE and v["small_gain"].label == "not resolvable at full"
    _, v = _verdicts(tmp_path / "2", {("r1", "top1"): [60.0, 60.2, 59.9], ("r2", "top1"): [59.9, 60.1, 60.0]})
    assert v["small_gain"].verdict == INCONCLUSIVE  # resolvable here, and the data do not show it


def test_holm_turns_a_single_p_of_004_among_six_into_not_significant():
    adjusted = holm([0.04, 0.5, 0.6, 0.7, 0.8, 0.9])
    assert adjusted[0] == pytest.approx(0.24) and adjusted[0] > 0.05
    assert holm([0.01, 0.02, 0.03]) == pytest.approx([0.03, 0.04, 0.04])  # step-down, kept monotone


def test_holm_across_a_claims_comparisons_keeps_one_borderline_fail_from_failing_the_claim(tmp_path):
    # five comparisons hold clearly; x3 > x2 leans the other way at a raw one-sided p near 0.04
    x2, x3 = [50.0, 50.6, 49.7], [48.9, 49.6, 48.2]
    raw = sps.ttest_ind(x3, x2, equal_var=False, alternative="less").pvalue
    assert 0.01 < raw < 0.05
    cells = {("x1", "top1"): [60.0, 60.5, 59.5], ("x2", "top1"): x2, ("x3", "top1"): x3,
             ("x4", "top1"): [40.0, 40.5, 39.5], ("x5", "top1"): [40.0, 40.4, 39.8], ("x6", "top1"): [30.0, 30.2, 29.9]}
    _, v = _verdicts(tmp_path, cells)
    last = v["six"].checks[-1]
    assert last.tests[0].p_less == pytest.approx(raw) and last.tests[0].p_less_adj > 0.05
    assert v["six"].verdict == INCONCLUSIVE  # without Holm: fails on one comparison of six
    assert "Holm" in last.statistic and "family-wise alpha=0.05" in v["six"].statistic


def test_both_sides_at_chance_are_not_testable(tmp_path):
    _, v = _verdicts(tmp_path, {("r1", "top1"): [10.02, 9.95, 10.1], ("r2", "top1"): [10.09, 10.0, 10.2]})
    assert v["small_gain"].verdict == NOT_TESTABLE and v["small_gain"].label == "not testable (both at chance)"


def test_significant_below_the_resolvable_effect_is_marked():
    t = compare_means([52.0, 51.2, 51.9], [53.5, 54.1, 53.3], False, 0.05)  # like ConViT f100: -1.98, p=0.028
    assert t.p_less < 0.05
    a, b = [50.1, 50.4, 50.2], [49.2, 49.9, 49.8]
    t = compare_means(a, b, False, 0.05)
    assert t.p_greater < 0.05 and abs(t.effect) < t.mde  # significant, yet below the resolvable effect


def test_below_mde_reaches_the_label(tmp_path):
    _, v = _verdicts(tmp_path, {("r1", "top1"): [50.1, 50.4, 50.2], ("r2", "top1"): [49.2, 49.9, 49.8]})
    assert v["small_gain"].verdict == HOLDS and v["small_gain"].checks[0].below_mde
    assert v["small_gain"].label == "holds (below the resolvable effect)"
    assert "likely inflated" in v["small_gain"].checks[0].statistic


def test_a_stochastic_curve_is_tested_per_block_not_per_seed_and_element(tmp_path):
    rng = np.random.default_rng(0)
    x1 = [list(1.0 + 0.05 * rng.standard_normal(6)) for _ in range(3)]
    x2 = [list(np.asarray(c) - 0.002) for c in x1]  # 0.002 above the "bound" everywhere: noise, not a violation
    x2 = [list(np.asarray(c) + 0.05 * rng.standard_normal(6)) for c in x2]
    _, v = _verdicts(tmp_path, {("x1", "curve"): x1, ("x2", "curve"): x2})
    check = v["curve_below"].checks[0]
    assert len(check.tests) == 6 and v["curve_below"].verdict != FAILS  # old rule: fails on any seed's element
    bad = [list(np.asarray(c) + 0.5) for c in x1]
    _, v = _verdicts(tmp_path / "2", {("x1", "curve"): bad, ("x2", "curve"): x2})
    assert v["curve_below"].verdict == FAILS


def test_a_similarity_claim_needs_its_negative_control_rejected(tmp_path):
    conv = {("conv", "gap"): [0.01, 0.015, 0.005]}
    _, v = _verdicts(tmp_path / "a", {**conv, ("rand", "gap"): [0.02, 0.03, 0.01]})  # the control passes too
    assert v["similar"].verdict == INCONCLUSIVE and v["similar"].result == HOLDS
    assert "negative control is not rejected" in v["similar"].statistic
    assert v["similar_no_control"].verdict == INCONCLUSIVE and "no negative control" in v["similar_no_control"].statistic
    _, v = _verdicts(tmp_path / "b", {**conv, ("rand", "gap"): [0.3, 0.35, 0.28]})  # the bound rejects it
    assert v["similar"].verdict == HOLDS and "negative control rejected" in v["similar"].statistic


def test_evidence_kinds_are_counted_apart_in_the_headline(tmp_path):
    cells = {("r1", "top1"): [60.0, 61.0, 60.5], ("r2", "top1"): [50.0, 51.0, 50.5]}
    cmp, v = _verdicts(tmp_path, cells)
    h = headline(cmp, list(v.values()))[0]
    assert v["ours_reading"].verdict == HOLDS and v["cited_claim"].verdict == HOLDS
    assert h["ours"] == {"total": 1, "hold": 1, "fail": 0, "other": 0, "others": {}} and h["cited"]["hold"] == 1
    assert h["hold"] == 1  # small_gain only: the ours / cited claims are not the paper's own
    text = headline_text(h)
    assert "stricter readings (ours): 1 hold" in text and "cited: 1 hold" in text


def test_summary_json_carries_numbers_preconditions_and_holm(tmp_path):
    (tmp_path / "papers" / "rp").mkdir(parents=True)
    (tmp_path / "papers" / "rp" / "paper.yaml").write_text(PAPER)
    _records(tmp_path / "results", {**NOT_LIMITED, ("ours10", "top1"): [44.0, 44.5, 43.8],
                                    ("r1", "top1"): [60.0, 61.0, 60.5], ("r2", "top1"): [50.0, 51.0, 50.5]})
    build_report("rp", papers_dir=tmp_path / "papers", results_dir=tmp_path / "results", notebook_execute=None)
    s = json.loads((tmp_path / "results" / "rp" / "summary.json").read_text())
    claims = {c["id"]: c for c in s["claims"]}
    c = claims["small_gain"]["comparisons"][0]
    assert c["effect"] == pytest.approx(10.0) and c["ci95"][0] < 10.0 < c["ci95"][1] and c["n"] == [3, 3]
    assert 0 < c["p_holds"] <= c["p_holds_holm"] < 0.05 and c["resolvable_effect"] > 0
    outside = claims["ahead_low_data"]
    assert outside["verdict"] == OUTSIDE and outside["result"] == FAILS and outside["kind"] == "training"
    assert outside["requires"][0]["id"] == "pre_limited" and outside["requires"][0]["met"] is False
    assert outside["requires"][0]["comparisons"][0]["effect"] == pytest.approx(1.5667 - 5, abs=1e-3)
    assert {p["id"] for p in s["preconditions"]} == {"pre_limited"}
    assert claims["small_gain"]["resolvability"] == "not resolvable"  # the paper's +0.5: a statement on the design


def test_a_comparison_short_of_three_seeds_gives_its_effect_and_n_and_no_test(tmp_path):
    """A campaign committed as it runs: one seed a side is inconclusive, leaning, with n = [1, 1] in
    summary.json and no interval or p (no test is made on fewer than 3 seeds)."""
    (tmp_path / "papers" / "rp").mkdir(parents=True)
    (tmp_path / "papers" / "rp" / "paper.yaml").write_text(PAPER)
    _records(tmp_path / "results", {("r1", "top1"): [61.0], ("r2", "top1"): [50.0]})
    build_report("rp", papers_dir=tmp_path / "papers", results_dir=tmp_path / "results", notebook_execute=None)
    s = json.loads((tmp_path / "results" / "rp" / "summary.json").read_text())
    c = {c["id"]: c for c in s["claims"]}["small_gain"]
    (cmp,) = c["comparisons"]
    assert c["verdict"] == INCONCLUSIVE and cmp["method"] == "lean" and cmp["n"] == [1, 1]
    assert cmp["effect"] == pytest.approx(11.0) and cmp["ci95"] is None and cmp["p_holds"] is None
    assert "n=1 vs 1 < 3 seeds" in cmp["statistic"]


def test_a_curve_bound_short_of_three_seeds_gives_its_largest_excess_and_n():
    """Per-block curves (lhs <= rhs at every block) committed mid-campaign: no test, but the largest excess of
    the mean curve over the mean bound, its direction and n per side, like a scalar comparison."""
    from repro.report.pairwise import _bound_tested
    from repro.paper import Claim, Ref

    lhs, rhs = Ref("t", "deit", "curve"), Ref("t", "aug", "curve")
    claim = Claim("c", "", "", "t", "bound", [(lhs, rhs)], "<=")
    a = [[1.0, 1.2, 1.5], [1.0, 1.4, 1.7]]  # mean 1.0, 1.3, 1.6
    b = [[1.1, 1.5, 1.4], [1.1, 1.7, 1.6], [1.2, 1.6, 1.5]]  # mean 1.133, 1.6, 1.5
    check = _bound_tested(claim, lhs, rhs, a, b)
    assert check.verdict == INCONCLUSIVE and check.method == "lean" and check.n == (2, 3) and not check.tests
    assert check.effect == pytest.approx(0.1) and "leans outside" in check.statistic
    assert "n=2 vs 3 < 3 seeds" in check.statistic
    inside = _bound_tested(claim, lhs, Ref(const=2.0), a, [2.0])
    assert inside.effect == pytest.approx(-0.4) and inside.n == (2, "const") and "leans inside" in inside.statistic


PAPERS = ("convit", "cmhsa", "oversmoothing", "augvit", "respostln")


@pytest.mark.parametrize("pid", PAPERS)
def test_the_notebook_and_the_committed_report_find_the_same_verdicts(pid, tmp_path):
    """One code path: the notebook's ReportView (run from results/<id>/, as nbconvert does) judges every
    (scale, claim) as the committed summary.json and the index do."""
    import os

    from repro.report.notebook import ReportView

    root = Path(__file__).resolve().parents[1]
    summary = json.loads((root / "results" / pid / "summary.json").read_text())
    cwd = os.getcwd()
    os.chdir(root / "results" / pid)
    try:
        view = ReportView(pid)
    finally:
        os.chdir(cwd)
    ours = {(v.claim.id, v.scale): v.verdict for v in view.verdicts}
    assert ours == {(c["id"], c["scale"]): c["verdict"] for c in summary["claims"]}
    index = re.findall(rf'class="verdict v-([a-z-]+)" data-scale="(\w+)">[^<]*</span>\s*'
                       rf'<a href="{pid}/report\.html#claim-([^"]+)-(\w+)">',
                       (root / "results" / "index.html").read_text())
    assert {(claim, scale): v for v, _, claim, scale in index} == \
        {(c["id"], c["scale"] or "none"): c["verdict"].replace(" ", "-") for c in summary["claims"]}


def test_the_headline_names_every_verdict_of_a_kind_and_a_paper_without_training_claims():
    """'1 outside regime', never '1 other'; a comparison of ours with no training claim of the paper's says so."""
    g = {"total": 3, "hold": 1, "fail": 0, "other": 2, "others": {"outside regime": 1, "inconclusive": 1}}
    h = {"scale": "cpu", "training_total": 0, "training_designed": 0, "ours": g, "seeds": [3], "data": [],
         "setting": "depth 6"}
    text = headline_text(h)
    assert text.startswith("cpu (depth 6): no training claim of the paper's; ")
    assert "stricter readings (ours): 1 hold, 0 fail, 1 outside regime, 1 inconclusive (of 3)" in text
    assert " other" not in text
