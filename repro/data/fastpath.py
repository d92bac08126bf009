"""The fast path for CIFAR-sized images: each batch augmented by a few whole-batch tensor ops on the device, every
run drawing from its own random streams (seeded by (seed, epoch, rank)), so fused runs stay apart and an epoch
replays exactly after a resume. DeiT's order for 32 px: crop and flip; RandAugment with a draw of ops per image
(torchvision's op set and uint8 arithmetic, vectorised: one warp, one blend and the level ops per layer; exact up
to float rounding, tests/test_fastpath.py); normalise and random erasing; Mixup / CutMix as timm's batch mode."""
from __future__ import annotations

import math
import numpy as np
import torch
from torchvision.transforms.v2 import functional as TF

from .batch_aug import Normalize, erasing, parse_rand_augment, random_crop, random_erase, random_flip
from .tensor_loader import TensorTrainLoader

OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
       "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")
OP = {name: i for i, name in enumerate(OPS)}
SIGNED = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness")


def op_magnitudes(magnitude: int, size: int, bins: int = 11) -> dict[str, float]:
    """torchvision RandAugment's value of each op at ``magnitude`` (of ``bins``) for ``size`` px images."""
    def at(lo: float, hi: float) -> float:
        return float(torch.linspace(lo, hi, bins)[magnitude])
    return {"ShearX": at(0, 0.3), "ShearY": at(0, 0.3), "TranslateX": at(0, 150 / 331 * size),
            "TranslateY": at(0, 150 / 331 * size), "Rotate": at(0, 30), "Brightness": at(0, 0.9),
            "Color": at(0, 0.9), "Contrast": at(0, 0.9), "Sharpness": at(0, 0.9),
            "Posterize": float(int((8 - torch.arange(bins) / ((bins - 1) / 4)).round()[magnitude])),
            "Solarize": 255.0 * at(1, 0)}


