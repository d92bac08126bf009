"""One process per run at a time: a lock file created atomically (O_EXCL) beside the run's record (``lock_dir``),
so that two commands on one results folder (or a cluster array job) never train a run twice, whatever caches
they use. Every path that trains a run takes it through ``claim`` (under DDP, rank 0 alone). The holder touches
it every ``HEARTBEAT_S``; it is stale, and taken over, when its owner is a dead process on this host or no
heartbeat came for ``STALE_AFTER_S`` (a killed job on another host, a reused pid)."""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

from ..records import record_path
from ..runs import RunSpec
from ..train import ddp

LOCK_NAME = "run.lock"
HEARTBEAT_S = 30.0      # the holder touches its lock this often
STALE_AFTER_S = 300.0   # a lock untouched this long has lost its holder (ten missed heartbeats)
SKEW_S = 5.0            # a heartbeat further in the future than this comes from a clock ahead of ours


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def owner(path: Path) -> dict | None:
    """The lock's owner {pid, host, since}, or None: no lock, or one being written, cut, or not ours."""
    try:
        info = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(info, dict) and type(info.get("pid")) is int and isinstance(info.get("host"), str)
    return info if ok else None


def heartbeat_age(path: Path) -> float | None:
    """Seconds since the lock's holder last touched it; None when there is no lock."""
    try:
        return time.time() - Path(path).stat().st_mtime
    except FileNotFoundError:
        return None


def _stale(path: Path) -> bool:
    age = heartbeat_age(path)
    if age is None:
        return True
    info = owner(path)
    if info is None:  # being written right now, or its writer died between create and write
        return age > 10
    if info["host"] == socket.gethostname() and not _alive(info["pid"]):
        return True
    return age > STALE_AFTER_S


def acquire(folder: Path) -> Path | None:
    """Take the run's lock; None when a live holder has it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path):
                return None
            path.unlink(missing_ok=True)  # its holder is gone: take it over
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, f)
        return path
    return None


def release(path: Path | None) -> None:
    """Remove our lock, and its folder once empty (a results folder keeps no trace of a finished run's lock)."""
    info = owner(path) if path is not None else None
    if info and info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
        path.unlink(missing_ok=True)
        with suppress(OSError):  # another file in it, or already gone
            path.parent.rmdir()


def _beat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        try:
            os.utime(path)
        except OSError:  # removed by hand: nothing left to keep alive
            return


@contextmanager
def run_lock(folder: Path):
    """``with run_lock(lock_dir(spec)) as held:`` ``held`` is False when another process runs it; while
    held, a daemon thread keeps the heartbeat."""
    path = acquire(folder)
    stop = threading.Event()
    if path is not None:
        threading.Thread(target=_beat, args=(path, stop), daemon=True, name="run-lock-heartbeat").start()
    try:
        yield path is not None
    finally:
        stop.set()
        release(path)


def lock_dir(spec: RunSpec) -> Path:
    """Where a run's lock lives: beside its record, in the results folder, so that commands writing one
    results folder never train a run twice, whatever caches they use."""
    return record_path(spec.paper, spec.scale, spec.run_id).parent.parent / "locks" / spec.run_id


@contextmanager
def claim(spec: RunSpec, d: ddp.Dist):
    """The run's lock, taken by rank 0 and its answer shared, so that all ranks train the run or all skip it."""
    with (run_lock(lock_dir(spec)) if d.is_main else nullcontext(True)) as held:
        yield ddp.from_main(held, d)


def live_holder(spec: RunSpec) -> dict | None:
    """The owner {pid, host, since} of the run's lock while its holder is alive (what ``acquire`` would refuse);
    None when no live process holds it."""
    path = lock_dir(spec) / LOCK_NAME
    return None if _stale(path) else owner(path)


def held_by(spec: RunSpec) -> str:
    """'another process holds it (pid <pid> on <host>)', with what to do where its owner cannot be read or its
    heartbeat is from the future (a clock ahead of ours: the lock outlives its holder by that much)."""
    path = lock_dir(spec) / LOCK_NAME
    who = owner(path)
    holder = f"pid {who['pid']} on {who['host']}" if who else "its owner cannot be read from the lock"
    line = f"another process holds it ({holder})"
    age = heartbeat_age(path)
    gone = f"if pid {who['pid']} on {who['host']} has ended" if who else "if no command is running this run"
    if age is not None and age < -SKEW_S:
        writer = f"{who['host']}'s" if who else "the lock writer's"
        return (f"{line}; its heartbeat is {-age:.0f} s in the future (clock skew: this host's clock is behind "
                f"{writer}), so the lock holds that much longer after its holder is gone: {gone}, delete {path}")
    return f"{line}: {gone}, delete {path}" if who is None else line
