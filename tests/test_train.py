"""Training engine: DeiT recipe parts, checkpoints, the loop (learns, diverges, hooks), kill/resume, DDP."""
import csv
import json
import random
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

from repro import records
from repro.cli import main
from repro.train import checkpoint
from repro.train.checkpoint import CheckpointError
from repro.train.recipe import (build_criterion, build_mixup, build_optimizer, build_scheduler,
                                learning_rate, run_epochs)

from conftest import fast_args, subprocess_env

NO_AUG = ["recipe.mixup=0", "recipe.cutmix=0", "recipe.aa=null", "recipe.reprob=0", "recipe.smoothing=0"]


def records_of(d, pid, scale="tiny"):
    good, bad = records.load_records(pid, root=d["results"])
    assert not bad
    return sorted(good, key=lambda r: r["run_id"])


# ------------------------------------------------------------------ recipe

def test_deit_lr_rule_and_fraction_epochs():
    assert learning_rate({"base_lr": 5e-4, "batch_size": 1024}) == pytest.approx(1e-3)
    assert learning_rate({"base_lr": 5e-4, "batch_size": 256, "lr": 0.1}) == 0.1
    assert run_epochs({"epochs": 300}, {"fraction": 0.05}) == 6000
    assert run_epochs({"epochs": 300}, {"fraction": 0.3}) == 1000
    assert run_epochs({"epochs": 300, "scale_epochs_with_fraction": False}, {"fraction": 0.3}) == 300


def test_a_fractional_warm_up_is_that_share_of_the_updates():
    """warmup_epochs=0.2 of a 2-epoch run stepped per update: the lr climbs for 10 % of the updates (4 of
    40), peaks there and only falls after; 0.25 epochs of 10 updates round to 2 (2.5 is even-rounded)."""
    import timm
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=1, embed_dim=32,
                              num_heads=2, num_classes=10)
    recipe = {"opt": "adamw", "lr": 1e-3, "sched": "cosine", "warmup_epochs": 0.2, "warmup_lr": 1e-6,
              "min_lr": 0.0, "step_on_epochs": False}
    for warmup, peak in ((0.2, 4), (0.25, 2)):
        opt = build_optimizer(model, recipe)
        sched = build_scheduler(opt, {**recipe, "warmup_epochs": warmup}, epochs=2, steps_per_epoch=20 if warmup == 0.2 else 10)
        lrs = []
        for step in range(12):
            sched.step_update(num_updates=step)
            lrs.append(opt.param_groups[0]["lr"])
        assert lrs[0] == pytest.approx(1e-6)
        assert all(a < b for a, b in zip(lrs[:peak], lrs[1:peak + 1])) and lrs[peak] == max(lrs)
        assert all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:]))


def test_optimizer_scheduler_mixup_criterion_from_config():
    import timm
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=1, embed_dim=32,
                              num_heads=2, num_classes=10)
    recipe = {"opt": "adamw", "base_lr": 5e-4, "batch_size": 512, "weight_decay": 0.05, "opt_eps": 1e-8,
              "sched": "cosine", "warmup_epochs": 1, "warmup_lr": 1e-6, "min_lr": 1e-5, "step_on_epochs": False}
    opt = build_optimizer(model, recipe)
    assert type(opt).__name__ == "AdamW" and {g["weight_decay"] for g in opt.param_groups} == {0.0, 0.05}
    no_decay = [g for g in opt.param_groups if g["weight_decay"] == 0][0]["params"]
    assert any(p is model.pos_embed for p in no_decay)  # timm's no_weight_decay list is honoured
    sched = build_scheduler(opt, recipe, epochs=5, steps_per_epoch=10)
    lrs = []
    for step in range(51):
        sched.step_update(num_updates=step)
        lrs.append(opt.param_groups[0]["lr"])
    # linear warm-up over the first epoch (10 updates), then timm's cosine over all 50 (DeiT's shape)
    assert lrs[0] == pytest.approx(1e-6) and all(a < b for a, b in zip(lrs[:10], lrs[1:11]))
    cosine = 1e-5 + 0.5 * (5e-4 - 1e-5) * (1 + np.cos(np.pi * 10 / 50))
    assert lrs[10] == pytest.approx(cosine, rel=1e-6)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[50] == pytest.approx(1e-5, rel=1e-2)
    mix = build_mixup({"mixup": 0.8, "cutmix": 1.0, "smoothing": 0.1}, 10)
    assert isinstance(mix, Mixup) and isinstance(build_criterion({}, mix), SoftTargetCrossEntropy)
    assert build_mixup({"mixup": 0, "cutmix": 0}, 10) is None
    # label smoothing without Mixup: timm's loss on class indices, and soft targets accepted too
    torch.manual_seed(0)
    logits, labels = torch.randn(8, 10), torch.randint(0, 10, (8,))
    smoothed = build_criterion({"smoothing": 0.1}, None)
    assert smoothed(logits, labels).item() == pytest.approx(
        LabelSmoothingCrossEntropy(smoothing=0.1)(logits, labels).item(), rel=1e-6)
    soft = torch.nn.functional.one_hot(labels, 10).float()
    assert smoothed(logits, soft).item() == pytest.approx(smoothed(logits, labels).item(), rel=1e-6)


