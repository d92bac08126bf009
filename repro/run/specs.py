"""The runs one command means: the plan's runs of the tables asked for (with every run they depend on),
this shard's share, and the checks that make bad input fail before anything is written."""
from __future__ import annotations

import sys

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from .. import records
from ..checks import check_data, check_finite, check_paths, check_recipe, class_counts
from ..data import check_fraction, check_train_data
from ..errors import ConfigError, one_line
from ..functions import lookup
from ..plan.build import dotted, resolved_runs
from ..runs import RUN_KEYS, RunSpec, shard, source_spec, with_sources
from ..train.execute import DONE
from ..train.hooks import probe_list
from ..train.model import check_model


def run_overrides(cfg: DictConfig, task: list[str] | None = None) -> dict:
    """Command-line ``key=value`` overrides of run keys (model., data., recipe., ...), as a nested dict;
    ``task``: the overrides, when ``cfg`` was composed outside the Hydra app (repro/run/deadline.py)."""
    return dotted(cfg, command_overrides() if task is None else task)


def command_overrides() -> list[str]:
    """The overrides typed on the command line ([] outside the Hydra app: tests calling build_specs)."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def build_specs(c: dict, overrides: dict | None = None) -> list[RunSpec]:
    """Resolved RunSpecs of ``c['paper']`` at ``c['scale']`` (repro.plan): tables filter and shard applied."""
    tables = c.get("tables")
    if isinstance(tables, str):
        tables = [t for t in tables.split(",") if t]
    specs = only(resolved_runs(c, overrides, tables), c.get("runs"))
    shards, index = int(c.get("num_shards") or 1), int(c.get("shard") or 0)
    if not 0 <= index < shards:
        raise ConfigError(f"shard={index} with num_shards={shards}: need 0 <= shard < num_shards")
    return shard(specs, index, shards)


def only(specs: list[RunSpec], ids) -> list[RunSpec]:
    """The runs ``ids`` names (run ids or prefixes of them), with every run they start from or read; all of
    ``specs`` when ``ids`` is empty. An id that names no run is bad input."""
    if not ids:
        return specs
    ids = [i for i in (ids.split(",") if isinstance(ids, str) else ids) if i]
    unknown = [i for i in ids if not any(s.run_id.startswith(str(i)) for s in specs)]
    if unknown:
        raise ConfigError(f"runs={unknown[0]!r} names no run of these tables; see python -m repro list "
                          f"paper=<id> scale=<scale>")
    return with_sources([s for s in specs if s.run_id.startswith(tuple(map(str, ids)))])


def validate(spec: RunSpec, seen_data: dict | None = None) -> str | None:
    """Everything checkable before a run starts, so bad input fails before anything is written.

    Returns the dataset's images per class ('data: ...'), or None where ``seen_data`` (the datasets already
    checked) holds it: ImageNet is listed once, not per run.
    """
    check_finite({k: v for k, v in spec.config.items() if k in RUN_KEYS})
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
        raise records.RecordError(f"{one_line(bad[0])}{more}; or build the report without them: allow_invalid=true")
    for e in bad:
        print(f"skipped: {one_line(e)}", file=sys.stderr)


def to_train(specs: list[RunSpec], status: dict, force: bool) -> list[RunSpec]:
    """The runs this command may execute: those without a finished or diverged record (all with force)."""
    return [s for s in specs if force or status[s.run_id] not in DONE]
