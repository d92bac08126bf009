"""SIGTERM and Ctrl-C stop a run cleanly: checkpoint where it is, release its lock, exit so that a rerun resumes.

SLURM (before preemption, requeue or the time limit), torchrun and ``kill`` send SIGTERM; Ctrl-C SIGINT. The
handler only sets a flag, which the loop reads where it checks the loss (all ranks agreeing), checkpoints
mid-epoch and raises ``Preempted`` through the run's lock; a second Ctrl-C raises KeyboardInterrupt at once.
Submitit's SIGUSR2 before the time limit is caught the same way, and submitit's own handler (which requeues
the job) is called once the run is checkpointed and its lock released."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from contextlib import contextmanager

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM
INTERRUPT_EXIT_CODE = 128 + signal.SIGINT  # ... and by Ctrl-C (130)
REQUEUE_SIGNAL = signal.SIGUSR2   # submitit's default (its handler requeues the job)
SUMMARIZED = "REPRO_STOP_SUMMARIZED"  # set for the children of a jobs=N command: the parent says what stopped

_received: int | None = None      # the signal that asked us to stop, if any


class Preempted(BaseException):
    """A run stopped on SIGTERM or Ctrl-C after its checkpoint was written. A BaseException, as KeyboardInterrupt:
    no ``except Exception`` records it as a failed run."""


def requested() -> bool:
    """Whether SIGTERM, SIGINT (or submitit's requeue signal) arrived since ``on_signals`` was entered."""
    return _received is not None


def request() -> None:
    """Ask the running loop to stop as SIGTERM does (a deadline near: repro/run/deadline.py), from any thread."""
    global _received
    _received = signal.SIGTERM


def cause() -> str | None:
    """The name of the signal that asked us to stop ('SIGTERM'), or None."""
    return None if _received is None else signal.Signals(_received).name


def exit_code() -> int:
    """130 after Ctrl-C, else 143 (SIGTERM, and submitit's requeue signal, as before)."""
    return INTERRUPT_EXIT_CODE if _received == signal.SIGINT else EXIT_CODE


def _handler(signum, frame) -> None:
    global _received
    if signum == signal.SIGINT and _received == signal.SIGINT:
        raise KeyboardInterrupt  # Ctrl-C twice: stop now, from the last checkpoint
    _received = signum


@contextmanager
def on_signals():
    """Within the block SIGTERM and SIGINT set the flag instead of ending the process (main thread only); SIGUSR2 too
    where submitit set a handler, which is called on the way out once the run is checkpointed."""
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received = None
    previous = {signum: signal.signal(signum, _handler) for signum in (signal.SIGTERM, signal.SIGINT)}
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


def stopped(code: int) -> bool:
    """Whether a child's exit code says it was stopped (checkpointed, then exited or killed), not finished."""
    return code < 0 or code in (EXIT_CODE, INTERRUPT_EXIT_CODE)


def wait(proc: subprocess.Popen) -> int:
    """A child process's exit code; SIGTERM or Ctrl-C to this process is passed on to it as SIGTERM (it
    checkpoints and exits), for a parent that starts the runs in children (``jobs=N``, torchrun)."""
    while True:
        try:
            return proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            if requested():
                proc.terminate()
                return proc.wait()
