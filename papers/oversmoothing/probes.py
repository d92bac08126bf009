"""Figure 2 of patch diversification: layer-wise patch cosine similarity and attention std.

Per layer l (block l's output, class token dropped): CosSim(h) = 1/(n(n-1)) sum_{i != j} cos(h_i, h_j)
and the std of each patch's softmax attention row over the n patches, averaged over heads and patches
(repro.probes.diversity). ``cossim_norm`` is CosSim after the final LayerNorm: the tokens the three
losses act on, one step past the last block's output that Figure 2 ends with. The committed metrics use
the engine's fixed batch of test images; ``poster_cossim`` puts CosSim on the poster's image set (up to
``TRAIN_IMAGES`` training images, the test transform) beside them.
"""
from __future__ import annotations

import timm
import torch
from torch import nn

import repro.models  # noqa: F401  (registers the repro_* model names with timm)
from repro.data import build_data, choose_pipeline, open_split
from repro.data.batch_aug import Normalize
from repro.data.image_loader import ImageEvalLoader
from repro.data.tensor_cache import decoded
from repro.data.tensor_loader import TensorEvalLoader, spread
from repro.functions import register
from repro.models.cost import count_params as _count
from repro.probes.budget import probe_images
from repro.probes.diversity import num_patches, oversmoothing_metrics, patch_cosine_similarity
from repro.probes.hooks import eval_mode, record_blocks
from repro.train.ddp import Dist
from repro.train.engine import evaluate
from repro.train.model import create_model

PROBE_BATCH = 64
TRAIN_IMAGES = 10_000  # Figure 2's caption: "a sub-sampled ImageNet training set, which contains 10,000 images"
CHUNK = 100  # images per forward pass: every block's tokens of a chunk are held at once (DeiT-B24: 3 GB)


@register("oversmoothing.oversmoothing")
def oversmoothing(model: nn.Module, ctx) -> dict:
    """Training probe (config['probes']): Figure 2's metrics on the engine's fixed test batch, and CosSim
    on the poster's image set (``cossim_train_*``)."""
    return {**oversmoothing_metrics(model, ctx.images),
            **poster_cossim(model, ctx.config["data"], ctx.device, train_images(ctx.config))}


@register("oversmoothing.random_init")
def random_init(config: dict) -> dict:
    """Probe run (config['probe']): Figure 2's metrics of the run's model at initialisation ("DEIT random init").

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
            **poster_cossim(model, config["data"], device, train_images(config)),
            **evaluate(model, data.test, Dist(device=device), None), "params": _count(model)}


@register("oversmoothing.count_params")
def count_params(config: dict) -> dict:
    """Probe run: parameters of ``timm.create_model(model.name, **model.kwargs)`` (all of them, as papers count)."""
    with torch.device("meta"):
        model = timm.create_model(config["model"]["name"], **(config["model"].get("kwargs") or {}))
    return {"params": _count(model)}


def training_batches(data_cfg: dict, n: int, device, batch_size: int = CHUNK):
    """Up to ``n`` training images spread evenly over the training split (every class alike: splits are
    stored class by class), in batches, with the test set's transform: no augmentation."""
    split = open_split(data_cfg, "train")
    idx = spread(len(split), n)
    if choose_pipeline(data_cfg) == "loader":
        loader = ImageEvalLoader(split.subset(idx.tolist()), data_cfg, batch_size, device=device)
    else:  # tensor and fastpath: the decoded split, cached once per machine
        images, labels = decoded(split)
        norm = Normalize(data_cfg["mean"], data_cfg["std"], int(data_cfg["img_size"]), device)
        loader = TensorEvalLoader(images[idx], labels[idx], batch_size, norm, device=device)
    for x, _ in loader.batches():
        yield x


def train_images(config: dict) -> int:
    """The poster's 10,000 training images for a real run; one training batch in a smoke or dry run."""
    return probe_images(config, TRAIN_IMAGES)


def poster_cossim(model: nn.Module, data_cfg: dict, device, images: int = TRAIN_IMAGES) -> dict:
    """CosSim per block and after the final norm, the mean over up to ``images`` training images.

    The definition is the committed one (patch tokens of each block's output, class token dropped, eval
    mode); only the images differ: the poster's training images, not ``PROBE_BATCH`` test images.
    """
    patches, depth, count = num_patches(model), len(model.blocks), 0
    sums = [0.0] * (depth + 1)  # per block, then after the final norm
    with eval_mode(model), torch.no_grad(), record_blocks(model) as rec:
        for x in training_batches(data_cfg, images, device, CHUNK):
            tokens = model.forward_features(x.to(device))
            for i, h in enumerate([rec.features[b] for b in range(depth)] + [tokens]):
                sums[i] += patch_cosine_similarity(h, h.shape[1] - patches).sum().item()
            count += len(x)
    layers = [v / count for v in sums[:depth]]
    return {"cossim_train_layers": layers, "cossim_train_last": layers[-1], "cossim_train_norm": sums[depth] / count,
            "cossim_train_images": count}
