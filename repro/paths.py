"""The folders the REPRO_*_DIR variables name, read one way: set but empty is a mistake, never the current folder."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError


def env_folder(var: str, default: str) -> Path:
    """``$var``, or ``default`` where it is unset. Set but empty (``REPRO_RESULTS_DIR=$UNSET``) is a ConfigError:
    read as a path it is the current folder, where records, reports and caches were written."""
    value = os.environ.get(var)
    if value is None:
        return Path(default)
    if not value.strip():
        raise ConfigError(f"{var} is set but empty; give it a folder, or unset it for the default ./{default}")
    return Path(value)


def file_in_the_way(folder: Path) -> Path | None:
    """The file standing where ``folder`` or one of its parents should be a folder (what keeps it from being made)."""
    folder = Path(folder)
    return next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)


def not_writable(folder: Path, why: str, what: str, env: str) -> ConfigError:
    """The one line for a folder we cannot write: which, why, and what to do."""
    return ConfigError(f"{what} {folder} is not writable ({why}), or point {env} at a writable folder")


def check_creatable(folder: Path, what: str, env: str) -> None:
    """A folder a command creates later (a run's locks, its checkpoints, the data cache) can be created: no
    file stands on its path. Checked without creating it, so bad input still writes nothing."""
    blocker = file_in_the_way(folder)
    if blocker:
        raise not_writable(folder, f"{blocker} is a file, not a folder: move it away", what, env)
