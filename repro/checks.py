"""Input checks made before any run starts: bad input is one line naming what to fix, never a traceback
after an hour of training, and never a silently wrong result (a dataset whose classes do not line up).
"""
from __future__ import annotations

import difflib
import math
import os
import re
import tempfile
from collections import Counter
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError
from omegaconf.nodes import BooleanNode

from .paths import check_creatable, not_writable
from .runs import ConfigError, dotted_items

CONF_DIR = Path(__file__).resolve().parent / "conf"
AMP = ("bf16", "fp16", "none")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
PIPELINES = ("tensor", "loader", "fastpath", "auto")
DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")

# recipe keys by the range their values must lie in (check_ranges): values a run can be trained with
POSITIVE_INT = ("epochs", "batch_size", "eval_batch_size")
NON_NEGATIVE_INT = ("eval_every", "recount")
POSITIVE = ("lr_base_batch", "opt_eps", "clip_grad")  # null clip_grad: none
# lr 0 is a frozen phase (what the init-transfer tests train: the weights stay what the transfer made); null: derived
NON_NEGATIVE = ("lr", "base_lr", "warmup_epochs", "weight_decay", "min_lr", "warmup_lr", "mixup", "cutmix",
                "cooldown_epochs")
PROBABILITY = ("smoothing", "reprob", "mixup_prob", "mixup_switch_prob", "hflip", "drop_path", "drop")
FRACTION = ("momentum", "ema_decay")


def check_finite(config: dict, prefix: str = "") -> None:
    """No number of a run's config is nan or inf (``recipe.lr=nan`` trained 10 failed runs; ``recipe.lr=inf``
    10 "diverged" ones, kept as done): one line naming the first such key, before anything is written."""
    for key, value in (config.items() if isinstance(config, dict) else enumerate(config)):
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}={value}: not a finite number; give a finite value")
        if isinstance(value, (dict, list, tuple)):
            check_finite(value, name)


def _number(key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"recipe.{key}={value!r} is not a number; give e.g. recipe.{key}=1")
    return float(value)


def check_ranges(recipe: dict) -> None:
    """Each numeric recipe value given is a number in its range (epochs >= 1, lr >= 0, clip_grad > 0,
    probabilities in [0, 1]); keys absent (or null) are not checked."""
    for key in POSITIVE_INT + NON_NEGATIVE_INT:
        if key in recipe:
            v = _number(key, recipe[key])
            low = 1 if key in POSITIVE_INT else 0
            if v != int(v) or v < low:
                raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a whole number >= {low}")
    for key in POSITIVE:
        if recipe.get(key) is not None and _number(key, recipe[key]) <= 0:
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a number > 0")
    for key in NON_NEGATIVE:
        if recipe.get(key) is not None and _number(key, recipe[key]) < 0:
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a number >= 0")
    for key in PROBABILITY + FRACTION:
        if key in recipe and not 0 <= _number(key, recipe[key]) <= 1:
            kind = "probability" if key in PROBABILITY else "number"
            raise ConfigError(f"recipe.{key}={recipe[key]!r}: give a {kind} in [0, 1]")


def check_given(overrides: dict) -> None:
    """The run values typed on the command line, as typed: smoke=true replaces some of them in every run, and
    ``recipe.epochs=inf`` under smoke passed."""
    check_finite(overrides)
    check_ranges(overrides.get("recipe") or {})
    _image_counts(overrides.get("data") or {})


def check_recipe(recipe: dict) -> None:
    """A run's whole recipe: each value in its range, and the values that depend on each other agree."""
    check_ranges(recipe)
    warmup = recipe.get("warmup_epochs") or 0
    if recipe.get("step_on_epochs", True) and warmup != int(warmup):
        raise ConfigError(f"recipe.warmup_epochs={warmup!r}: a schedule stepped per epoch warms up whole epochs;"
                          " give a whole number, or recipe.step_on_epochs=false for a fraction")
    steps = recipe.get("max_steps")
    if steps is not None and (_number("max_steps", steps) < 1 or steps != int(steps)):
        raise ConfigError(f"recipe.max_steps={steps!r}: give a whole number >= 1, or null for no limit")


def _count(key: str, value, low: int = 1, also: tuple = ()) -> None:
    """A whole number >= ``low`` (or one of ``also``): 0 must never pass for "no limit" or "one"."""
    if value in also and not isinstance(value, int):  # None, 'auto' (never 0 or False, which equal 0)
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        alternatives = "".join(f", or {a if a is not None else 'null'}" for a in also)
        raise ConfigError(f"{key}={value!r}: give a whole number >= {low}{alternatives}")


