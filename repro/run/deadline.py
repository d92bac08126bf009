"""A campaign under a deadline (a SLURM time limit, a spot instance, a 30-minute GPU slot).

    python -m repro deadline 25m reproduce paper=convit scale=small [runtime.fused=true ...]
    python -m repro deadline 17:20 reproduce paper=convit ...      # a UTC clock time (today, or tomorrow)

It predicts the campaign's wall time from a throughput table measured once per device (fused groups sped up by
a measured ``packed_speedup``) and prints it beside the time left, then runs the command with a watch that,
``--margin`` seconds before the deadline, stops it as SIGTERM does: runs checkpoint and the same command resumes
them. ``--hold-back`` starts only the runs predicted to finish, for a machine whose checkpoints do not outlive it."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import threading
from typing import Callable

import torch
from .. import records
from ..errors import ConfigError, one_line
from ..paths import check_creatable
from ..train import machine, preempt
from ..data import fraction_indices, open_split
from ..probes.speed import throughput
from ..runs import RunSpec, cache_root, final_checkpoint
from ..train.execute import DONE, record_status
from ..train.model import create_model
from ..train.recipe import run_epochs
from .parked import parked_path
from .sequential import BAD_INPUT
from .specs import select

EVAL_SPEEDUP = 3.0  # an evaluated image costs about a third of a trained one (forward only)
MAX_DAYS = 30  # further away is a typo, and past threading's longest wait the watch thread died unseen


def seconds_left(text: str, now: dt.datetime | None = None) -> float:
    """'25m', '1h30m', '90s' from now, or 'HH:MM' (UTC, the next such time) -> seconds until then."""
    now = now or dt.datetime.now(dt.timezone.utc)
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if parts and any(parts.groups()):
        h, m, s = (int(g or 0) for g in parts.groups())
        if 3600 * h + 60 * m + s > MAX_DAYS * 86400:
            raise ConfigError(f"deadline {text!r} is over {MAX_DAYS} days away; give a duration up to {MAX_DAYS * 24}h")
        return float(3600 * h + 60 * m + s)
    clock = re.fullmatch(r"(\d{1,2}):(\d{2})", text.strip())
    if not clock or int(clock[1]) > 23 or int(clock[2]) > 59:
        raise ConfigError(f"deadline {text!r}: give a duration (25m, 1h30m, 90s) or a UTC time (17:20, 00:00 to 23:59)")
    at = now.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
    if at <= now:
        at += dt.timedelta(days=1)
    return (at - now).total_seconds()


def device_label() -> str:
    name = machine.device_name()
    return name if name != "cpu" else f"cpu-{torch.get_num_threads()}t"


def _arch_key(spec: RunSpec) -> str:
    c = spec.config
    return json.dumps([c["model"], c["data"]["img_size"], c["recipe"]["batch_size"]], sort_keys=True, default=str)


def measure(spec: RunSpec, steps: int = 3) -> float:
    """Training images/s of ``spec``'s model at its batch on this device (repro/probes/speed.py: random
    pixels, AdamW, bf16 on a GPU; the median of ``steps`` timed steps after one warm-up)."""
    c = spec.config
    model = create_model(c, int(c["data"].get("num_classes") or 10)).to("cuda" if torch.cuda.is_available() else "cpu")
    return throughput(model, batch=int(c["recipe"]["batch_size"]), img_size=int(c["data"]["img_size"]), train=True,
                      steps=steps, warmup=1)["images_per_s"]


def throughput_table(specs: list[RunSpec]) -> dict[str, float]:
    """images/s per distinct (model, image size, batch), measured once per device and kept."""
    path = cache_root() / "deadline" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', device_label())}.json"
    table = json.loads(path.read_text()) if path.exists() else {}
    missing = {_arch_key(s): s for s in specs if _arch_key(s) not in table}
    if missing:
        check_creatable(path.parent, "cache folder", "REPRO_CACHE_DIR")  # before measuring, not after
        table.update({key: measure(spec) for key, spec in missing.items()})
        records.atomic_write_bytes(path, (json.dumps(table, indent=1) + "\n").encode())
    return table


def work(spec: RunSpec) -> tuple[int, int, int]:
    """(training images left, images per evaluation, evaluations left) of a run not yet recorded."""
    data, recipe = spec.config["data"], spec.config["recipe"]
    batch = int(recipe["batch_size"])
    train = len(fraction_indices(open_split(data, "train"), float(data.get("fraction", 1.0))))
    test = len(open_split(data, "test"))
    epochs, per_epoch = run_epochs(recipe, data), train // batch
    total = epochs * per_epoch if not recipe.get("max_steps") else min(epochs * per_epoch, int(recipe["max_steps"]))
    ckpt = final_checkpoint(spec) if final_checkpoint(spec).exists() else parked_path(spec)  # restored before it runs
    done = int(torch.load(ckpt, map_location="cpu", weights_only=True).get("step", 0)) if ckpt.exists() else 0
    every = int(recipe.get("eval_every") or 0)
    evals_left = sum(1 for e in range(done // max(1, per_epoch), epochs) if e == epochs - 1 or (every and (e + 1) % every == 0))
    return (total - done) * batch, test, evals_left


def packed_speedup() -> float | None:
    """What fusing gained on this device, from results/bench/<device>-fastpath.json (None: not measured)."""
    path = records.results_root() / "bench" / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', device_label())}-fastpath.json"
    return json.loads(path.read_text()).get("packed_speedup") if path.exists() else None


def run_seconds(todo: list[RunSpec], rate, count=work) -> dict[str, float]:
    """Each run's predicted seconds alone: images left at ``rate(spec)`` images/s, evaluations EVAL_SPEEDUP faster."""
    seconds = {}
    for s in todo:
        images, per_eval, evals = count(s)
        r = rate(s)
        seconds[s.run_id] = images / r + per_eval * evals / (EVAL_SPEEDUP * r)
    return seconds


