"""The runs one command means, read from its plan: the tables asked for (with every run they depend on), this
shard's share, and the checks that make bad input fail before anything is written."""
from __future__ import annotations

import sys

from .. import records
from ..checks import check_data, check_finite, check_paths, check_recipe, class_counts
from ..data import check_fraction, check_train_data
from ..errors import ConfigError, one_line
from ..functions import lookup
from ..runs import RUN_KEYS, RunSpec, sources_first
from ..train.execute import DONE
from ..train.hooks import probe_list
from ..train.model import check_model, register_models


def planned_specs(doc: dict) -> list[RunSpec]:
    """The plan's runs as RunSpecs, in its order; a run whose id does not recompute from its stored config
    (a plan of other code) is bad input."""
    out = []
    for r in doc["runs"]:
        s = RunSpec(doc["paper"], r["table"], r["cell"], doc["scale"], seed=r["seed"], kind=r["kind"],
                    config=r["config"], name=r["name"])
        if s.run_id != r["run_id"]:
            raise ConfigError(f"{doc['paper']}/{doc['scale']} plan.json: run {r['run_id']} recomputes as {s.run_id}; "
                              f"rebuild it with python -m repro.plan --paper {doc['paper']} --scale {doc['scale']}")
        out.append(s)
    return out


def sources_of(doc: dict) -> dict[str, RunSpec]:
    """Run id -> the run it starts from or reads (plan.json's ``depends_on``: at most one), as the plan holds it."""
    spec = {s.run_id: s for s in planned_specs(doc)}
    return {r["run_id"]: spec[i] for r in doc["runs"] for i in r["depends_on"].values()}


def select(c: dict, doc: dict, group: int | None = None) -> list[RunSpec]:
    """The plan's runs one command means: its tables (``tables=``: their runs and the runs that fill their cells)
    and runs (``runs=``, ids or prefixes), with every run they start from or read (the plan's ``depends_on``),
    then this shard's groups or ``group`` alone; the models they name registered."""
    register_models(c.get("paper"), (c.get("runtime") or {}).get("imports"))
    wanted = doc["runs"]
    tables = c.get("tables")
    if tables:
        tables = [t for t in tables.split(",") if t] if isinstance(tables, str) else list(tables)
        known = sorted({r["table"] for r in [*wanted, *doc.get("fills", [])]})
        if unknown := [t for t in tables if t not in known]:
            raise ConfigError(f"unknown table(s) {', '.join(unknown)} for {doc['paper']} at scale {c['scale']}; "
                              f"tables with runs: {', '.join(known) or 'none'}")
        filling = {f["run_id"] for f in doc.get("fills", []) if f["table"] in tables}
        wanted = [r for r in wanted if r["table"] in tables or r["run_id"] in filling]
    by_id = {r["run_id"]: r for r in doc["runs"]}

    def with_sources(rows: list[dict]) -> list[dict]:  # every run they start from or read, before its first dependent
        return sources_first(rows, lambda r: r["run_id"], lambda r: [by_id[i] for i in r["depends_on"].values()])

    if ids := c.get("runs"):
        ids = [str(i) for i in (ids.split(",") if isinstance(ids, str) else ids) if i]
        wanted = with_sources(wanted)  # a run these tables start from can be named alone (deadline --hold-back does)
        if unknown := [i for i in ids if not any(r["run_id"].startswith(i) for r in wanted)]:
            raise ConfigError(f"runs={unknown[0]!r} names no run of these tables; see python -m repro list "
                              f"paper=<id> scale=<scale>")
        wanted = [r for r in wanted if r["run_id"].startswith(tuple(ids))]
    shards, index = int(c.get("num_shards") or 1), int(c.get("shard") or 0)
    if not 0 <= index < shards:
        raise ConfigError(f"shard={index} with num_shards={shards}: need 0 <= shard < num_shards")
    mine = (lambda g: g == group) if group is not None else (lambda g: g % shards == index)
    spec = {s.run_id: s for s in planned_specs(doc)}
    return [spec[r["run_id"]] for r in with_sources(wanted) if mine(r["group"])]


def validate(spec: RunSpec, seen_data: dict | None = None) -> str | None:
    """Everything checkable before a run starts, so bad input fails before anything is written; the dataset's
    images per class ('data: ...'), or None where ``seen_data`` (datasets already checked) holds it."""
    check_finite({k: v for k, v in spec.config.items() if k in RUN_KEYS})
    if spec.kind == "probe":
        if not spec.config.get("probe"):
            raise ConfigError(f"probe run {spec.run_id} has no config['probe'] (a registered function name)")
        lookup(spec.config["probe"])
        check_paths(spec.config.get("data") or {})
        return
    check_model(spec.config)
    if init := spec.config.get("init"):  # its shape checked by the plan stage; the model it starts from too
        lookup(init["fn"])
        check_model(init["from"]["config"])
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
        raise records.RecordError(f"{one_line(bad[0])}{more}; or build the report without them: allow_invalid=true")
    for e in bad:
        print(f"skipped: {one_line(e)}", file=sys.stderr)


def to_train(specs: list[RunSpec], status: dict, force: bool) -> list[RunSpec]:
    """The runs this command may execute: those without a finished or diverged record (all with force)."""
    return [s for s in specs if force or status[s.run_id] not in DONE]