def _choice(key: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r}: use one of {', '.join(allowed)}")


def check_command(c: dict) -> None:
    """The command's own values (how runs execute), before anything is read or written."""
    _count("jobs", c.get("jobs"))
    _count("num_shards", c.get("num_shards"))
    r = c["runtime"]
    _count("runtime.nproc_per_node", r.get("nproc_per_node"), also=("auto",))
    _count("runtime.threads", r.get("threads"), also=(None,))
    _count("runtime.num_workers", r.get("num_workers"), low=0, also=("auto",))
    _count("runtime.check_every", r.get("check_every"), also=("auto",))
    _count("runtime.probe_batch", r.get("probe_batch"))
    _choice("runtime.amp", r.get("amp"), AMP)
    _choice("runtime.compile_mode", r.get("compile_mode", "default"), COMPILE_MODES)
    device = r.get("device")
    if not isinstance(device, str) or not DEVICE.fullmatch(device):
        raise ConfigError(f"runtime.device={device!r}: use auto, cpu, cuda or cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"runtime.device={device}: no CUDA GPU is visible here; use runtime.device=auto or cpu")


def check_data(data: dict) -> None:
    """Image counts are positive or null (null: no limit), the pipeline is one we have, paths are given."""
    _image_counts(data)
    _choice("data.pipeline", data.get("pipeline", "auto"), PIPELINES)
    check_paths(data)


def _image_counts(data: dict) -> None:
    for key in ("max_per_class", "test_max_per_class", "test_limit"):
        _count(f"data.{key}", data.get(key), also=(None,))


def check_paths(data: dict) -> None:
    """The paths a dataset needs are given (data=folder: data.path); checked for probe runs too, which may
    read images only once the runs before them have trained."""
    if data.get("name") == "folder" and not data.get("path"):
        raise ConfigError("data=folder needs data.path=<folder holding train/ and the test split>")


def check_keys(overrides: list[str]) -> DictConfig:
    """The composed config, where every ``key=value`` names a key of it: Hydra's struct error (a listing and exit 1)
    becomes one line naming the key and the nearest valid one. Swept values are left to each job."""
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            return compose("config", overrides=overrides)
    except MissingConfigException as e:  # data=nosuch: an option of a config group that does not exist
        group, _, name = str(e.missing_cfg_file).rpartition("/")
        options = ", ".join(e.options or [])
        raise ConfigError(f"unknown {group}={name}{'; use one of ' + options if options else ''}") from None
    except ConfigCompositionException as e:
        cause = e.__cause__
        key = getattr(cause, "full_key", None)
        if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or not key:
            raise ConfigError(" ".join(str(e).split())) from None
        raise ConfigError(_unknown_key(key, cause.parent_node)) from None


def check_booleans(overrides: list[str]) -> dict[str, bool]:
    """{key: bool} for each override of a boolean key, read as OmegaConf reads one; anything else is a ConfigError:
    Hydra keeps the value as a string, and a string is truthy (``force=no`` forced)."""
    groups = [o for o in overrides if o.partition("=")[0] in {p.name for p in CONF_DIR.iterdir() if p.is_dir()}]
    composed, defaults = check_keys(overrides), check_keys(groups)  # defaults: the chosen data/recipe/scale alone
    out = {}
    for o in overrides:
        key = o.partition("=")[0].lstrip("+~")
        if not isinstance(OmegaConf.select(defaults, key), bool):
            continue
        value = OmegaConf.select(composed, key)
        try:
            out[key] = BooleanNode(value, is_optional=False)._value()
        except ValidationError:
            raise ConfigError(f"{key}={value!r} is not a boolean; give {key}=true or {key}=false") from None
    return out


def _unknown_key(key: str, parent) -> str:
    """'unknown key recipe.epoch; did you mean recipe.epochs?': the closest key under the same parent."""
    prefix = key.rpartition(".")[0]
    tree = OmegaConf.to_container(parent, resolve=False) if parent is not None else {}
    known = [path for path, _ in dotted_items(tree, prefix)]
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {near[0]}?" if near else f"no key like it{' under ' + prefix if prefix else ''}"
    return f"unknown key {key}; {hint} (to add a new key, write +{key}=...)"


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


def check_writable(folder: Path, what: str = "results folder", env: str = "REPRO_RESULTS_DIR") -> None:
    """A folder we will write (records, checkpoints, Hydra's run dir) is writable before hours of training,
    not after: one line naming it, not a traceback from the first write."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        check_creatable(folder, what, env)  # a file on its path: named
        raise not_writable(folder, f"{e.strerror or e}: fix its permissions", what, env) from None