def draw_ops(n: int, layers: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's op per layer (layers x n indices into OPS) and sign (+-1), as torchvision draws them."""
    ops = torch.randint(len(OPS), (layers, n), generator=gen, device=gen.device)
    signs = torch.where(torch.rand((layers, n), generator=gen, device=gen.device) <= 0.5, -1.0, 1.0)
    return ops, signs


def _per_image(op: torch.Tensor, sign: torch.Tensor, values: dict, names: tuple, rest: float) -> torch.Tensor:
    """Per image: the (signed) value of its op where its op is one of ``names``, else ``rest``."""
    out = torch.full(op.shape, rest, device=op.device, dtype=sign.dtype)
    for name in names:
        v = values[name] * (sign if name in SIGNED else 1.0)
        out = torch.where(op == OP[name], v, out)
    return out


def _warp(x: torch.Tensor, op: torch.Tensor, sign: torch.Tensor, values: dict) -> torch.Tensor:
    """The geometric ops as one nearest-neighbour warp (output pixel centre (u, v) samples the input at A @ (u, v, 1),
    ``fill`` outside), as torchvision pivots and rounds them."""
    b, c, h, w = x.shape
    s = lambda name: torch.where(op == OP[name], values[name] * sign, torch.zeros_like(sign))[:, None]  # noqa: E731
    theta = s("Rotate") * math.pi / 180
    cos, sin = torch.cos(theta), torch.sin(theta)  # exactly 1 and 0 for the images not rotated
    v, u = torch.meshgrid(torch.arange(h, device=x.device) + 0.5, torch.arange(w, device=x.device) + 0.5,
                          indexing="ij")
    u, v = u.reshape(1, -1), v.reshape(1, -1)
    col = cos * u + (s("ShearX") - sin) * v + (1 - cos) * w / 2 + sin * h / 2 - s("TranslateX").trunc()
    row = (sin + s("ShearY")) * u + cos * v + (1 - cos) * h / 2 - sin * w / 2 - s("TranslateY").trunc()
    ix, iy = torch.round(col - 0.5).long(), torch.round(row - 0.5).long()
    inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
    idx = (iy.clamp(0, h - 1) * w + ix.clamp(0, w - 1))[:, None, :].expand(b, c, h * w)
    out = x.reshape(b, c, h * w).gather(2, idx)
    return torch.where(inside[:, None, :], out, values["fill"].view(1, c, 1)).view(b, c, h, w)


def _blend(x: torch.Tensor, op: torch.Tensor, sign: torch.Tensor, values: dict) -> torch.Tensor:
    """Brightness, colour, contrast, sharpness: f x + (1 - f) degenerate, f = 1 + value (1: unchanged),
    in torchvision's float32 arithmetic (f and 1 - f rounded from float64, sharpness as x + (1 - f)(d - x))."""
    value = _per_image(op, sign.double(), values, ("Brightness", "Color", "Contrast", "Sharpness"), 0.0)
    f, one_minus_f = (1 + value).float().view(-1, 1, 1, 1), (-value).float().view(-1, 1, 1, 1)
    xf = x.float()
    gray = xf[:, 0:1].mul(0.2989).add_(xf[:, 1:2], alpha=0.587).add_(xf[:, 2:3], alpha=0.114).floor_()
    blurred = xf.clone()  # torchvision's [[1 1 1] [1 5 1] [1 1 1]] / 13 smoothing inside the border
    h, w = x.shape[-2:]
    window = sum(xf[..., i:h - 2 + i, j:w - 2 + j] for i in range(3) for j in range(3))
    blurred[..., 1:-1, 1:-1] = ((window + 4 * xf[..., 1:-1, 1:-1]) / 13).round()  # integer sums: exact
    pick = lambda name: (op == OP[name]).view(-1, 1, 1, 1)  # noqa: E731
    degenerate = torch.where(pick("Color"), gray, torch.zeros_like(xf))
    degenerate = torch.where(pick("Contrast"), gray.mean(dim=(-3, -2, -1), keepdim=True), degenerate)
    out = torch.where(pick("Sharpness"), torch.addcmul(xf, blurred - xf, one_minus_f),
                      torch.addcmul(xf * f, degenerate, one_minus_f))
    return out.clamp_(0, 255).to(torch.uint8)


def _levels(x: torch.Tensor, op: torch.Tensor, sign: torch.Tensor, values: dict) -> torch.Tensor:
    """Posterize (keep the top bits), solarize (invert above a threshold), autocontrast, equalize."""
    bits = _per_image(op, torch.ones_like(op, dtype=torch.float), values, ("Posterize",), 8.0).long()
    mask = (((1 << bits) - 1) << (8 - bits)).to(torch.uint8).view(-1, 1, 1, 1)
    x = x & mask
    threshold = _per_image(op, torch.ones_like(op, dtype=torch.float), values, ("Solarize",), 256.0)
    x = torch.where(x >= threshold.view(-1, 1, 1, 1), 255 - x, x)
    x = torch.where((op == OP["AutoContrast"]).view(-1, 1, 1, 1), TF.autocontrast(x), x)
    return torch.where((op == OP["Equalize"]).view(-1, 1, 1, 1), TF.equalize(x), x)


STAGES = ((("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate"), _warp),
          (("Brightness", "Color", "Contrast", "Sharpness"), _blend),
          (("Posterize", "Solarize", "AutoContrast", "Equalize"), _levels))


def rand_augment(x: torch.Tensor, ops: torch.Tensor, signs: torch.Tensor, values: dict) -> torch.Tensor:
    """RandAugment on a uint8 batch with ops drawn per image; each stage runs on the whole batch on a GPU (no host
    sync), on a CPU on the images that chose it alone (a third of the work or less)."""
    for op, sign in zip(ops, signs):
        for names, stage in STAGES:
            if x.device.type != "cpu":
                x = stage(x, op, sign, values)
                continue
            idx = torch.isin(op, torch.tensor([OP[n] for n in names])).nonzero().squeeze(1)
            if len(idx):
                x = x.index_copy(0, idx, stage(x[idx], op[idx], sign[idx], values))
    return x


def mix(x: torch.Tensor, y: torch.Tensor, num_classes: int, rng: np.random.Generator, mixup: float,
        cutmix: float, prob: float = 1.0, switch_prob: float = 0.5, smoothing: float = 0.0):
    """timm's batch-mode Mixup/CutMix: (mixed images, soft targets summing to 1 per image)."""
    off = smoothing / num_classes
    one_hot = torch.full((len(y), num_classes), off, device=x.device).scatter_(1, y[:, None], 1 - smoothing + off)
    lam = 1.0
    if (mixup > 0 or cutmix > 0) and rng.random() < prob:
        use_cutmix = cutmix > 0 and (mixup <= 0 or rng.random() < switch_prob)
        lam = float(rng.beta(cutmix, cutmix) if use_cutmix else rng.beta(mixup, mixup))
        if use_cutmix:  # one box for the batch (timm's rand_bbox), lambda corrected to the box's area
            h, w = x.shape[-2:]
            cut_h, cut_w = int(h * math.sqrt(1 - lam)), int(w * math.sqrt(1 - lam))
            cy, cx = int(rng.integers(0, h)), int(rng.integers(0, w))
            y0, y1 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, h)
            x0, x1 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, w)
            x = x.clone()
            x[..., y0:y1, x0:x1] = x.flip(0)[..., y0:y1, x0:x1]
            lam = 1 - (y1 - y0) * (x1 - x0) / (h * w)
        else:
            x = x * lam + x.flip(0) * (1 - lam)
    return x, one_hot * lam + one_hot.flip(0) * (1 - lam)


