"""plan.json: its path, an atomic deterministic write, and a read that checks the schema.

Kept free of torch, timm and paper code: the report reads plans through this module alone.
"""
from __future__ import annotations

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


def write_plan(plan: dict, root: Path | None = None) -> Path:
    """Write ``plan`` atomically (readers see the old file or the new one); returns its path."""
    path = plan_path(plan["paper"], plan["scale"], root)
    data = dumps(plan)
    if not (path.is_file() and path.read_bytes() == data):  # an unchanged plan leaves the file untouched
        atomic_write_bytes(path, data)
    return path


def read_plan(paper: str, scale: str, root: Path | None = None) -> dict | None:
    """The scale's plan, or None where none was written; a plan that cannot be read is a ConfigError."""
    path = plan_path(paper, scale, root)
    if not path.is_file():
        return None
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: unreadable plan ({e}); rebuild it with python -m repro.plan "
                          f"--paper {paper}") from None
    if not isinstance(plan, dict) or plan.get("schema") != SCHEMA or not isinstance(plan.get("runs"), list):
        raise ConfigError(f"{path}: not a {SCHEMA} plan; rebuild it with python -m repro.plan "
                          f"--paper {paper}")
    return plan
