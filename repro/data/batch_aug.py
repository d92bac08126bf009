"""DeiT's small-image train transform applied to whole uint8 batches, on the GPU when there is one.

Order as DeiT/ConViT's ``build_transform`` at 32 px: crop with 4 px padding, flip, RandAugment, normalise,
random erasing. RandAugment is torchvision's ``v2.RandAugment`` (n and m from timm's ``rand-m9-n2-...``,
``num_magnitude_bins=11``, fill = mean), one draw of ops per ``data.aug_group`` images, since a call per image
costs a launch per image; unlike timm's PIL policy it has no magnitude noise and always applies its ops.
Erasing is ``random_erase`` on a GPU (whole batch at once) and timm's ``RandomErasing`` on a CPU (measured faster)."""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from timm.data.random_erasing import RandomErasing
from torchvision.transforms import v2


def parse_rand_augment(policy: str | None) -> tuple[int, int] | None:
    """timm policy 'rand-m9-mstd0.5-inc1' -> (num_ops=2, magnitude=9); None/'' -> None."""
    if not policy:
        return None
    parts = str(policy).split("-")
    if parts[0] != "rand":
        raise ValueError(f"recipe.aa={policy!r}: the tensor pipeline runs RandAugment ('rand-m9-...') "
                         f"only; use data.pipeline=loader for other policies")
    n, m = 2, 10
    for p in parts[1:]:
        key, val = re.match(r"([a-z]+)([\d.]*)", p).groups()
        if key == "m":
            m = int(float(val))
        elif key == "n":
            n = int(val)
    return n, m


