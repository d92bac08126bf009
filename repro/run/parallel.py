"""``jobs=N``: N processes at a time, each running one group of runs (a run that starts from scratch with
the runs that start from it or read it, ``repro.runs.run_groups``) as a shard of the same command; a
process that ends hands its core to the next group. A fixed split into N shards left a core idle for up to
a run's length at the end. Groups whose runs all have a record are not started."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from hydra.core.hydra_config import HydraConfig

from ..runs import RunSpec, run_groups
from ..train import preempt
from ..train.execute import DONE
from .progress import duration, stopped_runs

# what each group's process is told anew (the rest of the command line is passed on as typed)
OWN_KEYS = ("command", "jobs", "shard", "num_shards", "report", "runtime.threads", "runtime.progress")


def parallel(c: dict, specs: list[RunSpec], status: dict) -> list[int | None]:
    """Run the groups with runs to do, ``c['jobs']`` processes at a time; their exit codes (None: not started)."""
    jobs = int(c["jobs"])
    threads = c["runtime"].get("threads") or max(1, (os.cpu_count() or 1) // jobs)
    task = [o for o in HydraConfig.get().overrides.task if o.split("=")[0].lstrip("+~") not in OWN_KEYS]
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
                print(f"{len(ended)}/{len(todo)} group(s) done in {duration(spent)}"
                      f"{f', ETA {duration(spent / len(ended) * left)}' if left else ''}", flush=True)
    if preempt.requested():
        raise preempt.Preempted(stopped_runs([s for s in specs if group[s.run_id] in todo]))
    print(f"{c['paper']} at scale {c['scale']}: {jobs} jobs x {threads} thread(s) finished in "
          f"{time.time() - start:.0f} s of wall time (exit codes {sorted(set(codes))})", flush=True)
    return codes
