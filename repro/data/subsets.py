"""Class-balanced training subsets as ConViT's ``make_subsampled_dataset`` takes them (Table 2): for every class,
the first ``int(n * f)`` images in the split's order (sorted file names, or CIFAR's batch order)."""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence


class FractionError(ValueError):
    """A training fraction outside (0, 1]."""


def check_fraction(fraction: float) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise FractionError(f"data.fraction={fraction!r} is outside (0, 1]; give the share of each "
                            f"class's training images to keep, e.g. data.fraction=0.1")
    return float(fraction)


def class_balanced_indices(labels: Sequence[int], fraction: float = 1.0,
                           max_per_class: int | None = None) -> list[int]:
    """Indices of the first ``int(min(n_c, max_per_class) * fraction)`` items of each class c, in label then list
    order: ``int(n * f)`` as the official code floors it (0.3 of 5000 keeps 1500)."""
    fraction = check_fraction(fraction)
    if max_per_class is not None and max_per_class < 1:
        raise FractionError(f"data.max_per_class={max_per_class!r}: give a positive count or null")
    by_class: dict[int, list[int]] = defaultdict(list)
    for i, y in enumerate(labels):
        by_class[int(y)].append(i)
    keep: list[int] = []
    for c in sorted(by_class):
        items = by_class[c][:max_per_class] if max_per_class else by_class[c]
        keep.extend(items[:int(len(items) * fraction)])
    return keep
