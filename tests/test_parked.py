"""Parked checkpoints: a campaign stopped on one machine goes on on another that has only the repository (the
records and ``results/<paper>/<scale>/parked/``), resuming exactly; park keeps only what unfinished runs need."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repro import records
from repro.cli import main
from repro.run import parked, sequential
from repro.runs import final_checkpoint
from repro.train import checkpoint, preempt

from conftest import EXPERIMENTS, PROBES, build_specs, fast_args, write_paper
from test_cluster import SIGNAL_HOOK, _signal_args
from test_group import NO_AUG
from test_train_init import EXPERIMENTS as TWO_PHASE, PROBES as TWO_PHASE_PROBES, _specs

TIMING = ("epoch_s", "images_per_s")


def _without_timing(metrics: dict) -> dict:
    history = [{k: v for k, v in row.items() if k not in TIMING} for row in metrics["history"]]
    return {**metrics, "history": history}


def _machine(monkeypatch, tmp_path, name, results=None):
    """A fresh cache: another machine; with ``results``, a clone of that results folder at another path."""
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / f"cache-{name}"))
    if results is not None:
        shutil.copytree(results, tmp_path / f"results-{name}")
        monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / f"results-{name}"))
        return tmp_path / f"results-{name}"


def test_a_run_stopped_on_one_machine_resumes_exactly_on_another_from_its_parked_checkpoint(
        dirs, capsys, tmp_path, monkeypatch):
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "term-now"
    args = _signal_args(pid, flag)
    assert main(["reproduce", *args]) == 0  # uninterrupted reference
    (ref,) = records.load_records(pid, root=dirs["results"])[0]
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "repo-results"))
    _machine(monkeypatch, tmp_path, "first")
    flag.touch()
    assert main(["reproduce", *args]) == preempt.EXIT_CODE  # stopped mid-run, checkpointed
    flag.unlink()
    capsys.readouterr()
    assert main(["park", *args]) == 0
    assert f"parked {ref['run_id']} (checkpoint" in capsys.readouterr().out
    parked_file = tmp_path / "repo-results" / pid / "tiny" / "parked" / f"{ref['run_id']}.pt"
    assert parked_file.exists()

    _machine(monkeypatch, tmp_path, "second", tmp_path / "repo-results")  # a clone elsewhere, an empty cache
    assert main(["list", *args]) == 0 and "parked" in capsys.readouterr().out
    assert main(["reproduce", *args]) == 0
    assert f"resume {ref['run_id']}" in capsys.readouterr().out
    (again,) = records.load_records(pid, root=tmp_path / "results-second")[0]
    assert _without_timing(again["metrics"]) == _without_timing(ref["metrics"]) and again["run_id"] == ref["run_id"]
    assert again["provenance"]["resumed_from"]["step"] == 5  # the record names the checkpoint it went on from
    assert not (tmp_path / "results-second" / parked_file.relative_to(tmp_path / "repo-results")).exists()
    assert main(["park", *args]) == 0 and "nothing to park" in capsys.readouterr().out


def test_a_parked_checkpoint_further_on_than_the_cache_wins(dirs, capsys, tmp_path, monkeypatch):
    """A machine whose cache holds an older checkpoint of the run: the parked one is restored, and park keeps it."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "term-now"
    args = _signal_args(pid, flag)
    assert main(["reproduce", *args]) == 0
    (ref,) = records.load_records(pid, root=dirs["results"])[0]
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "repo-results"))
    _machine(monkeypatch, tmp_path, "first")
    flag.touch()
    assert main(["reproduce", *args]) == preempt.EXIT_CODE  # step 5
    (old,) = (tmp_path / "cache-first").rglob("last.pt")
    stale = tmp_path / "stale.pt"
    shutil.copy(old, stale)
    assert main(["reproduce", *args]) == preempt.EXIT_CODE  # resumed, stopped again 5 steps on: step 10
    flag.unlink()
    assert main(["park", *args]) == 0 and "checkpoint at step 10" in capsys.readouterr().out
    _machine(monkeypatch, tmp_path, "second", tmp_path / "repo-results")
    cached = tmp_path / "cache-second" / old.relative_to(tmp_path / "cache-first")
    cached.parent.mkdir(parents=True)
    shutil.copy(stale, cached)  # this machine stopped the run earlier
    assert main(["park", *args]) == 0
    assert f"kept parked {ref['run_id']} (step 10, further than the cache's 5)" in capsys.readouterr().out
    assert main(["reproduce", *args]) == 0
    (again,) = records.load_records(pid, root=tmp_path / "results-second")[0]
    assert again["provenance"]["resumed_from"]["step"] == 10
    assert _without_timing(again["metrics"]) == _without_timing(ref["metrics"])


def _two_phase_specs(pid):
    return build_specs(_specs(pid), {"data": {"max_per_class": 16, "test_max_per_class": 4},
                                     "recipe": {"batch_size": 8}})


