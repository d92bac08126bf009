"""Paper-specific measurements and loss terms, plugged into training by registered name (a probe is a function,
a loss is a closure: no framework beyond this). A train run's config may list
- ``probes``: ``fn(model, ctx: ProbeContext, **kwargs) -> dict`` on the trained model (and after every epoch
  with ``every_epoch: true``), merged into the record's metrics or the epoch's history row; rank 0 only.
- ``losses``: ``factory(model, **kwargs)`` on the bare model (before compile / DDP, so it may hook features)
  returns ``term(images, targets, logits)``; the loss trained is the criterion + sum of weight x term.
- ``objective``: ``factory(model, criterion=, num_classes=, **kwargs)`` returns an ``nn.Module`` called as
  ``objective(images, targets) -> (loss, {term: scalar})`` in place of the criterion, for losses that change the
  batch or run the model themselves; its parameters train and checkpoint with the model. Not with ``losses``."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from ..functions import lookup
from ..runs import ConfigError


@dataclass
class ProbeContext:
    config: dict
    device: torch.device
    images: torch.Tensor     # a fixed batch of normalised test images (same every epoch)
    labels: torch.Tensor
    epoch: int
    step: int
    history: list = field(default_factory=list)  # the epoch rows logged so far (all of them at the end)
    run: Any = None  # the RunSpec being trained (its seed, scale, and the run it started from, if any)
    source: dict | None = None  # the finished record of the run it started from (None in a dry run)


@dataclass
class LossTerm:
    name: str
    weight: float
    term: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _entries(items) -> list[dict]:
    out = []
    for item in items or []:
        entry = {"fn": item} if isinstance(item, str) else dict(item)
        if "fn" not in entry:
            raise ConfigError(f"probe/loss entry {item!r} has no 'fn' ('package.module:function')")
        out.append(entry)
    return out


def build_losses(items, model: torch.nn.Module) -> list[LossTerm]:
    terms = []
    for e in _entries(items):
        factory = lookup(e.pop("fn"))
        weight = float(e.pop("weight", 1.0))
        terms.append(LossTerm(getattr(factory, "__name__", "loss"), weight, factory(model, **e)))
    return terms


def build_objective(entry, model: nn.Module, criterion, num_classes: int) -> nn.Module | None:
    """The configured training objective, or None for the default criterion(model(images), targets)."""
    if not entry:
        return None
    e = _entries([entry])[0]
    name = e.pop("fn")
    objective = lookup(name)(model, criterion=criterion, num_classes=num_classes, **e)
    if not isinstance(objective, nn.Module):
        raise ConfigError(f"objective {name!r} returned {type(objective).__name__}; the factory must return an "
                          f"nn.Module called as objective(images, targets) -> (loss, terms)")
    return objective


class ObjectiveStep(nn.Module):
    """Model and objective as one module, so that DDP syncs the objective's parameters too and the
    objective's forward (which runs the model) goes through the DDP wrapper."""

    def __init__(self, model: nn.Module, objective: nn.Module):
        super().__init__()
        self.model, self.objective = model, objective

    def forward(self, images: torch.Tensor, targets: torch.Tensor):
        return self.objective(images, targets)


def probe_list(items) -> list[tuple[Callable, bool, dict]]:
    """(function, every_epoch, kwargs) for each configured probe; imports checked up front."""
    return [(lookup(e.pop("fn")), bool(e.pop("every_epoch", False)), e) for e in _entries(items)]


def run_probes(probes, model: torch.nn.Module, ctx: ProbeContext, epoch_end: bool) -> dict[str, Any]:
    """Metrics from the probes due now (every_epoch ones after each epoch, all at the end)."""
    metrics: dict[str, Any] = {}
    was_training = model.training
    model.eval()
    for fn, every, kwargs in probes:
        if epoch_end and not every:
            continue
        out = fn(model, ctx, **kwargs)
        if not isinstance(out, dict):
            raise TypeError(f"probe {fn.__module__}:{fn.__name__} returned {type(out).__name__}, not a dict")
        metrics.update(out)
    model.train(was_training)
    return metrics
