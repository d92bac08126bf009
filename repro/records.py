"""Result records: one JSON file per run that ended, finished, diverged or failed
(``results/<paper>/<scale>/records/<run_id>.json``), written atomically, with provenance, only ever by a
real run; the report reads records and never trains."""
from __future__ import annotations

import errno
import json
import math
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

from .errors import ConfigError
from .paths import env_folder, file_in_the_way

SCHEMA = "vitrepro.record/1"
STATUSES = ("finished", "diverged", "failed")
PERCENT = re.compile(r"(^|_)top[15](_|$)")  # accuracies in %: top1, top5, best_top1, top1_masked, top1_curve
REQUIRED = ("schema", "run_id", "paper", "table", "cell", "scale", "seed", "status", "metrics", "config", "provenance")

_UMASK = os.umask(0o022)  # the umask at import (reading it sets one, so it is put back at once)
os.umask(_UMASK)


class RecordError(ValueError):
    """A record file that cannot be trusted (unreadable, truncated or missing fields)."""


def results_root() -> Path:
    """Where records and reports live: ``REPRO_RESULTS_DIR`` or ``./results``."""
    return env_folder("REPRO_RESULTS_DIR", "results")


def record_dir(paper: str, scale: str, root: Path | None = None) -> Path:
    return (root or results_root()) / paper / scale / "records"


def record_path(paper: str, scale: str, run_id: str, root: Path | None = None) -> Path:
    return record_dir(paper, scale, root) / f"{run_id}.json"


def disk_full(e: BaseException) -> bool:
    """A write that failed for want of space (or quota): bad input to fix on the machine, not a bug in a run."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write(f)`` into a temp file beside ``path``, fsync, rename: readers see old or new, a failed write leaves no
    temp file, and the file gets ``open``'s mode (0666 less the umask), so a group's shared folder stays readable."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"cannot write {path}: {file_in_the_way(path.parent)} is a file, not a folder: "
                          f"move it away") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, IsADirectoryError) and path.is_dir():
            raise ConfigError(f"cannot write {path}: a folder stands there: move it away") from None
        if isinstance(e, RuntimeError) and "unexpected pos" in str(e):  # torch.save's word for a short write
            raise OSError(errno.ENOSPC, "No space left on device", str(path)) from None
        if isinstance(e, OSError) and e.filename is None:  # a write through a file object names no file
            e.filename = str(path)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``data`` to ``path`` atomically (``atomic_write``)."""
    atomic_write(path, lambda f: f.write(data))


def _jsonable(x: Any) -> Any:
    """Plain JSON types only; non-finite floats become None so the file stays valid JSON."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):  # numpy / torch scalars and arrays
        return _jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def validate(rec: dict, source: str = "<record>") -> dict:
    """Check the fields every consumer relies on; raise RecordError naming the file and field."""
    if not isinstance(rec, dict):
        raise RecordError(f"{source}: a record must be a JSON object")
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise RecordError(f"{source}: missing field(s) {', '.join(missing)}; delete the file and rerun "
                          f"its run to regenerate it")
    if rec["schema"] != SCHEMA:
        raise RecordError(f"{source}: schema {rec['schema']!r}, expected {SCHEMA!r}")
    if rec["status"] not in STATUSES:
        raise RecordError(f"{source}: status {rec['status']!r} is not one of {STATUSES}")
    if not isinstance(rec["cell"], dict) or not isinstance(rec["metrics"], dict):
        raise RecordError(f"{source}: 'cell' and 'metrics' must be objects")
    for key, value in rec["metrics"].items():
        if PERCENT.search(key):
            _check_percent(key, value, source)
    return rec


def _check_percent(key: str, value, source: str) -> None:
    """An accuracy (or a curve of them) is a finite number of percent, or null where it was not measured."""
    for x in value if isinstance(value, list) else [value]:
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)
                              or not 0 <= x <= 100):
            raise RecordError(f"{source}: metrics.{key} = {x!r} is not an accuracy in [0, 100] %; delete the file "
                              f"and rerun its run")


def write_record(rec: dict, root: Path | None = None) -> Path:
    """Validate and atomically write one record; returns its path."""
    rec = _jsonable(dict(rec))
    rec.setdefault("schema", SCHEMA)
    validate(rec)
    path = record_path(rec["paper"], rec["scale"], rec["run_id"], root)
    atomic_write_bytes(path, (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode())
    return path


def read_record(path: Path) -> dict:
    """Read and validate one record file; RecordError (with the path) if it is corrupt."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path}: unreadable record ({e.__class__.__name__}: {e}); delete it and rerun "
                          f"its run") from None
    return validate(rec, str(path))


def load_records(paper: str, root: Path | None = None) -> tuple[list[dict], list[RecordError]]:
    """All valid records of a paper, plus the errors of the corrupt ones."""
    good, bad = [], []
    for f in sorted(((root or results_root()) / paper).glob("*/records/*.json")):
        try:
            good.append(check_place(read_record(f), f, paper, f.parents[1].name))
        except RecordError as e:
            bad.append(e)
    return good, bad


def check_place(rec: dict, path: Path, paper: str, scale: str) -> dict:
    """A record sits in its paper's and scale's folder, in the file named for its run: a copy or a record filed
    elsewhere would count one run twice, or as another scale's. RecordError names the file and where it belongs."""
    home = record_path(str(rec["paper"]), str(rec["scale"]), str(rec["run_id"]), path.parents[3])
    if path.name != home.name or rec["paper"] != paper or rec["scale"] != scale:
        where = (f"whose record is {home}: one run id is one measurement; delete the copy" if home.exists() else
                 f"whose record belongs at {home} (no file there): move it there, or delete it")
        raise RecordError(f"{path}: holds run {rec['run_id']} of {rec['paper']}/{rec['scale']}, {where}")
    return rec


def git_state(cwd: Path | None = None) -> dict:
    """Commit sha and dirty flag (tracked code or config differs; results/ left out, as runs write there), or
    'unknown' outside git; REPRO_GIT_SHA / REPRO_GIT_DIRTY win, where the tree was copied (a device machine's)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
    try:
        sha = git("rev-parse", "HEAD") or "unknown"
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)results"))
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "unknown", False
    if os.environ.get("REPRO_GIT_SHA"):
        sha, dirty = os.environ["REPRO_GIT_SHA"], os.environ.get("REPRO_GIT_DIRTY", "1") != "0"
    return {"git_sha": sha, "git_dirty": dirty}
