"""Fused groups (``runtime.fused=true``): the runs of a cell that fuse (train/fused.py ``groups``) trained as one
model on one device, each run under its own lock as when it trains alone (``locks.claim``), each recorded."""
from __future__ import annotations

import contextlib
import traceback

from .. import records
from ..runs import RunSpec
from ..train import machine
from ..train.engine import Runtime, train_runs
from ..train.execute import DONE, make_record, record_status
from ..train.fused import NotFusable, groups
from . import parked
from .locks import claim


def train_packed(specs: list[RunSpec], rt: Runtime, say=print) -> set[str]:
    """Train the runs among ``specs`` that fuse, group by group, and write their records; the run ids recorded (a
    group that cannot run together is left to train alone)."""
    if rt.dist.world_size > 1:
        return set()
    done: set[str] = set()
    for group in groups(specs):
        with contextlib.ExitStack() as stack:
            # under its lock each run's status is read again: another process may have finished it
            held = [s for s in group if stack.enter_context(claim(s, rt.dist)) and record_status(s) not in DONE]
            if len(held) < 2:
                continue
            say(f"fused group of {len(held)}: {', '.join(s.run_id for s in held)}", flush=True)
            started = machine.provenance(1)
            try:
                results = train_runs(held, rt)
            except (NotFusable, RuntimeError, ValueError) as e:
                traceback.print_exc()
                say(f"  not fused ({type(e).__name__}: {e}); these runs train alone", flush=True)
                continue
            for s, res in zip(held, results):
                records.write_record(make_record(s, rt, res.status, res.metrics, res.provenance, started))
                if res.status in DONE:
                    parked.release(s)
                done.add(s.run_id)
    return done
