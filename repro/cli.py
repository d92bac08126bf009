"""``python -m repro reproduce|list|park|deadline|forecast``: the command line, on Hydra.

    python -m repro reproduce paper=convit [scale=tiny|cpu|small|full] [tables=table2,table3] [seeds=3] [key=value ...]
    python -m repro list [paper=convit] [scale=...]
    python -m repro park paper=augvit scale=cpu [key=value ...]   (a reproduce's run keys, whole plan: run/parked.py)
    python -m repro deadline 25m [--margin S] [--hold-back] reproduce paper=convit ...   (repro/run/deadline.py)
    python -m repro forecast [--bench FILE] [--paper ID] scale=small ...                 (repro/run/forecast.py)

``reproduce`` plans (repro/plan/), runs every run without a record, resuming partial ones (repro/run/), then
rebuilds the report (repro/report/). Default scale: small with a GPU, else tiny. Hydra's ``-m`` and launchers
work as usual (``-m hydra/launcher=slurm``). Bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from . import records
from .checks import CONF_DIR, check_booleans, check_command, check_keys, check_writable
from .errors import ConfigError, one_line
from .plan.build import for_command
from .plan.experiments import known_papers, paper_scales
from .plan.store import write_plan
from .run import deadline, forecast, multirun, parked
from .run.dry_run import dry_run
from .run.listing import list_papers, list_runs
from .run.outcome import RunsFailed, outcome
from .run.reproduce import check, reproduce
from .run.specs import planned_specs, sources_of
from .runs import SCALES, cache_root
from .train import ddp, preempt

COMMANDS = ("reproduce", "list", "park", "deadline", "forecast")
_exit_code = 0


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> dict:
    """The task function: its return value is what a multirun job reports (repro/run/multirun.py)."""
    global _exit_code
    command = {"reproduce": _reproduce, "list": _list, "park": _park}[cfg.command]
    code, error = outcome(lambda: command(OmegaConf.to_container(cfg, resolve=True)))
    if preempt.requested():
        multirun.end_stopped_slurm_job(code)
    _exit_code = max(_exit_code, code)
    return {"code": code, "error": error}


def _task() -> list[str]:
    """The overrides typed on the command line."""
    return [o for o in HydraConfig.get().overrides.task if not o.startswith("command=")]


def _reproduce(c: dict) -> int:
    """plan -> run -> report: the plan built and checked before anything is written, the runs read from its file."""
    check_command(c)
    task = _task()
    if c.get("plan"):  # a torchrun rank: its parent planned and checked, and builds the report
        return reproduce(c, Path(c["plan"]), task)
    doc = for_command(c, task)
    if c.get("dry_run"):
        return dry_run(c, doc)
    lines = check(c, doc)
    path = write_plan(doc)
    if int(c["num_shards"]) == 1 and not ddp.in_torchrun():  # once, by the command typed (not its shards, ranks)
        for line in lines:
            print(line, flush=True)
    try:
        code = reproduce(c, path, task, doc["digest"])
    except RunsFailed:
        _report(c)
        raise
    if code != 2:
        _report(c)
    return code


def _list(c: dict) -> int:
    """``list``: the runs of the command's plan (every paper's, without paper=), with their status."""
    check_command(c)
    task = _task()
    if c.get("paper"):
        return list_runs(c, for_command(c, task))
    return list_papers(c, known_papers(), lambda paper: for_command({**c, "paper": paper}, task))


def _park(c: dict) -> int:
    """``park`` with the arguments of a ``reproduce``: the checkpoints its unfinished runs need, copied beside the
    records (repro/run/parked.py)."""
    check_command(c)
    if not c.get("paper"):
        raise ConfigError("park needs paper=<id>: give it the arguments of the reproduce command it parks")
    doc = for_command(c, _task())  # the whole plan, whatever tables= or runs= name: what any unfinished run needs
    return parked.park(planned_specs(doc), sources_of(doc), lambda line: print(line, flush=True))


def _report(c: dict) -> None:
    """The report stage: the paper's report and the index rebuilt from all its records (rank 0 only). A report that
    cannot be built is bad input (ConfigError, exit 2); the records already written stay."""
    if not c.get("report", True) or int(os.environ.get("RANK", 0)) != 0:
        return
    from .report.build import UnknownPaper, build_all

    paper = c["paper"]
    try:
        written, errors = build_all(results_dir=records.results_root(), only=[paper], notebook_execute=None)
    except UnknownPaper:
        print(f"note: papers/{paper}/paper.yaml does not exist; records are written, no report built")
        return
    except OSError as e:
        raise ConfigError(f"report of {paper} not written: {e.strerror or e} ({e.filename or 'results'}); "
                          f"the records are kept: free space or fix permissions, then run make report "
                          f"PAPER={paper}") from None
    if errors:
        raise ConfigError(f"report of {paper} not built: {errors[paper]}; the records are kept: fix it, then "
                          f"run make report PAPER={paper}")
    print(f"report: {records.results_root() / paper / 'report.html'}")


def campaign(args: list[str]) -> tuple[dict, dict]:
    """The composed config and built plan of ``reproduce <args>``, which deadline and forecast price before it runs."""
    overrides = [a for a in _prepare(args) if "=" in a and not a.startswith("-")]
    c = OmegaConf.to_container(check_keys(overrides), resolve=True)
    return c, for_command(c, overrides)


def _prepare(args: list[str]) -> list[str]:
    """Check the scale and the keys early (one line, not Hydra's listing); default scale; tables=a,b as a list."""
    sweep = any(a in ("-m", "--multirun") for a in args)
    multirun.check_launcher(args)
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
    try:
        overrides = OverridesParser.create().parse_overrides([a for a in out if "=" in a and not a.startswith("-")])
    except Exception as e:  # noqa: BLE001 - Hydra's OverrideParseException and friends
        raise ConfigError(f"cannot parse the command line: {' '.join(str(e).split())[:200]}") from None
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
    if command == "deadline":
        return deadline.main(rest, campaign, lambda args: main(["reproduce", *args]))
    if command == "forecast":
        return forecast.main(rest, campaign, lambda scale: [p for p in known_papers() if scale in paper_scales(p)])
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
