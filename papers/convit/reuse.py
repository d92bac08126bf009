"""Cells that probe another run's trained model.

Tables 5-6 and Figs. 4-6 measure ConViT's trained Ti pair, which at the reduced scales is Table 2's pair on
all the data. Such a cell gets a *pointer*: a probe run that carries the *source* run's own (partial)
config plus ``source``, which names the source's run, and ``args`` for the probe. The plan resolves the
pointer exactly as it resolves the source (same scale config, command-line overrides and smoke/dry-run
mode), so the pointer's config minus ``probe``/``source``/``args`` is the source's resolved config: its
fingerprint, its run id, its record and its checkpoint. ``trained(source)`` builds the source's model.
(A cell that the source's record fills as it is names that run in the plan: ``repro.runs.fill``.)

A probe never trains or reads its source itself: the plan lists the source among the pointer's dependencies, a
command that asks for the pointer's table runs the source first, under the command's runtime and the source's
lock, and the run stage loads its record and final weights and passes them to the probe function
(``fn(config, source)``; repro/run/sources.py, which says what to run when either is missing).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from repro.runs import ConfigError, RunSpec, Source, final_checkpoint
from repro.train import checkpoint, ddp
from repro.train.engine import evaluate


@dataclass
class Trained:
    """A source run's trained model with its test set, evaluated as the engine evaluates."""
    spec: RunSpec
    model: torch.nn.Module
    test: object
    dist: ddp.Dist
    amp_dtype: torch.dtype | None

    def evaluate(self, model: torch.nn.Module | None = None) -> dict:
        """Top-1 / top-5 (%) on the run's whole test set (all ranks)."""
        return evaluate(model or self.model, self.test, self.dist, self.amp_dtype)


def trained(source: Source) -> Trained:
    """The source's model as trained (its final weights), in eval mode on the default device."""
    from repro.data import build_data
    from repro.train.model import create_model

    spec = source.spec
    if spec.kind != "train":
        raise ConfigError(f"source {spec.run_id} is a {spec.kind} run; a trained model needs a train run")
    d = ddp.setup("auto")  # the command's runtime is not passed down to probes
    cfg, on_gpu = spec.config, d.device.type == "cuda"
    data = build_data(cfg["data"], cfg["recipe"], seed=spec.seed, rank=d.rank, world=d.world_size,
                      device=d.device, num_workers=min(8, os.cpu_count() or 1) if on_gpu else 0)
    model = create_model(cfg, data.num_classes)
    checkpoint.restore_module(model, source.weights, final_checkpoint(spec))
    amp_dtype = torch.bfloat16 if on_gpu else None
    return Trained(spec, model.to(d.device).eval(), data.test, d, amp_dtype)
