"""ConViT (d'Ascoli et al., ICML 2021): which runs fill which cells of paper.yaml, at each scale.

Table 2, sample efficiency: DeiT and ConViT trained on a class-balanced fraction f of the training
set (the first int(f * n) images of each class in sorted order, as the official code does) for
epochs x 1/f, so that every fraction sees the same number of images. One run per (fraction, model,
seed) fills that model's top-1 and top-5 columns of row f<percent>; the report derives the gaps.

Scales (protocol per scale and every deviation: papers/convit/README.md):
- tiny:  CIFAR-10 (JPEG copy) at 32 px, first 300 / 100 images per class, depth-4 width-96 models
         with patch 8 (a 4x4 grid: patch 4 costs 4x the compute on CPU), 5 epochs at f = 1, 1 seed;
         CPU minutes.
- small: the whole CIFAR-10 training set at 32 px, DeiT-Ti / ConViT-Ti with patch 4, 3 seeds.
- full:  ImageNet-1k at 224 px, DeiT-S / ConViT-S, DeiT recipe, 300 epochs, 1 seed (as the paper).
"""
from __future__ import annotations

from repro.runs import RunSpec

FRACTIONS = {"f5": 0.05, "f10": 0.10, "f30": 0.30, "f50": 0.50, "f100": 1.00}

# scale -> models {column prefix: (timm name, create_model kwargs)}, epochs at f = 1, seeds, data
PROTOCOL = {
    "tiny": {
        "models": {"deit": ("repro_deit_tiny_c32", {"depth": 4, "embed_dim": 96, "num_heads": 3, "patch_size": 8}),
                   "convit": ("repro_convit_tiny_c32", {"depth": 4, "gpsa_layers": 3, "embed_dim": 96, "num_heads": 4, "patch_size": 8})},
        "epochs": 5, "seeds": 1, "data": {"max_per_class": 300},
    },
    "small": {
        "models": {"deit": ("repro_deit_tiny_c32", {}), "convit": ("repro_convit_tiny_c32", {})},
        "epochs": 20, "seeds": 3, "data": {},
    },
    "full": {
        "models": {"deit": ("repro_deit_small", {}), "convit": ("repro_convit_small", {})},
        "epochs": 300, "seeds": 1, "data": {},
    },
}


def table2(scale: str, seeds: int) -> list[RunSpec]:
    p = PROTOCOL[scale]
    specs = []
    for row, fraction in FRACTIONS.items():
        for prefix, (model, kwargs) in p["models"].items():
            for seed in range(seeds):
                specs.append(RunSpec(
                    paper="convit", table="table2", scale=scale, seed=seed, name=prefix,
                    cell={"row": row, "columns": {f"{prefix}_top1": "top1", f"{prefix}_top5": "top5"}},
                    config={"model": {"name": model, "kwargs": dict(kwargs)},
                            "data": {**p["data"], "fraction": fraction},
                            "recipe": {"epochs": p["epochs"], "scale_epochs_with_fraction": True}}))
    return specs


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every ConViT run at a scale (``seeds`` overrides the scale's default seed count)."""
    return table2(scale, seeds or PROTOCOL[scale]["seeds"])
