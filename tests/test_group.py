"""runtime.fused=true: a cell's seeds train as one fused group through the CLI (repro/train/fused.py)."""
from __future__ import annotations

import json
import os

import pytest
import torch

from repro import records
from repro.run import locks
from repro.cli import main
from repro.data.batch_aug import BatchAugment
from repro.data.fastpath import fast_loader
from repro.data.tensor_loader import TensorTrainLoader
from repro.train import preempt
from repro.train.fused import FusedRuns

from conftest import fast_args

NO_AUG = ["recipe.mixup=0", "recipe.cutmix=0", "recipe.aa=null", "recipe.reprob=0", "recipe.smoothing=0"]
DATA = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "img_size": 32, "crop_padding": 4}


def test_fast_path_draws_the_tensor_pipelines_batches_under_crop_and_flip_alone():
    """Why a tensor-pipeline run under such a recipe (the cpu scale's) can train fused unchanged."""
    recipe = {"aa": None, "reprob": 0.0, "mixup": 0.0, "cutmix": 0.0, "hflip": 0.5}
    images = torch.randint(0, 256, (40, 3, 32, 32), dtype=torch.uint8)
    labels = torch.arange(40) % 10
    fast = fast_loader(images, labels, 8, recipe, DATA, 10, seed=4)
    tensor = TensorTrainLoader(images, labels, 8, BatchAugment(recipe, DATA, "cpu"), seed=4)
    for epoch in (0, 1):
        for (a, ya), (b, yb) in zip(fast.epoch(epoch), tensor.epoch(epoch), strict=True):
            assert torch.equal(a, b) and torch.equal(ya, yb)


@pytest.mark.slow
def test_fused_seeds_stopped_and_resumed_record_what_alone_runs_record(dirs, tmp_path, monkeypatch):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "seeds=2", "recipe.epochs=2", "recipe.lr=3e-3",
                     "recipe.warmup_epochs=0", "runtime.checkpoint_every_s=0", *NO_AUG)
    assert main(["reproduce", *args]) == 0  # alone
    alone = {r["run_id"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    fused_root = tmp_path / "fused"
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(fused_root))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "fused_cache"))
    calls = []
    with monkeypatch.context() as m:  # a stop request at the 13th step of the first group (of 20)
        m.setattr(preempt, "requested", lambda: calls.append(1) or len(calls) == 13)
        assert main(["reproduce", *args, "runtime.fused=true"]) != 0
    assert not records.load_records(pid, root=fused_root)[0]
    assert main(["reproduce", *args, "runtime.fused=true"]) == 0
    fused = {r["run_id"]: r for r in records.load_records(pid, root=fused_root)[0]}
    assert sorted(fused) == sorted(alone) and len(fused) == 4
    for run_id, rec in fused.items():
        ref = alone[run_id]
        prov = rec["provenance"]
        assert ref["provenance"]["trained"] == "alone" and prov["trained"] == "fused"
        assert len(prov["fused_with"]) == 1 and prov["fused_with"][0] != run_id
        assert fused[prov["fused_with"][0]]["cell"] == rec["cell"]  # the other seed of its cell
        a, b = ref["metrics"], rec["metrics"]
        assert a["steps"] == b["steps"] and len(a["history"]) == len(b["history"]) == a["epochs"]
        for ra, rb in zip(a["history"], b["history"]):
            assert ra["train_loss"] == pytest.approx(rb["train_loss"], rel=1e-4)
        assert a["eval_loss"] == pytest.approx(b["eval_loss"], rel=1e-4)
        assert abs(a["top1"] - b["top1"]) <= 100 / 40  # at most one of the 40 test images


def test_the_engine_trains_on_the_fast_path_with_its_own_mixing(dirs):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", "data.pipeline=fastpath", "recipe.max_steps=3",
                                         "recipe.epochs=1")]) == 0
    recs = records.load_records(pid, root=dirs["results"])[0]
    assert len(recs) == 2 and all(r["status"] == "finished" for r in recs)
    assert all(r["provenance"]["data"]["pipeline"] == "fastpath" and r["metrics"]["steps"] == 3 for r in recs)
    assert recs[0]["config"]["recipe"]["mixup"] > 0 and recs[0]["config"]["recipe"]["aa"]


