"""One baseline, five ideas (issue #29): which runs fill which cells of paper.yaml, at each scale.

Every row is the scale's shared baseline (a DeiT-style ViT: depth, width, heads, patch, data, recipe,
epochs and seeds fixed per scale) with one paper's idea applied the way that paper applies it, and
nothing else changed: what each row changes is papers/crosspaper/README.md's "Rows" (``with_idea``,
``cmhsa_phases``); ``CHANGES`` names the settings each idea may change, and tests/test_crosspaper.py
checks every row's config against the baseline's. Each trained model is probed at the end for every
idea's diagnostic and its training images/s (probes.py).

Scales (papers/crosspaper/README.md):
- tiny:  CPU minutes: 100 / 50 images per class, depth 4, width 72, 9 heads, patch 4, 2 epochs, 1 seed.
- cpu:   the 2-core CPU: all of CIFAR-10 (JPEG q75) and its 10,000 test images, depth 6, width 72 (9
         heads of 8), patch 4, the cpu recipe, 3 seeds, two runs at a time; at 2 epochs (table ideas,
         about 90 minutes: a budget finding, since ConViT's training loss crosses the baseline's only
         between epochs 2 and 3) and at 10 epochs (table ideas_e10, about 5x that), where the ideas are
         not limited by the budget. One fraction (all the data): a second one would double the cost.
- small: one GPU: CIFAR-10, depth 12, width 216 (9 heads of 24), patch 4, 20 epochs, all the data and
         10 % of it (x 1/f epochs), 3 seeds.
- full:  ImageNet-1k at 224 px, depth 12, width 432 (9 heads of 48: ConViT-S's), patch 16, DeiT recipe
         300 epochs, 1 seed.
"""
from __future__ import annotations

from repro.models.transfer import bias_scale
from repro.runs import RunSpec

PAPER = "crosspaper"
SCALES = ("tiny", "cpu", "small", "full")
IDEAS = ("convit", "cmhsa", "oversmoothing", "augvit", "respostln")
ROWS = ("baseline",) + IDEAS
# Our claims (each idea vs the baseline at equal data, seeds and epochs) that a scale is designed to judge.
RESOLVES = {"cpu": tuple(f"{idea}_beats_baseline{sfx}" for idea in IDEAS for sfx in ("", "_e10")),
            "small": tuple(f"{idea}_beats_baseline{sfx}" for idea in IDEAS for sfx in ("", "_f10"))}
PROBES = [{"fn": "crosspaper.diagnostics"}]
COLUMNS = ("top1", "top5", "params", "images_per_s", "nonlocality", "cossim_last", "diversity_ratio",
           "grad_norm_init")
AUG = {"aug_paths": 2, "aug_mlp": True, "aug_scale": 0.75, "aug_fft": False}  # Aug-ViT's release, dense product
TRANSFER = "models.conv_to_mhsa"
# patch diversification's best combination (its Table 1: contrastive + mixing), as papers/oversmoothing runs it
OVERSMOOTHING = {"fn": "oversmoothing.anti_oversmoothing_loss", "cos": False, "contrastive": True, "mixing": True}
# what each row may change in the baseline's config (dotted paths; the config-diff test holds rows to it)
CHANGES = {
    "baseline": (),
    "convit": ("model.name", "model.kwargs.gpsa_layers", "model.kwargs.locality_strength", "model.kwargs.qkv_bias"),
    "cmhsa": ("model.name", "model.kwargs.embed_dim", "model.kwargs.num_heads", "model.kwargs.head_dim",
              "recipe.epochs", "init"),
    "oversmoothing": ("objective",),
    "augvit": tuple(f"model.kwargs.{k}" for k in AUG),
    "respostln": ("model.kwargs.norm",),
}

PROTOCOL = {
    "tiny": {"model": ("repro_deit_tiny_c32", {"depth": 4, "embed_dim": 72, "num_heads": 9, "patch_size": 4}),
             "cmhsa": ("repro_cmhsa_3_conv_c32", "repro_cmhsa_attn_c32"), "img_patch": (32, 4),
             "data": {"max_per_class": 100, "test_max_per_class": 50}, "recipe": {"epochs": 2},
             "fractions": {"f100": 1.0}, "seeds": 1},
    "cpu": {"model": ("repro_deit_tiny_c32", {"depth": 6, "embed_dim": 72, "num_heads": 9, "patch_size": 4}),
            "cmhsa": ("repro_cmhsa_3_conv_c32", "repro_cmhsa_attn_c32"), "img_patch": (32, 4),
            "data": {}, "recipe": {"epochs": 2}, "fractions": {"f100": 1.0}, "seeds": 3,
            "budgets": {"ideas_e10": 10}},  # the same rows at 10 epochs: a budget the ideas are not limited by
    "small": {"model": ("repro_deit_tiny_c32", {"depth": 12, "embed_dim": 216, "num_heads": 9, "patch_size": 4}),
              "cmhsa": ("repro_cmhsa_3_conv_c32", "repro_cmhsa_attn_c32"), "img_patch": (32, 4),
              "data": {}, "recipe": {"epochs": 20}, "fractions": {"f100": 1.0, "f10": 0.1}, "seeds": 3},
    "full": {"model": ("repro_deit_small", {"depth": 12, "embed_dim": 432, "num_heads": 9}),
             "cmhsa": ("repro_cmhsa_3_conv", "repro_cmhsa_attn"), "img_patch": (224, 16),
             "data": {}, "recipe": {"epochs": 300}, "fractions": {"f100": 1.0}, "seeds": 1},
}
TABLES = {"f100": "ideas", "f10": "ideas_f10"}  # fraction -> table


