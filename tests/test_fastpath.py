"""The fast path (repro/data/fastpath.py): each op does what it says, per image, from the run's own streams."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchvision.transforms.v2 import functional as TF

from repro.data.fastpath import OP, OPS, draw_ops, fast_loader, mix, op_magnitudes, rand_augment
from repro.data.tensor_loader import TensorTrainLoader, epoch_draws

DATA = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "img_size": 32, "crop_padding": 4}
RECIPE = {"aa": "rand-m9-mstd0.5-inc1", "hflip": 0.5, "reprob": 0.25, "mixup": 0.8, "cutmix": 1.0, "smoothing": 0.1}
PLAIN = {"aa": None, "hflip": 0.0, "reprob": 0.0, "mixup": 0.0, "cutmix": 0.0}
FILL = [124, 116, 104]


def photos(n: int = 16, seed: int = 0) -> torch.Tensor:
    """Smooth random uint8 images (neighbouring pixels alike, as in photographs)."""
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return TF.gaussian_blur(x, 5)


def loader(recipe: dict, n: int = 32, seed: int = 0, **kw) -> TensorTrainLoader:
    images = photos(n)
    return fast_loader(images, torch.arange(n) % 10, 8, recipe, {**DATA, **kw}, 10, seed)


def torchvision_op(img: torch.Tensor, name: str, value: float) -> torch.Tensor:
    """What torchvision's v2.RandAugment does for op ``name`` at (signed) ``value`` (its _apply_image_... )."""
    shear = math.degrees(math.atan(value)) if name.startswith("Shear") else 0.0
    geometric = {"ShearX": dict(translate=[0, 0], shear=[shear, 0.0], center=[0, 0]),
                 "ShearY": dict(translate=[0, 0], shear=[0.0, shear], center=[0, 0]),
                 "TranslateX": dict(translate=[int(value), 0], shear=[0.0, 0.0]),
                 "TranslateY": dict(translate=[0, int(value)], shear=[0.0, 0.0])}
    if name in geometric:
        return TF.affine(img, angle=0.0, scale=1.0, fill=FILL, **geometric[name])
    return {"Identity": lambda: img, "Rotate": lambda: TF.rotate(img, angle=value, fill=FILL),
            "Brightness": lambda: TF.adjust_brightness(img, 1 + value),
            "Color": lambda: TF.adjust_saturation(img, 1 + value),
            "Contrast": lambda: TF.adjust_contrast(img, 1 + value),
            "Sharpness": lambda: TF.adjust_sharpness(img, 1 + value),
            "Posterize": lambda: TF.posterize(img, int(value)), "Solarize": lambda: TF.solarize(img, value),
            "AutoContrast": lambda: TF.autocontrast(img), "Equalize": lambda: TF.equalize(img)}[name]()


@pytest.mark.parametrize("name", OPS)
def test_each_rand_augment_op_is_torchvisions_per_image(name):
    """The measured deviation from torchvision's per-image call (exact on the development CPU; the bound
    leaves room for float rounding elsewhere): <= 0.5 % of values, by one grey level at most."""
    x, values = photos(), {**op_magnitudes(9, 32), "fill": torch.tensor(FILL, dtype=torch.uint8)}
    for sign in (1.0, -1.0):
        ours = rand_augment(x, torch.full((1, 16), OP[name]), torch.full((1, 16), sign), values)
        value = values.get(name, 0.0) * (1 if name in ("Posterize", "Solarize") else sign)
        ref = torch.stack([torchvision_op(im, name, value) for im in x])
        diff = (ours.int() - ref.int()).abs()
        assert ours.dtype == torch.uint8 and diff.max() <= 1 and (diff > 0).float().mean() <= 0.005, (name, sign)
    if name != "Identity":  # and the op does something at m9
        assert not torch.equal(ours, x)


def test_ops_are_drawn_per_image():
    ops, signs = draw_ops(512, 2, torch.Generator().manual_seed(0))
    assert ops.shape == signs.shape == (2, 512) and set(signs.unique().tolist()) == {-1.0, 1.0}
    counts = torch.bincount(ops.flatten(), minlength=len(OPS)).float()
    assert counts.min() > 0.5 * counts.mean()  # every op drawn, about equally often
    # one image repeated: its copies come out different (per-group draws would make them equal)
    fp = fast_loader(photos(1).expand(16, 3, 32, 32), torch.zeros(16, dtype=torch.long), 16,
                  {**PLAIN, "aa": "rand-m9"}, {**DATA, "crop_padding": 0}, 10, seed=0)
    x, _ = next(fp.epoch(0))
    distinct = {tuple(im.flatten().tolist()[:: 97]) for im in x}
    assert len(distinct) >= 10


