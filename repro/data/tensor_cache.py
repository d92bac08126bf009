"""Small datasets decoded once into a uint8 tensor, cached on disk under REPRO_CACHE_DIR, so training never
decodes an image again; the file is named by a hash of the images' bytes, so changed pixels get a new cache."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from ..paths import check_creatable
from ..records import atomic_write
from ..runs import cache_root
from .sources import DataError, Split, read_image

_memo: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def _decode_files(split: Split) -> torch.Tensor:
    images = [np.asarray(read_image(f)) for f in split.files]
    sizes = {im.shape[:2] for im in images}
    if len(sizes) > 1:
        raise DataError(f"{split.name}: images differ in size ({sorted(sizes)[:3]} ...); the tensor "
                        f"pipeline needs one size: use data.pipeline=loader")
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def _cache_file(split: Split) -> Path:
    h = hashlib.sha256()
    for f in split.files:
        try:
            h.update(hashlib.sha256(Path(f).read_bytes()).digest())
        except OSError as e:  # a dangling symlink, an unreadable file
            raise DataError(f"cannot read image {f}: {e.strerror or e}; replace or delete the file") from None
    safe = split.name.replace("/", "-")
    return cache_root() / "data" / f"{safe}-{len(split.files)}-{h.hexdigest()[:16]}.pt"


def _load(path: Path, count: int) -> torch.Tensor:
    """The cached images, checked to be ``count`` RGB images: a cut or foreign file is a DataError naming it."""
    try:
        images = torch.load(path, weights_only=True)["images"]
        ok = isinstance(images, torch.Tensor) and images.dtype == torch.uint8 and images.dim() == 4
        if not ok or images.shape[:2] != (count, 3):
            raise ValueError(f"{tuple(images.shape) if ok else type(images).__name__}, not {count} RGB images")
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError/EOFError/UnpicklingError on a cut file
        raise DataError(f"data cache {path} is unreadable ({type(e).__name__}: {' '.join(str(e).split())[:120]}); "
                        f"delete it to rebuild it from the images: rm {path}") from None
    return images


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
        images = _load(path, len(split.files))
    else:
        check_creatable(path.parent, "cache folder", "REPRO_CACHE_DIR")  # before decoding, not after
        images = _decode_files(split)
        atomic_write(path, lambda f: torch.save({"images": images}, f))
    _memo[str(path)] = (images, labels)
    return images, labels
