"""The READMEs' generated results blocks (repro/report/readme.py) and the READMEs' size limits."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro.records import SCHEMA
from repro.report import readme
from repro.paper import paper_ids

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 12_000  # characters, README.md and each papers/<id>/README.md


def _summary() -> dict:
    """The rows the blocks are cut from: the first screen's (each claim's deciding comparison) and the tallies."""
    row = {"id": "a_beats_b", "kind": "training", "verdict": "holds", "result": None, "qualifier": "",
           "effect": 6.78, "ci": [4.77, 8.79], "unit": "%", "paper_effect": 3.2,
           "toward": {"effect": 6.78, "ci": [4.77, 8.79], "paper": 3.2},
           "setting": {"short": "32 px, trained 10 epochs, 0.86M"}}
    pre = {"id": "pre_limited", "kind": "precondition", "verdict": "not met", "unit": "%", "qualifier": "",
           "toward": {"effect": -1.5, "ci": [-2.0, -1.0], "paper": None}}
    tallies = {"cpu": {"training": {"holds": 1}, "cited": {}, "ours": {}, "theory": {"holds": 2, "fails": 1},
                       "theory_fails": ["bound_b"], "precondition": {"not met": 1}, "smoke": False},
               "tiny": {"training": {}, "theory": {"holds": 2}, "smoke": True}}
    return {"paper": "toy", "scales": ["cpu", "tiny"], "tallies": tallies,
            "first_screen": [{"scale": "cpu", "rows": [row], "preconditions": [pre]}]}


@pytest.fixture
def repo(tmp_path):
    """A checkout in miniature: README.md, papers/toy/{paper.yaml,README.md}, results/toy/ with two records."""
    (tmp_path / "papers" / "toy").mkdir(parents=True)
    (tmp_path / "papers" / "toy" / "paper.yaml").write_text("id: toy\n")
    (tmp_path / "papers" / "toy" / "README.md").write_text(
        f"# Toy\n\nProtocol by hand.\n\n{readme.BEGIN}\nold numbers\n{readme.END}\n\nPilots by hand.\n")
    (tmp_path / "README.md").write_text(f"# top\n\n{readme.BEGIN}\n{readme.END}\ntail\n")
    res = tmp_path / "results" / "toy"
    (res / "cpu" / "records").mkdir(parents=True)
    (res / "summary.json").write_text(json.dumps(_summary()))
    for i, wall in enumerate((1800.0, 5400.0)):
        rec = {"schema": SCHEMA, "paper": "toy", "table": "t", "cell": {}, "scale": "cpu", "seed": i, "run_id": f"r{i}",
               "status": "finished", "kind": "train", "config": {}, "metrics": {},
               "provenance": {"wall_s": wall, "device": "cpu", "cpu": "x86_64", "cpu_threads": 1}}
        (res / "cpu" / "records" / f"r{i}.json").write_text(json.dumps(rec))
    return tmp_path


def _write(repo: Path) -> list[Path]:
    return readme.write_readmes(repo / "papers", repo / "results")


def test_block_is_generated_from_the_summary_and_the_records(repo):
    changed = _write(repo)
    text = (repo / "papers" / "toy" / "README.md").read_text()
    assert set(changed) == {repo / "papers" / "toy" / "README.md", repo / "README.md"}
    assert "old numbers" not in text
    assert "| `a_beats_b` | holds | +6.78 [+4.77, +8.79] % | +3.2 | 32 px, trained 10 epochs, 0.86M |" in text
    assert "cost 2.0 h, 2 runs, cpu" in text  # (1800 + 5400) s
    assert "Preconditions: `pre_limited` not met (-1.5 [-2, -1] %)" in text
    assert "Theory: 2 holds, 1 fails; fails: `bound_b`." in text and "Smoke scale" in text
    top = (repo / "README.md").read_text()
    assert ("| [toy](papers/toy/) | cpu | 1 holds | - | - | 2 holds, 1 fails; fails: `bound_b` | 1 not met "
            "| 2.0 h, 2 runs, cpu |") in top


def test_text_outside_the_markers_is_kept_and_a_second_run_changes_nothing(repo):
    _write(repo)
    text = (repo / "papers" / "toy" / "README.md").read_text()
    assert text.startswith("# Toy\n\nProtocol by hand.\n\n" + readme.BEGIN)
    assert text.endswith(readme.END + "\n\nPilots by hand.\n")
    assert (repo / "README.md").read_text().endswith(readme.END + "\ntail\n")
    assert _write(repo) == []
    assert (repo / "papers" / "toy" / "README.md").read_text() == text


def test_a_hand_edit_inside_the_block_is_overwritten(repo):
    _write(repo)
    path = repo / "papers" / "toy" / "README.md"
    generated = path.read_text()
    path.write_text(generated.replace("+6.78", "+9.99"))
    assert _write(repo) == [path]
    assert path.read_text() == generated


def test_missing_markers_is_an_error_naming_the_file(repo):
    path = repo / "papers" / "toy" / "README.md"
    path.write_text("# Toy\n\nno block\n")
    with pytest.raises(readme.MissingMarkers, match=str(path)):
        _write(repo)
    assert path.read_text() == "# Toy\n\nno block\n"


def test_cost_names_each_device_once_when_runs_moved_between_devices(repo):
    """Runs resumed on another device (a GPU's, then the CPU's) used to be counted as '3 devices', one per
    combination; the cost names the devices themselves, GPUs by their model."""
    records = repo / "results" / "toy" / "cpu" / "records"
    rec = json.loads((records / "r1.json").read_text())
    rec["provenance"].update(device="cpu", devices=[{"device": "NVIDIA H200", "from_epoch": 0},
                                                    {"device": "cpu", "from_epoch": 4}])
    (records / "r1.json").write_text(json.dumps(rec))
    rec.update(run_id="r2", seed=2)
    rec["provenance"] = {"wall_s": 3600.0, "device": "NVIDIA H100 80GB HBM3"}
    (records / "r2.json").write_text(json.dumps(rec))
    assert readme.costs("toy", repo / "results", ["cpu"]) == {"cpu": "3.0 h, 3 runs, H100 + H200 + cpu"}


def test_results_elsewhere_leave_the_readmes_alone(repo, tmp_path_factory):
    other = tmp_path_factory.mktemp("elsewhere")
    assert readme.write_readmes(repo / "papers", other) == []


def test_committed_readmes_match_the_committed_summaries():
    """Fails when a README's block drifts from results/: run `make report` and commit the READMEs."""
    summaries, cost = [], {}
    for pid in paper_ids(ROOT / "papers"):
        summary = json.loads((ROOT / "results" / pid / "summary.json").read_text())
        summaries.append(summary)
        cost[pid] = readme.costs(pid, ROOT / "results", summary["scales"])
        path = ROOT / "papers" / pid / "README.md"
        text = path.read_text()
        block = readme.paper_block(summary, cost[pid])
        assert readme.splice(text, block, path) == text, f"{path} is stale: run make report and commit it"
    path = ROOT / "README.md"
    text = path.read_text()
    block = readme.index_block(summaries, cost)
    assert readme.splice(text, block, path) == text, f"{path} is stale: run make report and commit it"


@pytest.mark.parametrize("path", ["README.md", *(f"papers/{p}/README.md" for p in paper_ids(ROOT / "papers"))])
def test_readme_size_limit(path):
    size = len((ROOT / path).read_text())
    assert size <= LIMIT, f"{path}: {size} characters, over {LIMIT}; move reference material to its own README"


def test_a_row_resolved_only_on_its_own_p_says_so():
    """Five ideas against one baseline are five chances of a "holds": a row whose p Holm-adjusted across them
    is 0.05 or more says so beside its verdict; one that survives the family does not."""
    row = {"verdict": "holds", "result": None, "why": "", "qualifier": "",
           "family": {"size": 5, "p_holm": 0.067, "side": "holds"}}
    assert readme._verdict(row) == "holds (on its own p; Holm across the 5 rows sharing its baseline: 0.067)"
    row["family"]["p_holm"] = 0.01
    assert readme._verdict(row) == "holds"