class Normalize:
    """uint8 N,3,H,W -> float, resized to ``img_size`` if needed, minus mean over std."""

    def __init__(self, mean, std, img_size: int, device):
        self.mean = torch.tensor(mean, device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(std, device=device).view(1, 3, 1, 1) * 255
        self.img_size = img_size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if x.shape[-1] != self.img_size or x.shape[-2] != self.img_size:
            x = F.interpolate(x, size=self.img_size, mode="bicubic", antialias=True, align_corners=False)
        return (x - self.mean) / self.std


def random_crop(x: torch.Tensor, padding: int, gen: torch.Generator) -> torch.Tensor:
    """Per-image random crop of the zero-padded batch back to its size (torchvision RandomCrop)."""
    if padding <= 0:
        return x
    n, _, h, w = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    oy = torch.randint(0, 2 * padding + 1, (n, 1), generator=gen, device=gen.device).to(x.device)
    ox = torch.randint(0, 2 * padding + 1, (n, 1), generator=gen, device=gen.device).to(x.device)
    rows = (oy + torch.arange(h, device=x.device))[:, :, None]          # n,h,1
    cols = (ox + torch.arange(w, device=x.device))[:, None, :]          # n,1,w
    batch = torch.arange(n, device=x.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2).contiguous()


def random_flip(x: torch.Tensor, p: float, gen: torch.Generator) -> torch.Tensor:
    flip = (torch.rand(x.shape[0], generator=gen, device=gen.device) < p).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


class BatchAugment:
    """The train transform for a batch (see module docstring); call with a per-epoch generator."""

    def __init__(self, recipe: dict, data: dict, device):
        self.padding = int(data.get("crop_padding", 4))
        self.hflip = float(recipe.get("hflip", 0.5))
        ra = parse_rand_augment(recipe.get("aa"))
        fill = [round(255 * m) for m in data["mean"]]
        self.rand_augment = None if ra is None else v2.RandAugment(
            num_ops=ra[0], magnitude=ra[1], num_magnitude_bins=11, fill=fill)
        self.group = max(1, int(data.get("aug_group", 16)))
        self.normalize = Normalize(data["mean"], data["std"], int(data["img_size"]), device)
        self.reprob, self.remode, self.recount = erasing(recipe)
        self.timm_erase = None
        if self.reprob > 0 and torch.device(device).type == "cpu":
            self.timm_erase = RandomErasing(self.reprob, mode=self.remode, max_count=self.recount, device="cpu")

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        x = random_crop(x, self.padding, gen)
        x = random_flip(x, self.hflip, gen)
        if self.rand_augment is not None:
            x = torch.cat([self.rand_augment(chunk) for chunk in x.split(self.group)])
        x = self.normalize(x)
        if self.timm_erase is not None:
            return self.timm_erase(x)
        return random_erase(x, self.reprob, gen, self.remode, self.recount)

    def batch(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator, rng) -> tuple[torch.Tensor, torch.Tensor]:
        """The tensor loader's call: (augmented batch, its labels); Mixup/CutMix runs in the engine's step."""
        return self(x, gen), y


ERASE_MODES = ("pixel", "rand", "const")


def erasing(recipe: dict) -> tuple[float, str, int]:
    """The recipe's random erasing (reprob, remode, recount), its mode checked before any batch is drawn."""
    mode = recipe.get("remode", "pixel")
    if mode not in ERASE_MODES:
        raise ValueError(f"recipe.remode={mode!r}: use one of {', '.join(ERASE_MODES)}")
    return float(recipe.get("reprob", 0.0)), mode, max(1, int(recipe.get("recount", 1)))


def random_erase(x: torch.Tensor, p: float, gen: torch.Generator, mode: str = "pixel", max_count: int = 1,
                 area: tuple[float, float] = (0.02, 1 / 3), min_aspect: float = 0.3,
                 attempts: int = 10) -> torch.Tensor:
    """Random erasing as timm's ``RandomErasing`` draws it (same distribution: p, 1..max_count boxes, ``attempts``
    (area, aspect) draws each, 'pixel' / 'rand' / 'const' fill), for a whole batch at once: timm loops over the
    images in Python, hundreds of kernel launches per batch on a GPU."""
    if p <= 0:
        return x
    b, c, height, width = x.shape
    dev = x.device

    def uniform(*shape):
        return torch.rand(shape, generator=gen, device=dev)

    erase = uniform(b) < p
    count = 1 + (uniform(b) * max_count).long().clamp_(max=max_count - 1)
    rows = torch.arange(height, device=dev).view(1, height, 1)
    cols = torch.arange(width, device=dev).view(1, 1, width)
    log_lo, log_hi = math.log(min_aspect), math.log(1 / min_aspect)
    out = x
    for k in range(max_count):
        target = (area[0] + (area[1] - area[0]) * uniform(b, attempts)) * (height * width) / count[:, None]
        aspect = torch.exp(log_lo + (log_hi - log_lo) * uniform(b, attempts))
        h = torch.round(torch.sqrt(target * aspect)).long()
        w = torch.round(torch.sqrt(target / aspect)).long()
        fits = (h < height) & (w < width)
        first = fits.int().argmax(1, keepdim=True)  # first attempt that fits (0 when none does)
        h, w = h.gather(1, first).squeeze(1), w.gather(1, first).squeeze(1)
        active = erase & (k < count) & fits.any(1)
        top = (uniform(b) * (height - h + 1)).long()
        left = (uniform(b) * (width - w + 1)).long()
        box = ((rows >= top.view(b, 1, 1)) & (rows < (top + h).view(b, 1, 1))
               & (cols >= left.view(b, 1, 1)) & (cols < (left + w).view(b, 1, 1)) & active.view(b, 1, 1))
        if mode == "pixel":
            fill = torch.randn(x.shape, generator=gen, device=dev, dtype=x.dtype)
        elif mode == "rand":
            fill = torch.randn((b, c, 1, 1), generator=gen, device=dev, dtype=x.dtype).expand_as(x)
        elif mode == "const":
            fill = torch.zeros((), device=dev, dtype=x.dtype)
        else:
            raise ValueError(f"recipe.remode={mode!r}: use one of {', '.join(ERASE_MODES)}")
        out = torch.where(box.unsqueeze(1), fill, out)
    return out
