"""``list``: the papers, their tables and runs at a scale, and each run's status (or its resolved config), read
from the plans the plan stage built for the command."""
from __future__ import annotations

import csv
from collections import Counter
from statistics import median_low
from typing import Callable

from omegaconf import OmegaConf
from tabulate import tabulate

from .. import records
from ..errors import one_line
from ..runs import RunSpec, run_dir
from ..train.execute import DONE, record_status
from ..train.recipe import run_epochs
from .locks import live_holder
from .parked import parked_path
from .specs import select


def _status(s: RunSpec, who: bool = False) -> str:
    """The run's status; one a live process holds the lock of is "training" (``who``: and by which process)."""
    try:
        st = record_status(s)
    except records.RecordError:
        return "corrupt record"
    holder = live_holder(s) if st not in DONE else None
    if holder:
        return f"training (pid {holder['pid']} on {holder['host']})" if who else "training"
    return "parked" if st == "not run" and parked_path(s).exists() else st  # resumes from it (run/parked.py)


def _epochs_logged(s: RunSpec) -> str:
    """", epoch k of E" for a train run whose log (the cache's log.csv, a row per finished epoch) has rows, and the
    time its remaining steps take at the median pace of its last three logged epochs."""
    try:
        recipe = s.config["recipe"]
        with open(run_dir(s) / "log.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        done, total = int(rows[-1]["epoch"]) + 1, run_epochs(recipe, s.config.get("data", {}))
        step, cap = int(rows[-1]["step"]), int(recipe.get("max_steps") or 0)
        pace = median_low(float(r["images_per_s"]) for r in rows[-3:])
        batch = int(recipe["batch_size"])
    except (OSError, IndexError, KeyError, ValueError):  # no log yet, or not a train run's
        return ""
    end = total * step // done  # the global step counts on across a resume: step / done is the steps per epoch
    left = (min(end, cap) if cap else end) - step
    eta = f", {_hours(left * batch / pace)} left at {pace:.0f} img/s" if left > 0 and pace > 0 else ""
    return f", epoch {done} of {total}{eta}"


def _hours(seconds: float) -> str:
    """An estimate, so rounded: tenths of an hour, or whole minutes under one."""
    return f"about {seconds / 3600:.1f} h" if seconds >= 3600 else f"about {max(1, round(seconds / 60))} min"


def list_papers(c: dict, papers: list[str], plan_of: Callable[[str], dict]) -> int:
    """One row per paper: its tables, runs and their statuses at the scale (``plan_of(paper)``: its plan, built
    here, so that one broken experiments.py, named in its row, does not hide the others)."""
    rows = []
    for paper in papers:
        try:
            specs = select({**c, "paper": paper}, plan_of(paper))
        except Exception as e:  # noqa: BLE001 - named in its row
            rows.append([paper, "", "", f"error: {one_line(e)}"])
            continue
        counts = Counter(_status(s) for s in specs)
        rows.append([paper, ", ".join(sorted({s.table for s in specs})), len(specs),
                     ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))])
    print(f"scale {c['scale']}")
    print(tabulate(rows, headers=["paper", "tables", "runs", "status"]))
    return 0


def list_runs(c: dict, doc: dict) -> int:
    """The runs of the plan ``doc`` the command means and each run's status (or its resolved config)."""
    specs = select(c, doc)
    if c.get("resolved"):
        for s in specs:  # what each run will use: the base, the paper's protocol and the command line merged
            print(f"# {s.run_id}  ({s.kind}, table {s.table}, row {s.cell['row']}, seed {s.seed}, {_status(s, who=True)})")
            print(OmegaConf.to_yaml({"config": s.config}), end="")
        return 0
    rows = []
    for s in specs:
        st = _status(s, who=True)
        st += _epochs_logged(s) if st.startswith(("partial", "training", "failed")) else ""
        rec = records.read_record(records.record_path(s.paper, s.scale, s.run_id)) if st in DONE else None
        top1 = rec["metrics"].get("top1", "") if rec else ""
        rows.append([s.table, s.cell["row"], ",".join(s.cell["columns"]), s.seed, s.run_id, st, top1])
    print(f"{c['paper']} at scale {c['scale']}: {len(specs)} run(s)")
    print(tabulate(rows, headers=["table", "row", "columns", "seed", "run_id", "status", "top1"]))
    return 0