def units(c: dict, todo: list[RunSpec], seconds: dict[str, float], speedup: float) -> list[tuple[list, float]]:
    """What trains as one, in the command's order: each fused group the command will form (its runs' seconds
    over the measured ``speedup``) or a run alone; with the predicted seconds of each."""
    from ..train.fused import groups

    grouped = {s.run_id: g for g in (groups(todo) if c["runtime"].get("fused") else []) for s in g}
    out, seen = [], set()
    for s in todo:
        unit = grouped.get(s.run_id, [s])
        if unit[0].run_id not in seen:
            seen.add(unit[0].run_id)
            out.append((unit, sum(seconds[u.run_id] for u in unit) / (speedup if s.run_id in grouped else 1.0)))
    return out


def predict(c: dict, specs: list[RunSpec]) -> dict:
    """The campaign's predicted seconds on this device, its shape (runs, groups) and ``units``."""
    todo = [s for s in specs if s.kind == "train" and record_status(s) not in DONE]
    table = throughput_table(todo)
    speedup = packed_speedup() or 1.0
    parts = units(c, todo, run_seconds(todo, lambda s: table[_arch_key(s)]), speedup)
    fused = [len(u) for u, _ in parts if len(u) > 1]
    return {"seconds": sum(t for _, t in parts), "runs": len(todo), "groups": fused,
            "alone": len(todo) - sum(fused), "speedup": speedup, "device": device_label(), "units": parts}


def held_back(c: dict, doc: dict, budget: float, p: dict | None = None) -> set[str]:
    """Run ids not to start where a stopped run cannot resume elsewhere: in order, each unit goes to the first of
    ``jobs`` workers free and is held back unless it ends within ``budget`` s, and so is every run depending on one."""
    free, held, specs = [0.0] * max(1, int(c.get("jobs") or 1)), set(), select(c, doc)
    for unit, secs in (p or predict(c, specs))["units"]:
        i = min(range(len(free)), key=free.__getitem__)
        if free[i] + secs <= budget:
            free[i] += secs
        else:
            held |= {u.run_id for u in unit}
    deps = {r["run_id"]: {r["depends_on"].get("init"), r["depends_on"].get("source")} for r in doc["runs"]}
    for s in specs:  # sources come before their dependents
        if deps[s.run_id] & held:
            held.add(s.run_id)
    return held


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def plan_line(p: dict, left: float) -> str:
    shape = f"{p['runs']} run(s)"
    if p["groups"]:
        shape += f": {len(p['groups'])} fused group(s) of {'/'.join(map(str, sorted(set(p['groups']))))} runs " \
                 f"(x{p['speedup']:.2f} measured), {p['alone']} alone"
    return f"this campaign: {_minutes(p['seconds'])} on {p['device']}, {shape}; {_minutes(left)} left"


