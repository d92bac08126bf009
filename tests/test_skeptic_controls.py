"""The controls and preconditions a skeptic asks for, on the committed cpu records: each test reads a verdict
that the definitions before them judged otherwise (a fail where the baseline shows no problem to fix, a hold
read off one of four variants, a gap shrink forced by a ceiling, a fail far above Post-LN's usable range)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from papers.convit import experiments as convit
from repro.report.claims import FAILS, HOLDS, INCONCLUSIVE, combine
from repro.report.glance import deciding, why
from repro.report.pairwise import NOT_RUN, Check, Verdict
from repro.report import stats
from repro.paper import Claim, Ref, load_paper

REPO = Path(__file__).resolve().parents[1]


def _cpu(pid: str) -> dict:
    summary = json.loads((REPO / "results" / pid / "summary.json").read_text())
    return {c["id"]: c for c in summary["claims"] + summary["preconditions"] if c["scale"] == "cpu"}


def test_oversmoothing_table1_needs_a_baseline_that_oversmooths_and_a_neutral_augmentation():
    v = _cpu("oversmoothing")
    assert v["pre_deit12_oversmooths"]["verdict"] == "not met"  # DeiT-12's last-block CosSim 0.29, not above 0.5
    assert v["pre_mixing_augmentation_neutral"]["verdict"] == "not met"  # patch-grid CutMix alone costs ~3.9 points
    for claim in ("t1_every_loss_raises_accuracy", "t1_contrastive_mixing_best", "t1_losses_lower_last_layer_cossim"):
        assert v[claim]["verdict"] == "outside regime" and v[claim]["result"] == FAILS, claim  # was: fails
    assert v["t1_mixing_loss_beats_its_augmentation"]["verdict"] == HOLDS  # the loss read against its control
    paper = load_paper(REPO / "papers" / "oversmoothing" / "paper.yaml")
    claim = next(c for c in paper.claims if c.id == "t1_losses_lower_last_layer_cossim")
    assert claim.reading == "ours"  # the poster prints no CosSim for Table 1's models


def test_convit_top5_gap_shrink_is_outside_a_ceiling_and_table3_never_holds_on_two_rows():
    v = _cpu("convit")
    assert v["pre_top5_headroom"]["verdict"] == "not met"  # DeiT's top-5 at 100 % is ~97 %, over the paper's 95.0
    assert v["t2_gap_shrinks_top5"]["verdict"] == "outside regime"  # was: holds
    # a claim about every trainable-GPSA variant (a-d): it once held on 1 of 4 variants; it now rests on all four
    # (cpu trains b-d), whose comparisons the statistic counts
    t3 = v["t3_gpsa_beats_deit_low_data"]
    assert "not run" not in t3["statistic"] and "4/4 comparisons hold" in t3["statistic"], t3["statistic"]
    assert "t2_convit_ahead_of_equal_size_deit" in convit.RESOLVES["cpu"]


def test_warmup_rescue_needs_post_ln_to_train_with_warmup_somewhere_it_is_needed():
    v = _cpu("respostln")
    for depth in (12, 24):
        assert v[f"grid_d{depth}_warmup_lets_post_ln_train"]["verdict"] != HOLDS
        assert v[f"grid_d{depth}_warmup_rescues_post_ln"]["verdict"] != FAILS  # d12 was: fails


@pytest.mark.parametrize("verdicts,expected", [
    ((HOLDS, FAILS, FAILS), HOLDS), ((FAILS, FAILS, FAILS), FAILS), ((INCONCLUSIVE, FAILS, FAILS), INCONCLUSIVE)])
def test_somewhere_holds_on_any_comparison_and_fails_only_on_all(verdicts, expected):
    ref = Ref("t", "r", "c")
    checks = [Check(ref, ref, ">", v, "") for v in verdicts]
    assert combine(checks, somewhere=True) == expected
    assert combine(checks) == (FAILS if FAILS in verdicts else INCONCLUSIVE)  # the default: every one must hold


def test_crosspaper_cpu_has_a_longer_budget_and_its_2_epoch_claims_need_it():
    from papers.crosspaper import experiments as cross

    specs = [s for s in cross.runs("cpu") if s.table in ("ideas", "ideas_e10")]
    short = {(s.name, s.seed): s.config for s in specs if s.table == "ideas"}
    for s in (s for s in specs if s.table == "ideas_e10"):  # the same run, five times the epochs
        other = short[s.name, s.seed]
        assert s.config["recipe"]["epochs"] == 5 * other["recipe"]["epochs"]
        assert {k: v for k, v in s.config.items() if k not in ("recipe", "init")} == \
            {k: v for k, v in other.items() if k not in ("recipe", "init")}
    paper = load_paper(REPO / "papers" / "crosspaper" / "paper.yaml")
    for idea in cross.IDEAS:  # the 2-epoch table is a budget finding until 10 epochs show the budget is not it
        claim = next(c for c in paper.claims if c.id == f"{idea}_beats_baseline")
        assert "pre_budget_not_limiting" in claim.requires and f"{idea}_beats_baseline_e10" in cross.RESOLVES["cpu"]
    assert _cpu("crosspaper")["convit_beats_baseline"]["verdict"] != FAILS  # was: fails at 2 epochs (-2.74)


def test_an_open_claim_waiting_for_comparisons_says_so():
    """The first screen's reason for an open row: comparisons not yet run come before what the run ones say."""
    ref = Ref("t", "r", "c")
    claim = Claim(id="every", text="every variant beats the baseline", source="", table="t", check="greater",
                  pairs=[(ref, ref)] * 4, relation=">")
    measured = Check(ref, ref, ">", INCONCLUSIVE, "", "lean", effect=0.4, resolvable=2.0, n=(1, 1))
    waiting = [Check(ref, ref, ">", NOT_RUN, "") for _ in range(3)]
    v = Verdict(claim, "cpu", INCONCLUSIVE, "", checks=[measured, *waiting])
    assert why(v, measured) == "3 of 4 comparisons not run yet"
    v.checks = [measured]
    assert why(v, measured) == "fewer than 3 seeds a side"  # once all are run, what the measured one says


