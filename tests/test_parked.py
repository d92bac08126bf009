"""Parked checkpoints: a campaign stopped on one machine goes on on another that has only the repository (the
records and ``results/<paper>/<scale>/parked/``), resuming exactly; park keeps only what unfinished runs need."""
from __future__ import annotations

import shutil

import pytest

from repro import records
from repro.cli import main
from repro.run import parked
from repro.runs import final_checkpoint
from repro.train import checkpoint, preempt

from conftest import EXPERIMENTS, PROBES, build_specs, fast_args, write_paper
from test_cluster import SIGNAL_HOOK, _signal_args
from test_train_init import EXPERIMENTS as TWO_PHASE, PROBES as TWO_PHASE_PROBES, _specs

TIMING = ("epoch_s", "images_per_s")


def _without_timing(metrics: dict) -> dict:
    history = [{k: v for k, v in row.items() if k not in TIMING} for row in metrics["history"]]
    return {**metrics, "history": history}


def _machine(monkeypatch, tmp_path, name):
    """A fresh cache: another machine, with the same results folder (the repository's committed files)."""
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / f"cache-{name}"))


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

    _machine(monkeypatch, tmp_path, "second")
    assert main(["list", *args]) == 0 and "parked" in capsys.readouterr().out
    assert main(["reproduce", *args]) == 0
    assert f"resume {ref['run_id']}" in capsys.readouterr().out
    (again,) = records.load_records(pid, root=tmp_path / "repo-results")[0]
    assert _without_timing(again["metrics"]) == _without_timing(ref["metrics"]) and again["run_id"] == ref["run_id"]
    assert not parked_file.exists()  # the run ended: its parked checkpoint goes
    assert main(["park", *args]) == 0 and "nothing to park" in capsys.readouterr().out


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
    second_rec.unlink()  # the dependent unfinished, with no checkpoint of its own: it starts from its source
    final_checkpoint(second).unlink()
    foreign = d["results"] / pid / "tiny" / "parked" / "other-plan-s0-0123456789.pt"
    foreign.parent.mkdir(parents=True)
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


def test_a_parked_checkpoint_of_another_config_is_refused_not_resumed(dirs, capsys, tmp_path, monkeypatch):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "runtime.checkpoint_every_s=0")
    assert main(["reproduce", *args]) == 0
    (rec,) = records.load_records(pid, root=dirs["results"])[0]
    overrides = {"data": {"max_per_class": 16, "test_max_per_class": 4}, "recipe": {"batch_size": 8}}
    (trained,) = build_specs(_specs(pid, tables=["table2"], num_shards=2, shard=1), overrides)
    overrides["recipe"]["lr"] = 0.02
    (other,) = build_specs(_specs(pid, tables=["table2"], num_shards=2, shard=1), overrides)
    assert trained.run_id == rec["run_id"] != other.run_id
    parked.parked_path(other).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(final_checkpoint(trained), parked.parked_path(other))  # a file under another run's name
    _machine(monkeypatch, tmp_path, "second")
    capsys.readouterr()
    assert main(["reproduce", *args[:-1], "recipe.lr=0.02"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and f"parked {parked.parked_path(other)} cannot" in err
    assert "git rm that file" in err and not final_checkpoint(other).exists()  # nothing copied, nothing trained
    assert not records.record_path(pid, "tiny", other.run_id).exists()
    with pytest.raises(checkpoint.CheckpointError):
        checkpoint.load(parked.parked_path(other), other.fingerprint)
    assert main(["park", "scale=tiny"]) == 2 and "park needs paper=" in capsys.readouterr().err
