"""Table 1's "training time" column: a row's training cost relative to ViT-base, timed on one machine.

The paper reports wall-clock training time relative to ViT-base (two-phase rows: both phases). We
time what differs between the rows, the model's training step (forward, cross-entropy, backward,
AdamW step; bf16 autocast on CUDA as the engine trains), for every model of the row and for the
ViT-base reference, interleaved in rounds in one process, so machine load hits all of them alike:

    time ratio = sum over phases (epochs_i x step_i) / (epochs_ref x step_ref)

Every row sees the same data, batch size and steps per epoch, so these cancel. Data loading and
augmentation (the same for every row) are left out; the runs' own measured seconds are in the
records (``train_s``) beside this.
"""
from __future__ import annotations

import statistics
import time

import torch

from repro.functions import register
from repro.runs import deep_merge
from repro.train.model import create_model
from repro.train.recipe import build_optimizer


def _trainer(config: dict, part: dict, num_classes: int, device: torch.device):
    """A closure doing one training step of the model in ``part`` on a fixed random batch."""
    cfg = deep_merge(config, {"model": part["model"], "recipe": part.get("recipe") or {}})
    model = create_model(cfg, num_classes).to(device).train()
    opt = build_optimizer(model, cfg["recipe"])
    batch, size = int(cfg["recipe"]["batch_size"]), int(cfg["data"]["img_size"])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, size, size, generator=gen).to(device)
    y = torch.randint(0, num_classes, (batch,), generator=gen).to(device)
    amp = device.type == "cuda"

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if amp:
            torch.cuda.synchronize(device)
    return step


@register("cmhsa.time_ratio")
def time_ratio(config: dict) -> dict:
    """Probe run: ``config["timing"] = {"phases": [{"model", "recipe", "epochs"}, ...], "reference":
    {...}, "rounds": R, "steps": S}``; median step seconds over R rounds of S steps per model."""
    t = config.get("timing")
    if not isinstance(t, dict) or not t.get("phases") or not t.get("reference"):
        raise ValueError("time_ratio needs config['timing'] with 'phases' and 'reference' "
                         "(papers/cmhsa/experiments.py sets it)")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    num_classes = int(config["data"]["num_classes"])
    parts = [*t["phases"], t["reference"]]
    steps = [_trainer(config, p, num_classes, device) for p in parts]
    for step in steps:  # first steps allocate and pick kernels: not timed
        step()
    times: list[list[float]] = [[] for _ in parts]
    for _ in range(int(t.get("rounds", 3))):
        for step, seen in zip(steps, times):
            start = time.perf_counter()
            for _ in range(int(t.get("steps", 1))):
                step()
            seen.append((time.perf_counter() - start) / int(t.get("steps", 1)))
    median = [statistics.median(s) for s in times]
    cost = sum(int(p["epochs"]) * s for p, s in zip(t["phases"], median))
    ref = int(t["reference"]["epochs"]) * median[-1]
    return {"time_ratio": cost / ref, "step_s": median[:-1], "reference_step_s": median[-1],
            "timed_batch": int(config["recipe"]["batch_size"]), "device": str(device),
            "timing_rounds": int(t.get("rounds", 3))}  # alternated rounds: the report may judge timing claims
