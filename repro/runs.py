"""Runs: which training or probe run fills which table cell, each with a stable id.

``papers/<id>/experiments.py`` gives partial configs (what the paper changes); ``resolve`` merges each over the
scale's Hydra config and the command line, and the resolved config, seed and scale fix the run's id: a rerun
finds its record and checkpoint again. A run may start from another's final model (``config["init"]``) or
read another's record (a pointer probe), and a cell that another run already fills is ``fill``: the plan names
that run and nothing runs twice."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from .errors import ConfigError
from .functions import hashed, short_name
from .paths import env_folder

KINDS = ("train", "probe")
SCALES = ("tiny", "cpu", "small", "full")  # smoke, 2-core CPU, one GPU, the paper's protocol
# Top-level config keys that describe what a run measures (hashed into its id); everything else
# in the Hydra config (runtime, command, ...) changes how it runs, not what it measures.
CPU_PRECISIONS = ("fp32", "bf16")  # a CPU step's numerics (repro/train/precision.py)
RUN_KEYS = ("model", "data", "recipe", "probes", "losses", "objective", "probe", "mode", "cpu_precision")


def cache_root() -> Path:
    """Checkpoints, decoded datasets, run logs, Hydra's run dir: ``REPRO_CACHE_DIR`` or ``./.cache``."""
    return env_folder("REPRO_CACHE_DIR", ".cache")


def run_dir(spec: "RunSpec") -> Path:
    """Where a run keeps its checkpoint, CSV log and resolved config."""
    return cache_root() / "runs" / spec.paper / spec.scale / spec.run_id


def final_checkpoint(spec: "RunSpec") -> Path:
    """The ``last.pt`` holding the final model behind ``spec``'s record."""
    return run_dir(spec) / "last.pt"


def _measured(config):
    """``config`` as hashed into run ids: ``data.download`` counts as false (how files arrive is not what a run
    measures), and ``cpu_precision: fp32`` is left out (the runs from before the key keep their ids)."""
    if isinstance(config, list):
        return [_measured(v) for v in config]
    if not isinstance(config, dict):
        return config
    out = {k: _measured(v) for k, v in config.items() if not (k == "cpu_precision" and v == "fp32")}
    if isinstance(out.get("data"), dict) and "download" in out["data"]:
        out["data"] = {**out["data"], "download": False}
    return out


