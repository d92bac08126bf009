"""Clusters: locks whose owner is gone are taken over (dead pid here, silent heartbeat elsewhere), DDP ranks
share rank 0's lock, SIGTERM checkpoints and releases the lock so that a rerun resumes exactly."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from repro import records
from repro.run import locks
from repro.cli import main
from repro.report.provenance import hardware_label
from repro.train import checkpoint, preempt

from conftest import EXPERIMENTS, PROBES, fast_args, subprocess_env, write_paper

ELSEWHERE = "node-that-is-not-this-one"


def _lock(folder, host, pid, age_s=0.0):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / locks.LOCK_NAME
    path.write_text(json.dumps({"pid": pid, "host": host, "since": 0}))
    beat = time.time() - age_s
    os.utime(path, (beat, beat))
    return path


def test_a_lock_from_another_host_is_taken_over_only_once_its_heartbeat_is_old(tmp_path):
    live = _lock(tmp_path / "live", ELSEWHERE, os.getpid(), age_s=locks.STALE_AFTER_S - 30)
    with locks.run_lock(tmp_path / "live") as held:
        assert not held  # its holder beat within the timeout: a job running on another node
    assert locks.owner(live)["host"] == ELSEWHERE
    _lock(tmp_path / "gone", ELSEWHERE, os.getpid(), age_s=locks.STALE_AFTER_S + 30)
    with locks.run_lock(tmp_path / "gone") as held:
        assert held and locks.owner(tmp_path / "gone" / locks.LOCK_NAME)["host"] == os.uname().nodename
    assert not (tmp_path / "gone" / locks.LOCK_NAME).exists()
    # on this host a live pid holds it while it beats; silent past the timeout, its pid was reused
    _lock(tmp_path / "here", os.uname().nodename, os.getppid())
    with locks.run_lock(tmp_path / "here") as held:
        assert not held
    _lock(tmp_path / "here", os.uname().nodename, os.getppid(), age_s=locks.STALE_AFTER_S + 30)
    with locks.run_lock(tmp_path / "here") as held:
        assert held


def test_the_holder_keeps_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.05)
    with locks.run_lock(tmp_path) as held:
        assert held
        path = tmp_path / locks.LOCK_NAME
        old = time.time() - 1000
        os.utime(path, (old, old))
        time.sleep(0.5)
        assert locks.heartbeat_age(path) < 1.0


SIGNAL_HOOK = '''

def signal_at(model, step=3, flag="", sig="SIGTERM"):
    """Extra loss (zero) that sends this process `sig` at call `step` while the file `flag` exists."""
    import os, signal
    calls = {"n": 0}
    def term(images, targets, logits):
        calls["n"] += 1
        if calls["n"] == step and os.path.exists(flag):
            os.kill(os.getpid(), getattr(signal, sig))
        return logits.sum() * 0.0
    return term
'''


def _signal_args(pid, flag, sig="SIGTERM", step=5):
    return fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "recipe.epochs=3",
                     f"losses=[{{fn: 'papers.{pid}.probes:signal_at', step: {step}, flag: '{flag}', sig: {sig}}}]")


def test_list_says_how_far_a_stopped_run_got(dirs, capsys, tmp_path):
    """20 steps an epoch: stopped at step 25, the run has one epoch in its log; a run not started, none."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "term-now"
    flag.touch()
    args = _signal_args(pid, flag, step=25)
    assert main(["list", *args]) == 0
    out = capsys.readouterr().out
    assert "not run" in out and "epoch" not in out
    assert main(["reproduce", *args]) == preempt.EXIT_CODE
    assert main(["list", *args]) == 0
    assert "  partial, epoch 1 of 3, about 1 min left at " in capsys.readouterr().out  # 40 steps of 8 images


def test_list_prices_the_steps_left_at_the_median_pace_of_the_last_three_epochs(tmp_path, monkeypatch):
    """781 steps an epoch: after 3 of 80 epochs at 100, 120 and 90 img/s (median 100, mean 103, last 90), 77 epochs
    of 781 x 64 images are left; a max_steps cap 100 steps past the log leaves 100 steps; a finished log, nothing."""
    from types import SimpleNamespace
    from repro.run import listing

    monkeypatch.setattr(listing, "run_dir", lambda s: tmp_path)
    (tmp_path / "log.csv").write_text("epoch,step,images_per_s\n0,781,100\n1,1562,120\n2,2343,90\n")
    run = SimpleNamespace(config={"recipe": {"epochs": 80, "batch_size": 64}, "data": {}})
    assert listing._epochs_logged(run) == f", epoch 3 of 80, about {77 * 781 * 64 / 100 / 3600:.1f} h left at 100 img/s"
    run.config["recipe"]["max_steps"] = 2443
    assert listing._epochs_logged(run) == ", epoch 3 of 80, about 1 min left at 100 img/s"  # 6,400 images
    run.config["recipe"].update(epochs=3, max_steps=0)
    assert listing._epochs_logged(run) == ", epoch 3 of 3"