# ------------------------------------------------------------------ checkpoints

def test_checkpoint_roundtrip_rng_and_refusals(tmp_path):
    path = tmp_path / "run" / "last.pt"
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    state = {"fingerprint": "abc", "rng": [checkpoint.rng_state()], "model": {"w": torch.ones(2)}, "epoch": 3}
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    checkpoint.save(path, state)
    (path.parent / ".last.pt.x.tmp").write_bytes(b"half")  # as left by a kill during save
    loaded = checkpoint.load(path, "abc")
    assert not list(path.parent.glob("*.tmp")) and loaded["epoch"] == 3
    checkpoint.set_rng_state(loaded["rng"][0])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    with pytest.raises(CheckpointError) as e:
        checkpoint.load(path, "other")
    assert "written for config abc" in str(e.value) and "\n" not in str(e.value)
    assert checkpoint.load(tmp_path / "none.pt", "abc") is None
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="unreadable"):
        checkpoint.load(path, "abc")
    with pytest.raises(CheckpointError, match="does not fit the model"):
        checkpoint.restore_module(torch.nn.Linear(2, 2), {"weight": torch.ones(3, 3)}, path)


# ------------------------------------------------------------------ the loop, through the CLI

def test_tiny_run_learns_and_records(dirs, capsys):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", "recipe.epochs=6", "data.max_per_class=32",
                                         "recipe.warmup_epochs=0", "recipe.lr=3e-3", *NO_AUG)]) == 0
    recs = records_of(dirs, pid)
    assert [r["cell"]["row"] for r in recs] == ["f100", "f50"] and all(r["status"] == "finished" for r in recs)
    full = recs[0]
    m = full["metrics"]
    assert m["top1"] > 50 and m["top5"] >= m["top1"]  # 10 synthetic classes: chance is 10 %
    assert m["epochs"] == 6 and recs[1]["metrics"]["epochs"] == 12  # epochs x 1/f at f = 0.5
    assert m["steps"] == 6 * (320 // 8) and len(m["history"]) == 6
    p = full["provenance"]
    assert p["world_size"] == 1 and p["bf16"] is False and p["images_per_s"] > 0 and p["wall_s"] > 0
    assert p["trained"] == "alone" and "fused_with" not in p
    assert p["data"]["train"] == "synthetic/train" and p["data"]["train_images"] == 320
    assert full["config"]["model"]["kwargs"]["depth"] == 1 and full["config"]["runtime"]["amp"] == "bf16"
    log = (dirs["cache"] / "runs" / pid / "tiny" / full["run_id"] / "log.csv").read_text().splitlines()
    assert log[0].startswith("epoch,step,train_loss") and len(log) == 7
    out = capsys.readouterr().out
    assert f"[{full['run_id']}] epoch 6/6" in out and "top1" in out


def test_nonfinite_loss_is_recorded_as_diverged_and_not_retried(dirs, capsys):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", f"losses=[{{fn: 'papers.{pid}.probes:nan_at', step: 3}}]")
    assert main(["reproduce", *args]) == 0
    recs = records_of(dirs, pid)
    assert [r["status"] for r in recs] == ["diverged", "diverged"]  # the second run still ran
    assert all(r["metrics"]["diverged_step"] == 3 for r in recs)
    assert recs[0]["config"]["losses"][0]["step"] == 3
    capsys.readouterr()
    assert main(["reproduce", *args]) == 0
    assert capsys.readouterr().out.count("(diverged)") == 2


def test_crash_in_one_run_is_recorded_failed_others_go_on_and_rerun_retries(dirs, capsys):
    pid = dirs["pid"]
    flag = dirs["cache"] / "crash-now"
    flag.touch()
    args = fast_args(pid, f"losses=[{{fn: 'papers.{pid}.probes:crash', flag: '{flag}'}}]")
    assert main(["reproduce", *args]) == 1
    recs = records_of(dirs, pid)
    assert sorted(r["status"] for r in recs) == ["failed", "failed", "finished"]  # the probe run still ran
    failed = [r for r in recs if r["status"] == "failed"][0]
    assert "simulated crash" in failed["metrics"]["error"] and "Traceback" in failed["metrics"]["traceback"]
    capsys.readouterr()
    flag.unlink()
    assert main(["reproduce", *args]) == 0  # failed runs are retried, finished ones skipped
    assert capsys.readouterr().out.count("(finished)") == 1
    assert sorted(r["status"] for r in records_of(dirs, pid)) == ["finished"] * 3


def test_probes_every_epoch_and_at_end_ema(dirs):
    pid = dirs["pid"]
    probe = f"probes=[{{fn: 'papers.{pid}.probes:feature_norm', every_epoch: true, scale: 2.0}}]"
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", probe, "recipe.ema=true",
                                         "recipe.ema_decay=0.5")]) == 0
    rec = records_of(dirs, pid)[0]
    m = rec["metrics"]
    assert m["feature_norm"] > 0 and m["probe_epoch"] == 2  # the end-of-training call
    assert [h["probe_epoch"] for h in m["history"]] == [0, 1]
    assert {"ema_top1", "ema_top5", "top1"} <= set(m)