def _tested(verdict: str, effect: float, ci: tuple, resolvable: float, paper: float | None = None) -> Check:
    ref = Ref("t", "r", "c")
    test = stats.Test(effect, ci, 0.3, 0.7, "Welch t", 0.5, (3, 3), resolvable)
    return Check(ref, ref, ">", verdict, "", "welch", effect, resolvable, [test], paper_effect=paper)


def test_an_open_row_says_when_it_leans_against_the_claim_and_when_it_excludes_the_papers_effect():
    """'effect below the resolvable' alone hid that the estimate points the other way, or that our interval
    already rules out the effect the paper printed."""
    ref = Ref("t", "r", "c")
    claim = Claim(id="c", text="", source="", table="t", check="greater", pairs=[(ref, ref)], relation=">")
    against = _tested(INCONCLUSIVE, -0.02, (-0.05, 0.01), 0.03)
    assert why(Verdict(claim, "cpu", INCONCLUSIVE, "", checks=[against]), against) == \
        "leans against the claim; effect below the resolvable 0.03"
    small = _tested(INCONCLUSIVE, 0.45, (-1.08, 1.97), 1.6, paper=2.3)
    assert why(Verdict(claim, "cpu", INCONCLUSIVE, "", checks=[small]), small) == \
        "effect below the resolvable 1.6; the interval excludes the paper's +2.3"


def test_a_claim_that_holds_somewhere_is_quoted_from_the_comparison_that_could_make_it_hold():
    """Any comparison holding suffices, so an open one decides, not the one that clearly fails."""
    failing, open_ = _tested(FAILS, -4.45, (-6.8, -2.1), 2.0), _tested(INCONCLUSIVE, 1.44, (-26.3, 29.2), 25.7)
    assert deciding([failing, open_], somewhere=True) is open_
    assert deciding([failing, open_]) is failing  # every one must hold: the failing one decides