def test_park_keeps_the_final_model_an_unfinished_run_starts_from_and_drops_what_nothing_needs(
        dirs, capsys, tmp_path, monkeypatch):
    d, pid = dirs, dirs["pid"]
    write_paper(d["papers"], pid, TWO_PHASE, TWO_PHASE_PROBES)
    args = fast_args(pid, "runtime.checkpoint_every_s=0")
    assert main(["reproduce", *args]) == 0
    first, second = _two_phase_specs(pid)
    second_rec = records.record_path(pid, "tiny", second.run_id, d["results"])
    top1 = records.read_record(second_rec)["metrics"]["top1"]
    second_rec.unlink()  # the dependent unfinished
    assert main(["park", *args]) == 0  # with a checkpoint of its own it needs no weights from its source
    assert [p.stem for p in parked.parked_path(first).parent.iterdir()] == [second.run_id]
    final_checkpoint(second).unlink()  # with none, it starts from its source's final model
    parked.parked_path(second).unlink()
    foreign = d["results"] / pid / "tiny" / "parked" / "other-plan-s0-0123456789.pt"
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_bytes(b"parked by a command with other arguments")
    capsys.readouterr()
    assert main(["park", *args]) == 0
    out = capsys.readouterr().out
    assert f"parked {first.run_id} (final model" in out and "left other-plan-s0-0123456789.pt" in out
    assert sorted(p.name for p in foreign.parent.iterdir()) == sorted([f"{first.run_id}.pt", foreign.name])

    _machine(monkeypatch, tmp_path, "second")  # the source's final model exists only parked
    assert main(["reproduce", *args]) == 0
    again = records.read_record(second_rec)
    assert again["status"] == "finished" and again["metrics"]["top1"] == top1
    assert main(["park", *args]) == 0  # all finished: the source's model is needed no more
    assert f"unparked {first.run_id}.pt" in capsys.readouterr().out
    assert sorted(p.name for p in foreign.parent.iterdir()) == [foreign.name]


def test_a_parked_checkpoint_of_another_config_stops_the_command_before_anything_trains(dirs, capsys, tmp_path,
                                                                                       monkeypatch):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "runtime.checkpoint_every_s=0")
    assert main(["reproduce", *args]) == 0
    overrides = {"data": {"max_per_class": 16, "test_max_per_class": 4}, "recipe": {"batch_size": 8}}
    trained = build_specs(_specs(pid, tables=["table2"]), overrides)
    overrides["recipe"]["lr"] = 0.02
    first, second = build_specs(_specs(pid, tables=["table2"]), overrides)  # the command's two runs, in order
    assert {first.run_id, second.run_id}.isdisjoint(s.run_id for s in trained)
    parked.parked_path(second).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(final_checkpoint(trained[0]), parked.parked_path(second))  # another run's file under its name
    _machine(monkeypatch, tmp_path, "second")
    capsys.readouterr()
    assert main(["reproduce", *args, "recipe.lr=0.02"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert f"{parked.parked_path(second)} was written for config {trained[0].fingerprint}" in err
    assert "git rm it" in err
    for s in (first, second):  # its first run did not train either: nothing written, nothing copied
        assert not records.record_path(pid, "tiny", s.run_id).exists() and not final_checkpoint(s).exists()
    assert main(["park", "scale=tiny"]) == 2 and "park needs paper=" in capsys.readouterr().err


@pytest.mark.slow
def test_fused_groups_resume_their_parked_checkpoints_and_release_them(dirs, tmp_path, monkeypatch, capsys):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "seeds=2", "recipe.epochs=2", "recipe.lr=3e-3", "recipe.warmup_epochs=0",
                     "runtime.checkpoint_every_s=0", "runtime.fused=true", *NO_AUG)
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "repo-results"))
    _machine(monkeypatch, tmp_path, "first")
    calls = []
    with monkeypatch.context() as m:  # a stop request in the first fused group
        m.setattr(preempt, "requested", lambda: calls.append(1) or len(calls) == 13)
        assert main(["reproduce", *args]) != 0
    assert main(["park", *args]) == 0
    held = [p.stem for p in (tmp_path / "repo-results").rglob("parked/*.pt")]
    assert len(held) == 2  # the group's two runs, stopped mid-way
    _machine(monkeypatch, tmp_path, "second", tmp_path / "repo-results")
    real, seen = sequential.train_packed, {}

    def spy(todo, rt, say):  # what the fused path finds in the cache when it starts
        seen.update({s.run_id: final_checkpoint(s).exists() for s in todo})
        return real(todo, rt, say)
    monkeypatch.setattr(sequential, "train_packed", spy)
    assert main(["reproduce", *args]) == 0
    assert all(seen[run_id] for run_id in held)
    recs = {r["run_id"]: r for r in records.load_records(pid, root=tmp_path / "results-second")[0]}
    assert len(recs) == 4 and all(recs[i]["provenance"]["resumed_from"]["step"] > 0 for i in held)
    assert all(recs[i]["provenance"]["trained"] == "fused" for i in held)
    assert not list((tmp_path / "results-second").rglob("parked/*.pt"))


def test_git_carries_parked_checkpoints():
    """The repository is all a replaced machine keeps: a parked checkpoint must not be one git ignores.

    --no-index: without it git reports a tracked file as not ignored whatever .gitignore says."""
    root = Path(__file__).resolve().parents[1]
    for path in ("results/augvit/cpu/parked/ablations-augvit-augvit-s0-949446e280.pt", "results/x/tiny/parked/r.pt"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=root)
        assert ignored.returncode == 1, path