@dataclass(frozen=True)
class RunSpec:
    """One run that fills one table cell (one seed of it): cell = {"row": <row key>, "columns": {<column>: <metric>}}.
    kind "train" trains config["model"] under config["recipe"] on config["data"]; kind "probe" records the metrics
    of the registered function config["probe"] called with the resolved config (and a pointer's ``Source``)."""
    paper: str
    table: str
    cell: dict
    scale: str
    seed: int = 0
    kind: str = "train"
    config: dict = field(default_factory=dict)
    name: str = ""  # readable part of the run id, e.g. "deit"; defaults to the model / probe name

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"RunSpec kind {self.kind!r} for {self.table}/{self.cell}: use one of {KINDS}")
        if not (isinstance(self.cell, dict) and isinstance(self.cell.get("row"), str)
                and isinstance(self.cell.get("columns"), dict)):
            raise ConfigError(f"RunSpec cell {self.cell!r} of {self.paper}/{self.table}: expected "
                              f"{{'row': str, 'columns': {{column: metric}}}}")

    @property
    def fingerprint(self) -> str:
        """Short hash of what the run measures: kind, resolved config, seed and scale."""
        blob = json.dumps({"kind": self.kind, "config": hashed(_measured(self.config)), "seed": self.seed,
                           "scale": self.scale}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.kind == "probe":
            return short_name(self.config.get("probe", "probe"))
        return str((self.config.get("model") or {}).get("name") or "model").removeprefix("repro_")

    def as_source(self) -> dict:
        """What ``config["init"]["from"]`` holds for a run that starts from this run's final model."""
        return {"table": self.table, "cell": copy.deepcopy(self.cell), "seed": self.seed, "name": self.name,
                "config": copy.deepcopy(self.config)}

    @property
    def run_id(self) -> str:
        """``<table>-<row>-<label>-s<seed>-<fingerprint>``, safe as a file name."""
        raw = f"{self.table}-{self.cell['row']}-{self.label}-s{self.seed}"
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", raw) + "-" + self.fingerprint


def deep_merge(*dicts: dict) -> dict:
    """Merge nested dicts left to right (later wins, lists replaced): OmegaConf.merge without interpolation."""
    merged = OmegaConf.merge(*(OmegaConf.create(copy.deepcopy(d or {}), flags={"allow_objects": True}) for d in dicts))
    return OmegaConf.to_container(merged, resolve=False)


def dotted_items(tree, prefix: str = ""):
    """(dotted key, value) of every key of a nested dict, each before the keys under it."""
    for k, v in tree.items() if isinstance(tree, dict) else ():
        path = f"{prefix}.{k}" if prefix else str(k)
        yield path, v
        yield from dotted_items(v, path)


def is_smoke(scale: str | None) -> bool:
    """A scale that proves the pipeline runs and judges no training claim: tiny and every smoke run."""
    return scale == "tiny" or bool(scale and scale.endswith("-smoke"))


def resolve(spec: RunSpec, base: dict, overrides: dict | None = None, mode: dict | None = None) -> RunSpec:
    """The spec with its full config: base (Hydra) < spec.config < command-line overrides < mode (smoke, dry run),
    which changes the run id, so a smoke record never passes for a real one; smoke runs file under ``<scale>-smoke``."""
    base = {k: v for k, v in base.items() if k in RUN_KEYS}
    cfg = deep_merge(base, spec.config, overrides or {}, mode or {})
    if cfg.get("cpu_precision", "fp32") not in CPU_PRECISIONS:
        raise ConfigError(f"cpu_precision={cfg['cpu_precision']!r} in {spec.paper}/{spec.table}: "
                          f"use one of {', '.join(CPU_PRECISIONS)}")
    if cfg.get("cpu_precision") == "fp32":  # the default: configs (and plans) read as before the key existed
        del cfg["cpu_precision"]
    scale = spec.scale
    if (mode or {}).get("mode") == "smoke":  # smoke records live apart: never averaged into real ones
        scale = spec.scale.removesuffix("-smoke") + "-smoke"  # a source's spec is filed there already
        if isinstance(cfg.get("source"), dict):  # a pointer reads the smoke run of its source
            cfg["source"]["scale"] = scale
    out = dataclasses.replace(spec, config=cfg, scale=scale)
    # a pointer at a run that starts from another carries that run's init: resolve its source too
    source = _init_source(out) if pointer_source(cfg) is not None else source_spec(out)
    if source is not None:
        cfg["init"]["from"]["config"] = resolve(source, base, overrides, mode).config
    return out


def source_spec(spec: RunSpec) -> RunSpec | None:
    """The run whose final model ``spec`` starts from (``config["init"]["from"]``), or None."""
    if spec.kind == "probe" and pointer_source(spec.config) is not None:
        return None  # a pointer carries its source's init; the source itself starts from that run
    return _init_source(spec, train_only=True)


def _init_source(spec: RunSpec, train_only: bool = False) -> RunSpec | None:
    """``config["init"]["from"]`` as a RunSpec (None without an init); a malformed one is a ConfigError."""
    init = spec.config.get("init")
    if not init:
        return None
    src = init.get("from") if isinstance(init, dict) else None
    malformed = not isinstance(src, dict) or not {"table", "cell", "config"} <= set(src) \
        or not isinstance(init.get("fn"), str)
    if malformed or (train_only and spec.kind != "train"):
        raise ConfigError(f"config['init'] of {spec.paper}/{spec.table}/{spec.cell.get('row')} must be "
                          f"{{'from': <source RunSpec>.as_source(), 'fn': <registered function name>}} on a "
                          f"train run, got {init!r:.200}")
    return RunSpec(paper=spec.paper, table=src["table"], cell=src["cell"], scale=spec.scale,
                   seed=int(src.get("seed", spec.seed)), kind="train", config=src["config"],
                   name=src.get("name", ""))


def sources_first(items: list, key, sources) -> list:
    """``items`` plus what each depends on (``sources(item)``), each once and before its first dependent."""
    out, seen = [], set()

    def add(item) -> None:
        for source in sources(item):
            add(source)
        if key(item) not in seen:
            seen.add(key(item))
            out.append(item)

    for item in items:
        add(item)
    return out


def with_sources(specs: list[RunSpec]) -> list[RunSpec]:
    """``specs`` plus every run one of them starts from or reads (a pointer's source), each before its first
    dependent: a command trains its pointers' sources itself, in order, and a probe never trains its source."""
    return sources_first(specs, lambda s: s.run_id, lambda s: filter(None, [
        source_spec(s) or (pointer_source(s.config) if s.kind == "probe" else None)]))


POINTER_KEYS = ("probe", "source", "args")  # a pointer's own keys; the rest of its config is its source's


def fill(source: RunSpec, table: str, cell: dict) -> RunSpec:
    """``table``/``cell`` filled by ``source``'s own record (``cell["columns"]`` name its metrics): the same
    run under another table, which the plan turns into a cell naming ``source`` (``fills``), never a run."""
    return dataclasses.replace(source, table=table, cell=cell)


def pointer(source: RunSpec, table: str, cell: dict, name: str, probe: str, args: dict | None = None) -> RunSpec:
    """A probe spec filling ``table``/``cell`` by measuring ``source``'s result (same seed and scale)."""
    own = {k: source.config[k] for k in POINTER_KEYS if k in source.config}
    config = {k: v for k, v in source.config.items() if k not in POINTER_KEYS}
    config.update(probe=probe, args=dict(args or {}),
                  source={"paper": source.paper, "table": source.table, "cell": source.cell,
                          "scale": source.scale, "seed": source.seed, "kind": source.kind,
                          "name": source.name, "own": own})
    return RunSpec(paper=source.paper, table=table, cell=cell, scale=source.scale, seed=source.seed,
                   kind="probe", config=config, name=name)


def pointer_source(config: dict) -> RunSpec | None:
    """The run a probe config reads (``config["source"]``, papers/convit/reuse.py's pointers), or None."""
    src = config.get("source")
    if not isinstance(src, dict) or not {"paper", "table", "cell", "scale", "seed", "kind"} <= set(src):
        return None
    own = {k: v for k, v in config.items() if k not in POINTER_KEYS}
    own.update(src.get("own") or {})
    return RunSpec(paper=src["paper"], table=src["table"], cell=src["cell"], scale=src["scale"], seed=src["seed"],
                   kind=src["kind"], config=own, name=src.get("name", ""))


@dataclass(frozen=True)
class Source:
    """A run another depends on, as the run stage loaded it (run/sources.py); weights None where none are read."""
    spec: RunSpec
    record: dict
    weights: dict | None = None


def check_unique(specs: list[RunSpec]) -> None:
    """Two specs with one run id would overwrite each other's record: refuse."""
    seen: dict[str, RunSpec] = {}
    for s in specs:
        if s.run_id in seen:
            raise ConfigError(f"two runs resolve to the same run id {s.run_id} (cells "
                              f"{seen[s.run_id].cell} and {s.cell}); give them different names or configs")
        seen[s.run_id] = s