def test_sigterm_checkpoints_releases_the_lock_and_a_rerun_resumes_exactly(dirs, capsys, tmp_path, monkeypatch):
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "term-now"
    args = _signal_args(pid, flag)
    assert main(["reproduce", *args]) == 0  # the flag is absent: the uninterrupted reference
    (ref,) = records.load_records(pid, root=dirs["results"])[0]
    for key in ("results", "cache"):
        monkeypatch.setenv(f"REPRO_{key.upper()}_DIR", str(tmp_path / f"again-{key}"))
    flag.touch()
    capsys.readouterr()
    assert main(["reproduce", *args]) == preempt.EXIT_CODE
    err = capsys.readouterr().err.strip()
    assert err.startswith("stopped: SIGTERM: ") and "\n" not in err and "checkpointed at step 5 (epoch 1" in err
    run = tmp_path / "again-cache" / "runs" / pid / "tiny" / ref["run_id"]
    assert (run / "last.pt").exists() and not list((tmp_path / "again-results").rglob(locks.LOCK_NAME))
    assert not list((tmp_path / "again-results").rglob("records/*.json"))  # no record: the run is not over
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler goes with the command
    flag.unlink()
    assert main(["reproduce", *args]) == 0
    assert f"resume {ref['run_id']}" in capsys.readouterr().out
    (again,) = records.load_records(pid, root=tmp_path / "again-results")[0]
    timing = ("epoch_s", "images_per_s")
    strip = lambda h: [{k: v for k, v in row.items() if k not in timing} for row in h]  # noqa: E731
    assert strip(again["metrics"].pop("history")) == strip(ref["metrics"].pop("history"))
    assert again["metrics"] == ref["metrics"] and again["run_id"] == ref["run_id"]
    assert "devices" not in ref["provenance"] and "devices" not in again["provenance"]  # one device: no trail


def test_a_run_resumed_on_another_device_names_both_in_its_record(dirs, capsys, tmp_path):
    """A checkpoint written on a GPU (its trail says so) resumed here: the record keeps the trail and the
    report's hardware line names each device with the epoch it took over at."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "term-now"
    flag.touch()
    args = _signal_args(pid, flag)
    assert main(["reproduce", *args]) == preempt.EXIT_CODE  # checkpointed at step 5, mid-epoch 1
    (ckpt,) = list(dirs["cache"].rglob("last.pt"))
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert state["spent"]["devices"] == [{"device": "cpu", "from_epoch": 0, "from_step": 0}]
    state["spent"]["devices"] = [{"device": "NVIDIA H200", "from_epoch": 0, "from_step": 0}]
    checkpoint.save(ckpt, state)
    flag.unlink()
    assert main(["reproduce", *args]) == 0
    (rec,) = records.load_records(pid, root=dirs["results"])[0]
    assert rec["provenance"]["devices"] == [{"device": "NVIDIA H200", "from_epoch": 0, "from_step": 0},
                                            {"device": "cpu", "from_epoch": 0, "from_step": 5}]
    assert hardware_label(rec["provenance"]) == "NVIDIA H200, then cpu from epoch 1"


def test_submitit_requeue_signal_checkpoints_first_then_submitit_requeues(dirs, capsys, tmp_path):
    """Under submitit, SIGUSR2 (its signal before the time limit) stops the run like SIGTERM; submitit's own
    handler, which requeues the job, runs after the checkpoint is written and the lock released."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    flag = tmp_path / "now"
    flag.touch()
    runs = dirs["cache"] / "runs" / pid / "tiny"
    seen = []

    def submitit_requeue(signum, frame):  # what submitit's checkpoint_and_try_requeue would find on disk
        (run,) = list(runs.iterdir())
        held = list(dirs["results"].rglob(locks.LOCK_NAME))  # run locks live in the results folder
        seen.append((signum, (run / "last.pt").exists(), bool(held)))

    old = signal.signal(signal.SIGUSR2, submitit_requeue)
    try:
        assert main(["reproduce", *_signal_args(pid, flag, "SIGUSR2")]) == preempt.EXIT_CODE
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert seen == [(signal.SIGUSR2, True, False)]
    assert "stopped: SIGUSR2: table2-f100" in capsys.readouterr().err


def _wait_for(path, proc, timeout=120):
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None or time.time() - t0 > timeout:
            pytest.fail(f"{path} never appeared: {proc.communicate()}")
        time.sleep(0.02)


