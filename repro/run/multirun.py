"""Hydra multiruns that report, through any launcher (basic, submitit_local, slurm).

A launcher runs each job where it likes, and its exit code stays there: a failed job looked finished. ``JobReport``
(a Hydra callback, conf/config.yaml) has each job write ``outcome.json`` when it ends; the parent prints progress
while jobs run, then one line per job, and exits non-zero when one failed. A job killed outright writes none:
``summarize_unended`` lists the jobs that did end. A SLURM job stopped by SIGTERM leaves no result, so that the
parent waits for its requeued run (``end_stopped_slurm_job``)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from ..errors import ConfigError
from ..records import atomic_write_bytes
from .progress import duration

OUTCOME = "outcome.json"
_worst = 0  # the worst exit code among the jobs of the last multirun, for repro.cli.main
_running: tuple[Path, int | None, threading.Event] | None = None  # the multirun under way: its sweep folder,
#                                                                   job count and progress thread's stop event


def take_exit_code() -> int:
    """The worst job exit code of the multirun that just ended (0 when none failed), then reset."""
    global _worst
    code, _worst = _worst, 0
    return code


def in_multirun() -> bool:
    """Whether this process is running a job of a Hydra multirun (``-m``)."""
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


def _log_file() -> str | None:
    """This job's stderr log when a submitit launcher runs it (else its output is on the console)."""
    try:
        import submitit
        return str(submitit.JobEnvironment().paths.stderr.resolve())
    except Exception:  # not in a submitit job, or submitit not installed
        return None


def _job_count(task: list[str]) -> int | None:
    """How many jobs the basic sweeper makes of these overrides (None for a sweep it cannot count)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    try:
        batches = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(task), None)
    except Exception:
        return None
    return sum(len(b) for b in batches)


def _outcomes(sweep_dir: Path) -> list[dict]:
    found = []
    for path in sweep_dir.rglob(OUTCOME):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):  # being written
            continue
    return sorted(found, key=lambda o: o.get("num", 0))


class JobReport(Callback):
    """One line per job after a multirun, a progress line while it runs, non-zero exit if a job failed."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = float(every_s)  # its only state: Hydra sends its callbacks to submitit jobs

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _running
        sweep_dir = Path(str(config.hydra.sweep.dir))
        total = _job_count(list(config.hydra.overrides.task))
        launcher = str(config.hydra.launcher.get("_target_", "")).rpartition(".")[2] or "launcher"
        print(f"multirun: {total if total is not None else 'some'} job(s) through {launcher}; outputs under "
              f"{sweep_dir}", flush=True)
        _running = (sweep_dir, total, threading.Event())
        threading.Thread(target=self._progress, args=(*_running, time.time()), daemon=True,
                         name="multirun-progress").start()

    def _progress(self, sweep_dir: Path, total: int | None, stop: threading.Event, start: float) -> None:
        while not stop.wait(self.every_s):
            done = _outcomes(sweep_dir)
            failed = sum(o["code"] != 0 for o in done)
            print(f"multirun: {len(done)}/{total if total is not None else '?'} job(s) done ({failed} failed), "
                  f"{duration(time.time() - start)} elapsed", flush=True)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or int(os.environ.get("RANK", 0)) != 0:  # a job's task 0 reports
            return
        if job_return.status == JobStatus.COMPLETED:
            value = job_return.return_value  # repro.cli's task function returns {"code", "error"}
            code, error = (int(value["code"]), value.get("error")) if isinstance(value, dict) else (0, None)
        else:  # the task function raised (repro.cli catches what it can in a job, so this is rare)
            e = job_return._return_value  # the public property re-raises it
            code, error = 1, f"crashed: {type(e).__name__}: {' '.join(str(e).split())}"
        out = Path(str(config.hydra.runtime.output_dir))
        overrides = [o for o in job_return.overrides or [] if not o.startswith("command=")]  # set by repro.cli
        outcome = {"num": int(config.hydra.job.num), "overrides": overrides,
                   "code": code, "error": error, "log": _log_file()}
        atomic_write_bytes(out / OUTCOME, json.dumps(outcome).encode())

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _worst, _running
        if _running is not None:
            _running[2].set()
        _running = None
        _worst = max(_worst, _summary(Path(str(config.hydra.sweep.dir)), _job_count(list(config.hydra.overrides.task))))


def _summary(sweep_dir: Path, total: int | None, missing_why: str = "killed?") -> int:
    """Print one line per job of the sweep; returns the worst exit code (1 for jobs without an outcome)."""
    done = _outcomes(sweep_dir)
    missing = (total or len(done)) - len(done)
    failed = [o for o in done if o["code"] != 0]
    print(f"multirun: {len(done)} job(s) ended, {len(failed)} failed"
          f"{f', {missing} without an outcome ({missing_why})' if missing > 0 else ''}", flush=True)
    for o in done:
        what = "finished" if o["code"] == 0 else f"failed (exit {o['code']}): {o.get('error') or 'no error line'}"
        log = f"; log {o['log']}" if o.get("log") else ""
        print(f"  job {o['num']} ({' '.join(o['overrides'])}): {what}{log}", flush=True)
    return max([0, *(o["code"] for o in failed), *([1] if missing > 0 else [])])


def summarize_unended() -> int:
    """After a multirun stopped before its end (a job ended without a result): a line per job that ended, and 1."""
    global _running
    if _running is None:
        return 0
    sweep_dir, total, stop = _running
    _running = None
    stop.set()
    return max(1, _summary(sweep_dir, total, "killed, or still running"))


def in_slurm_job() -> bool:
    """Whether this process runs a job that submitit sent to SLURM."""
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm" and in_multirun()


def join_slurm_tasks() -> None:
    """In a SLURM job of several tasks, each task joins the data-parallel group as a rank (submitit exports what
    ``torch.distributed`` reads) instead of relaunching itself under torchrun."""
    if in_slurm_job() and int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "RANK" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def end_stopped_slurm_job(code: int) -> None:
    """A SLURM job whose run SIGTERM stopped (requeue, preemption, scancel, time limit) exits with ``code`` and no
    result: a result would tell the launcher's parent the job is over while SLURM runs it again."""
    if in_slurm_job():
        raise SystemExit(code)


SLURM_LAUNCHERS = ("slurm", "submitit_slurm")


def check_launcher(args: list[str]) -> None:
    """``hydra/launcher=...`` that cannot work here is one line, not a traceback from sbatch or Hydra."""
    for a in args:
        key, _, name = a.partition("=")
        if key.lstrip("+") != "hydra/launcher" or name in ("basic", ""):
            continue
        plugin = importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher")
        if name.startswith(("submitit", "slurm")) and plugin is None:
            raise ConfigError(f"hydra/launcher={name} needs the submitit launcher plugin: pip install -e '.[slurm]'")
        if name in SLURM_LAUNCHERS and shutil.which("sbatch") is None:
            raise ConfigError(f"hydra/launcher={name}: SLURM's sbatch is not on PATH, so this is no SLURM cluster; "
                              f"run it on the cluster's login node, or try the jobs here with "
                              f"hydra/launcher=submitit_local")
