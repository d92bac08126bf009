"""The ImageNet-scale path: timm's ``create_transform`` per image in DataLoader workers, as in DeiT/ConViT
(RandomCrop with 4 px padding instead of the resized crop at 32 px or less; size/0.875 resize and centre
crop to evaluate; timm's RepeatAugSampler). Samplers are seeded per epoch, so an epoch replays after a resume."""
from __future__ import annotations

import signal
from typing import Iterator

import numpy as np
import torch
from timm.data import create_transform
from timm.data.distributed_sampler import RepeatAugSampler
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from torchvision import transforms

from .sources import Split
from .tensor_loader import spread


class SplitDataset(Dataset):
    def __init__(self, split: Split, transform):
        self.split, self.transform = split, transform

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int):
        return self.transform(self.split.pil(i)), self.split.labels[i]


def train_transform(recipe: dict, data: dict):
    size = int(data["img_size"])
    t = create_transform(size, is_training=True, color_jitter=recipe.get("color_jitter", 0.4),
                         auto_augment=recipe.get("aa") or None,
                         interpolation=recipe.get("train_interpolation", "bicubic"),
                         re_prob=float(recipe.get("reprob", 0.0)), re_mode=recipe.get("remode", "pixel"),
                         re_count=int(recipe.get("recount", 1)), hflip=float(recipe.get("hflip", 0.5)),
                         mean=tuple(data["mean"]), std=tuple(data["std"]))
    if size <= 32:  # DeiT/ConViT for CIFAR-sized inputs: padded random crop, not a resized crop
        t.transforms[0] = transforms.RandomCrop(size, padding=int(data.get("crop_padding", 4)))
    return t


def eval_transform(data: dict):
    size = int(data["img_size"])
    return create_transform(size, is_training=False, interpolation="bicubic",
                            crop_pct=1.0 if size <= 32 else float(data.get("crop_pct", 0.875)),
                            mean=tuple(data["mean"]), std=tuple(data["std"]))


def _worker_init(worker_id: int) -> None:
    # timm's RandAugment draws ops with numpy: give each worker its own stream (torch seeds it).
    np.random.seed(torch.initial_seed() % 2**32)
    # Ctrl-C reaches the whole process group: a worker that died of it would crash the run; the main
    # process alone decides when to stop (repro/train/preempt.py), and ends the workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ImageTrainLoader:
    def __init__(self, split: Split, recipe: dict, data: dict, batch_size: int, seed: int,
                 rank: int = 0, world: int = 1, num_workers: int = 0, device="cpu"):
        self.dataset = SplitDataset(split, train_transform(recipe, data))
        n = len(self.dataset)
        if recipe.get("repeated_aug"):
            self.sampler = RepeatAugSampler(self.dataset, num_replicas=world, rank=rank, shuffle=True,
                                            num_repeats=3, selected_round=256 if n >= 256 * world else 0)
        else:
            self.sampler = DistributedSampler(self.dataset, num_replicas=world, rank=rank, shuffle=True,
                                              seed=seed, drop_last=True)
        self.batch_size, self.seed, self.rank = batch_size, seed, rank
        self.num_workers, self.device = num_workers, torch.device(device)
        self.steps_per_epoch = len(self.sampler) // batch_size

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        loader = DataLoader(self.dataset, batch_size=self.batch_size, sampler=self.sampler,
                            num_workers=self.num_workers, drop_last=True, worker_init_fn=_worker_init,
                            pin_memory=self.device.type == "cuda",
                            generator=torch.Generator().manual_seed(
                                1_000_003 * self.seed + 7919 * epoch + self.rank))
        for x, y in loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


class ImageEvalLoader:
    def __init__(self, split: Split, data: dict, batch_size: int, rank: int = 0, world: int = 1,
                 num_workers: int = 0, device="cpu"):
        dataset = SplitDataset(split, eval_transform(data))
        self.loader = DataLoader(torch.utils.data.Subset(dataset, range(rank, len(dataset), world)),
                                 batch_size=batch_size, shuffle=False, num_workers=num_workers,
                                 worker_init_fn=_worker_init, pin_memory=torch.device(device).type == "cuda")
        self.device = torch.device(device)

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def sample(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` test images spread evenly over the set (see TensorEvalLoader.sample)."""
        dataset = self.loader.dataset
        items = [dataset[int(i)] for i in spread(len(dataset), n)]
        x = torch.stack([x for x, _ in items]).to(self.device)
        return x, torch.as_tensor([int(y) for _, y in items], device=self.device)
