"""plan.json: its path, an atomic deterministic write, and a read that checks the schema.

Kept free of torch, timm and paper code: the report reads plans through this module alone.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import ConfigError
from ..records import atomic_write_bytes, results_root

SCHEMA = "vitrepro.plan/1"
FILE = "plan.json"


def plan_path(paper: str, scale: str, root: Path | None = None) -> Path:
    """``results/<paper>/<scale>/plan.json``, beside the scale's records."""
    return (root or results_root()) / paper / scale / FILE


def dumps(plan: dict) -> bytes:
    """The file's bytes: sorted keys and one layout, so the same plan is the same file."""
    return (json.dumps(plan, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def digest(plan: dict) -> str:
    """A hash of the plan's content (all but its own digest): a plan edited by hand no longer matches it."""
    return hashlib.sha256(dumps({k: v for k, v in plan.items() if k != "digest"})).hexdigest()[:16]


def sealed(plan: dict) -> dict:
    """``plan`` with its digest, which read_plan checks: the report trusts only a plan the plan stage wrote."""
    return {**plan, "digest": digest(plan)}


def check_plan_path(path: Path) -> None:
    """A folder named plan.json is one line naming it where the plan is read or written, not a traceback (or,
    read, a plan taken as missing)."""
    if Path(path).is_dir():
        raise ConfigError(f"{path} is a folder, not a plan: move it away; then python -m repro.plan --paper "
                          f"{path.parent.parent.name} --scale {path.parent.name} writes the plan there")


def write_plan(plan: dict, root: Path | None = None) -> Path:
    """Write ``plan`` (sealed) atomically (readers see the old file or the new one); returns its path."""
    path = plan_path(plan["paper"], plan["scale"], root)
    check_plan_path(path)
    data = dumps(sealed(plan))
    if not (path.is_file() and path.read_bytes() == data):  # an unchanged plan leaves the file untouched
        atomic_write_bytes(path, data)
    return path


def read_plan(paper: str, scale: str, root: Path | None = None, verify: bool = True) -> dict | None:
    """The scale's plan, or None where none was written; a plan that cannot be read, or (``verify``) that is
    another folder's or was edited since the plan stage wrote it, is a ConfigError."""
    path = plan_path(paper, scale, root)
    check_plan_path(path)
    if not path.is_file():
        return None
    rebuild = f"rebuild it with python -m repro.plan --paper {paper} --scale {scale}"
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable plan ({e}); {rebuild}") from None
    if not isinstance(plan, dict) or plan.get("schema") != SCHEMA or not isinstance(plan.get("runs"), list) \
            or not all(isinstance(r, dict) and {"run_id", "table", "cell"} <= r.keys() for r in plan["runs"]):
        raise ConfigError(f"{path}: not a {SCHEMA} plan; {rebuild}")
    if verify and (plan.get("paper"), plan.get("scale")) != (paper, scale):
        raise ConfigError(f"{path}: the plan of {plan.get('paper')}/{plan.get('scale')}, not of {paper}/{scale}; "
                          f"{rebuild}")
    if verify and plan.get("digest") != digest(plan):
        raise ConfigError(f"{path}: its content does not match its digest (edited since python -m repro.plan "
                          f"wrote it); {rebuild}")
    return plan


def plan_at(path: Path) -> dict:
    """The plan at ``path`` (as plan_path names it), checked as read_plan checks it: what the run stage reads."""
    path = Path(path)
    plan = read_plan(path.parent.parent.name, path.parent.name, path.parents[2])
    if plan is None:
        raise ConfigError(f"{path}: no such plan; python -m repro reproduce writes it before its runs")
    return plan