def test_sigterm_from_outside_leaves_a_checkpoint_and_no_lock(dirs, tmp_path):
    """As SLURM does before preemption: the command stops with 143, one line, checkpoint kept, lock gone."""
    pid = dirs["pid"]
    cmd = [sys.executable, "-m", "repro", "reproduce", *fast_args(pid, "tables=[table2]", "num_shards=2",
                                                                     "shard=1", "recipe.epochs=200")]
    p = subprocess.Popen(cmd, env=subprocess_env(dirs), cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    runs = dirs["cache"] / "runs" / pid / "tiny"
    _wait_for(runs, p)
    (run,) = list(runs.iterdir())
    _wait_for(run / "log.csv", p)  # inside the run's first epochs
    assert list(dirs["results"].rglob(locks.LOCK_NAME))  # held in the results folder while it trains
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == preempt.EXIT_CODE, out + err
    assert err.strip().splitlines()[-1].startswith(f"stopped: SIGTERM: {run.name} checkpointed at step ")
    assert (run / "last.pt").exists() and not list(dirs["results"].rglob(locks.LOCK_NAME))


@pytest.mark.slow
def test_two_torchrun_commands_on_one_folder_train_each_run_once(dirs, tmp_path):
    """Rank 0 takes each run's lock and the other rank follows its answer (gloo on CPU, 2 x 2 processes)."""
    cmd = [sys.executable, "-m", "repro", "reproduce",
           *fast_args(dirs["pid"], "tables=[table2]", "seeds=2", "recipe.epochs=3", "runtime.nproc_per_node=2")]
    procs = [subprocess.Popen(cmd, env=subprocess_env(dirs), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    trained = [line.split()[2] for out in outs for line in out.splitlines() if " run table2" in line]
    assert len(trained) == len(set(trained)) == 4, outs  # 2 fractions x 2 seeds, each by one command
    recs = records.load_records(dirs["pid"], root=dirs["results"])[0]
    assert len(recs) == 4 and all(r["provenance"]["world_size"] == 2 for r in recs)
    assert not list(dirs["results"].rglob(locks.LOCK_NAME))


# ------------------------------------------------------------------ launchers that report

def _sweep_args(pid, *extra):
    args = [a for a in fast_args(pid, "tables=[table2]", "recipe.epochs=1") if not a.startswith("data=")]
    return ["-m", *args, "data=synthetic,cifar10_jpeg", "hydra.callbacks.job_report.every_s=0.2", *extra]


def test_a_multirun_lists_each_job_and_exits_non_zero_when_one_failed(dirs, capsys, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(dirs["data"] / "missing"))  # the cifar10_jpeg job fails
    assert main(["reproduce", *_sweep_args(dirs["pid"])]) == 2
    out = capsys.readouterr().out
    assert "multirun: 2 job(s) through BasicLauncher" in out and "multirun: 2 job(s) ended, 1 failed" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("  job ")]
    assert len(lines) == 2 and "data=synthetic): finished" in lines[0]
    assert "data=cifar10_jpeg): failed (exit 2): error: data root" in lines[1] and "does not exist" in lines[1]


@pytest.mark.slow
def test_a_submitit_local_multirun_names_the_failed_jobs_error_and_log(dirs, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    env = dict(subprocess_env(dirs), REPRO_DATA_DIR=str(dirs["data"] / "missing"))
    cmd = [sys.executable, "-m", "repro", "reproduce", *_sweep_args(dirs["pid"], "hydra/launcher=submitit_local")]
    p = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "job(s) done (" in p.stdout  # the progress line while the jobs run
    (failed,) = [ln for ln in p.stdout.splitlines() if "failed (exit 2)" in ln]
    assert "data=cifar10_jpeg" in failed and "error: data root" in failed
    log = failed.rpartition("; log ")[2]
    assert log.endswith("_log.err") and "does not exist" in open(log).read()
    assert any("data=synthetic): finished" in ln for ln in p.stdout.splitlines())


def test_runs_that_crash_end_in_one_line_naming_them(dirs, capsys):
    flag = dirs["cache"] / "crash-now"
    flag.touch()
    crash = f"losses=[{{fn: 'papers.{dirs['pid']}.probes:crash', flag: '{flag}'}}]"
    args = fast_args(dirs["pid"], "tables=[table2]", crash)
    assert main(["reproduce", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: 2 run(s) failed: table2-") and "RuntimeError: simulated crash" in err


def test_slurm_launcher_off_a_cluster_is_one_line(dirs, capsys, monkeypatch):
    import repro.run.multirun
    monkeypatch.setattr(repro.run.multirun.shutil, "which", lambda name: None)
    for launcher in ("slurm", "submitit_slurm"):
        code = main(["reproduce", "-m", f"hydra/launcher={launcher}", f"paper={dirs['pid']}", "scale=tiny"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.startswith(f"error: hydra/launcher={launcher}: SLURM's sbatch is not on PATH")
        assert "\n" not in err and "submitit_local" in err
    assert not (dirs["cache"] / "hydra").exists()


@pytest.mark.slow
def test_torch_compile_compiles_an_architecture_once_per_process(dirs, monkeypatch):
    """runtime.compile=true: the second run of the same model in one process compiles no new graph, and
    Inductor's cache lives under REPRO_CACHE_DIR."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    torch._dynamo.reset()
    args = fast_args(dirs["pid"], "tables=[table2]", "runtime.compile=true", "recipe.max_steps=2", "num_shards=2")
    assert main(["reproduce", *args, "shard=0"]) == 0
    graphs = counters["stats"]["unique_graphs"]
    assert graphs > 0
    assert main(["reproduce", *args, "shard=1"]) == 0  # another run (other fraction), same architecture
    assert counters["stats"]["unique_graphs"] == graphs
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(dirs["cache"] / "inductor")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