def test_batches_shapes_dtypes_and_soft_targets():
    x, t = next(loader(RECIPE).epoch(0))
    assert x.shape == (8, 3, 32, 32) and x.dtype == torch.float32 and t.shape == (8, 10)
    assert torch.allclose(t.sum(1), torch.ones(8)) and t.min() >= 0
    x, y = next(loader(PLAIN).epoch(0))
    assert y.dtype == torch.long and y.shape == (8,)


def test_each_run_has_its_own_stream_and_an_epoch_replays():
    def batches(seed, epoch):
        return [(x.clone(), t.clone()) for x, t in loader(RECIPE, seed=seed).epoch(epoch)]
    a, again, other, later = batches(1, 0), batches(1, 0), batches(2, 0), batches(1, 1)
    torch.manual_seed(99)  # the global RNG plays no part
    np.random.seed(99)
    assert all(torch.equal(x, x2) and torch.equal(t, t2) for (x, t), (x2, t2) in zip(a, batches(1, 0)))
    assert all(torch.equal(x, x2) for (x, _), (x2, _) in zip(a, again))
    assert not torch.equal(a[0][0], other[0][0]) and not torch.equal(a[0][0], later[0][0])


def test_crop_and_flip():
    fp = loader({**PLAIN, "hflip": 0.5}, crop_padding=0)
    x, y = next(fp.epoch(0))
    idx = [int(i) for i in epoch_indices(fp)]
    plain = fp.augment.normalize(fp.images[idx])
    flipped = [torch.equal(x[i], plain[i].flip(-1)) for i in range(8)]
    same = [torch.equal(x[i], plain[i]) for i in range(8)]
    assert all(f or s for f, s in zip(flipped, same)) and 0 < sum(flipped) < 8  # seed 0: some of each
    fp = loader({**PLAIN}, crop_padding=4)
    x, _ = next(fp.epoch(0))
    pad = torch.nn.functional.pad(fp.images[epoch_indices(fp)], (4, 4, 4, 4))
    for i in range(8):  # a 32 px window of the zero-padded image
        assert any(torch.equal(x[i], fp.augment.normalize(pad[i:i + 1, :, dy:dy + 32, dx:dx + 32])[0])
                   for dy in range(9) for dx in range(9))


def epoch_indices(fp: TensorTrainLoader) -> torch.Tensor:
    return epoch_draws(fp, 0)[0][:fp.batch_size]


def test_random_erasing_erases_its_stated_area_share():
    """reprob 1, const fill: every image loses one box of 2-33 % of its area (mean about 17 %)."""
    fp = fast_loader(torch.full((512, 3, 32, 32), 200, dtype=torch.uint8), torch.zeros(512, dtype=torch.long), 512,
                  {**PLAIN, "reprob": 1.0, "remode": "const"}, {**DATA, "crop_padding": 0}, 10, seed=0)
    x, _ = next(fp.epoch(0))
    share = (x == 0).all(1).flatten(1).float().mean(1)
    assert share.min() >= 0.015 and share.max() <= 1 / 3 + 0.02 and abs(share.mean() - 0.177) < 0.02


def test_mixup_and_cutmix_mix_images_and_targets_alike():
    x = torch.rand(8, 3, 32, 32)
    y = torch.arange(8)
    for seed in range(6):
        xm, t = mix(x, y, 10, np.random.default_rng(seed), mixup=0.8, cutmix=0.0)
        lam = float(t[0, 0])
        assert torch.allclose(t.sum(1), torch.ones(8)) and torch.allclose(xm, lam * x + (1 - lam) * x.flip(0), atol=1e-6)
        xc, t = mix(x, y, 10, np.random.default_rng(seed), mixup=0.0, cutmix=1.0, smoothing=0.1)
        taken = (xc != x).any(1).float().mean(dim=(1, 2))  # share of pixels from the paired image
        lam = (float(t[0, 0]) - 0.01) / 0.9  # target of the own class: lam x (1 - 0.1 + 0.01) + (1 - lam) x 0.01
        assert torch.allclose(t.sum(1), torch.ones(8)) and torch.allclose(taken, torch.full((8,), 1 - lam), atol=1e-5)
