"""The one door to paper code: ``papers/<id>/experiments.py`` defines ``runs(scale, seeds) -> list[RunSpec]`` and
optionally ``SCALES`` and ``RESOLVES`` (scale -> claims it resolves); the run and report stages read the plan."""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..errors import ConfigError
from ..runs import SCALES, RunSpec

DEFAULT_SCALES = ("tiny", "small", "full")  # a paper's scales unless its experiments.py lists SCALES


def known_papers() -> list[str]:
    """Paper ids that have ``papers/<id>/experiments.py`` (on every path of the papers package)."""
    try:
        import papers
    except ImportError:
        return []
    return sorted({p.parent.name for root in papers.__path__ for p in Path(root).glob("*/experiments.py")})


def _module(paper: str) -> ModuleType:
    if paper not in known_papers():
        raise ConfigError(f"unknown paper {paper!r}; papers with experiments: "
                          f"{', '.join(known_papers()) or 'none'} (run from the repository root)")
    return importlib.import_module(f"papers.{paper}.experiments")


def load_experiments(paper: str) -> Callable[[str, int | None], list[RunSpec]]:
    """The ``runs(scale, seeds)`` function of papers/<paper>/experiments.py."""
    fn = getattr(_module(paper), "runs", None)
    if not callable(fn):
        raise ConfigError(f"papers/{paper}/experiments.py has no runs(scale, seeds) function")
    return fn


def paper_scales(paper: str) -> tuple[str, ...]:
    """The scales papers/<paper>/experiments.py defines runs for (its ``SCALES``, else tiny/small/full)."""
    return tuple(getattr(_module(paper), "SCALES", DEFAULT_SCALES))


def paper_runs(paper: str, scale: str, seeds: int | None = None) -> list[RunSpec]:
    """The paper's unresolved RunSpecs at a scale."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; use one of {', '.join(SCALES)}")
    if seeds is not None and (not isinstance(seeds, int) or seeds < 1):
        raise ConfigError(f"seeds={seeds!r}: give a positive number of seeds")
    if scale not in paper_scales(paper):
        raise ConfigError(f"{paper} defines no runs at scale {scale!r} yet; its scales: "
                          f"{', '.join(paper_scales(paper))}")
    specs = load_experiments(paper)(scale, seeds)
    for s in specs:
        if not isinstance(s, RunSpec) or s.paper != paper or s.scale != scale:
            raise ConfigError(f"papers/{paper}/experiments.py returned {s!r}; expected RunSpecs with "
                              f"paper={paper!r} and scale={scale!r}")
    return specs


def resolves_by_scale(paper: str) -> dict[str, list[str]]:
    """scale -> the claims papers/<paper>/experiments.py says that scale is designed to resolve (``RESOLVES``)."""
    table = getattr(_module(paper), "RESOLVES", None) or {}
    return {str(scale): sorted(str(c) for c in claims) for scale, claims in sorted(table.items())}
