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
