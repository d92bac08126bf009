"""Input checks made before any run starts: bad input is one line naming what to fix, never a traceback
after an hour of training, and never a silently wrong result (a dataset whose classes do not line up).
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

from .runs import ConfigError

# recipe key -> (kind, lower bound, inclusive, upper bound): values a run can be trained with
POSITIVE_INT = ("epochs", "batch_size", "eval_batch_size")
NON_NEGATIVE_INT = ("eval_every", "recount")
POSITIVE = ("lr_base_batch",)
NON_NEGATIVE = ("base_lr", "warmup_epochs", "weight_decay", "min_lr", "warmup_lr", "mixup", "cutmix", "cooldown_epochs")
PROBABILITY = ("smoothing", "reprob", "mixup_prob", "mixup_switch_prob", "hflip", "drop_path", "drop")


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"recipe.{key}={value!r} is not a number; give e.g. recipe.{key}=1")
    return float(value)


def check_recipe(recipe: dict) -> None:
    """Every numeric recipe value is a number in its range (epochs >= 1, lr >= 0, probabilities in [0, 1])."""
    for key in POSITIVE_INT + NON_NEGATIVE_INT:
        if key in recipe:
            v = _number(key, recipe[key])
            low = 1 if key in POSITIVE_INT else 0
            if v != int(v) or v < low:
                raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a whole number >= {low}")
    for key in POSITIVE:
        if key in recipe and _number(key, recipe[key]) <= 0:
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a number > 0")
    for key in NON_NEGATIVE + (("lr",) if recipe.get("lr") is not None else ()):  # lr 0: a frozen phase
        if key in recipe and _number(key, recipe[key]) < 0:
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a number >= 0")
    for key in PROBABILITY:
        if key in recipe and not 0 <= _number(key, recipe[key]) <= 1:
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a probability in [0, 1]")
    steps = recipe.get("max_steps")
    if steps is not None and (_number("max_steps", steps) < 1 or steps != int(steps)):
        raise ConfigError(f"recipe.max_steps={steps!r}: give a whole number >= 1, or null for no limit")


def class_counts(split) -> str:
    """'cifar10_jpeg/train: 10 classes x 500 images' (or '3-5 images each'): what a run will see per class."""
    counts = Counter(split.labels)
    n = [counts[c] for c in range(len(split.classes))]
    if min(n) == max(n):
        return f"{split.name}: {len(n)} classes x {n[0]} images"
    return f"{split.name}: {len(n)} classes, {min(n)}-{max(n)} images each ({sum(n)} in all)"


def check_classes(train, test, data: dict) -> None:
    """Train and test name the same classes, as many as the config declares: a missing class folder
    would shift every label after it and train "successfully" on wrong labels."""
    if list(train.classes) != list(test.classes):
        only_train = sorted(set(train.classes) - set(test.classes))
        only_test = sorted(set(test.classes) - set(train.classes))
        raise ConfigError(f"{train.name} and {test.name} have different classes (only in train: "
                          f"{', '.join(only_train) or 'none'}; only in test: {', '.join(only_test) or 'none'}); "
                          f"restore the missing class folders")
    declared = data.get("num_classes")
    if declared and int(declared) != len(train.classes):
        raise ConfigError(f"{train.name} has {len(train.classes)} classes but data.num_classes={declared}; "
                          f"restore the missing class folders or set data.num_classes={len(train.classes)}")


def check_writable(folder: Path) -> None:
    """Records must be writable before hours of training, not after."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"results folder {folder} is not writable ({e.strerror or e}); fix its permissions "
                          f"or point REPRO_RESULTS_DIR at a writable folder") from None
