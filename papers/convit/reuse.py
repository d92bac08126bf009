"""Cells that probe another run's trained model.

Tables 5-6 and Figs. 4-6 measure ConViT's trained Ti pair, which at the reduced scales is Table 2's pair on
all the data. Such a cell gets a *pointer*: a probe run that carries the *source* run's own (partial)
config plus ``source``, which names the source's run, and ``args`` for the probe. The plan resolves the
pointer exactly as it resolves the source (same scale config, command-line overrides and smoke/dry-run
mode), so the pointer's config minus ``probe``/``source``/``args`` is the source's resolved config: its
fingerprint, its run id, its record and its checkpoint. ``trained(config)`` loads the source's model.
(A cell that the source's record fills as it is names that run in the plan: ``repro.runs.fill``.)

A probe never trains its source: the plan lists the source among the pointer's dependencies, and a
command that asks for the pointer's table runs the source first, under the command's runtime and the
source's lock. A source with no finished record, or a finished one whose checkpoint is gone (another
machine), is one line saying what to run (``repro.train.init_from``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from repro.runs import ConfigError, RunSpec, final_checkpoint, pointer_source
from repro.train import checkpoint, ddp
from repro.train.engine import Runtime, evaluate
from repro.train.init_from import source_weights


def source_spec(config: dict) -> RunSpec:
    """The source run of a resolved pointer config (its id, record and checkpoint follow)."""
    src = pointer_source(config)
    if src is None:
        raise ConfigError(f"probe {config.get('probe')!r} needs config['source'] naming the run it reuses; "
                          f"build its spec with repro.runs.pointer")
    return src


def _runtime() -> Runtime:
    """The runtime a probe evaluates a source's model under (the command's is not passed down to probes)."""
    d = ddp.setup("auto")
    on_gpu = d.device.type == "cuda"
    return Runtime(dist=d, progress=False, check_every=50 if on_gpu else 1,
                   num_workers=min(8, os.cpu_count() or 1) if on_gpu else 0, checkpoint_every_s=60.0)


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


def trained(config: dict) -> Trained:
    """The source's model as trained (checkpoint of its last epoch), in eval mode on the default device."""
    from repro.data import build_data
    from repro.train.model import create_model

    spec = source_spec(config)
    if spec.kind != "train":
        raise ConfigError(f"source {spec.run_id} is a {spec.kind} run; a trained model needs a train run")
    weights = source_weights(spec)      # its final model; never trained here
    path = final_checkpoint(spec)
    rt = _runtime()
    cfg, d = spec.config, rt.dist
    data = build_data(cfg["data"], cfg["recipe"], seed=spec.seed, rank=d.rank, world=d.world_size,
                      device=d.device, num_workers=rt.num_workers)
    model = create_model(cfg, data.num_classes)
    checkpoint.restore_module(model, weights, path)
    amp_dtype = torch.bfloat16 if d.device.type == "cuda" else None
    return Trained(spec, model.to(d.device).eval(), data.test, d, amp_dtype)
