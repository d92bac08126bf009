"""``python -m repro reproduce|list``: the command line, on Hydra.

    python -m repro reproduce paper=convit [scale=tiny|small|full] [tables=table2,table3] [seeds=3] [key=value ...]
    python -m repro list [paper=convit] [scale=...]

``reproduce`` runs every run of the paper's tables that has no record yet (resuming the partial
ones from their checkpoints), writes one record per run, then rebuilds the paper's report.
Default scale: small when a GPU is present, else tiny. Hydra's ``-m`` (multirun) and launchers
work as usual, e.g. ``-m hydra/launcher=slurm``. Bad input is one line on stderr and exit code 2.
This module reads the command line; the scheduler is repro/run/.
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import hydra
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from . import records
from .checks import check_booleans, check_writable
from .errors import ConfigError, one_line
from .run import multirun
from .run.listing import list_runs
from .run.reproduce import RunsFailed, reproduce
from .run.sequential import BAD_INPUT
from .runs import SCALES, cache_root
from .train import preempt

COMMANDS = ("reproduce", "list")
_exit_code = 0


# ------------------------------------------------------------------ entry point

@hydra.main(config_path=str(Path(__file__).resolve().parent / "conf"), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> dict:
    """The task function: its return value is what a multirun job reports (repro/run/multirun.py)."""
    global _exit_code
    code, error = _run_command(cfg)
    if preempt.requested():
        multirun.end_stopped_slurm_job(code)
    _exit_code = max(_exit_code, code)
    return {"code": code, "error": error}


def _run_command(cfg: DictConfig) -> tuple[int, str | None]:
    """The command's exit code and its one-line error, also printed on stderr. In a multirun job a crash
    is one too (the launcher's parent lists it with the job's log); elsewhere it stays a traceback."""
    try:
        with preempt.on_signals():
            return int({"reproduce": reproduce, "list": list_runs}[cfg.command](cfg) or 0), None
    except BAD_INPUT as e:
        code, error = 2, f"error: {one_line(e)}"
    except RunsFailed as e:
        code, error = 1, f"error: {one_line(e)}"
    except preempt.Preempted as e:
        code, error = preempt.exit_code(), f"stopped: {one_line(e)}"
        if os.environ.get(preempt.SUMMARIZED):  # a group of a jobs=N command: its parent says it once for all
            return code, error
    except Exception as e:
        if records.disk_full(e):
            return 2, _said(f"error: {_disk_full_line(e)}")
        if not multirun.in_multirun():
            raise
        traceback.print_exc()
        code, error = 1, f"crashed: {type(e).__name__}: {one_line(e)}"
    return code, _said(error)


def _said(error: str) -> str:
    print(error, file=sys.stderr, flush=True)
    return error


def _disk_full_line(e: OSError) -> str:
    return (f"no space left on the device writing {e.filename or 'a file'}; nothing half-written is kept and the "
            f"finished runs keep their records: free space, then run the same command again")


def _prepare(args: list[str]) -> list[str]:
    """Check the scale and the keys early (one line, not Hydra's listing); default scale; tables=a,b as a list."""
    sweep = any(a in ("-m", "--multirun") for a in args)
    multirun.check_launcher(args)
    try:
        OverridesParser.create().parse_overrides([a for a in args if "=" in a and not a.startswith("-")])
    except Exception as e:  # noqa: BLE001 - Hydra's OverrideParseException and friends
        raise ConfigError(f"cannot parse the command line: {' '.join(str(e).split())[:200]}") from None
    out = []
    for a in args:
        if a == "--resolved":  # list's flag, as a Hydra override (Hydra owns the -- flags)
            a = "resolved=true"
        key, eq, value = a.partition("=")
        if eq and key == "scale" and not sweep and value not in SCALES:
            raise ConfigError(f"unknown scale {value!r}; use one of {', '.join(SCALES)}")
        if eq and key == "tables" and "," in value and not sweep and not value.startswith("["):
            a = f"tables=[{value}]"
        out.append(a)
    if not any(a.startswith("scale=") for a in out):
        out = _with_overrides(out, [f"scale={'small' if torch.cuda.is_available() else 'tiny'}"])
    overrides = OverridesParser.create().parse_overrides([a for a in out if "=" in a and not a.startswith("-")])
    booleans = check_booleans([o.input_line for o in overrides if not (sweep and o.is_sweep_override())])
    return [_as_boolean(a, booleans) for a in out]


def _as_boolean(arg: str, booleans: dict[str, bool]) -> str:
    """``force=no`` as ``force=false``: Hydra passes the boolean, never the truthy string."""
    key, eq, _ = arg.partition("=")
    name = key.lstrip("+~")
    return f"{key}={str(booleans[name]).lower()}" if eq and name in booleans else arg


def _with_overrides(args: list[str], extra: list[str]) -> list[str]:
    """Insert overrides next to the user's own, so that they stay one block for Hydra's argparse
    (``-m paper=x`` and ``paper=x --cfg job`` both keep working)."""
    at = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return args[:at] + extra + args[at:]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m repro``; returns the exit code."""
    global _exit_code
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; use one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        rest = _prepare(rest)
        check_writable(cache_root() / "hydra", "cache folder", "REPRO_CACHE_DIR")  # Hydra's run dir, then ours
    except ConfigError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    _exit_code = 0
    saved = sys.argv
    sys.argv = [saved[0] if saved else "repro", *_with_overrides(rest, [f"command={command}"])]
    try:
        _hydra_main()
    except KeyboardInterrupt:  # a second Ctrl-C (the first stops at the next check), or one before the run began
        print("stopped: interrupted; each run keeps its last checkpoint and its lock is released; run the same "
              "command again to resume", file=sys.stderr, flush=True)
        return preempt.INTERRUPT_EXIT_CODE
    except SystemExit as e:  # Hydra exits 1 after printing an error, e.g. a multirun job that ended without a result
        code = multirun.summarize_unended()  # then the jobs that did end, one line each
        if not code:
            raise
        return max(code, e.code if isinstance(e.code, int) else 1)
    finally:
        sys.argv = saved
    return max(_exit_code, multirun.take_exit_code())
