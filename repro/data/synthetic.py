"""Synthetic images for tests, smoke runs and paper-scale dry runs: learnable, deterministic, no files.
Each image is its class's fixed random 4x4 colour layout, upsampled, plus per-image noise; any image is made on
its own, so a 1000-class 224 px split costs nothing until it is read."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


class SyntheticImages:
    def __init__(self, num_classes: int = 10, img_size: int = 32, per_class: int = 50,
                 split_seed: int = 0, noise: float = 48.0):
        self.num_classes, self.img_size, self.per_class = num_classes, img_size, per_class
        self.split_seed, self.noise = split_seed, noise
        g = torch.Generator().manual_seed(1234)
        self.layouts = torch.rand(num_classes, 3, 4, 4, generator=g) * 255

    def __len__(self) -> int:
        return self.num_classes * self.per_class

    def labels(self) -> list[int]:
        """Class-major order, like a sorted ImageFolder."""
        return [i // self.per_class for i in range(len(self))]

    def batch(self, indices) -> torch.Tensor:
        """uint8 images N,3,H,W for the given indices."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        base = F.interpolate(self.layouts[idx // self.per_class], size=self.img_size, mode="nearest")
        seeds = [1_000_003 * self.split_seed + int(i) for i in idx]
        noise = torch.stack([torch.randn(3, self.img_size, self.img_size, generator=torch.Generator().manual_seed(s))
                             for s in seeds]) if len(idx) else base
        return (base + self.noise * noise).clamp(0, 255).round().to(torch.uint8)

    def image(self, i: int) -> np.ndarray:
        """One image as uint8 H,W,3 (for PIL)."""
        return self.batch([i])[0].permute(1, 2, 0).numpy()
