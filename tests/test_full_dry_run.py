"""Every paper's full scale as a dry run: the paper's models at the paper's resolution, two optimizer steps
each on synthetic data, no record. A file of its own (test_every_paper.py has the smoke and cpu dry runs): a
quarter of the suite's test time, which pytest-xdist's per-file scheduling can give a worker of its own."""
from __future__ import annotations

import pytest

from repro.cli import main
from tests.conftest import papers_with_models


@pytest.mark.slow
@pytest.mark.parametrize("paper", papers_with_models("full"))
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
