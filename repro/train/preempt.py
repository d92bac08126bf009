"""SIGTERM stops a run cleanly: checkpoint where it is, release its lock, exit so that a rerun resumes.

SLURM sends SIGTERM before it preempts or requeues a job (and at its time limit), torchrun forwards it
to every rank, ``kill`` sends it by default. The handler only sets a flag; the training loop looks at
it where it already checks the loss (every ``runtime.check_every`` steps, all ranks agreeing),
checkpoints mid-epoch (the batches done so far are skipped, not repeated, on resume) and raises
``Preempted``, which unwinds through the run's lock.

Under Hydra's submitit launcher, submitit asks SLURM for SIGUSR2 shortly before the time limit and
requeues the job from its own handler. That signal is caught the same way, and submitit's handler is
called once the run is checkpointed and its lock released, so the requeued job resumes where it stopped.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from contextlib import contextmanager

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM
REQUEUE_SIGNAL = signal.SIGUSR2   # submitit's default (its handler requeues the job)

_received: int | None = None      # the signal that asked us to stop, if any


class Preempted(BaseException):
    """A run stopped on SIGTERM after its checkpoint was written. A BaseException, as KeyboardInterrupt:
    no ``except Exception`` records it as a failed run."""


def requested() -> bool:
    """Whether SIGTERM (or submitit's requeue signal) arrived since ``on_sigterm`` was entered."""
    return _received is not None


def cause() -> str | None:
    """The name of the signal that asked us to stop ('SIGTERM'), or None."""
    return None if _received is None else signal.Signals(_received).name


def _handler(signum, frame) -> None:
    global _received
    _received = signum


@contextmanager
def on_sigterm():
    """Within the block SIGTERM sets the flag instead of ending the process (main thread only: signal
    handlers can be set nowhere else; in another thread the block changes nothing). SIGUSR2 too where a
    handler for it exists (submitit's), which is called on the way out once the run is checkpointed."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _handler)}
    if callable(signal.getsignal(REQUEUE_SIGNAL)):
        previous[REQUEUE_SIGNAL] = signal.signal(REQUEUE_SIGNAL, _handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if _received == REQUEUE_SIGNAL and REQUEUE_SIGNAL in previous:
            print(f"{cause()}: the run is checkpointed; handing over to submitit to requeue the job",
                  file=sys.stderr, flush=True)
            previous[REQUEUE_SIGNAL](REQUEUE_SIGNAL, None)


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
