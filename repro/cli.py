"""``python -m repro reproduce|list``: the command line, on Hydra.

    python -m repro reproduce paper=convit [scale=tiny|small|full] [tables=table2,table3] [seeds=3] [key=value ...]
    python -m repro list [paper=convit] [scale=...]

``reproduce`` runs every run of the paper's tables that has no record yet (resuming the partial
ones from their checkpoints), writes one record per run, then rebuilds the paper's report.
Default scale: small when a GPU is present, else tiny. Hydra's ``-m`` (multirun) and launchers
work as usual, e.g. ``-m hydra/launcher=slurm``. Bad input is one line on stderr and exit code 2.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from tabulate import tabulate

from . import locks, multirun, records
from .checks import (check_booleans, check_command, check_data, check_paths, check_recipe, check_writable,
                     class_counts)
from .data import DataError, FractionError, check_fraction, check_train_data
from .functions import lookup
from .plan.build import plan, resolved_runs
from .plan.experiments import known_papers
from .plan.store import write_plan
from .runs import RUN_KEYS, SCALES, ConfigError, RunSpec, cache_root, lock_dir, run_dir, run_groups, shard, source_spec
from .train import ddp, preempt
from .train.checkpoint import CheckpointError
from .train.engine import Runtime, train
from .train.execute import DONE, execute, failed_record, make_record, record_status, shared_record
from .train.group import run_groups as train_fused
from .train.hooks import probe_list
from .train.model import check_model, register_models

COMMANDS = ("reproduce", "list")
BAD_INPUT = (ConfigError, DataError, FractionError, records.RecordError, CheckpointError)
_exit_code = 0


class RunsFailed(Exception):
    """Some runs crashed (each recorded as failed, the others ran): exit code 1, one line naming them."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


# ------------------------------------------------------------------ configs -> resolved RunSpecs

def run_overrides(cfg: DictConfig, task: list[str] | None = None) -> dict:
    """Command-line ``key=value`` overrides of run keys (model., data., recipe., ...), as a nested dict;
    ``task``: the overrides, when ``cfg`` was composed outside the Hydra app (repro/run/deadline.py)."""
    if task is None:
        try:
            task = list(HydraConfig.get().overrides.task)
        except ValueError:  # not inside a Hydra app (tests calling build_specs directly)
            return {}
    out = OmegaConf.create()
    for o in OverridesParser.create().parse_overrides(task):
        key = o.key_or_group
        if o.is_delete() or "." not in key or key.split(".")[0] not in RUN_KEYS:
            continue
        OmegaConf.update(out, key, OmegaConf.select(cfg, key), force_add=True)  # the composed (typed) value
    return OmegaConf.to_container(out, resolve=True)


def build_specs(c: dict, overrides: dict | None = None) -> list[RunSpec]:
    """Resolved RunSpecs of ``c['paper']`` at ``c['scale']`` (repro.plan): tables filter and shard applied."""
    tables = c.get("tables")
    if isinstance(tables, str):
        tables = [t for t in tables.split(",") if t]
    specs = resolved_runs(c, overrides, tables)
    shards, index = int(c.get("num_shards") or 1), int(c.get("shard") or 0)
    if not 0 <= index < shards:
        raise ConfigError(f"shard={index} with num_shards={shards}: need 0 <= shard < num_shards")
    return shard(specs, index, shards)


def validate(spec: RunSpec, seen_data: dict | None = None) -> str | None:
    """Everything checkable before a run starts, so bad input fails before anything is written.

    Returns the dataset's images per class ('data: ...'), or None where ``seen_data`` (the datasets already
    checked) holds it: ImageNet is listed once, not per run.
    """
    if spec.kind == "probe":
        if not spec.config.get("probe"):
            raise ConfigError(f"probe run {spec.run_id} has no config['probe'] (a registered function name)")
        lookup(spec.config["probe"])
        check_paths(spec.config.get("data") or {})
        return
    check_model(spec.config)
    source = source_spec(spec)
    if source is not None:
        lookup(spec.config["init"]["fn"])
        check_model(source.config)
    check_fraction(spec.config["data"].get("fraction", 1.0))
    check_data(spec.config["data"])
    check_recipe(spec.config.get("recipe") or {})
    probe_list(spec.config.get("probes"))
    for entry in spec.config.get("losses") or []:
        lookup(entry if isinstance(entry, str) else entry.get("fn", ""))
    train, test, fresh = check_train_data(spec.config["data"], spec.config["recipe"], seen_data)
    return f"data: {class_counts(train)}; {class_counts(test)}" if fresh else None


