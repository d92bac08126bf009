"""Where datasets live and how a split is listed: torchvision CIFAR, ImageFolder trees, synthetic. A split is an
*ordered* list of images (files sorted per class, or CIFAR's order), so "the first k images of each class"
means one thing everywhere; a missing dataset is one line: where we looked, the layout expected, how to get it."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from ..checks import check_paths
from ..paths import env_folder
from .subsets import class_balanced_indices
from .synthetic import SyntheticImages

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class DataError(FileNotFoundError):
    """A dataset that is not where the config says (one line: path, expected layout, remedy)."""


class EmptyClassError(DataError):
    """A class folder without images: the run would train a head with a class it never sees. Unlike a missing
    dataset, no synthetic stand-in replaces it (smoke mode): the dataset is there, and wrong."""


def data_root() -> Path:
    """``REPRO_DATA_DIR`` or ``./data``."""
    return env_folder("REPRO_DATA_DIR", "data")


def read_image(path: Path) -> Image.Image:
    """One image file as RGB, the one decoder of both pipelines (so both see the same pixels); an unreadable, cut or
    oversized (decompression bomb) file is a DataError naming it."""
    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:  # UnidentifiedImageError: OSError
        raise DataError(f"cannot decode image {path}: {' '.join(str(e).split())}; replace or delete the file") from None


# name -> (folder under the data root, train split, test split, how to get it)
FOLDERS = {
    "cifar10_jpeg": ("cifar10-jpeg", "train", "test",
                     "it is our offline JPEG (q75) copy of CIFAR-10, the data of the committed tiny and cpu "
                     "records, and is not downloadable: unpack its archive there (tar -xJf cifar10-jpeg.tar.xz "
                     "-C <data root>), or train on torchvision's CIFAR-10 with data=cifar10 data.download=true "
                     "(another dataset: new run ids, its own records)"),
    "imagenet": ("imagenet", "train", "val",
                 "extract ILSVRC-2012 train/ and val/ (val sorted into class folders) there"),
}
TORCHVISION = {"cifar10": ("CIFAR10", "cifar-10-batches-py", 10), "cifar100": ("CIFAR100", "cifar-100-python", 100)}
DATASETS = ("synthetic", "folder", *FOLDERS, *TORCHVISION)


@dataclass
class Split:
    """One ordered split. Exactly one of files / array / synthetic holds the pixels."""
    name: str
    labels: list[int]
    classes: list[str]
    files: list[Path] | None = None
    array: np.ndarray | None = None          # uint8 N,H,W,3 (torchvision CIFAR)
    synthetic: SyntheticImages | None = None
    index: list[int] = field(default_factory=list)  # rows of array / synthetic that we keep

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, keep: Sequence[int]) -> "Split":
        return replace(self, labels=[self.labels[i] for i in keep],
                       files=None if self.files is None else [self.files[i] for i in keep],
                       index=[self.index[i] for i in keep] if self.index else list(keep))

    def pil(self, i: int) -> Image.Image:
        """Image i as RGB PIL (the loader path)."""
        if self.files is not None:
            return read_image(self.files[i])
        if self.array is not None:
            return Image.fromarray(self.array[self.index[i]])
        return Image.fromarray(self.synthetic.image(self.index[i]))


def _missing(name: str, where: Path, layout: str, how: str) -> DataError:
    root = data_root()
    if not root.exists():
        return DataError(f"data root {root.resolve()} does not exist (REPRO_DATA_DIR="
                         f"{os.environ.get('REPRO_DATA_DIR', 'unset, default ./data')}); {name} goes there as "
                         f"{layout}: {how}; or point REPRO_DATA_DIR at a folder that has it")
    return DataError(f"dataset {name} not found at {where.resolve()}; expected {layout}; {how}")


def _folder_split(name: str, split_dir: Path) -> Split:
    """ImageFolder listing: classes = sorted sub-folders, files sorted within each (ConViT's order)."""
    classes = sorted(d.name for d in split_dir.iterdir() if d.is_dir())
    files, labels = [], []
    for c, cls in enumerate(classes):
        for dirpath, _, fnames in sorted(os.walk(split_dir / cls, followlinks=True)):
            for f in sorted(fnames):
                if f.lower().endswith(IMG_EXTENSIONS):
                    files.append(Path(dirpath) / f)
                    labels.append(c)
    if not files:
        raise DataError(f"no images in {split_dir.resolve()}; expected <class>/<image> files with "
                        f"extensions {', '.join(IMG_EXTENSIONS)}")
    present = set(labels)
    empty = [cls for c, cls in enumerate(classes) if c not in present]
    if empty:
        raise EmptyClassError(f"empty class folder {(split_dir / empty[0]).resolve()} ({len(empty)} of "
                              f"{len(classes)} classes in {split_dir.name}/ have no image); add its images, or "
                              f"remove the class from every split")
    return Split(name=name, labels=labels, classes=classes, files=files)


def _synthetic(cfg: dict, split: str) -> Split:
    per_class = cfg.get("max_per_class" if split == "train" else "test_max_per_class") or (
        50 if split == "train" else 10)
    images = SyntheticImages(num_classes=int(cfg.get("num_classes") or 10), img_size=int(cfg["img_size"]),
                             per_class=int(per_class), split_seed=0 if split == "train" else 1)
    return Split(name=f"synthetic/{split}", labels=images.labels(), synthetic=images,
                 classes=[f"class{c}" for c in range(images.num_classes)], index=list(range(len(images))))


def _torchvision_split(name: str, cfg: dict, split: str) -> Split:
    """CIFAR-10/100 through torchvision, fetched when ``data.download`` is set; offline, a missing or
    failed download is one line saying which archive to fetch and where to unpack it."""
    import torchvision

    cls_name, folder, _ = TORCHVISION[name]
    cls, root = getattr(torchvision.datasets, cls_name), data_root()
    by_hand = f"download {cls.url} and unpack it into {root.resolve()} (giving {folder}/)"
    if not (root / folder).is_dir() and not cfg.get("download"):
        raise _missing(name, root / folder, f"<data root>/{folder}/ (torchvision's {cls_name} files)",
                       f"add data.download=true to fetch it with torchvision, or {by_hand}")
    try:
        ds = cls(str(root), train=split == "train", download=bool(cfg.get("download")))
    except OSError as e:  # no network (URLError), refused, disk full
        reason = " ".join(str(getattr(e, "reason", None) or e.strerror or e).split())
        raise DataError(f"cannot download {name} into {root.resolve()} ({reason}); offline? {by_hand}, "
                        f"or point REPRO_DATA_DIR at a folder holding {folder}/") from None
    except RuntimeError as e:  # corrupt or partial files
        raise DataError(f"{name} at {root.resolve()}: {e}; delete {root / folder} and download again") from None
    return Split(name=f"{name}/{split}", labels=[int(t) for t in ds.targets], classes=list(ds.classes),
                 array=ds.data, index=list(range(len(ds.targets))))


def _locate(cfg: dict, split: str) -> Split:
    name, root = cfg["name"], data_root()
    if name == "synthetic":
        return _synthetic(cfg, split)
    if name in TORCHVISION:
        return _torchvision_split(name, cfg, split)
    if name == "folder":
        check_paths(cfg)
        base, train_split, test_split = Path(cfg["path"]), "train", cfg.get("test_split") or "val"
        if not base.is_absolute():
            base = root / base
        how = "point data.path at an ImageFolder tree"
    elif name in FOLDERS:
        folder, train_split, test_split, how = FOLDERS[name]
        base = root / folder
    else:
        raise DataError(f"unknown dataset data.name={name!r}; use one of {', '.join(DATASETS)}")
    split_name = train_split if split == "train" else test_split
    layout = f"<data root>/{base.name}/{{{train_split},{test_split}}}/<class>/<image>"
    if not (base / split_name).is_dir():
        raise _missing(name, base / split_name, layout, how)
    return _folder_split(f"{name}/{split}", base / split_name)


def open_split(cfg: dict, split: str) -> Split:
    """The split named by a data config, its first ``max_per_class`` images per class (all fractions share one decoded
    copy); with ``data.allow_synthetic`` (smoke), a missing dataset is synthetic images of its shape, named so."""
    try:
        s = _synthetic(cfg, split) if cfg.get("synthetic") else _locate(cfg, split)  # synthetic: dry runs' pixels
    except DataError as e:
        if not cfg.get("allow_synthetic") or isinstance(e, EmptyClassError):
            raise
        s = _synthetic(cfg, split)
        s.name = f"synthetic/{split} (stand-in: {str(e).split(';')[0]})"
    keep = class_balanced_indices(s.labels, 1.0, cfg.get("max_per_class" if split == "train" else "test_max_per_class"))
    if split != "train" and cfg.get("test_limit"):
        keep = keep[:int(cfg["test_limit"])]
    return s.subset(keep)


def fraction_indices(split: Split, fraction: float) -> list[int]:
    """Rows of a training split that form its class-balanced fraction; error if none are left."""
    keep = class_balanced_indices(split.labels, fraction)
    if not keep:
        raise DataError(f"{split.name}: data.fraction={fraction} of {len(split)} images keeps none; "
                        f"raise data.fraction or data.max_per_class")
    return keep
