"""The SLURM launcher on a real scheduler: a one-node cluster on this machine (tests/cluster/slurm.sh, which
installs Debian's slurm-wlm and munge where they are missing) runs the project's own multiruns,
``python -m repro reproduce -m hydra/launcher=slurm ...``, through Hydra's submitit launcher and sbatch.

Each test submits real jobs: their outcomes reach the parent, a requeued job resumes its run, two commands on
one results folder share the runs (a job killed with scancel leaves a lock that the next job takes over),
and a job trains under torchrun with two processes. About two minutes in all on two cores.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro import records
from repro.run import locks
from repro.cli import main

from conftest import EXPERIMENTS, PROBES, REPO, fast_args, subprocess_env, write_paper

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests" / "cluster"
# the slurm launcher's config with a test job's needs: CPUs, no GPU, 1 GB; a progress line every second
def launcher(cpus: int = 1, tasks: int = 1) -> list[str]:
    return ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", f"hydra.launcher.cpus_per_task={cpus}",
            f"hydra.launcher.tasks_per_node={tasks}",
            "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10", "hydra.callbacks.job_report.every_s=1"]

HOLD_HOOK = '''

def hold_at(model, step=3, flag="", mark="", stuck=False):
    """Extra loss (zero). At call `step`, while the file `flag` exists, the first process to get there writes
    its SLURM job id into `mark` and waits (5 min at most), its run mid-epoch and locked, for SIGTERM to stop it;
    `stuck`: a step that SIGTERM does not end (SIGKILL does)."""
    import os, time
    from repro.train import preempt
    calls = {"n": 0}
    def term(images, targets, logits):
        calls["n"] += 1
        if calls["n"] == step and os.path.exists(flag):
            try:
                os.close(os.open(mark + ".claim", os.O_CREAT | os.O_EXCL))
            except FileExistsError:  # another process holds here already
                return logits.sum() * 0.0
            with open(mark + ".tmp", "w") as f:
                f.write(os.environ["SLURM_JOB_ID"])
            os.replace(mark + ".tmp", mark)
            start = time.time()
            while (stuck or not preempt.requested()) and time.time() - start < 300:
                time.sleep(0.05)
        return logits.sum() * 0.0
    return term
'''


def _slurm_down() -> str | None:
    """Why the cluster cannot be used here, or None when it answers. The tests never start it: `make test`
    installs nothing and starts no daemon; .ci/run starts it (tests/cluster/slurm.sh start, as root)."""
    if shutil.which("sinfo") and subprocess.run([CLUSTER / "slurm.sh", "status"]).returncode == 0:
        return None
    return "SLURM is not up: tests/cluster/slurm.sh start (as root; installs slurm-wlm and munge) or .ci/run starts it"


@pytest.fixture(scope="session")
def slurm_path():
    """PATH for commands that talk to the cluster (CI fails where it is not up; elsewhere the tests skip).
    Without an accounting database `sacct` answers nothing, and submitit asks it about jobs that end without a
    result: tests/cluster/bin has one that reads the controller's job table."""
    why = _slurm_down()
    if why is not None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    path = os.environ["PATH"]
    if subprocess.run(["sacct", "-j", "1"], capture_output=True).returncode != 0:
        path = f"{CLUSTER / 'bin'}{os.pathsep}{path}"
    return path


def test_the_tests_never_start_or_install_slurm(monkeypatch):
    """`make test` as root on a machine without SLURM apt-installed munge and slurm-wlm, wrote /etc/munge and
    /etc/slurm and started daemons: the tests now only ask whether the cluster is up."""
    calls = []
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(subprocess, "run", 
                        lambda cmd, *a, **k: calls.append(cmd) or subprocess.CompletedProcess(cmd, 1))
    why = _slurm_down()
    assert why.startswith("SLURM is not up") and "tests/cluster/slurm.sh start" in why
    assert not [c for c in calls if "start" in map(str, c)]


@pytest.fixture
def env(dirs, slurm_path):
    write_paper(dirs["papers"], dirs["pid"], EXPERIMENTS, PROBES + HOLD_HOOK)
    return dict(subprocess_env(dirs), PATH=slurm_path)


def _submit(env, cwd, *args, cpus: int = 1, tasks: int = 1) -> subprocess.Popen:
    """``python -m repro reproduce -m <the launcher> <args>``: the jobs build no report (the throw-away paper has
    no paper.yaml), which spares each job the report's imports."""
    cmd = [sys.executable, "-m", "repro", "reproduce", "-m", *launcher(cpus, tasks), *args, "report=false"]
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _end(p: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    """The parent's exit code and output."""
    try:
        out = p.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"the multirun did not end within {timeout} s: {p.communicate()[0]}")
    return p.returncode, out