def test_a_fused_group_takes_each_runs_lock_where_a_run_alone_does(dirs, capsys):
    """One lock discipline: a run whose lock a live process holds in the results folder stays out of its
    fused group, as it is skipped when it trains alone (fused groups used to lock in the cache instead)."""
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "seeds=2", "recipe.epochs=1", "recipe.max_steps=2", *NO_AUG,
                     "runtime.fused=true", "report=false")
    assert main(["list", *args]) == 0
    held = next(line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("table2"))
    folder = dirs["results"] / pid / "tiny" / "locks" / held
    folder.mkdir(parents=True)
    (folder / locks.LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "since": 0}))
    assert main(["reproduce", *args]) == 0
    out = capsys.readouterr().out
    recs = {r["run_id"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    assert held not in recs and f"skip {held}: another process holds it (pid {os.getppid()}" in out
    assert len(recs) == 3 and sum(r["provenance"]["trained"] == "fused" for r in recs.values()) == 2


def test_a_finished_fused_group_into_a_fresh_results_folder_trains_again(dirs, tmp_path, monkeypatch):
    """As a run alone does (checkpoint.for_record): another folder's final checkpoints over a shared cache are
    not turned into this folder's records; the group trains, and its checkpoints name the records they are for."""
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "seeds=2", "recipe.epochs=1", "recipe.max_steps=2", *NO_AUG,
                     "runtime.fused=true", "report=false")
    assert main(["reproduce", *args]) == 0
    first = {r["run_id"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(fresh))  # the same REPRO_CACHE_DIR
    spent = []
    real_step = FusedRuns.step
    monkeypatch.setattr(FusedRuns, "step", lambda self, *a: spent.append(1) or real_step(self, *a))
    assert main(["reproduce", *args]) == 0
    again = {r["run_id"]: r for r in records.load_records(pid, root=fresh)[0]}
    assert sorted(again) == sorted(first) and spent  # trained, not copied from the other folder's checkpoints
    assert all("resumed_from" not in r["provenance"] for r in again.values())
    for run_id in again:
        state = torch.load(dirs["cache"] / "runs" / pid / "tiny" / run_id / "last.pt", weights_only=True)
        assert state["record"] == str((fresh / pid / "tiny" / "records" / f"{run_id}.json").resolve())


def test_a_fused_run_that_diverges_stops_alone_and_its_group_trains_on(dirs, monkeypatch):
    """One engine for both: a non-finite loss ends that run (its record says where), the other run of the
    group finishes every epoch, as each would alone."""
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "seeds=2", "recipe.epochs=2", *NO_AUG, "runtime.fused=true",
                     "report=false")
    real_step = FusedRuns.step

    def step(self, *a):
        losses = real_step(self, *a)
        return torch.where(torch.arange(len(losses)) == 1, losses + (torch.nan if self.step_count >= 3 else 0), losses)
    monkeypatch.setattr(FusedRuns, "step", step)
    assert main(["reproduce", *args]) == 0
    fused = [r for r in records.load_records(pid, root=dirs["results"])[0] if r["provenance"]["trained"] == "fused"]
    assert fused
    for cell in {json.dumps(r["cell"], sort_keys=True) for r in fused}:
        recs = sorted((r for r in fused if json.dumps(r["cell"], sort_keys=True) == cell), key=lambda r: r["seed"])
        assert [r["status"] for r in recs] == ["finished", "diverged"]
        done, stopped = recs[0]["metrics"], recs[1]["metrics"]
        assert stopped["diverged_step"] == 3 and len(stopped["history"]) < len(done["history"]) == done["epochs"]
        assert "top1" in done and "top1" not in stopped
