"""Datasets and loaders for training runs; ``build_data`` picks the pipeline (``data.pipeline``, or ``auto``):
- ``tensor`` (CIFAR-sized data at its own resolution, synthetic): decoded once into a cached uint8 tensor on the
  device, augmented per batch there (``batch_aug``);
- ``loader`` (ImageNet-scale folders, or small data resized up): timm transforms in DataLoader workers;
- ``fastpath`` (by name only): the tensor loader with per-image RandAugment and each run's own random streams,
  as fused runs need (``fastpath``); the name is in the hashed data config, so the two never share a run id."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..checks import check_classes
from .batch_aug import BatchAugment, Normalize
from .fastpath import fast_loader
from .image_loader import ImageEvalLoader, ImageTrainLoader
from .sources import DATASETS, DataError, data_root, fraction_indices, open_split
from .subsets import FractionError, check_fraction, class_balanced_indices
from .tensor_cache import decoded
from .tensor_loader import TensorEvalLoader, TensorTrainLoader

__all__ = ["Data", "build_data", "check_train_data", "DataError", "FractionError", "data_root", "open_split",
           "class_balanced_indices", "check_fraction", "DATASETS"]

NATIVE_SIZE = {"cifar10": 32, "cifar100": 32, "cifar10_jpeg": 32}


@dataclass
class Data:
    train: Any                     # .epoch(e) -> iterator of (x, y); .steps_per_epoch
    test: Any                      # .batches() -> iterator of (x, y)
    num_classes: int
    info: dict = field(default_factory=dict)


def choose_pipeline(cfg: dict) -> str:
    choice = cfg.get("pipeline", "auto")
    if choice in ("tensor", "loader", "fastpath"):
        return choice
    if choice != "auto":
        raise DataError(f"data.pipeline={choice!r}: use tensor, loader, fastpath or auto")
    native = NATIVE_SIZE.get(cfg["name"], int(cfg["img_size"]) if cfg["name"] == "synthetic" else None)
    return "tensor" if native == int(cfg["img_size"]) else "loader"


def no_full_batch(name: str, images: int, fraction: float, batch: int) -> DataError:
    return DataError(f"{name}: {images} training images (fraction {fraction}) make no full batch of {batch}; "
                     f"lower recipe.batch_size or raise data.fraction")


def check_train_data(cfg: dict, recipe: dict, seen: dict | None = None):
    """Before any run starts: both splits exist with the same classes, a cached dataset's images decode (its cache is
    built now) and the training set holds a full batch; (train, test, opened now) (``seen``: splits checked)."""
    key = repr(sorted((k, repr(v)) for k, v in cfg.items() if k != "fraction"))
    fresh = seen is None or key not in seen
    if fresh:
        train, test = open_split(cfg, "train"), open_split(cfg, "test")  # missing data, an empty class folder
        check_classes(train, test, cfg)  # mismatched class folders
    else:
        train, test = seen[key]
    fraction = check_fraction(cfg.get("fraction", 1.0))
    keep = fraction_indices(train, fraction)
    if len(keep) < int(recipe["batch_size"]):
        raise no_full_batch(train.name, len(keep), fraction, int(recipe["batch_size"]))
    if fresh and choose_pipeline(cfg) == "tensor" and train.files is not None:  # image files, not pixels
        decoded(train), decoded(test)  # a corrupt image stops the command here, not a run an hour in
    if seen is not None:
        seen[key] = (train, test)
    return train, test, fresh


def build_data(cfg: dict, recipe: dict, *, seed: int, rank: int = 0, world: int = 1, device="cpu",
               num_workers: int = 0) -> Data:
    """Train loader (class-balanced fraction) and test loader for one run, this rank's share."""
    fraction = check_fraction(cfg.get("fraction", 1.0))
    batch = int(recipe["batch_size"])
    if batch % world:
        raise DataError(f"recipe.batch_size={batch} does not split over {world} processes")
    per_rank = batch // world
    train_split, test_split = open_split(cfg, "train"), open_split(cfg, "test")
    check_classes(train_split, test_split, cfg)
    keep = fraction_indices(train_split, fraction)
    num_classes = int(cfg.get("num_classes") or len(train_split.classes))
    pipeline = choose_pipeline(cfg)
    eval_batch = max(1, int(recipe.get("eval_batch_size", 256)) // world)
    repeats = 3 if recipe.get("repeated_aug") else 1
    if pipeline in ("tensor", "fastpath"):
        images, labels = decoded(train_split)
        if pipeline == "fastpath":
            train = fast_loader(images[keep], labels[keep], per_rank, recipe, cfg, num_classes, seed, rank, world,
                             repeats, device)
        else:
            train = TensorTrainLoader(images[keep], labels[keep], per_rank, BatchAugment(recipe, cfg, device),
                                      seed, rank, world, repeats, device)
        test = TensorEvalLoader(*decoded(test_split), eval_batch,
                                Normalize(cfg["mean"], cfg["std"], int(cfg["img_size"]), device), rank, world, device)
    else:
        train = ImageTrainLoader(train_split.subset(keep), recipe, cfg, per_rank, seed, rank, world,
                                 num_workers, device)
        test = ImageEvalLoader(test_split, cfg, eval_batch, rank, world, num_workers, device)
    if train.steps_per_epoch == 0:
        raise no_full_batch(train_split.name, len(keep), fraction, batch)
    info = {"train": train_split.name, "test": test_split.name, "train_images": len(keep),
            "test_images": len(test_split), "pipeline": pipeline, "num_classes": num_classes}
    return Data(train=train, test=test, num_classes=num_classes, info=info)
