"""One process (or one torchrun group of ranks) running the command's runs in order: each without a record
under its lock, fused groups first where ``runtime.fused=true``, a crash recorded while the others go on."""
from __future__ import annotations

import time
import traceback

from .. import records
from ..data import DataError, FractionError
from ..errors import ConfigError, one_line
from ..runs import RunSpec, final_checkpoint
from ..train import ddp, machine, preempt
from ..train.checkpoint import CheckpointError
from ..train.engine import Runtime
from ..train.execute import DONE, execute, failed_record, record_status, resumes
from . import parked, sources
from .locks import claim, held_by
from .packed import train_packed
from .progress import describe, eta
from .specs import to_train

BAD_INPUT = (ConfigError, DataError, FractionError, records.RecordError, CheckpointError)


def run_specs(specs: list[RunSpec], status: dict, force: bool, rt: Runtime, d, say,
              deps: dict[str, RunSpec]) -> list[RunSpec]:
    """Run, in order, each spec without a record (all with ``force``), ``deps``: the run each depends on
    (``specs.sources_of``); returns those that crashed (recorded failed)."""
    todo = to_train(specs, status, force)  # what this command will run
    took: list[float] = []  # wall seconds of each run this command executed
    failures: list[RunSpec] = []
    if rt.persist and rt.dist.is_main and not force:  # checkpoints an earlier machine parked (run/parked.py)
        parked.restore([*todo, *(deps[s.run_id] for s in todo if s.run_id in deps)])
    fused = train_packed(todo, rt, say) if rt.fused and not force else set()
    for i, s in enumerate(specs, 1):
        tag, st = f"[{i}/{len(specs)}]", status[s.run_id]
        if s.run_id in fused:  # trained in a fused group above, its record written
            continue
        if st in DONE and not force:
            say(f"{tag} skip {s.run_id} ({st})")
            continue
        if preempt.requested():
            raise preempt.Preempted(f"{preempt.cause()} before {s.run_id}; run the same command again to go on")
        with claim(s, d) as held:
            if not held:
                say(f"{tag} skip {s.run_id}: {held_by(s)}")
                continue
            t0 = time.monotonic()
            rec = run_one(s, tag, rt, say, force, eta(took, len(todo) - len(took)), deps.get(s.run_id))
            took.append(time.monotonic() - t0)
        if rec is None:
            failures.append(s)
    return failures


def run_one(s: RunSpec, tag: str, rt: Runtime, say, force: bool, progress: str = "",
            dep: RunSpec | None = None) -> dict | None:
    """Run one spec (``dep``: the run it depends on) under its lock; None when it crashed (recorded as failed)."""
    st = ddp.from_main(record_status(s), rt.dist)  # again, under the lock: another process may have finished it
    if st in DONE and not force:
        say(f"{tag} skip {s.run_id} ({st}, finished by another process)")
        return {"status": st}
    if force:  # start over: the old record stays until the new one replaces it
        final_checkpoint(s).unlink(missing_ok=True)
        st = "not run"
    resume = st == "partial" and rt.persist and resumes(s)  # a final checkpoint of another folder's record: run
    say(f"{tag} {'resume' if resume else 'run'} {s.run_id} ({s.kind} {s.table}/{s.cell['row']} "
        f"seed {s.seed}){'; ' + progress if progress else ''}", flush=True)
    try:
        rec = execute(s, rt, source=sources.load(dep, resume))  # a source it cannot use: recorded as failed
    except BAD_INPUT:
        raise
    except Exception as e:  # a crash in one run is recorded; the other runs go on
        if machine.out_of_memory(e):  # every later run would fail the same way: one line, no failed record
            raise ConfigError(f"{s.run_id}: out of memory ({one_line(e)[:160]}); lower recipe.batch_size (or "
                              f"runtime.probe_batch), or run it on a machine with more memory; the finished runs "
                              f"keep their records") from None
        if rt.dist.world_size > 1 or records.disk_full(e):  # other ranks wait in a collective; no room for a record
            raise
        traceback.print_exc()
        if rt.dist.is_main:
            records.write_record(failed_record(s, rt, e))
        return None
    if rt.dist.is_main and rec.get("status") in DONE:
        parked.release(s)
    say(f"{tag} {s.run_id}: {describe(rec)}", flush=True)
    return rec
