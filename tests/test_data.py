"""Data: ConViT's class-balanced subsets, dataset lookup and its errors, tensor cache, both pipelines."""
import numpy as np
import pytest
import torch
from PIL import Image

from repro.data import build_data, class_balanced_indices, open_split
from repro.data import tensor_cache
from repro.data.batch_aug import BatchAugment, parse_rand_augment, random_crop
from repro.data.sources import DataError, fraction_indices
from repro.data.subsets import FractionError
from repro.data.tensor_loader import TensorTrainLoader

DATA = {"name": "cifar10_jpeg", "img_size": 32, "num_classes": 3, "fraction": 1.0, "mean": [0.5] * 3,
        "std": [0.25] * 3, "pipeline": "auto", "aug_group": 4}
RECIPE = {"batch_size": 4, "aa": "rand-m9-mstd0.5-inc1", "reprob": 0.25, "remode": "pixel", "hflip": 0.5,
          "eval_batch_size": 5}


def make_tree(root, per_class=(7, 5, 6), size=32, name="cifar10-jpeg"):
    """A small ImageFolder tree; files written in shuffled order so sorting is what makes the order."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c, n in enumerate(per_class):
            d = root / name / split / f"class{c}"
            d.mkdir(parents=True)
            for i in rng.permutation(n):
                Image.fromarray(np.full((size, size, 3), 40 * c + i, np.uint8)).save(d / f"{i:04d}.jpg", quality=95)
            (d / "notes.txt").write_text("not an image")


def test_class_balanced_subset_matches_official_rule():
    labels = [0] * 100 + [1] * 10 + [2] * 7
    keep = class_balanced_indices(labels, 0.3)
    assert keep == list(range(30)) + list(range(100, 103)) + list(range(110, 112))  # int(7*0.3)=2
    # the float product is floored as in the official code: int(100 * 0.29) == 28, not 29
    assert len(class_balanced_indices([0] * 100, 0.29)) == 28
    assert len(class_balanced_indices([0] * 5000, 0.3)) == 1500
    # max_per_class first, then the fraction of what is left; interleaved labels keep list order
    assert class_balanced_indices([0, 1, 0, 1, 0, 1], 1.0, max_per_class=2) == [0, 2, 1, 3]
    assert class_balanced_indices(labels, 1.0) == list(range(len(labels)))


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, True, "half", None])
def test_fraction_outside_unit_interval_is_one_line_error(bad):
    with pytest.raises(FractionError) as e:
        class_balanced_indices([0, 1], bad)
    assert "data.fraction" in str(e.value) and "(0, 1]" in str(e.value) and "\n" not in str(e.value)


def test_folder_split_sorted_per_class_and_fraction(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    make_tree(tmp_path)
    s = open_split(DATA, "train")
    assert s.classes == ["class0", "class1", "class2"] and len(s) == 18  # notes.txt ignored
    names = [f.name for f in s.files]
    assert names[:7] == [f"{i:04d}.jpg" for i in range(7)]
    sub = s.subset(fraction_indices(s, 0.5))  # int(7*.5)=3, int(5*.5)=2, int(6*.5)=3
    assert [(f.parent.name, f.name) for f in sub.files] == (
        [("class0", f"{i:04d}.jpg") for i in range(3)] + [("class1", f"{i:04d}.jpg") for i in range(2)]
        + [("class2", f"{i:04d}.jpg") for i in range(3)])
    limited = open_split({**DATA, "max_per_class": 4, "test_max_per_class": 1}, "test")
    assert len(limited) == 3 and [f.name for f in limited.files] == ["0000.jpg"] * 3


def test_missing_data_root_and_dataset_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataError) as e:
        open_split(DATA, "train")
    msg = str(e.value)
    assert "nowhere" in msg and "does not exist" in msg and "REPRO_DATA_DIR" in msg and "\n" not in msg
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError) as e:
        open_split(DATA, "train")
    msg = str(e.value)
    assert "cifar10-jpeg" in msg and "{train,test}/<class>/<image>" in msg and "tar -xJf" in msg and "\n" not in msg
    with pytest.raises(DataError, match="data.download=true"):
        open_split({**DATA, "name": "cifar100"}, "train")
    with pytest.raises(DataError, match="unknown dataset"):
        open_split({**DATA, "name": "mnist"}, "train")
    # smoke mode: a synthetic stand-in of the same shape, and the split says so
    s = open_split({**DATA, "allow_synthetic": True, "max_per_class": 2}, "train")
    assert len(s) == 6 and s.name.startswith("synthetic/train (stand-in: dataset cifar10_jpeg not found")


def test_decoded_once_then_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    make_tree(tmp_path)
    split = open_split(DATA, "train")
    images, labels = tensor_cache.decoded(split)
    assert images.dtype == torch.uint8 and images.shape == (18, 3, 32, 32) and labels.tolist() == split.labels
    assert abs(int(images[8, 0, 5, 5]) - 41) <= 2  # class1/0001.jpg was filled with 41 (JPEG rounding)
    assert len(list((tmp_path / "cache" / "data").glob("*.pt"))) == 1
    tensor_cache._memo.clear()
    monkeypatch.setattr(tensor_cache, "_decode_files", lambda s: pytest.fail("decoded twice"))
    again, _ = tensor_cache.decoded(split)
    assert torch.equal(again, images)


def test_build_data_tensor_pipeline_and_batch_too_large(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    make_tree(tmp_path)
    data = build_data(DATA, RECIPE, seed=0)
    assert data.info["pipeline"] == "tensor" and data.info["train_images"] == 18 and data.num_classes == 3
    x, y = next(data.train.epoch(0))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (4,)
    assert sum(len(y) for _, y in data.test.batches()) == 18
    with pytest.raises(DataError, match="no full batch of 64"):
        build_data({**DATA, "fraction": 0.2}, {**RECIPE, "batch_size": 64}, seed=0)


def test_tensor_loader_epochs_replay_and_ranks_split():
    images = torch.arange(40, dtype=torch.uint8).view(40, 1, 1, 1).expand(40, 3, 8, 8).contiguous()
    labels = torch.arange(40)
    plain = {"aa": None, "reprob": 0, "hflip": 0.0}
    aug = BatchAugment(plain, {**DATA, "img_size": 8, "crop_padding": 0}, "cpu")
    ld = TensorTrainLoader(images, labels, 5, aug, seed=3)
    e0 = [y.tolist() for _, y in ld.epoch(0)]
    assert e0 == [y.tolist() for _, y in ld.epoch(0)] and e0 != [y.tolist() for _, y in ld.epoch(1)]
    assert sorted(sum(e0, [])) == list(range(40)) and ld.steps_per_epoch == 8
    r0 = TensorTrainLoader(images, labels, 4, aug, seed=3, rank=0, world=2)
    r1 = TensorTrainLoader(images, labels, 4, aug, seed=3, rank=1, world=2)
    a, b = sum([y.tolist() for _, y in r0.epoch(2)], []), sum([y.tolist() for _, y in r1.epoch(2)], [])
    assert len(a) == len(b) == 20 and not set(a) & set(b)
    rep = TensorTrainLoader(images, labels, 6, aug, seed=3, repeats=3)
    seen = sum([y.tolist() for _, y in rep.epoch(0)], [])
    assert len(set(seen)) <= 14 and all(seen.count(v) <= 3 for v in seen)


def test_batch_augment_crop_flip_normalise():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    out = random_crop(x, 2, g)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(6):  # every output is some 8x8 window of its own padded input
        assert any(torch.equal(out[i], padded[i, :, dy:dy + 8, dx:dx + 8]) for dy in range(5) for dx in range(5))
    assert parse_rand_augment("rand-m9-mstd0.5-inc1") == (2, 9) and parse_rand_augment("rand-n3-m5") == (3, 5)
    assert parse_rand_augment(None) is None
    with pytest.raises(ValueError, match="data.pipeline=loader"):
        parse_rand_augment("v0")
    aug = BatchAugment({**RECIPE, "reprob": 0.0}, {**DATA, "img_size": 8}, "cpu")
    y = aug(torch.full((4, 3, 8, 8), 128, dtype=torch.uint8), g)
    assert y.shape == (4, 3, 8, 8) and y.dtype == torch.float32 and y.abs().max() <= 2 / 0.25 + 1e-4


def test_loader_pipeline_with_resize_and_repeated_aug(monkeypatch, tmp_path):
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path))
    cfg = {**DATA, "name": "synthetic", "img_size": 24, "pipeline": "loader", "max_per_class": 8,
           "test_max_per_class": 2, "num_classes": 3}
    data = build_data(cfg, {**RECIPE, "repeated_aug": True, "train_interpolation": "bicubic"}, seed=0)
    assert data.info["pipeline"] == "loader" and type(data.train.sampler).__name__ == "RepeatAugSampler"
    x, y = next(data.train.epoch(0))
    assert x.shape == (4, 3, 24, 24) and x.dtype == torch.float32
    xs = [x for x, _ in data.test.batches()]
    assert sum(len(x) for x in xs) == 6 and xs[0].shape[1:] == (3, 24, 24)


@pytest.mark.parametrize("pipeline", ["tensor", "loader"])
def test_probe_sample_spans_every_class_of_a_class_sorted_test_set(tmp_path, monkeypatch, pipeline):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    make_tree(tmp_path)  # test set: class 0 x7, class 1 x5, class 2 x6, stored in that order
    data = build_data({**DATA, "pipeline": pipeline}, RECIPE, seed=0)
    first = next(data.test.batches())[1][:6]
    assert set(first.tolist()) == {0}  # why the probes must not take the first batch
    x, y = data.test.sample(6)
    assert x.shape == (6, 3, 32, 32) and y.tolist() == [0, 0, 0, 1, 2, 2]  # items 0, 3, 6, 9, 12, 15
    all_x = torch.cat([x for x, _ in data.test.batches()])
    assert torch.equal(x, all_x[[0, 3, 6, 9, 12, 15]])  # the same normalised images the evaluation sees
    assert len(data.test.sample(100)[1]) == 18  # never more than the set


def test_batched_random_erasing_draws_like_timms():
    import random

    from timm.data.random_erasing import RandomErasing

    from repro.data.batch_aug import random_erase

    n = 4000
    ours = random_erase(torch.zeros(n, 3, 32, 32), 0.25, torch.Generator().manual_seed(0))
    random.seed(0)
    ref = RandomErasing(0.25, mode="pixel", device="cpu")(torch.zeros(n, 3, 32, 32))
    for x in (ours, ref):  # erased pixels are N(0, 1) noise, the rest untouched
        assert (x != 0).any(1).eq((x != 0).all(1)).float().mean() > 0.999
    o_area, r_area = ((x != 0).any(1).flatten(1).float().mean(1) for x in (ours, ref))
    o_hit, r_hit = o_area > 0, r_area > 0
    assert abs(o_hit.float().mean() - 0.25) < 0.025 and abs(r_hit.float().mean() - 0.25) < 0.025
    assert abs(o_area[o_hit].mean() - r_area[r_hit].mean()) < 0.015  # mean erased share (about 0.17)
    assert o_area.max() <= 1 / 3 + 0.05 and o_area[o_hit].min() >= 0.015
    # each erased region is one axis-aligned box
    m = (ours != 0).any(1)
    for i in torch.nonzero(o_hit).flatten()[:50]:
        r, c = torch.nonzero(m[i], as_tuple=True)
        assert m[i, r.min():r.max() + 1, c.min():c.max() + 1].all()
    # the generator alone decides: the same seed gives the same batch, on any earlier global RNG state
    torch.manual_seed(123)
    again = random_erase(torch.zeros(n, 3, 32, 32), 0.25, torch.Generator().manual_seed(0))
    assert torch.equal(again, ours)
    const = random_erase(torch.ones(64, 3, 32, 32), 1.0, torch.Generator().manual_seed(1), mode="const")
    assert (const == 0).any() and set(const.unique().tolist()) == {0.0, 1.0}