def check_records(paper: str, allow_invalid: bool) -> None:
    """Every record of the paper (all tables and scales: the report reads them all) is valid, or the
    command stops naming the first; ``allow_invalid=true`` goes on, and the report leaves them out."""
    bad = records.load_records(paper)[1]
    if bad and not allow_invalid:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise records.RecordError(f"{_one_line(bad[0])}{more}; or build the report without them: allow_invalid=true")
    for e in bad:
        print(f"skipped: {_one_line(e)}", file=sys.stderr)


def to_train(specs: list[RunSpec], status: dict, force: bool) -> list[RunSpec]:
    """The runs this command may execute: those without a finished or diverged record (all with force)."""
    return [s for s in specs if force or status[s.run_id] not in DONE]


def _distinct_shapes(specs: list[RunSpec]) -> list[RunSpec]:
    """One spec per distinct model, data shape, objective and init for dry runs: recipe values
    (lr, epochs, fraction, augmentation strengths) and probes do not change what can rot at paper
    scale (probes and extra losses are exercised by the tiny smoke runs), so they are ignored."""
    seen, out = set(), []
    for s in specs:
        c, data = s.config, s.config.get("data", {})
        hooks = [(c.get(k) or {}).get("fn") for k in ("objective", "init")]  # both build or load modules
        key = repr((s.kind, c.get("model"), c.get("probe"), hooks, data.get("img_size"), data.get("num_classes")))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


# ------------------------------------------------------------------ commands

