"""``reproduce``: check everything before anything is written, write the plan, then run the command's runs
one of three ways (``jobs=N`` processes over groups of runs, torchrun ranks, or this process in order; a
Hydra multirun calls it once per job) and rebuild the paper's report from all its records."""
from __future__ import annotations

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .. import records
from ..checks import check_command, check_writable
from ..errors import ConfigError
from ..plan.build import plan, shaping
from ..plan.store import write_plan
from ..train import ddp
from ..train.execute import DONE, record_status
from ..train.model import register_models
from . import multirun
from .dry_run import dry_run
from .parallel import parallel
from .progress import failures_line, prefixed
from .runtime import nproc, runtime
from .sequential import run_specs
from .specs import build_specs, check_records, command_overrides, run_overrides, to_train, validate


class RunsFailed(Exception):
    """Some runs crashed (each recorded as failed, the others ran): exit code 1, one line naming them."""


def reproduce(cfg: DictConfig) -> int:
    """The ``reproduce`` command on the composed config; its exit code."""
    multirun.join_slurm_tasks()
    c = OmegaConf.to_container(cfg, resolve=True)
    check_command(c)
    register_models(c.get("paper"), c["runtime"].get("imports"))
    overrides = run_overrides(cfg)
    specs = build_specs(c, overrides)
    if c.get("dry_run"):
        return dry_run(specs, c)
    for folder in dict.fromkeys(records.record_dir(s.paper, s.scale) for s in specs) or [records.results_root()]:
        check_writable(folder)  # records/ or <scale>/ being a file: one line now, not a run that trains, then fails
    check_records(c["paper"], bool(c.get("allow_invalid")))
    status = {s.run_id: record_status(s) for s in specs}  # a corrupt record stops us here
    seen: dict = {}
    counts = [validate(s, seen) for s in to_train(specs, status, bool(c.get("force")))]  # a rebuild needs no data
    if int(c["num_shards"]) == 1 and not ddp.in_torchrun():  # once, by the command typed (not its shards, ranks)
        write_plan(plan(c, overrides, shaping(command_overrides())))  # its input checked, before any run
        for line in dict.fromkeys(n for n in counts if n):
            print(line, flush=True)
    if int(c.get("jobs") or 1) > 1 and int(c.get("num_shards") or 1) == 1:
        codes = parallel(c, specs, status)
        if 2 in codes:
            return 2
        if c.get("report", True):
            build_report(c["paper"])
        return max(codes, default=0)
    processes = nproc(c)
    if processes > 1 and not ddp.in_torchrun():  # torchrun starts this command again, once per rank
        task = [o for o in HydraConfig.get().overrides.task if not o.startswith("command=")]
        return ddp.relaunch(processes, ["reproduce", *task])
    return _in_this_process(c, specs, status)


def _in_this_process(c: dict, specs: list, status: dict) -> int:
    """The runs in order here (every torchrun rank the same), then the report (rank 0)."""
    d = ddp.setup(c["runtime"]["device"])
    status = ddp.from_main(status, d)  # every rank skips and runs the same runs
    rt = runtime(c, d)
    say = print if d.is_main else (lambda *a, **k: None)
    if int(c.get("num_shards") or 1) > 1:
        say = prefixed(say, f"shard {c['shard']}/{c['num_shards']}")
    done = sum(v in DONE for v in status.values())
    say(f"{c['paper']} at scale {c['scale']}: {len(specs)} run(s), {done} already done; device {d.device}, "
        f"world size {d.world_size}")
    if done and not c.get("force"):
        say(f"  runs with a record (e.g. the committed results) are skipped; to measure them again use force=true "
            f"(FORCE=1 with make), or a fresh folder: REPRO_RESULTS_DIR=<dir> (now {records.results_root()})")
    failures = run_specs(specs, status, bool(c.get("force")), rt, d, say)
    if d.is_main and c.get("report", True):
        build_report(c["paper"])
    ddp.teardown()
    if failures:
        raise RunsFailed(failures_line(failures))
    return 0


def build_report(paper: str) -> None:
    """Rebuild the paper's report and the index from all its records (the report never trains).

    A report that cannot be built (paper.yaml unreadable, disk full) is bad input: ConfigError, exit 2;
    the records already written stay as they are.
    """
    from ..report.build import UnknownPaper, build_all

    try:
        written, errors = build_all(results_dir=records.results_root(), only=[paper])
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
