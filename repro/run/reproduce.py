"""``reproduce``'s run stage: ``check`` the command's runs on its plan before anything is written, then run them
from plan.json as the plan stage wrote it, one of three ways (``jobs=N`` processes over the plan's groups,
torchrun ranks, or this process in order; a Hydra multirun calls it once per job)."""
from __future__ import annotations

from pathlib import Path

from .. import records
from ..checks import check_writable
from ..errors import ConfigError
from ..paths import check_creatable
from ..plan.store import check_plan_path, plan_at, plan_path
from ..runs import run_dir
from ..train import ddp
from ..train.execute import DONE, record_status
from . import multirun, parked
from .outcome import RunsFailed
from .parallel import parallel
from .progress import failures_line, prefixed
from .runtime import nproc, runtime
from .sequential import run_specs
from .specs import check_records, select, sources_of, to_train, validate


def check(c: dict, doc: dict) -> list[str]:
    """Everything checkable before anything is written, the plan included; the datasets' lines to print."""
    specs = select(c, doc)
    for folder in dict.fromkeys(records.record_dir(s.paper, s.scale) for s in specs) or [records.results_root()]:
        check_writable(folder)  # records/ or <scale>/ being a file: one line now, not a run that trains, then fails
        check_creatable(folder.parent / "locks", "results folder", "REPRO_RESULTS_DIR")
    for folder in dict.fromkeys(run_dir(s).parent for s in specs):  # <cache>/runs a file: not a failed record per run
        check_creatable(folder, "cache folder", "REPRO_CACHE_DIR")
    check_plan_path(plan_path(doc["paper"], doc["scale"]))
    check_records(c["paper"], bool(c.get("allow_invalid")))
    status = {s.run_id: record_status(s) for s in specs}  # a corrupt record stops us here
    seen: dict = {}
    lines = [validate(s, seen) for s in to_train(specs, status, bool(c.get("force")))]  # a rebuild needs no data
    if not c.get("force"):  # a forced run starts afresh
        parked.check(specs)
    return list(dict.fromkeys(n for n in lines if n))


def plan_written(plan: Path, digest: str | None) -> dict:
    """``plan`` as this command wrote it (``digest``), or one line if another command rewrote it since."""
    doc = plan_at(plan)
    if digest and doc["digest"] != digest:  # parallel multirun jobs that plan other runs of one scale
        raise ConfigError(f"{plan} was rewritten by another command since this one wrote it; run commands that "
                          f"plan other runs of {doc['paper']}/{doc['scale']} one after another")
    return doc


def reproduce(c: dict, plan: Path, task: list[str], digest: str | None = None) -> int:
    """The command's runs of ``plan`` (``digest``: as this command wrote it; ``task``: for torchrun); its exit code."""
    multirun.join_slurm_tasks()
    doc = plan_written(plan, digest)
    specs = select(c, doc)
    status = {s.run_id: record_status(s) for s in specs}
    if int(c.get("jobs") or 1) > 1 and int(c.get("num_shards") or 1) == 1:
        codes = parallel(c, plan, doc, specs, status)
        return 2 if 2 in codes else max(codes, default=0)
    processes = nproc(c)
    if processes > 1 and not ddp.in_torchrun():  # torchrun starts this command again, once per rank, on this plan
        own = ("command", "plan")
        return ddp.relaunch(processes, ["reproduce", *[o for o in task if o.split("=")[0] not in own], f"plan={plan}"])
    return in_this_process(c, specs, status, doc)


def in_this_process(c: dict, specs: list, status: dict, doc: dict) -> int:
    """The runs in order here (every torchrun rank the same), each given what it depends on from the plan ``doc``."""
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
    failures = run_specs(specs, status, bool(c.get("force")), rt, d, say, sources_of(doc))
    ddp.teardown()
    if failures:
        raise RunsFailed(failures_line(failures))
    return 0
