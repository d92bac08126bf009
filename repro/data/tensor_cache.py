"""Small datasets decoded once into a uint8 tensor, cached on disk under REPRO_CACHE_DIR.

Training then never decodes an image again: the tensor is indexed (on the GPU when there is one)
and augmented in batches. The cache file is named by a hash of the file list and sizes, so a
changed dataset gets a new cache instead of a stale one.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..records import atomic_write
from ..runs import cache_root
from .sources import DataError, Split

_memo: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def _read_rgb(path) -> np.ndarray:
    try:
        with Image.open(path) as im:  # PIL, as the loader path, so both pipelines see the same pixels
            return np.asarray(im.convert("RGB"))
    except (OSError, SyntaxError, ValueError) as e:  # PIL's UnidentifiedImageError is an OSError
        raise DataError(f"cannot decode image {path}: {e}; replace or delete the file") from None


def _decode_files(split: Split) -> torch.Tensor:
    images = [_read_rgb(f) for f in split.files]
    sizes = {im.shape[:2] for im in images}
    if len(sizes) > 1:
        raise DataError(f"{split.name}: images differ in size ({sorted(sizes)[:3]} ...); the tensor "
                        f"pipeline needs one size: use data.pipeline=loader")
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def _cache_file(split: Split) -> Path:
    h = hashlib.sha256()
    for f in split.files:
        h.update(f"{Path(f).resolve()}:{os.stat(f).st_size}\n".encode())
    safe = split.name.replace("/", "-")
    return cache_root() / "data" / f"{safe}-{len(split.files)}-{h.hexdigest()[:16]}.pt"


def decoded(split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 images N,3,H,W, int64 labels N) of a split, decoded at most once per machine."""
    labels = torch.tensor(split.labels, dtype=torch.long)
    if split.array is not None:
        return torch.from_numpy(split.array[split.index]).permute(0, 3, 1, 2).contiguous(), labels
    if split.synthetic is not None:
        return split.synthetic.batch(split.index), labels
    path = _cache_file(split)
    if str(path) in _memo:
        return _memo[str(path)]
    if path.exists():
        try:
            images = torch.load(path, weights_only=True)["images"]
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError/EOFError/UnpicklingError on a cut file
            raise DataError(f"data cache {path} is unreadable ({type(e).__name__}); delete it to rebuild it "
                            f"from the images: rm {path}") from None
    else:
        images = _decode_files(split)
        atomic_write(path, lambda f: torch.save({"images": images}, f))
    _memo[str(path)] = (images, labels)
    return images, labels
