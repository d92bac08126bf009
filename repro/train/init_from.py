"""Start a run from another run's final model (two-phase training, e.g. a conv phase then attention).

``config["init"] = {"from": source.as_source(), "fn": "<registered name>", "kwargs": {...}}`` (repro/runs.py).
Before the first step of a fresh run (not on resume: the checkpoint already holds the trained
weights) the engine builds the source run's model, loads the source's final weights and calls
``fn(source_model, model, **kwargs)``, which writes into ``model`` in place.

The source's final weights are the ``model`` entry of its ``last.pt``: the engine always saves it at
the end of the last epoch (whatever ``runtime.checkpoint_every_s``), and nothing deletes it. The
source must have a ``finished`` record (a diverged run's checkpoint is not its final model).
``reproduce`` runs sources first (``with_sources``); if a source's record or checkpoint is missing
anyway, the error says what to run or delete. Without persistence (dry runs) the source model is
built untrained: the transfer is exercised on the real shapes, nothing is read from disk.

At the switch the engine measures what the transfer kept (``switch_metrics``): both models' test
top-1 and the relative gap between their logits, recorded as ``switch_top1_source``,
``switch_top1_start`` and ``switch_logit_gap``.
"""
from __future__ import annotations

import torch

from .. import records
from .ddp import Dist, all_reduce
from ..functions import lookup
from ..runs import RunSpec, final_checkpoint, source_spec
from . import checkpoint
from .model import create_model


class InitError(RuntimeError):
    """A source run whose final model cannot be used (not run, not finished, checkpoint gone)."""


def run_first(source: RunSpec) -> str:
    """The command that records ``source``: what a run or a probe that needs it says to run first."""
    scale = source.scale.removesuffix("-smoke")
    smoke = " smoke=true" if scale != source.scale else ""
    return f"python -m repro reproduce paper={source.paper} scale={scale} tables={source.table}{smoke}"


def source_record(source: RunSpec) -> dict:
    """The finished record of ``source`` (a run another starts from, or a pointer probe reads). The scheduler
    runs sources first (``with_sources``); nothing else trains them, so a missing one says what to run."""
    rec_path = records.record_path(source.paper, source.scale, source.run_id)
    if not rec_path.exists():
        raise InitError(f"source run {source.run_id} has not run yet: run `{run_first(source)}` first")
    rec = records.read_record(rec_path)
    if rec["status"] != "finished":
        raise InitError(f"source run {source.run_id} is {rec['status']}, so it has no final model; see {rec_path}")
    return rec


def source_weights(source: RunSpec) -> dict:
    """The final model state dict of a finished source run (loaded with weights_only=True)."""
    source_record(source)
    ckpt = final_checkpoint(source)
    state = checkpoint.load(ckpt, source.fingerprint)
    if state is None:
        rec_path = records.record_path(source.paper, source.scale, source.run_id)
        raise InitError(f"source run {source.run_id} is finished but its final model {ckpt} is gone "
                        f"(cache cleared?): delete {rec_path} and run `{run_first(source)}` to retrain it")
    return state["model"]


def init_from_source(model: torch.nn.Module, spec: RunSpec, num_classes: int, device,
                     trained: bool = True) -> torch.nn.Module:
    """Apply ``spec.config['init']`` to ``model``; returns the source model (eval mode)."""
    source = source_spec(spec)
    init = spec.config["init"]
    fn = lookup(init["fn"])
    src_model = create_model(source.config, num_classes).to(device)
    if trained:
        checkpoint.restore_module(src_model, source_weights(source), final_checkpoint(source))
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
