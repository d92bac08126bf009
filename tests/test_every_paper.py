"""Every paper end to end without data: its tiny runs as a smoke test through records and report, its cpu
scale as a dry run (each distinct model two optimizer steps at its resolution); the full scale's dry runs are
test_full_dry_run.py. Files apart from test_cli.py and each other: pytest-xdist's per-file scheduling
(``--dist loadfile``) hands a whole file to one worker, and these are the suite's slowest tests."""
from __future__ import annotations

import pytest

from repro import records
from repro.cli import main
from repro.plan.experiments import known_papers, paper_scales
from repro.plan.store import read_plan
from tests.conftest import papers_with_models


@pytest.mark.slow
@pytest.mark.parametrize("paper", papers_with_models("tiny"))
def test_every_paper_tiny_smoke_through_records_and_report(paper, dirs, capsys):
    """CI smoke: each tiny run a few steps (synthetic data where the dataset is missing), then the report."""
    assert main(["reproduce", f"paper={paper}", "scale=tiny", "smoke=true", "runtime.progress=false"]) == 0
    recs, bad = records.load_records(paper, root=dirs["results"])
    planned = read_plan(paper, "tiny-smoke", dirs["results"])["runs"]  # a cell another run fills has no record
    assert not bad and sorted(r["run_id"] for r in recs) == sorted(r["run_id"] for r in planned)
    assert all(r["status"] == "finished" and r["config"]["mode"] == "smoke" for r in recs)
    assert any(dirs["results"].joinpath(paper).glob("REPORT*")), "report not rendered"


def _papers_at(scale):
    return [p for p in known_papers() if scale in paper_scales(p)]


@pytest.mark.slow
@pytest.mark.parametrize("paper", _papers_at("cpu"))
def test_every_cpu_run_dry_runs(paper, dirs, capsys):
    """Every distinct model of the paper's cpu scale, two optimizer steps on synthetic data, no record."""
    assert main(["reproduce", f"paper={paper}", "scale=cpu", "dry_run=true"]) == 0
    assert "dry run:" in capsys.readouterr().out
    assert not list(dirs["results"].rglob("records/*.json"))