def baseline(scale: str, fraction: float) -> dict:
    """The shared baseline's run config at a scale and training-set fraction."""
    p = PROTOCOL[scale]
    name, kwargs = p["model"]
    data = {**p["data"], **({"fraction": fraction} if fraction < 1 else {})}
    return {"model": {"name": name, "kwargs": dict(kwargs)}, "data": data, "recipe": dict(p["recipe"]),
            "probes": [dict(x) for x in PROBES]}


def with_idea(config: dict, idea: str) -> dict:
    """``config`` (the baseline's) with one idea applied; CMHSA's attention phase (see ``cmhsa_phases``)."""
    model = config["model"]
    kwargs = dict(model["kwargs"])
    if idea == "convit":
        name = "repro_convit_small" if model["name"] == "repro_deit_small" else "repro_convit_tiny9_c32"
        kwargs.update(gpsa_layers=kwargs.get("depth", 12) - 1, locality_strength=1.0, qkv_bias=False)
        return {**config, "model": {"name": name, "kwargs": kwargs}}
    if idea == "oversmoothing":
        return {**config, "objective": OVERSMOOTHING}
    if idea == "augvit":
        return {**config, "model": {"name": model["name"], "kwargs": {**kwargs, **AUG}}}
    if idea == "respostln":
        return {**config, "model": {"name": model["name"], "kwargs": {**kwargs, "norm": "res_post_ln"}}}
    raise ValueError(f"unknown idea {idea!r}: one of {IDEAS} (cmhsa: cmhsa_phases)")


def cmhsa_phases(config: dict, scale: str) -> tuple[dict, dict]:
    """(conv phase, attention phase) configs: E/2 epochs each, the baseline's depth, patch and recipe."""
    conv, attn = PROTOCOL[scale]["cmhsa"]
    kwargs = {k: v for k, v in config["model"]["kwargs"].items() if k not in ("embed_dim", "num_heads")}
    epochs = int(config["recipe"]["epochs"])
    if epochs % 2:
        raise ValueError(f"CMHSA's two phases split the baseline's {epochs} epochs in halves: use an even count")
    half = {**config["recipe"], "epochs": epochs // 2}
    first = {**config, "model": {"name": conv, "kwargs": dict(kwargs)}, "recipe": half}
    second = {**config, "model": {"name": attn, "kwargs": dict(kwargs)}, "recipe": dict(half)}
    return first, second


def transfer(scale: str, first: RunSpec) -> dict:
    """CMHSA's trainable transfer: W_Q, W_K kept, one-hot bias putting 90 % of each head on its offset."""
    img, patch = PROTOCOL[scale]["img_patch"]
    return {"from": first.as_source(), "fn": TRANSFER,
            "kwargs": {"scale": bias_scale(img, patch), "keep_qk": True, "bias_form": "one_hot"}}


def row_specs(scale: str, table: str, row: str, seed: int, config: dict) -> list[RunSpec]:
    cell = {"row": row, "columns": {c: c for c in COLUMNS}}
    if row != "cmhsa":
        config = config if row == "baseline" else with_idea(config, row)
        return [RunSpec(PAPER, table, cell, scale, seed=seed, name=row, config=config)]
    first_cfg, second_cfg = cmhsa_phases(config, scale)
    first_cfg = {**first_cfg, "probes": []}
    first = RunSpec(PAPER, "cmhsa_phase1", {"row": table, "columns": {"top1": "top1", "top5": "top5"}}, scale,
                    seed=seed, name="cmhsa_conv", config=first_cfg)
    second = RunSpec(PAPER, table, cell, scale, seed=seed, name=row,
                     config={**second_cfg, "init": transfer(scale, first)})
    return [first, second]


def budgets(scale: str) -> list[tuple[str, float, dict]]:
    """(table, fraction, baseline config) for each fraction of the scale, then each longer budget on all the
    data (table -> epochs): the rows trained again for more epochs, everything else the same."""
    p = PROTOCOL[scale]
    out = [(TABLES[key], fraction, baseline(scale, fraction)) for key, fraction in p["fractions"].items()]
    for table, epochs in p.get("budgets", {}).items():
        config = baseline(scale, 1.0)
        out.append((table, 1.0, {**config, "recipe": {**config["recipe"], "epochs": epochs}}))
    return out


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every row at every fraction and budget of the scale, ``seeds`` (default: the scale's) seeds each."""
    return [s for table, _, config in budgets(scale) for seed in range(seeds or PROTOCOL[scale]["seeds"])
            for row in ROWS for s in row_specs(scale, table, row, seed, config)]