def _watch(seconds: float, done: threading.Event, fired: threading.Event) -> threading.Thread:
    """A thread that asks the running loop to stop after ``seconds`` unless ``done`` is set first."""
    def wait():
        if not done.wait(seconds):
            fired.set()
            preempt.request()
    thread = threading.Thread(target=wait, daemon=True, name="deadline")
    thread.start()
    return thread


def run(deadline: str, c: dict, doc: dict, args: list[str], command: Callable[[list[str]], int],
        margin: float = 60.0, hold_back: bool = False) -> int:
    """Predict, run ``command(args)`` (``reproduce <args>``, whose config is ``c`` and plan ``doc``) until
    ``margin`` seconds before the deadline, summarise; the exit code."""
    left = seconds_left(deadline)
    if not 0 <= margin < MAX_DAYS * 86400:  # nan too
        raise ConfigError(f"--margin {margin}: give seconds >= 0")
    specs = select(c, doc)
    p = predict(c, specs)
    print(plan_line(p, left), flush=True)
    if left <= margin:
        print(f"deadline: {_minutes(left)} left, within the {margin:.0f} s margin: nothing started", flush=True)
        return 0
    if hold_back:
        held = held_back(c, doc, left - margin, p)
        kept = [s.run_id for s in specs if s.run_id not in held]
        print(f"deadline: {len(held)} run(s) held back, not predicted to finish in time (--hold-back: a stopped "
              f"run could not resume elsewhere); {len(kept)} of {len(specs)} go ahead", flush=True)
        if not kept:
            return 0
        if held:
            args = [a for a in args if not a.startswith("runs=")] + ["runs=[" + ",".join(f"'{k}'" for k in kept) + "]"]
    done, fired = threading.Event(), threading.Event()
    _watch(left - margin, done, fired)
    try:
        code = command(args)
    finally:
        done.set()
    if not fired.is_set() or code != preempt.EXIT_CODE:
        return code
    finished = sum(record_status(s) in DONE for s in specs)
    rest = predict(c, specs)
    print(f"deadline: stopped {margin:.0f} s before it, every run checkpointed; {finished} of {len(specs)} run(s) "
          f"recorded, {rest['runs']} to go ({_minutes(rest['seconds'])} on {rest['device']}); run the same "
          f"command again to resume", flush=True)
    return 0


def main(argv: list[str], campaign: Callable[[list[str]], tuple[dict, dict]],
         command: Callable[[list[str]], int]) -> int:
    """``python -m repro deadline ...`` (repro/cli.py): ``campaign(args)`` plans ``reproduce <args>`` (its config
    and plan, built, not written) and ``command(args)`` runs it."""
    at = argv.index("reproduce") if "reproduce" in argv else len(argv)  # ours before it, the command's after
    ap = argparse.ArgumentParser(prog="python -m repro deadline", description=__doc__.splitlines()[0],
                                 usage="%(prog)s DEADLINE [--margin S] reproduce key=value ...")
    ap.add_argument("deadline", help="a duration from now (25m, 1h30m, 90s) or a UTC time (17:20)")
    ap.add_argument("--margin", type=float, default=60.0, help="seconds before the deadline to stop (default 60)")
    ap.add_argument("--hold-back", action="store_true",
                    help="start only the runs predicted to finish before the deadline (a machine whose checkpoints "
                         "do not outlive it)")
    ns = ap.parse_args(argv[:at])
    if at == len(argv):
        print("error: give the command to run: python -m repro deadline 25m reproduce paper=<id> ...", file=sys.stderr)
        return 2
    try:
        seconds_left(ns.deadline)
        c, doc = campaign(argv[at + 1:])
        return run(ns.deadline, c, doc, argv[at + 1:], command, ns.margin, ns.hold_back)
    except BAD_INPUT as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
