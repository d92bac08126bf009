"""A paper at a scale -> its plan: every run resolved, with its id, the cells and claims of the scale,
and what each run depends on.

The edges are named in the plan so that the scheduler and the report need not rediscover them: ``depends_on``
is the run a run starts from (``init``) or reads (``source``); a cell an earlier run's record fills
(``runs.fill``) is one of the ``fills``, with no run of its own; a run's ``group`` is that of the run it
depends on, else a new one: what one process runs together, in order."""
from __future__ import annotations

from ..errors import ConfigError
from ..runs import (RUN_KEYS, RunSpec, check_unique, deep_merge, dotted_items, pointer_source, resolve, source_spec,
                    with_sources)
from .experiments import known_papers, paper_runs, resolves_by_scale
from .store import SCHEMA, sealed


def compose(paper: str, scale: str, overrides: list[str] | tuple = ()) -> dict:
    """The Hydra config ``python -m repro reproduce paper=<paper> scale=<scale> [overrides]`` runs with."""
    from omegaconf import OmegaConf

    from ..checks import check_keys

    return OmegaConf.to_container(check_keys([f"paper={paper}", f"scale={scale}", *overrides]), resolve=True)


def resolved_runs(c: dict, overrides: dict | None = None) -> list[RunSpec]:
    """Every run of ``c['paper']`` at ``c['scale']`` resolved over the config ``c``, the command line's
    ``overrides`` and the smoke / dry-run mode, each source run before its first dependent."""
    if not c.get("paper"):
        raise ConfigError(f"give paper=<id>; papers with experiments: {', '.join(known_papers()) or 'none'}")
    from ..checks import check_given  # torch and Hydra: imported when a plan is built, not with this module

    specs = paper_runs(c["paper"], c["scale"], c.get("seeds"))
    check_given(overrides or {})  # as typed: a mode may replace them below
    mode = _mode(c, overrides or {})
    specs = [resolve(s, c, overrides, mode) for s in specs]
    check_unique(specs)
    return with_sources(specs)  # a run that starts from another's model needs that run first


def _mode(c: dict, overrides: dict) -> dict | None:
    """smoke=true's or dry_run=true's settings, merged into every run; a value typed on the command line that
    they replace is named in one line (``recipe.epochs=5 smoke=true`` trained one epoch without a word)."""
    if c.get("smoke") and c.get("dry_run"):
        raise ConfigError("smoke=true and dry_run=true exclude each other; pick one")
    name = next((n for n in ("smoke", "dry_run") if c.get(n)), None)
    if name is None:
        return None
    given = {k: v for k, v in dotted_items(overrides) if not isinstance(v, dict)}
    replaced = [f"{k}={given[k]} with {v}" for k, v in dotted_items(c["modes"][name])
                if not isinstance(v, dict) and k in given and given[k] != v]
    if replaced:
        print(f"note: {name}=true replaces {', '.join(replaced)} in every run; without {name}=true the values "
              f"given are used", flush=True)
    return deep_merge({"mode": name}, c["modes"][name])


def _edges(spec: RunSpec) -> dict:
    """The run ``spec`` starts from (``init``) or reads (``source``), by id: its ``depends_on``."""
    pointer = pointer_source(spec.config) if spec.kind == "probe" else None
    return {k: s.run_id for k, s in (("init", source_spec(spec)), ("source", pointer)) if s is not None}


def _measured_by(specs: list[RunSpec]) -> dict[str, str]:
    """Run id -> the run that measures it: the first of its fingerprint (another table's cell names it), or itself
    where a run depends on it (smoke mode can make two sources one config: each runs, for its dependents)."""
    served = {d for s in specs for d in _edges(s).values()}
    first: dict[str, str] = {}
    for s in specs:
        first.setdefault(s.fingerprint, s.run_id)
    return {s.run_id: s.run_id if s.run_id in served else first[s.fingerprint] for s in specs}


