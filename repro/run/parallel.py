"""``jobs=N``: N processes at a time, each running one group of the plan's runs (a run with the runs that start
from or read it); a process that ends hands its core to the next group, where a fixed split into N shards left
a core idle at the end. Groups whose runs all have a record are not started."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ..runs import RunSpec, cache_root
from ..train import preempt
from ..train.execute import DONE
from .progress import duration, stopped_runs


def parallel(c: dict, plan: Path, doc: dict, specs: list[RunSpec], status: dict) -> list[int | None]:
    """Run the groups with runs to do, ``c['jobs']`` processes at a time; their exit codes (None: not started)."""
    jobs = int(c["jobs"])
    threads = c["runtime"].get("threads") or max(1, (os.cpu_count() or 1) // jobs)
    planned = {r["run_id"]: r["group"] for r in doc["runs"]}
    groups = list(dict.fromkeys(planned[s.run_id] for s in specs))  # this command's, numbered 0.. in its order
    group = {s.run_id: groups.index(planned[s.run_id]) for s in specs}
    todo = sorted({group[s.run_id] for s in specs if c.get("force") or status[s.run_id] not in DONE})
    print(f"{c['paper']} at scale {c['scale']}: {len(todo)} of {len(groups)} group(s) of runs to do, {jobs} at a "
          f"time, {threads} thread(s) each", flush=True)
    start = time.time()
    child = {**c, "jobs": 1, "num_shards": len(groups), "runtime": {**c["runtime"], "threads": threads,
                                                                    "progress": False}}
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=cache_root(), prefix="jobs-") as config:
        json.dump(child, config)
        config.flush()

        def one(index: int) -> int | None:
            if preempt.requested():  # SIGTERM or Ctrl-C: start no more groups
                return None
            cmd = [sys.executable, "-m", "repro.run.child", config.name, str(plan), str(groups[index]), str(index),
                   doc["digest"]]
            return preempt.wait(start_group(cmd))

        codes: list[int | None] = []
        with ThreadPoolExecutor(jobs) as pool:
            for done in as_completed([pool.submit(one, g) for g in todo]):
                codes.append(done.result())
                ended = [code for code in codes if code is not None and not preempt.stopped(code)]
                if codes[-1] is not None and not preempt.stopped(codes[-1]):  # a stopped group: in the summary
                    spent, left = time.time() - start, len(todo) - len(ended)
                    print(f"{len(ended)}/{len(todo)} group(s) done in {duration(spent)}"
                          f"{f', ETA {duration(spent / len(ended) * left)}' if left else ''}", flush=True)
    if preempt.requested():
        raise preempt.Preempted(stopped_runs([s for s in specs if group[s.run_id] in todo]))
    print(f"{c['paper']} at scale {c['scale']}: {jobs} jobs x {threads} thread(s) finished in "
          f"{time.time() - start:.0f} s of wall time (exit codes {sorted(set(codes))})", flush=True)
    return codes


def start_group(cmd: list[str]) -> subprocess.Popen:
    """A group's process in a session of its own: Ctrl-C reaches this process alone, which passes it on as SIGTERM
    (preempt.wait); a child in the terminal's group that got it while Python was starting ended in a traceback."""
    return subprocess.Popen(cmd, env={**os.environ, preempt.SUMMARIZED: "1"}, start_new_session=True)
