"""Figure 2 of patch diversification: layer-wise patch cosine similarity and attention std.

- ``oversmoothing(model, ctx)``: a training probe, run on the trained model and a fixed batch of test
  images (the engine's ``ctx``). The poster computes the same curves on 10,000 ImageNet training images.
- ``random_init(config)``: a probe run: the same curves for the run's model at initialisation (Figure 2's
  "DEIT random init"), on the test images every trained probe sees, and its (chance-level) test top-1.
- ``count_params(config)``: a probe run: Table 2's model size of ``config['model']`` as named (built on
  the meta device: no memory, no init).

Per layer l (block l's output, class token dropped): CosSim(h) = 1/(n(n-1)) sum_{i != j} cos(h_i, h_j)
and the std of each patch's softmax attention row over the n patches, averaged over heads and patches
(repro.probes.diversity). ``cossim_norm`` is CosSim after the final LayerNorm: the tokens the three
losses act on, one step past the last block's output that Figure 2 ends with.
"""
from __future__ import annotations

import timm
import torch
from torch import nn

import repro.models  # noqa: F401  (registers the repro_* model names with timm)
from repro.data import build_data
from repro.functions import register
from repro.probes.cost import count_params as _count
from repro.probes.diversity import oversmoothing_metrics
from repro.train.ddp import Dist
from repro.train.engine import evaluate
from repro.train.model import create_model

PROBE_BATCH = 64


@register("oversmoothing.oversmoothing")
def oversmoothing(model: nn.Module, ctx) -> dict:
    """Training probe (config['probes']): Figure 2's metrics on the engine's fixed test batch."""
    return oversmoothing_metrics(model, ctx.images)


@register("oversmoothing.random_init")
def random_init(config: dict) -> dict:
    """Probe run (config['probe']): Figure 2's metrics of the run's model at initialisation.

    The images are ``PROBE_BATCH`` test images spread over the set, normalised as in training: the batch the
    engine hands its training probes (runtime.probe_batch, default 64). Weights: torch.manual_seed(0).
    """
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # only the test images are used: batch 1 keeps a small training subset from refusing to load
    data = build_data(config["data"], {**config["recipe"], "batch_size": 1}, seed=0, device=device)
    images, _ = data.test.sample(PROBE_BATCH)
    model = create_model(config, data.num_classes).to(device)
    return {**oversmoothing_metrics(model, images[:PROBE_BATCH]),
            **evaluate(model, data.test, Dist(device=device), None), "params": _count(model)}


@register("oversmoothing.count_params")
def count_params(config: dict) -> dict:
    """Probe run: parameters of ``timm.create_model(model.name, **model.kwargs)`` (all of them, as papers count)."""
    with torch.device("meta"):
        model = timm.create_model(config["model"]["name"], **(config["model"].get("kwargs") or {}))
    return {"params": _count(model)}
