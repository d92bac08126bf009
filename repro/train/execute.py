"""A RunSpec in, a record out: train or probe, with provenance; the status of a run on disk."""
from __future__ import annotations

import time
import traceback

import yaml

from .. import records
from ..functions import lookup
from ..runs import RunSpec, Source, run_dir
from . import machine
from .engine import Runtime, start_state, train

# Statuses a rerun leaves alone: a diverged run is a result, not something to retry forever.
DONE = ("finished", "diverged")


def record_status(spec: RunSpec) -> str:
    """finished | diverged | failed (from its record), partial (checkpoint only) or 'not run'; a corrupt record
    raises records.RecordError naming the file: we never overwrite what we cannot read."""
    path = records.record_path(spec.paper, spec.scale, spec.run_id)
    if path.exists():
        return records.read_record(path)["status"]
    if (run_dir(spec) / "last.pt").exists():
        return "partial"
    return "not run"


def resumes(spec: RunSpec) -> bool:
    """Whether the run continues from its checkpoint, rather than starting from scratch (engine.start_state)."""
    path = run_dir(spec) / "last.pt"
    return spec.kind == "train" and path.exists() and start_state(spec, path)[0] is not None


def make_record(spec: RunSpec, rt: Runtime, status: str, metrics: dict, provenance: dict,
            started: dict | None = None) -> dict:
    runtime = {k: v for k, v in vars(rt).items() if k != "dist"}
    return {"run_id": spec.run_id, "paper": spec.paper, "table": spec.table, "cell": spec.cell,
            "scale": spec.scale, "seed": spec.seed, "kind": spec.kind, "status": status,
            "metrics": metrics, "config": {**spec.config, "runtime": runtime},
            "provenance": {**(started or machine.provenance(rt.dist.world_size)), **provenance}}


def execute(spec: RunSpec, rt: Runtime, write: bool = True, source: Source | None = None) -> dict:
    """Run one spec (``source``: what it depends on, run/sources.py); rank 0 writes its record unless write=False."""
    start, started = time.perf_counter(), machine.provenance(rt.dist.world_size)
    if write and rt.dist.is_main:
        out = run_dir(spec)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(yaml.safe_dump({"run_id": spec.run_id, "kind": spec.kind,
                                                         "seed": spec.seed, "config": spec.config},
                                                        sort_keys=False))
    if spec.kind == "probe":
        probe = lookup(spec.config["probe"])
        metrics = probe(spec.config) if source is None else probe(spec.config, source)  # a pointer gets its source
        if not isinstance(metrics, dict):
            raise TypeError(f"probe {spec.config['probe']} returned {type(metrics).__name__}, not a dict")
        rec = make_record(spec, rt, "finished", metrics, {"wall_s": time.perf_counter() - start}, started)
    else:
        res = train(spec, rt, source=source)
        rec = make_record(spec, rt, res.status, res.metrics, res.provenance, started)
    if write and rt.dist.is_main:
        records.write_record(rec)
    return rec


def failed_record(spec: RunSpec, rt: Runtime, error: BaseException) -> dict:
    """A record saying the run crashed (rerun retries it); the traceback goes in its metrics."""
    tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return make_record(spec, rt, "failed", {"error": f"{type(error).__name__}: {error}", "traceback": tb}, {})
