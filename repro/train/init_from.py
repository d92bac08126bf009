"""Start a run from another run's final model (two-phase training, e.g. a conv phase then attention).

Before the first step of a fresh run (not on resume: its checkpoint holds the trained weights) the engine
builds the source model, loads the weights the run stage read (repro/run/sources.py) and calls
``fn(source_model, model, **kwargs)`` of ``config["init"]``; in a dry run the source stays untrained.
``switch_metrics`` records what the transfer kept: both models' top-1 and the gap between their logits."""
from __future__ import annotations

import torch

from .ddp import Dist, all_reduce
from ..functions import lookup
from ..runs import RunSpec, final_checkpoint, source_spec
from . import checkpoint
from .model import create_model


def init_from_source(model: torch.nn.Module, spec: RunSpec, num_classes: int, device,
                     weights: dict | None) -> torch.nn.Module:
    """Apply ``spec.config['init']`` to ``model`` from the source's ``weights`` (None: untrained); the source model."""
    source = source_spec(spec)
    init = spec.config["init"]
    fn = lookup(init["fn"])
    src_model = create_model(source.config, num_classes).to(device)
    if weights is not None:
        checkpoint.restore_module(src_model, weights, final_checkpoint(source))
    src_model.eval()
    fn(src_model, model, **(init.get("kwargs") or {}))
    return src_model


@torch.no_grad()
def switch_metrics(source: torch.nn.Module, model: torch.nn.Module, test, d: Dist) -> dict:
    """Test top-1 (%) of the source and of the model it initialised, and ||z_model - z_source|| /
    ||z_source|| over all test logits: how much of the source's function survived the transfer."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(5, dtype=torch.float64, device=d.device)  # hits source, hits start, gap^2, ref^2, n
    for x, y in test.batches():
        zs, zm = source(x).float(), model(x).float()
        sums += torch.stack([(zs.argmax(1) == y).sum(), (zm.argmax(1) == y).sum(), (zm - zs).pow(2).sum(),
                             zs.pow(2).sum(), torch.tensor(len(y), device=d.device)]).double()
    all_reduce(sums, d)
    model.train(was_training)
    hs, hm, gap, ref, n = sums.tolist()
    return {"switch_top1_source": 100 * hs / n, "switch_top1_start": 100 * hm / n,
            "switch_logit_gap": (gap / ref) ** 0.5 if ref > 0 else float("nan")}