def _job_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("  job ")]


def _job_stdout(line: str) -> str:
    """The stdout of the job named in one of the parent's job lines (its stderr log, '_log.err')."""
    return Path(line.rpartition("; log ")[2].replace("_log.err", "_log.out")).read_text()


def _trained(text: str) -> list[str]:
    """Run ids a command's output says it trained to the end ('[i/n] <run id>: finished, ...')."""
    return [ln.split()[1].rstrip(":") for ln in text.splitlines() if ": finished, top1" in ln]


def _wait_for(path: Path, procs, timeout: float = 600) -> str:
    start = time.time()
    while not path.exists():
        if any(p.poll() is not None for p in procs) or time.time() - start > timeout:
            pytest.fail(f"{path.name} never appeared: {[_end(p, 5)[1] for p in procs]}")
        time.sleep(0.1)
    return path.read_text()


def _hold(pid: str, flag: Path, stuck: bool = False) -> str:
    return (f"losses=[{{fn: 'papers.{pid}.probes:hold_at', step: 5, flag: '{flag}', mark: '{flag}.job', "
            f"stuck: {stuck}}}]")


def _records(dirs) -> list[dict]:
    return records.load_records(dirs["pid"], root=dirs["results"])[0]


def test_jobs_report_their_outcomes_and_a_job_trains_under_torchrun_with_two_processes(dirs, env, tmp_path):
    """Two 2-CPU jobs with runtime.nproc_per_node=2, one with a dataset that is not there: one line per job,
    exit 2; the other relaunches itself under torchrun (gloo on CPU), whose rank 0 writes each record once."""
    env["REPRO_DATA_DIR"] = str(dirs["data"] / "missing")  # data=cifar10_jpeg fails; synthetic needs none
    args = [a for a in fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=1", "runtime.nproc_per_node=2")
            if not a.startswith("data=")]
    code, out = _end(_submit(env, tmp_path, *args, "data=synthetic,cifar10_jpeg", cpus=2))
    assert code == 2, out
    assert "multirun: 2 job(s) through SlurmLauncher" in out and "job(s) done (" in out, out
    assert "multirun: 2 job(s) ended, 1 failed" in out, out
    ok, failed = _job_lines(out)
    assert " data=synthetic " in ok and "): finished; log " in ok
    assert " data=cifar10_jpeg " in failed and "failed (exit 2): error: " in failed
    log = failed.rpartition("; log ")[2]
    assert "/.submitit/" in log and failed.split("error: ")[1].split("; log ")[0] in Path(log).read_text()
    log = _job_stdout(ok)
    assert "torch.distributed.run --standalone --nproc_per_node=2" in log and "world size 2" in log, log
    recs = _records(dirs)
    assert len(recs) == 2 and sorted(r["run_id"] for r in recs) == sorted(_trained(log))
    assert all(r["status"] == "finished" and r["provenance"]["world_size"] == 2 for r in recs)


def _strip_timing(rec: dict) -> dict:
    """A record's metrics without what depends on the machine's speed."""
    timing = ("epoch_s", "images_per_s")
    metrics = dict(rec["metrics"])
    metrics["history"] = [{k: v for k, v in row.items() if k not in timing} for row in metrics["history"]]
    return metrics