class FastAugment:
    """One run's batch augmentation on the device (``data.pipeline=fastpath``): a uint8 batch and its labels to
    (normalised images, targets), soft targets when Mixup/CutMix is on (``mixes``)."""

    def __init__(self, recipe: dict, data: dict, num_classes: int, size: int, device="cpu"):
        device = torch.device(device)
        self.num_classes = num_classes
        self.padding, self.hflip = int(data.get("crop_padding", 4)), float(recipe.get("hflip", 0.5))
        self.ra = parse_rand_augment(recipe.get("aa"))
        fill = torch.tensor([round(255 * m) for m in data["mean"]], dtype=torch.uint8, device=device)
        self.values = {**op_magnitudes(self.ra[1], size), "fill": fill} if self.ra else {}
        self.normalize = Normalize(data["mean"], data["std"], int(data["img_size"]), device)
        self.reprob, self.remode, self.recount = erasing(recipe)
        if recipe.get("mixup_mode", "batch") != "batch":
            raise ValueError(f"recipe.mixup_mode={recipe.get('mixup_mode')!r}: the fast path mixes whole "
                             f"batches only; use mixup_mode=batch or data.pipeline=tensor")
        self.mix = {k: float(recipe.get(k, d) or 0) for k, d in
                    (("mixup", 0), ("cutmix", 0), ("mixup_prob", 1), ("mixup_switch_prob", 0.5), ("smoothing", 0))}
        self.mixes = self.mix["mixup"] > 0 or self.mix["cutmix"] > 0

    def batch(self, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator, rng: np.random.Generator):
        """A uint8 batch and its labels -> (normalised augmented float batch, targets)."""
        x = random_flip(random_crop(x, self.padding, gen), self.hflip, gen)
        if self.ra is not None:
            x = rand_augment(x, *draw_ops(len(x), self.ra[0], gen), self.values)
        x = random_erase(self.normalize(x), self.reprob, gen, self.remode, self.recount)
        if not self.mixes:
            return x, y
        m = self.mix
        return mix(x, y, self.num_classes, rng, m["mixup"], m["cutmix"], m["mixup_prob"], m["mixup_switch_prob"],
                   m["smoothing"])


def fast_loader(images: torch.Tensor, labels: torch.Tensor, batch_size: int, recipe: dict, data: dict,
             num_classes: int, seed: int, rank: int = 0, world: int = 1, repeats: int = 1,
             device="cpu") -> TensorTrainLoader:
    """One run's training batches on the fast path: the tensor loader with ``FastAugment``."""
    augment = FastAugment(recipe, data, num_classes, int(images.shape[-1]), device)
    return TensorTrainLoader(images, labels, batch_size, augment, seed, rank, world, repeats, device)
