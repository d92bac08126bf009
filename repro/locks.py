"""One process per run at a time: a lock file in the run's folder, created atomically (O_EXCL).

Why: two identical ``reproduce`` commands on one results folder (or a cluster array job) would each
train every run, twice the compute, racing on the same checkpoint and record. The lock holds the
owner's pid and host; a lock whose owner is a dead process on this host is stale and taken over. A lock
held by another host is respected (we cannot see its processes); delete it by hand if that host is gone.
"""
from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

LOCK_NAME = "run.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def owner(path: Path) -> dict | None:
    """The lock's owner {pid, host, since}, or None when there is no lock (or it is unreadable)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _stale(path: Path) -> bool:
    info = owner(path)
    if not isinstance(info, dict):  # being written right now, or its writer died between create and write
        try:
            return time.time() - path.stat().st_mtime > 10
        except FileNotFoundError:
            return True
    return info.get("host") == socket.gethostname() and not _alive(int(info.get("pid", -1)))


def acquire(folder: Path) -> Path | None:
    """Take the run's lock; None when another live process holds it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _stale(path):
                return None
            path.unlink(missing_ok=True)  # a dead owner's lock: take it over
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}, f)
        return path
    return None


def release(path: Path | None) -> None:
    if path is not None and (owner(path) or {}).get("pid") == os.getpid():
        path.unlink(missing_ok=True)


@contextmanager
def run_lock(folder: Path):
    """``with run_lock(run_dir(spec)) as held:`` ``held`` is False when another process runs it."""
    path = acquire(folder)
    try:
        yield path is not None
    finally:
        release(path)
