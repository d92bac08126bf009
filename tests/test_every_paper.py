"""Every paper end to end without data: its tiny runs as a smoke test through records and report, its full
and cpu scales as dry runs (each distinct model two optimizer steps at its resolution). Kept apart from
test_cli.py so that pytest-xdist's per-file scheduling spreads these slow tests over its workers."""
from __future__ import annotations

import pytest
import timm

from repro import records
from repro.cli import main
from repro.plan.experiments import known_papers, paper_runs, paper_scales
from repro.plan.store import read_plan
from repro.train.model import register_models


def _papers_with_models(scale):
    """Every paper; one whose runs name a model timm does not know fails here (at collection), not skips."""
    for paper in known_papers():
        register_models(paper)
        missing = sorted({s.config["model"]["name"] for s in paper_runs(paper, scale)
                          if s.kind == "train" and not timm.is_model(s.config["model"]["name"])})
        assert not missing, f"{paper} at {scale}: models not registered: {', '.join(missing)}"
    return known_papers()


@pytest.mark.slow
@pytest.mark.parametrize("paper", _papers_with_models("tiny"))
def test_every_paper_tiny_smoke_through_records_and_report(paper, dirs, capsys):
    """CI smoke: each tiny run a few steps (synthetic data where the dataset is missing), then the report."""
    assert main(["reproduce", f"paper={paper}", "scale=tiny", "smoke=true", "runtime.progress=false"]) == 0
    recs, bad = records.load_records(paper, root=dirs["results"])
    planned = read_plan(paper, "tiny-smoke", dirs["results"])["runs"]  # a cell another run fills has no record
    assert not bad and sorted(r["run_id"] for r in recs) == sorted(r["run_id"] for r in planned)
    assert all(r["status"] == "finished" and r["config"]["mode"] == "smoke" for r in recs)
    assert any(dirs["results"].joinpath(paper).glob("REPORT*")), "report not rendered"


@pytest.mark.slow
@pytest.mark.parametrize("paper", _papers_with_models("full"))
def test_every_paper_full_dry_run(paper, dirs, capsys):
    """The paper's models at the paper's resolution, two optimizer steps on synthetic data, no record."""
    assert main(["reproduce", f"paper={paper}", "scale=full", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    assert "dry run:" in out and "steps" in out
    assert not list(dirs["results"].rglob("records/*.json")) and not (dirs["cache"] / "runs").exists()


def test_dry_run_of_the_fake_paper_at_full_scale(dirs, capsys):
    assert main(["reproduce", f"paper={dirs['pid']}", "scale=full", "dry_run=true", "data.num_classes=20",
                 "data.img_size=64"]) == 0
    out = capsys.readouterr().out
    assert "2 distinct run config(s) of 3" in out and "at 64 px" in out and "2 steps" in out
    assert not list(dirs["results"].rglob("records/*.json"))


def _papers_at(scale):
    return [p for p in known_papers() if scale in paper_scales(p)]


@pytest.mark.slow
@pytest.mark.parametrize("paper", _papers_at("cpu"))
def test_every_cpu_run_dry_runs(paper, dirs, capsys):
    """Every distinct model of the paper's cpu scale, two optimizer steps on synthetic data, no record."""
    assert main(["reproduce", f"paper={paper}", "scale=cpu", "dry_run=true"]) == 0
    assert "dry run:" in capsys.readouterr().out
    assert not list(dirs["results"].rglob("records/*.json"))