def _runtime(c: dict, dist):
    r = c["runtime"]
    if r.get("threads"):
        torch.set_num_threads(int(r["threads"]))
    on_gpu = dist.device.type == "cuda"
    workers = r["num_workers"]
    if workers == "auto":
        workers = min(8, (os.cpu_count() or 1) // max(1, dist.world_size)) if on_gpu else 0
    check = r["check_every"]
    if check == "auto":
        check = 50 if on_gpu else 1
    return Runtime(dist=dist, amp=r["amp"], compile=bool(r["compile"]), deterministic=bool(r["deterministic"]),
                   num_workers=int(workers), progress=bool(r["progress"]), tensorboard=bool(r["tensorboard"]),
                   check_every=int(check), probe_batch=int(r["probe_batch"]),
                   checkpoint_every_s=float(r["checkpoint_every_s"]), fused=bool(r.get("fused", False)))


def _nproc(c: dict) -> int:
    n = c["runtime"]["nproc_per_node"]
    if n == "auto":
        return torch.cuda.device_count() if c["scale"] == "full" and torch.cuda.device_count() > 1 else 1
    return int(n)


def _describe(rec: dict) -> str:
    m, p = rec["metrics"], rec["provenance"]
    parts = [rec["status"]]
    if rec["status"] == "diverged":
        parts.append(f"at step {m.get('diverged_step')}")
    for k in ("top1", "top5"):
        if isinstance(m.get(k), (int, float)):
            parts.append(f"{k} {m[k]:.2f}")
    if isinstance(p.get("wall_s"), (int, float)):
        parts.append(f"{p['wall_s']:.1f}s")
    if isinstance(p.get("images_per_s"), (int, float)):
        parts.append(f"{p['images_per_s']:.0f} img/s")
    return ", ".join(parts)


def reproduce(cfg: DictConfig) -> int:
    multirun.join_slurm_tasks()
    c = OmegaConf.to_container(cfg, resolve=True)
    check_command(c)
    register_models(c.get("paper"), c["runtime"].get("imports"))
    overrides = run_overrides(cfg)
    specs = build_specs(c, overrides)
    if c.get("dry_run"):
        return dry_run(specs, c)
    check_writable(records.results_root() / c["paper"])
    check_records(c["paper"], bool(c.get("allow_invalid")))
    status = {s.run_id: record_status(s) for s in specs}  # a corrupt record stops us here
    seen: dict = {}
    counts = [validate(s, seen) for s in to_train(specs, status, bool(c.get("force")))]  # a rebuild needs no data
    if int(c["num_shards"]) == 1 and not ddp.in_torchrun():  # once, by the command typed (not its shards, ranks)
        write_plan(plan(c, overrides))  # its input checked, before any run
        for line in dict.fromkeys(n for n in counts if n):
            print(line, flush=True)
    if int(c.get("jobs") or 1) > 1 and int(c.get("num_shards") or 1) == 1:
        return _parallel(c, specs, status)
    nproc = _nproc(c)
    if nproc > 1 and not ddp.in_torchrun():
        task = [o for o in HydraConfig.get().overrides.task if not o.startswith("command=")]
        return ddp.relaunch(nproc, ["reproduce", *task])
    d = ddp.setup(c["runtime"]["device"])
    status = ddp.from_main(status, d)  # every rank skips and runs the same runs
    rt = _runtime(c, d)
    say = print if d.is_main else (lambda *a, **k: None)
    if int(c.get("num_shards") or 1) > 1:
        say = _prefixed(say, f"shard {c['shard']}/{c['num_shards']}")
    done = sum(v in DONE for v in status.values())
    say(f"{c['paper']} at scale {c['scale']}: {len(specs)} run(s), {done} already done; device {d.device}, "
        f"world size {d.world_size}")
    if done and not c.get("force"):
        say(f"  runs with a record (e.g. the committed results) are skipped; to measure them again use force=true "
            f"(FORCE=1 with make), or a fresh folder: REPRO_RESULTS_DIR=<dir> (now {records.results_root()})")
    failures = _run_specs(specs, status, bool(c.get("force")), rt, d, say)
    if d.is_main and c.get("report", True):
        _build_report(c["paper"])
    ddp.teardown()
    if failures:
        raise RunsFailed(_failures_line(failures))
    return 0


def _run_specs(specs: list[RunSpec], status: dict, force: bool, rt, d, say) -> list[RunSpec]:
    """Run, in order, each spec without a record (all with ``force``); returns those that crashed (recorded failed)."""
    finished = {}  # fingerprint -> run id of a finished record: a run another table asked for already
    for s in specs:
        if status[s.run_id] == "finished":
            finished.setdefault(s.fingerprint, s.run_id)
    todo = [s.run_id for s in specs if force or status[s.run_id] not in DONE]  # what this command will run
    took: list[float] = []  # wall seconds of each run this command executed
    failures: list[RunSpec] = []
    fused = train_fused([s for s in specs if s.run_id in todo], rt, say) if rt.fused and not force else set()
    for i, s in enumerate(specs, 1):
        tag, st = f"[{i}/{len(specs)}]", status[s.run_id]
        if s.run_id in fused:  # trained in a fused group above, its record written
            continue
        if st in DONE and not force:
            say(f"{tag} skip {s.run_id} ({st})")
            continue
        twin = None if force else finished.get(s.fingerprint)
        if twin is not None and st == "not run":
            source = records.read_record(records.record_path(s.paper, s.scale, twin))
            if d.is_main:
                records.write_record(shared_record(s, source))
            say(f"{tag} {s.run_id}: same run as {twin}, record shared")
            continue
        if preempt.requested():
            raise preempt.Preempted(f"{preempt.cause()} before {s.run_id}; run the same command again to go on")
        with _run_lock(s, d) as held:
            if not held:
                who = locks.owner(lock_dir(s) / locks.LOCK_NAME) or {}
                say(f"{tag} skip {s.run_id}: another process holds it (pid {who.get('pid')} on {who.get('host')})")
                continue
            t0 = time.monotonic()
            rec = _run_one(s, tag, rt, say, force, eta(took, len(todo) - len(took)))
            took.append(time.monotonic() - t0)
        if rec is None:
            failures.append(s)
        elif rec["status"] == "finished":
            finished.setdefault(s.fingerprint, s.run_id)
    return failures


def _failures_line(failed: list[RunSpec]) -> str:
    """'2 run(s) failed: <id> (<its error>), <id>; ...' from their failed records."""
    path = records.record_path(failed[0].paper, failed[0].scale, failed[0].run_id)
    error = records.read_record(path)["metrics"].get("error", "") if path.exists() else ""
    ids = ", ".join(s.run_id for s in failed[1:4]) + (", ..." if len(failed) > 4 else "")
    return (f"{len(failed)} run(s) failed: {failed[0].run_id} ({error}){', ' + ids if ids else ''}; their records "
            f"keep the tracebacks; run the same command again to retry them")


def eta(took: list[float], left: int) -> str:
    """'run k of n to go, ETA ...' from the runs this command finished (their mean wall time)."""
    if not took:
        return f"{left} run(s) to go"
    mean = sum(took) / len(took)
    return f"{left} run(s) to go, ETA {_duration(mean * left)} (mean {_duration(mean)} per run so far)"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@contextlib.contextmanager
def _run_lock(s: RunSpec, d):
    """The run's lock (repro/locks.py), taken by rank 0 alone; every rank gets its answer, so that all
    ranks train the run or all skip it."""
    with (locks.run_lock(lock_dir(s)) if d.is_main else contextlib.nullcontext(True)) as held:
        yield ddp.from_main(held, d)


def _run_one(s: RunSpec, tag: str, rt, say, force: bool, progress: str = "") -> dict | None:
    """Run one spec under its lock; None when it crashed (recorded as failed, the others go on)."""
    st = ddp.from_main(record_status(s), rt.dist)  # again, under the lock: another process may have finished it
    if st in DONE and not force:
        say(f"{tag} skip {s.run_id} ({st}, finished by another process)")
        return {"status": st}
    if force:  # start over: the old record stays until the new one replaces it
        (run_dir(s) / "last.pt").unlink(missing_ok=True)
        st = "not run"
    say(f"{tag} {'resume' if st == 'partial' else 'run'} {s.run_id} ({s.kind} {s.table}/{s.cell['row']} "
        f"seed {s.seed}){'; ' + progress if progress else ''}", flush=True)
    try:
        rec = execute(s, rt)
    except BAD_INPUT:
        raise
    except Exception as e:  # a crash in one run is recorded; the other runs go on
        if rt.dist.world_size > 1 or records.disk_full(e):  # other ranks wait in a collective; no room for a record
            raise
        traceback.print_exc()
        if rt.dist.is_main:
            records.write_record(failed_record(s, rt, e))
        return None
    say(f"{tag} {s.run_id}: {_describe(rec)}", flush=True)
    return rec


def _prefixed(say, prefix: str):
    def out(msg, **kw):
        say(f"{prefix} {msg}", **kw)
    return out


def _parallel(c: dict, specs: list[RunSpec], status: dict) -> int:
    """``jobs=N``: N processes at a time, each running one group of runs (a run that starts from scratch
    with the runs that start from it or read it, ``repro.runs.run_groups``); a process that ends hands its
    core to the next group. A fixed split into N shards left a core idle for up to a run's length at
    the end. Groups whose runs all have a record are not started. Then one report."""
    jobs = int(c["jobs"])
    threads = c["runtime"].get("threads") or max(1, (os.cpu_count() or 1) // jobs)
    task = [o for o in HydraConfig.get().overrides.task
            if o.split("=")[0].lstrip("+~") not in ("command", "jobs", "shard", "num_shards", "report",
                                                     "runtime.threads", "runtime.progress")]
    group = run_groups(specs)
    count = max(group.values(), default=-1) + 1
    todo = sorted({group[s.run_id] for s in specs if c.get("force") or status[s.run_id] not in DONE})
    print(f"{c['paper']} at scale {c['scale']}: {len(todo)} of {count} group(s) of runs to do, {jobs} at a "
          f"time, {threads} thread(s) each", flush=True)
    start = time.time()

    def one(index: int) -> int | None:
        if preempt.requested():  # SIGTERM or Ctrl-C: start no more groups
            return None
        cmd = [sys.executable, "-m", "repro", "reproduce", *task, f"shard={index}", f"num_shards={count}", "jobs=1",
               "report=false", f"runtime.threads={threads}", "runtime.progress=false"]
        return preempt.wait(subprocess.Popen(cmd, env={**os.environ, preempt.SUMMARIZED: "1"}))

    codes: list[int | None] = []
    with ThreadPoolExecutor(jobs) as pool:
        for done in as_completed([pool.submit(one, g) for g in todo]):
            codes.append(done.result())
            ended = [code for code in codes if code is not None and not preempt.stopped(code)]
            if codes[-1] is not None and not preempt.stopped(codes[-1]):  # a stopped group is told in the summary
                spent, left = time.time() - start, len(todo) - len(ended)
                print(f"{len(ended)}/{len(todo)} group(s) done in {_duration(spent)}"
                      f"{f', ETA {_duration(spent / len(ended) * left)}' if left else ''}", flush=True)
    if preempt.requested():
        raise preempt.Preempted(_stopped_runs([s for s in specs if group[s.run_id] in todo]))
    print(f"{c['paper']} at scale {c['scale']}: {jobs} jobs x {threads} thread(s) finished in "
          f"{time.time() - start:.0f} s of wall time (exit codes {sorted(set(codes))})", flush=True)
    if 2 in codes:
        return 2
    if c.get("report", True):
        _build_report(c["paper"])
    return max(codes, default=0)


def _stopped_runs(specs: list[RunSpec]) -> str:
    """The one line a stopped ``jobs=N`` command ends with: which runs finished, which stopped, which never began."""
    status = {s.run_id: record_status(s) for s in specs}
    stopped = [run for run, st in status.items() if st == "partial"]
    finished = sum(st in DONE for st in status.values())
    names = ", ".join(stopped[:3]) + (", ..." if len(stopped) > 3 else "")
    return (f"{preempt.cause()}: of {len(specs)} run(s), {finished} finished, {len(stopped)} stopped and "
            f"checkpointed{f' ({names})' if names else ''}, {len(specs) - finished - len(stopped)} not started; "
            f"run the same command again to resume")


def _build_report(paper: str) -> None:
    """Rebuild the paper's report and the index from all its records (the report never trains).

    A report that cannot be built (paper.yaml unreadable, disk full) is bad input: ConfigError, exit 2;
    the records already written stay as they are.
    """
    from .report.build import UnknownPaper, build_all

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


def dry_run(specs: list[RunSpec], c: dict) -> int:
    """The paper's models at the paper's resolution on synthetic data, two optimizer steps each."""
    rt = _runtime(c, ddp.setup(c["runtime"]["device"]))
    rt.persist, rt.progress = False, False
    todo = _distinct_shapes(specs)
    print(f"dry run: {len(todo)} distinct run config(s) of {len(specs)} at scale {c['scale']}")
    for s in todo:
        validate(s)
        if s.kind == "probe":
            print(f"  ok probe {s.run_id} ({s.config['probe']} importable)")
            continue
        res = train(s, rt)
        rec = make_record(s, rt, res.status, res.metrics, res.provenance)
        print(f"  ok {s.run_id}: {s.config['model']['name']} at {s.config['data']['img_size']} px, "
              f"{res.metrics['params'] / 1e6:.1f}M params, {res.metrics['steps']} steps, {_describe(rec)}")
        if res.status != "finished":
            return 1
    return 0


def list_runs(cfg: DictConfig) -> int:
    """Papers, their tables and runs at a scale, and each run's status."""
    c = OmegaConf.to_container(cfg, resolve=True)
    check_command(c)

    def status(s: RunSpec) -> str:
        try:
            return record_status(s)
        except records.RecordError:
            return "corrupt record"

    if not c.get("paper"):
        rows = []
        for paper in known_papers():
            try:
                specs = build_specs({**c, "paper": paper})
            except Exception as e:  # one broken experiments.py should not hide the others
                rows.append([paper, "", "", f"error: {_one_line(e)}"])
                continue
            counts = {}
            for s in specs:
                counts[status(s)] = counts.get(status(s), 0) + 1
            rows.append([paper, ", ".join(sorted({s.table for s in specs})), len(specs),
                         ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))])
        print(f"scale {c['scale']}")
        print(tabulate(rows, headers=["paper", "tables", "runs", "status"]))
        return 0
    specs = build_specs(c, run_overrides(cfg))
    if c.get("resolved"):
        for s in specs:  # what each run will use: the base, the paper's protocol and the command line merged
            print(f"# {s.run_id}  ({s.kind}, table {s.table}, row {s.cell['row']}, seed {s.seed}, {status(s)})")
            print(OmegaConf.to_yaml({"config": s.config}), end="")
        return 0
    rows = []
    for s in specs:
        st = status(s)
        top1 = ""
        if st in ("finished", "diverged"):
            rec = records.read_record(records.record_path(s.paper, s.scale, s.run_id))
            top1 = rec["metrics"].get("top1", "")
        rows.append([s.table, s.cell["row"], ",".join(s.cell["columns"]), s.seed, s.run_id, st, top1])
    print(f"{c['paper']} at scale {c['scale']}: {len(specs)} run(s)")
    print(tabulate(rows, headers=["table", "row", "columns", "seed", "run_id", "status", "top1"]))
    return 0


# ------------------------------------------------------------------ entry point

@hydra.main(config_path=str(Path(__file__).resolve().parent / "conf"), config_name="config", version_base=None)
def _hydra_main(cfg: DictConfig) -> dict:
    """The task function: its return value is what a multirun job reports (repro/multirun.py)."""
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
        code, error = 2, f"error: {_one_line(e)}"
    except RunsFailed as e:
        code, error = 1, f"error: {_one_line(e)}"
    except preempt.Preempted as e:
        code, error = preempt.exit_code(), f"stopped: {_one_line(e)}"
        if os.environ.get(preempt.SUMMARIZED):  # a group of a jobs=N command: its parent says it once for all
            return code, error
    except Exception as e:
        if records.disk_full(e):
            return 2, _said(f"error: {_disk_full_line(e)}")
        if not multirun.in_multirun():
            raise
        traceback.print_exc()
        code, error = 1, f"crashed: {type(e).__name__}: {_one_line(e)}"
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
        print(f"error: {_one_line(e)}", file=sys.stderr)
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
