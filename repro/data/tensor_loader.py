"""Batches from a device-resident uint8 tensor (airbench-style): an epoch is a permutation, a batch an index,
augmentation runs on the batch (``BatchAugment`` or ``FastAugment``), all drawn from generators seeded by
(seed, epoch, rank), so an epoch replays exactly after a resume."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import torch

from .batch_aug import Normalize


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


class TensorTrainLoader:
    """``epoch(e)`` yields (normalised augmented images, targets) of this rank's share of epoch e: soft targets
    (N x classes) when the augmentation mixes images (``mixes``), else the labels."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, augment,
                 seed: int, rank: int = 0, world: int = 1, repeats: int = 1, device="cpu"):
        self.device = torch.device(device)
        self.images, self.labels = images.to(self.device), labels.to(self.device)
        self.batch_size, self.augment, self.seed = batch_size, augment, seed
        self.rank, self.world, self.repeats = rank, world, max(1, int(repeats))
        self.per_rank = len(self.labels) // world
        self.steps_per_epoch = self.per_rank // batch_size
        self.mixes = bool(getattr(augment, "mixes", False))

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        mine, gen = epoch_draws(self, epoch)
        rng = np.random.default_rng([self.seed, epoch, self.rank])  # host-side draws (Mixup's lambda): no sync
        b = self.batch_size
        for s in range(self.steps_per_epoch):
            idx = mine[s * b:(s + 1) * b]
            yield self.augment.batch(self.images[idx], self.labels[idx], gen, rng)


def epoch_draws(loader, epoch: int) -> tuple[torch.Tensor, torch.Generator]:
    """This rank's image order for ``epoch`` and the generator its augmentation draws from, both seeded
    by (seed, epoch, rank): ``loader`` has images on ``device``, ``seed``, ``rank``, ``world``, ``repeats``."""
    n = len(loader.labels)
    order = torch.randperm(n, generator=_generator(loader.device, 1_000_003 * loader.seed + epoch),
                           device=loader.device)
    if loader.repeats > 1:  # repeated augmentation (DeiT's RASampler): each image r times in a row
        order = order[:math.ceil(n / loader.repeats)].repeat_interleave(loader.repeats)[:n]
    mine = order[loader.rank::loader.world][:n // loader.world]
    gen = _generator(loader.device, 1_000_003 * loader.seed + 7919 * epoch + 104_729 * (loader.rank + 1))
    return mine, gen


class TensorEvalLoader:
    """``batches()`` yields this rank's share of the test set, normalised, in order."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, normalize: Normalize,
                 rank: int = 0, world: int = 1, device="cpu"):
        device = torch.device(device)
        self.images, self.labels = images[rank::world].to(device), labels[rank::world].to(device)
        self.batch_size, self.normalize = batch_size, normalize

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(0, len(self.labels), self.batch_size):
            yield self.normalize(self.images[i:i + self.batch_size]), self.labels[i:i + self.batch_size]

    def sample(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` images spread over the test set, for probes (stored class by class: the first n are one class)."""
        idx = spread(len(self.labels), n).to(self.labels.device)
        return self.normalize(self.images[idx]), self.labels[idx]


def spread(total: int, n: int) -> torch.Tensor:
    """Indices of min(n, total) items evenly spaced over range(total)."""
    n = min(n, total)
    return torch.arange(n, dtype=torch.long) * total // max(n, 1)
