"""SIGTERM stops a run cleanly: checkpoint where it is, release its lock, exit so that a rerun resumes.

SLURM sends SIGTERM before it preempts or requeues a job (and at its time limit), torchrun forwards it
to every rank, ``kill`` sends it by default. The handler only sets a flag; the training loop looks at
it where it already checks the loss (every ``runtime.check_every`` steps, all ranks agreeing),
checkpoints mid-epoch (the batches done so far are skipped, not repeated, on resume) and raises
``Preempted``, which unwinds through the run's lock.
"""
from __future__ import annotations

import signal
import subprocess
import threading
from contextlib import contextmanager

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM

_requested = False


class Preempted(BaseException):
    """A run stopped on SIGTERM after its checkpoint was written. A BaseException, as KeyboardInterrupt:
    no ``except Exception`` records it as a failed run."""


def requested() -> bool:
    """Whether SIGTERM arrived since ``on_sigterm`` was entered."""
    return _requested


def request() -> None:
    """What the SIGTERM handler does: ask the running loop to checkpoint and stop."""
    global _requested
    _requested = True


@contextmanager
def on_sigterm():
    """Within the block SIGTERM sets the flag instead of ending the process (main thread only: signal
    handlers can be set nowhere else; in another thread the block changes nothing)."""
    global _requested
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _requested = False
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: request())
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def wait(proc: subprocess.Popen) -> int:
    """A child process's exit code; SIGTERM to this process is passed on to it (it checkpoints and exits),
    for a parent that starts the runs in children (``jobs=N``, torchrun)."""
    while True:
        try:
            return proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            if requested():
                proc.terminate()
                return proc.wait()
