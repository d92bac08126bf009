"""Models by timm name: ours (``repro_*``, registered by repro.models) or any timm model. Image size and class
count come from the data config and drop path from the recipe, so a run's config says each value once."""
from __future__ import annotations

import importlib

import timm
import torch

import repro.models  # noqa: F401  (registers the repro_* names with timm)

from ..runs import ConfigError


def register_models(paper: str | None = None, extra: list[str] | tuple = ()) -> None:
    """Import the modules that register model names with timm (missing optional ones are fine)."""
    for name in ("repro.models", *( [f"papers.{paper}.models"] if paper else [] )):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not name.startswith(e.name):  # a real import error inside it
                raise
    for name in extra or ():
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"runtime.imports: cannot import {name!r} ({e})") from None


def check_model(cfg: dict) -> str:
    """The model name of a run config, or a ConfigError saying it is unknown."""
    name = (cfg.get("model") or {}).get("name")
    if not name:
        raise ConfigError("model.name is not set: name a timm model, e.g. model.name=repro_deit_tiny")
    if not timm.is_model(name):
        close = timm.list_models(f"*{name.split('_')[0]}*")[:5] if "_" in name else []
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise ConfigError(f"unknown model model.name={name!r}{hint}; list names with "
                          f"timm.list_models('repro_*')")
    return name


def create_model(cfg: dict, num_classes: int) -> torch.nn.Module:
    """timm.create_model(name, num_classes, img_size, drop_rate, drop_path_rate, **model.kwargs)."""
    name = check_model(cfg)
    recipe, kwargs = cfg.get("recipe", {}), dict((cfg.get("model") or {}).get("kwargs") or {})
    kwargs.setdefault("img_size", int(cfg["data"]["img_size"]))
    kwargs.setdefault("drop_path_rate", float(recipe.get("drop_path", 0.0)))
    if recipe.get("drop"):
        kwargs.setdefault("drop_rate", float(recipe["drop"]))
    try:
        return timm.create_model(name, num_classes=num_classes, **kwargs)
    except TypeError as e:
        raise ConfigError(f"model {name!r} rejects its arguments {sorted(kwargs)}: {e}") from None