def test_a_requeued_job_checkpoints_and_its_rerun_writes_the_uninterrupted_record(dirs, env, tmp_path, monkeypatch):
    """scontrol requeue mid-epoch (SIGTERM, as preemption): the job checkpoints, frees the lock and ends without
    a result; SLURM starts it again, it resumes, and the parent reports one finished job."""
    pid, flag = dirs["pid"], tmp_path / "hold"
    args = fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1", "recipe.epochs=3", "runtime.threads=1",
                     "runtime.checkpoint_every_s=0", _hold(pid, flag))
    for key in ("results", "cache"):  # the uninterrupted reference, in this process (the flag is absent)
        monkeypatch.setenv(f"REPRO_{key.upper()}_DIR", str(tmp_path / f"ref-{key}"))
    assert main(["reproduce", *args, "report=false"]) == 0
    (ref,) = records.load_records(pid, root=tmp_path / "ref-results")[0]
    flag.touch()
    p = _submit(env, tmp_path, *args)
    job = _wait_for(Path(f"{flag}.job"), [p])  # the run holds at step 5, in its first epoch, locked
    subprocess.run(["scontrol", "requeue", job], check=True)
    flag.unlink()
    while subprocess.run(["squeue", "-h", "-j", job, "-t", "PD", "-o", "%r"], capture_output=True,
                         text=True).stdout.strip() != "BeginTime":
        assert p.poll() is None, _end(p)[1]  # the parent waits for the requeued job
        time.sleep(0.2)
    assert list(dirs["cache"].rglob("last.pt")) and not list(tmp_path.rglob(locks.LOCK_NAME))
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # SLURM holds a requeued
    code, out = _end(p)                                                                     # job 2 min otherwise
    assert code == 0, out
    (line,) = _job_lines(out)
    assert "): finished; log " in line
    log = _job_stdout(line)
    assert f"run {ref['run_id']}" in log and f"resume {ref['run_id']}" in log, log
    assert f"stopped: SIGTERM: {ref['run_id']} checkpointed at step 5 (epoch 1" in Path(
        line.rpartition("; log ")[2]).read_text()
    (again,) = _records(dirs)
    assert _strip_timing(again) == _strip_timing(ref) and again["run_id"] == ref["run_id"]
    assert not list(tmp_path.rglob(locks.LOCK_NAME))


def test_two_commands_on_one_folder_train_each_run_once_and_a_killed_jobs_lock_is_taken_over(dirs, env, tmp_path):
    """Job A holds run X mid-step; job B, on the other CPU, skips X (its holder is alive) and trains Y; A is
    cancelled with scancel, and its step outlasts SLURM's KillWait after SIGTERM, so SIGKILL ends it with its
    lock left behind; job C takes X's lock over and trains X, and skips Y. Each run trained once, recorded once."""
    flag = tmp_path / "hold"
    flag.touch()
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2", _hold(dirs["pid"], flag, stuck=True))
    a = _submit(env, tmp_path, *args)
    job_a = _wait_for(Path(f"{flag}.job"), [a])
    (held,) = list(tmp_path.rglob(locks.LOCK_NAME))
    code, out_b = _end(_submit(env, tmp_path, *args))
    assert code == 0, out_b
    log_b = _job_stdout(_job_lines(out_b)[0])
    (x,) = [ln.split()[2].rstrip(":") for ln in log_b.splitlines() if "another process holds it" in ln]
    (y,) = _trained(log_b)
    assert held.exists() and locks.owner(held)["host"] == os.uname().nodename and x != y
    subprocess.run(["scancel", job_a], check=True)
    while subprocess.run(["squeue", "-h", "-j", job_a], capture_output=True, text=True).stdout.strip():
        time.sleep(0.2)  # until SLURM has killed it (SIGTERM, KillWait, SIGKILL)
    (err_a,) = tmp_path.rglob(f"{job_a}_0_log.err")
    assert held.exists() and "stopped:" not in err_a.read_text()  # A died holding X, with no checkpoint
    code, out_c = _end(_submit(env, tmp_path, *args))
    assert code == 0, out_c
    log_c = _job_stdout(_job_lines(out_c)[0])
    assert _trained(log_c) == [x] and f"skip {y} (finished" in log_c, log_c
    assert sorted(r["run_id"] for r in _records(dirs)) == sorted([x, y])
    assert not list(tmp_path.rglob(locks.LOCK_NAME))
    code, out_a = _end(a)  # A's parent learns from SLURM that its job ended without a result
    assert code == 1 and f"Job {job_a} (task: 0)" in out_a and "(state: CANCELLED)" in out_a, out_a
    assert out_a.strip().endswith("multirun: 0 job(s) ended, 0 failed, 1 without an outcome (killed, or still "
                                  "running)"), out_a


def test_a_job_of_two_slurm_tasks_trains_as_two_ranks_and_records_once(dirs, env, tmp_path):
    """tasks_per_node=2: srun starts two tasks, each one rank (gloo on CPU) without torchrun; task 0 reports."""
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=1", "runtime.nproc_per_node=2")
    code, out = _end(_submit(env, tmp_path, *args, tasks=2))
    assert code == 0, out
    (line,) = _job_lines(out)
    log = _job_stdout(line)
    assert "world size 2" in log and "torch.distributed.run" not in log and "_0_log.err" in line, log
    recs = _records(dirs)
    assert len(recs) == 2 and sorted(_trained(log)) == sorted(r["run_id"] for r in recs)
    assert all(r["provenance"]["world_size"] == 2 for r in recs)
    assert "world size" not in Path(line.rpartition("; log ")[2].replace("_0_log.err", "_1_log.out")).read_text()
