"""The engine's own runs, built for a benchmark as `reproduce` builds them and writing nothing: every step the
benchmarks time is repro/train/engine.py's (``engine.stepper``), not a copy of it."""
from __future__ import annotations

import torch

from repro.runs import RunSpec, resolve
from repro.train import engine
from repro.train.ddp import Dist


def run_spec(base: dict, model: str | dict, steps: int, seed: int = 0, scale: str = "bench", **config) -> RunSpec:
    """A run of ``model`` (a timm name, or {"name", "kwargs"}) over ``base`` (a resolved config, e.g.
    data_path.run_config) with ``config`` merged in; synthetic data holds at least ``steps`` batches."""
    model = model if isinstance(model, dict) else {"name": model, "kwargs": {}}
    base = {k: v for k, v in base.items() if k != "model"}  # the scale's model kwargs are not this model's
    data, batch = {**base["data"], **config.pop("data", {})}, int(base["recipe"]["batch_size"])
    if data.get("synthetic"):
        classes = int(data.get("num_classes") or 10)
        data["max_per_class"] = max(int(data.get("max_per_class") or 0), -(-batch * steps // classes))
    cell = {"row": model["name"], "columns": {}}
    return resolve(RunSpec("bench", "engine_step", cell, scale, seed=seed,
                           config={"model": model, "data": data, **config}), base)


def engine_steps(specs: list[RunSpec], device: torch.device, mode: str | None = None, fused_opt: bool = False,
                 amp: str = "bf16"):
    """(the runs' endless batches, the engine's step on one batch): one run, or K fused; ``mode`` None
    eager, else the model (alone) or the update (fused) under torch.compile in that mode; ``amp`` as
    runtime.amp (autocast on CUDA)."""
    rt = engine.Runtime(dist=Dist(device=device), amp=amp, persist=False, progress=False, compile=mode is not None,
                        compile_mode=mode or "default", fused_optimizer=fused_opt)
    return engine.stepper(specs, rt)