# ------------------------------------------------------------------ kill / resume, DDP

def _wait_rows(log, n, proc, timeout=240):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if log.exists() and len(log.read_text().splitlines()) > n:
            return
        if proc.poll() is not None:
            pytest.fail(f"run ended before epoch {n}: {proc.stdout.read()}")
        time.sleep(0.02)
    pytest.fail("timed out")


@pytest.mark.slow
def test_sigkill_at_random_steps_then_resume_gives_identical_metrics(dirs, tmp_path):
    pid = dirs["pid"]
    args = [sys.executable, "-m", "repro", "reproduce",
            *fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "recipe.epochs=5",
                       "data.max_per_class=24", "runtime.deterministic=true",
                       "runtime.checkpoint_every_s=0")]
    env = subprocess_env(dirs)
    clean = dict(env, REPRO_RESULTS_DIR=str(tmp_path / "clean_res"), REPRO_CACHE_DIR=str(tmp_path / "clean_cache"))
    ref = subprocess.run(args, env=clean, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr
    rng = random.Random()
    kills = []
    for after_epoch in (0, 2, 3):  # kill somewhere inside epochs 1, 3 and 4 (of 5)
        p = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        logs = list((dirs["cache"] / "runs" / pid / "tiny").glob("*/log.csv"))
        log = logs[0] if logs else None
        while log is None:
            time.sleep(0.05)
            logs = list((dirs["cache"] / "runs" / pid / "tiny").glob("*/log.csv"))
            log = logs[0] if logs else None
            if p.poll() is not None:
                pytest.fail(p.stdout.read())
        _wait_rows(log, after_epoch, p)
        # kill inside the next epoch: a delay in units of the last epoch's time, which on an idle
        # machine can be shorter than any fixed delay (the run would finish before the kill)
        epoch_s = float(list(csv.DictReader(log.read_text().splitlines()))[-1]["epoch_s"])
        delay = rng.uniform(0.05, 0.8) * epoch_s
        time.sleep(delay)
        p.kill()
        p.wait()
        kills.append((after_epoch, round(delay, 2), p.returncode))
        assert p.returncode == -9, f"run finished before the kill {kills}"
    final = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr
    assert "resume" in final.stdout
    a = json.loads(next((tmp_path / "clean_res").rglob("records/*.json")).read_text())
    b = json.loads(next(dirs["results"].rglob("records/*.json")).read_text())
    assert a["run_id"] == b["run_id"]
    timing = ("epoch_s", "images_per_s")
    strip = lambda h: [{k: v for k, v in row.items() if k not in timing} for row in h]  # noqa: E731
    assert strip(a["metrics"].pop("history")) == strip(b["metrics"].pop("history")), kills
    assert a["metrics"] == b["metrics"], kills


@pytest.mark.slow
def test_torchrun_two_processes_gloo_record_says_world_size_2(dirs, tmp_path):
    pid = dirs["pid"]
    args = [sys.executable, "-m", "repro", "reproduce",
            *fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "runtime.nproc_per_node=2")]
    out = subprocess.run(args, env=subprocess_env(dirs), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch.distributed.run" in out.stdout and "--nproc_per_node=2" in out.stdout
    assert "world size 2" in out.stdout
    (rec,) = records_of(dirs, pid)
    assert rec["status"] == "finished" and rec["provenance"]["world_size"] == 2
    assert rec["metrics"]["steps_per_epoch"] == 160 // 8  # global batch 8 = 2 ranks x 4