def _models(specs: list[RunSpec]) -> dict[str, dict]:
    """Each registered model a run builds -> its constructor arguments (depth, width, heads, ...): what the
    report says was trained, read from the plan so that the report never imports a model."""
    from ..models.registry import architecture

    out = {}
    for s in specs:
        model = s.config.get("model") or {}
        for name in (model.get("name"), (model.get("kwargs") or {}).get("base")):
            if isinstance(name, str) and name not in out and (arch := architecture(name)):
                out[name] = arch
    return dict(sorted(out.items()))


def dotted(cfg, task: list[str] | tuple) -> dict:
    """The ``key.sub=value`` overrides of run keys (model., data., recipe., ...) in ``task``, as a nested dict
    of their composed (typed) values in ``cfg`` (a DictConfig)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    out = OmegaConf.create()
    for o in OverridesParser.create().parse_overrides(list(task)):
        key = o.key_or_group
        if o.is_delete() or "." not in key or key.split(".")[0] not in RUN_KEYS:
            continue
        OmegaConf.update(out, key, OmegaConf.select(cfg, key), force_add=True)
    return OmegaConf.to_container(out, resolve=True)


def planned(paper: str, scale: str, command: list[str] | tuple = ()) -> dict:
    """The plan ``python -m repro reproduce paper=<paper> scale=<scale> <command>`` writes."""
    return for_command(compose(paper, scale, command), command)


def for_command(c: dict, task: list[str] | tuple) -> dict:
    """The plan of a command composed as ``c`` from the command-line overrides ``task``."""
    from omegaconf import OmegaConf

    return plan(c, dotted(OmegaConf.create(c), task), shaping(task))


def shaping(task: list[str] | tuple) -> list[str]:
    """The command-line overrides that change which runs a plan holds or their configs (``data=cifar10_jpeg``,
    ``recipe.lr=...``, ``seeds=5``), in the order typed: a plan keeps them so that it can be built again."""
    keep = (*RUN_KEYS, "seeds")
    return [o for o in task if o.lstrip("+~").split("=")[0].split(".")[0] in keep]


def plan(c: dict, overrides: dict | None = None, command: list[str] | tuple = ()) -> dict:
    """The plan of ``c['paper']`` at ``c['scale']`` (plan.json's content): runs in order, cells, claims;
    ``command``: the overrides it was composed with (``shaping``), stored when there are any."""
    specs = resolved_runs(c, overrides)
    measured_by = _measured_by(specs)
    group: dict[str, int] = {}
    runs, fills = [], []
    for s in specs:
        if measured_by[s.run_id] != s.run_id:  # the same run asked for by another table: the cell names it
            fills.append({"table": s.table, "cell": s.cell, "seed": s.seed, "run_id": measured_by[s.run_id]})
            continue
        deps = _edges(s)
        served = deps.get("init") or deps.get("source")
        group[s.run_id] = group[served] if served else max(group.values(), default=-1) + 1
        runs.append({"run_id": s.run_id, "table": s.table, "cell": s.cell, "seed": s.seed, "kind": s.kind,
                     "name": s.name, "fingerprint": s.fingerprint, "config": s.config,
                     "depends_on": deps, "group": group[s.run_id]})
    cells = sorted({(s.table, s.cell["row"], col) for s in specs for col in s.cell["columns"]})
    scale = specs[0].scale if specs else c["scale"]  # a smoke plan is filed under <scale>-smoke, as its runs
    by_scale = resolves_by_scale(c["paper"])  # what the scale resolves (empty: no claim designed for it; full judges every claim regardless)
    return sealed({"schema": SCHEMA, "paper": c["paper"], "scale": scale, "seeds": c.get("seeds"),
                   "resolves": by_scale.get(c["scale"], []), "resolves_by_scale": by_scale,
                   "cells": [list(x) for x in cells], "models": _models(specs), "runs": runs, "fills": fills,
                   **({"overrides": list(command)} if command else {})})
