"""Named functions: a run config names a probe, loss, objective or init function by a registered name
(``"convit.locality"``), never by where its code lives, so that moving a module never changes a run id.

``@register("<namespace>.<name>")`` files a function; ``lookup`` imports the namespace's ``HOSTS`` on first use.
``ALIASES`` keeps the import path that committed records' ids hashed for each name registered back then, and
``hashed`` puts it back, so those ids stay. Code outside the project may still name ``"package.module:function"``."""
from __future__ import annotations

import importlib
from typing import Any, Callable

from .errors import ConfigError

_REGISTRY: dict[str, Callable] = {}

HOSTS: dict[str, tuple[str, ...]] = {  # namespace -> the modules whose @register lines fill it
    "models": ("repro.models.transfer", "repro.models.resample"),
    "augvit": ("papers.augvit.probes",),
    "cmhsa": ("papers.cmhsa.summary", "papers.cmhsa.theorems", "papers.cmhsa.timing"),
    "convit": ("papers.convit.probes", "papers.convit.table1"),
    "crosspaper": ("papers.crosspaper.probes",),
    "oversmoothing": ("papers.oversmoothing.probes", "papers.oversmoothing.losses"),
    "respostln": ("papers.respostln.probes",),
}

ALIASES: dict[str, str] = {  # registered name -> the import path the committed records' ids hashed
    "models.conv_to_mhsa": "repro.models.transfer:conv_to_mhsa",
    "models.at_new_resolution": "repro.models.resample:at_new_resolution",
    "augvit.cost": "papers.augvit.probes:cost",
    "augvit.diversity_at_init": "papers.augvit.probes:diversity_at_init",
    "augvit.trained_analysis": "papers.augvit.probes:trained_analysis",
    "cmhsa.run_summary": "papers.cmhsa.summary:run_summary",
    "cmhsa.fewest_heads_row": "papers.cmhsa.theorems:fewest_heads_row",
    "cmhsa.head_bound_row": "papers.cmhsa.theorems:head_bound_row",
    "cmhsa.lemma2_row": "papers.cmhsa.theorems:lemma2_row",
    "cmhsa.transfer_row": "papers.cmhsa.theorems:transfer_row",
    "cmhsa.time_ratio": "papers.cmhsa.timing:time_ratio",
    "convit.locality": "papers.convit.probes:locality",
    "convit.locality_change": "papers.convit.probes:locality_change",
    "convit.table1_measure": "papers.convit.table1:measure",
    "convit.table5_run": "papers.convit.probes:table5_run",
    "convit.table6_run": "papers.convit.probes:table6_run",
    "crosspaper.diagnostics": "papers.crosspaper.probes:diagnostics",
    "oversmoothing.anti_oversmoothing_loss": "papers.oversmoothing.losses:AntiOversmoothingLoss",
    "oversmoothing.count_params": "papers.oversmoothing.probes:count_params",
    "oversmoothing.oversmoothing": "papers.oversmoothing.probes:oversmoothing",
    "oversmoothing.random_init": "papers.oversmoothing.probes:random_init",
    "respostln.lemma1": "papers.respostln.probes:lemma1",
    "respostln.table1": "papers.respostln.probes:table1",
    "respostln.theorem4": "papers.respostln.probes:theorem4",
}


def register(name: str) -> Callable[[Callable], Callable]:
    """Decorator: file ``fn`` under ``name`` ('<namespace>.<function>'); a name taken twice is a bug."""
    namespace, dot, short = name.partition(".")
    if not (namespace and dot and short) or ":" in name:
        raise ValueError(f"register({name!r}): name a function '<namespace>.<function>'")

    def add(fn: Callable) -> Callable:
        if _REGISTRY.get(name, fn) is not fn:
            raise ValueError(f"{name!r} is registered twice ({_REGISTRY[name].__module__} and {fn.__module__})")
        _REGISTRY[name] = fn
        return fn
    return add


def _import_path(path: str) -> Any:
    mod_name, _, attr = path.partition(":")
    if not mod_name or not attr:
        raise ConfigError(f"{path!r}: name a function by its registered name ('convit.locality') or as "
                          f"'package.module:function'")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ConfigError(f"{path!r}: cannot import {mod_name} ({e})") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ConfigError(f"{path!r}: {mod_name} has no attribute {attr!r}") from None


def lookup(name: str) -> Any:
    """The function registered as ``name`` (or at ``"package.module:function"``); ConfigError if none."""
    name = str(name)
    if ":" in name:
        return _import_path(name)
    if name not in _REGISTRY:
        for module in HOSTS.get(name.partition(".")[0], ()):
            importlib.import_module(module)
    if name not in _REGISTRY:
        known = ", ".join(sorted(n for n in ALIASES if n.partition(".")[0] == name.partition(".")[0])) or \
            ", ".join(sorted(HOSTS))
        raise ConfigError(f"no function registered as {name!r} (known: {known}); register one with "
                          f"@repro.functions.register and list its module in repro.functions.HOSTS")
    return _REGISTRY[name]


def short_name(name: str) -> str:
    """The function part of a name, as run ids label probe runs: 'locality' for 'convit.locality'."""
    path = ALIASES.get(str(name), str(name))
    return path.rpartition(":")[2] if ":" in path else path.rpartition(".")[2]


def hashed(value: Any) -> Any:
    """``value`` with every registered name that has an alias replaced by it: what run ids hash."""
    if isinstance(value, dict):
        return {k: hashed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hashed(v) for v in value]
    if isinstance(value, str):
        return ALIASES.get(value, value)
    return value
