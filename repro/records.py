"""Result records: one JSON file per finished run, written atomically, with provenance.

Layout: ``results/<paper>/<scale>/records/<run_id>.json``. A record is only ever written by a real
run (train, eval or probe); the report reads records and never trains.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

SCHEMA = "vitrepro.record/1"
STATUSES = ("finished", "diverged", "failed")
REQUIRED = ("schema", "run_id", "paper", "table", "cell", "scale", "seed", "status", "metrics",
            "config", "provenance")


class RecordError(ValueError):
    """A record file that cannot be trusted (unreadable, truncated or missing fields)."""


def results_root() -> Path:
    """Where records and reports live: ``REPRO_RESULTS_DIR`` or ``./results``."""
    return Path(os.environ.get("REPRO_RESULTS_DIR", "results"))


def record_dir(paper: str, scale: str, root: Path | None = None) -> Path:
    return (root or results_root()) / paper / scale / "records"


def record_path(paper: str, scale: str, run_id: str, root: Path | None = None) -> Path:
    return record_dir(paper, scale, root) / f"{run_id}.json"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename: readers see old or new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


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
    return rec


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


def load_records(paper: str, scales: Iterable[str] | None = None, root: Path | None = None,
                 ) -> tuple[list[dict], list[RecordError]]:
    """All valid records of a paper (optionally some scales), plus the errors of the corrupt ones."""
    base = (root or results_root()) / paper
    good, bad = [], []
    if not base.is_dir():
        return good, bad
    for scale_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        if scales is not None and scale_dir.name not in scales:
            continue
        for f in sorted((scale_dir / "records").glob("*.json")):
            try:
                good.append(read_record(f))
            except RecordError as e:
                bad.append(e)
    return good, bad


def git_state(cwd: Path | None = None) -> dict:
    """Commit sha and dirty flag of the checkout, or 'unknown' outside git.

    Dirty means tracked code or config differs from the commit; the repository's own results/ folder
    is left out, since writing records and reports there is what runs do.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    try:
        sha = git("rev-parse", "HEAD") or "unknown"
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)results"))
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "unknown", False
    return {"git_sha": sha, "git_dirty": dirty}


def device_name(device=None) -> str:
    """The name a record gives a device: the GPU's model name, or 'cpu'; with no device, the GPU this
    process would use, if any."""
    import torch

    if device is None:
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def trained_how(run_id: str, group: Iterable[str] = ()) -> dict:
    """How a run was trained, for its record's provenance: alone, or fused into one batched model with
    other runs (repro/train/fused.py), named by run id. Not part of the run id: the same run either way."""
    others = sorted(r for r in group if r != run_id)
    return {"trained": "fused", "fused_with": others} if others else {"trained": "alone"}


def provenance(world_size: int = 1) -> dict:
    """Who/what/where of a run: versions, device, git state, start time."""
    import timm
    import torch

    dev = device_name()
    return {
        **git_state(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "device": dev,
        "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        "hostname": platform.node(),
        "world_size": world_size,
        "start_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
