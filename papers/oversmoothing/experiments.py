"""Patch diversification (Gong et al. 2021): which runs fill which cells of paper.yaml, at each scale.

"Ours" is DeiT trained with ``AntiOversmoothingLoss`` (papers/oversmoothing/losses.py) through the
engine's ``objective`` hook: CE + any of the cosine, patch-contrastive and patch-mixing terms, weight 1
each, the mixing term on a patch-grid CutMix of the (already Mixup/CutMix-ed) batch. Every trained
model is probed at the end for Figure 2's layer-wise CosSim and attention std (probes.py).

Scales (protocol and every deviation: papers/oversmoothing/README.md):
- tiny:  CPU minutes for the whole paper (a smoke test: the models barely train). CIFAR-10 (JPEG copy)
         at 32 px, the first 150 / 50 images per class, 3 epochs (4 for the "400 epochs" rows),
         width-48 3-head DeiT of depth 12 and 24 with patch 8 (a 4x4 grid), 1 seed. Every row of
         Figure 2 and Tables 1, 3, 4 and 5, and Table 2's model sizes.
- cpu:   the paper's regime on the 2-core CPU, a campaign of several hours (issue #28). All of CIFAR-10
         (JPEG copy) and its 10,000 test images at 32 px, width-48 3-head DeiT with patch 4 (an 8x8 grid)
         at depth 12 (Table 1) and 24 (Figure 2), drop path 0.1 on every row, 10 epochs of the cpu
         recipe (chosen on a held-out split by the rule in the README: DeiT clears 60 % top-1),
         3 seeds: DeiT and ours at depth 24; at depth 12 DeiT, the release's losses (mixing, contrastive,
         both: no cosine rows, to stay within ~6 hours) and a control, DeiT on the mixing loss's
         patch-grid CutMix with CE alone.
- small: one GPU. The whole CIFAR-10 training set at 32 px, DeiT-Ti width (192, 3 heads) with patch 4 at
         depth 12 and 24, the small scale's 20-epoch recipe (27 for the "400 epochs" rows), 3 seeds, the
         CutMix control and the arXiv paper's absolute cosine loss (row cos_abs).
- full:  ImageNet-1k at 224 px, DeiT-B (DeiT-S for Table 2's S rows). DeiT rows: the DeiT recipe (drop
         path 0.1, repeated augmentation, 300 epochs). Rows with the losses: the release's recipe (drop
         path 0.5, no repeated augmentation, 300 epochs); refined rows with talking heads: 400 epochs,
         drop path 0.75.
"""
from __future__ import annotations

from repro.runs import RunSpec

PAPER = "oversmoothing"
SCALES = ("tiny", "cpu", "small", "full")
# The training claims each reduced scale is designed to resolve (tiny: none; full: all of them).
RESOLVES = {"cpu": ("f2_losses_lower_last_layer_cossim", "f2_losses_raise_last_layer_attention_std",
                    "f2_losses_raise_accuracy_depth24", "t1_losses_lower_last_layer_cossim",
                    "t1_every_loss_raises_accuracy", "t1_contrastive_mixing_best",
                    "t1_mixing_loss_beats_its_augmentation")}
OBJECTIVE = "oversmoothing.anti_oversmoothing_loss"
FIGURE2_PROBE = {"fn": "oversmoothing.oversmoothing"}

# loss combination -> (cos, contrastive, mixing): Table 1's rows in the poster's order
LOSSES = {
    "none": (False, False, False),
    "cos": (True, False, False),
    "mixing": (False, False, True),
    "contrastive": (False, True, False),
    "cos_mixing": (True, False, True),
    "cos_contrastive": (True, True, False),
    "contrastive_mixing": (False, True, True),
    "cos_abs": (True, False, False),
    "patch_cutmix": (False, False, False),
}
COS_FORM = {"cos_abs": "absolute"}  # the poster's signed cosine loss elsewhere (losses.py)
# rows that train on the mixing loss's patch-grid CutMix without its loss: the augmentation's control
CUTMIX_ONLY = ("patch_cutmix",)
POSTER_ROWS = tuple(r for r in LOSSES if r not in COS_FORM and r not in CUTMIX_ONLY)

# scale -> model family, recipes, data, seeds, what runs there
PROTOCOL = {
    "tiny": {
        "widths": {"base": ("repro_deit_tiny_c32", {"embed_dim": 48, "num_heads": 3, "patch_size": 8})},
        "data": {"max_per_class": 150, "test_max_per_class": 50},
        "deit": {"epochs": 3}, "release": {"epochs": 3}, "refined": {"epochs": 4}, "ours": "deit",
        "seeds": 1, "tables": ("figure2", "table1", "table2", "table3", "table4", "table5"),
        "table1_rows": POSTER_ROWS,
        "table4_rows": ("standard", "no_repeated_aug", "no_random_erasing", "no_mixup", "no_drop_path", "depth24"),
    },
    "cpu": {
        # chosen on a held-out split (README, "Regime"): patch 4 (an 8x8 grid), one drop path for every row,
        # 10 epochs; the release's drop path 0.5 left DeiT-24 below the 60 % floor there (58.8 %)
        "widths": {"base": ("repro_deit_tiny_c32", {"embed_dim": 48, "num_heads": 3, "patch_size": 4})},
        "data": {},
        "deit": {"epochs": 10, "drop_path": 0.1}, "release": {"epochs": 10, "drop_path": 0.1},
        "refined": {"epochs": 10, "drop_path": 0.1}, "ours": "deit",
        # within ~6 hours of the 2-core machine: the release's losses (no cosine rows) and the control at
        # depth 12, DeiT vs ours at depth 24
        "seeds": 3, "tables": ("figure2", "table1"), "figure2_control": False,
        "table1_rows": ("none", "mixing", "contrastive", "contrastive_mixing") + CUTMIX_ONLY,
    },
    "small": {
        "widths": {"base": ("repro_deit_tiny_c32", {})},
        "data": {},
        "deit": {"epochs": 20}, "release": {"epochs": 20}, "refined": {"epochs": 27}, "ours": "deit",
        "seeds": 3, "tables": ("figure2", "table1", "table2", "table3", "table4", "table5"), "figure2_control": True,
        "table1_rows": POSTER_ROWS + CUTMIX_ONLY + tuple(COS_FORM),
        "table4_rows": ("standard", "no_repeated_aug", "no_random_erasing", "no_mixup", "no_drop_path", "depth24"),
    },
    "full": {
        "widths": {"base": ("repro_deit_base", {}), "small": ("repro_deit_small", {})},
        "data": {},
        # DeiT's recipe as is (repro/conf/recipe/deit.yaml); the release's and the refined one
        "deit": {},
        "release": {"drop_path": 0.5, "repeated_aug": False},
        "refined": {"drop_path": 0.75, "repeated_aug": False, "epochs": 400},
        "ours": "refined",  # recipe of "Ours" in Table 2 and Table 4 (the paper's best model)
        "seeds": 1, "tables": ("figure2", "table1", "table2", "table3", "table4", "table5"),
        "table1_rows": POSTER_ROWS,
        "table4_rows": ("standard", "no_repeated_aug", "no_random_erasing", "no_mixup", "no_drop_path", "depth24"),
    },
}

# Table 4: the DeiT trick each row removes (the rest of the row's recipe unchanged)
TRICKS = {
    "standard": {},
    "no_repeated_aug": {"repeated_aug": False},
    "no_random_erasing": {"reprob": 0.0},
    "no_mixup": {"mixup": 0.0},          # DeiT's ablation: Mixup off, CutMix kept
    "no_drop_path": {"drop_path": 0.0},
    "depth24": {},
}


def model(scale: str, depth: int = 12, talking_heads: bool = False, width: str = "base") -> dict:
    name, kwargs = PROTOCOL[scale]["widths"][width]
    kwargs = {**kwargs, "depth": depth}
    if talking_heads:
        kwargs["attn"] = "talking_heads"
    return {"name": name, "kwargs": kwargs}


def objective(losses: str) -> dict | None:
    cos, contrastive, mixing = LOSSES[losses]
    control = losses in CUTMIX_ONLY
    if not (cos or contrastive or mixing or control):
        return None
    extra = {"cos_form": COS_FORM[losses]} if losses in COS_FORM else {}
    if control:
        extra["patch_cutmix"] = True
    return {"fn": OBJECTIVE, "cos": cos, "contrastive": contrastive, "mixing": mixing, **extra}


def recipe(scale: str, kind: str, **changes) -> dict:
    """The scale's 'deit' | 'release' | 'refined' | 'ours' recipe with ``changes``.

    At tiny and small all are the scale's own recipe (only epochs differ for Table 3's and 5's
    longer-training rows), and 'ours' is 'deit': there Table 4 compares DeiT and ours at equal epochs,
    isolating the losses and talking heads (the paper's "Ours" also trains 400 epochs, not 300).
    """
    if kind == "ours":
        kind = PROTOCOL[scale]["ours"]
    return {**PROTOCOL[scale][kind], **changes}


def train_spec(scale: str, table: str, row: str, columns: dict, seed: int, name: str, *, model_cfg: dict,
               recipe_cfg: dict, losses: str = "none") -> RunSpec:
    config = {"model": model_cfg, "data": dict(PROTOCOL[scale]["data"]), "recipe": recipe_cfg,
              "probes": [dict(FIGURE2_PROBE)]}
    obj = objective(losses)
    if obj is not None:
        config["objective"] = obj
    return RunSpec(paper=PAPER, table=table, cell={"row": row, "columns": columns}, scale=scale, seed=seed,
                   name=name, config=config)


def accuracy_and_cossim(top1: str, cossim: str | None = None) -> dict:
    return {top1: "top1", **({cossim: "cossim_last"} if cossim else {})}


# ------------------------------------------------------------------ tables

def figure2(scale: str, seeds: int) -> list[RunSpec]:
    """Figure 2: a 24-layer DeiT at random init, trained normally, and trained with the losses.

    "Ours" here is the same model and recipe plus the contrastive and mixing losses, without talking
    heads, so the curves isolate the losses (talking heads change the attention statistics themselves).
    """
    cols = {"top1": "top1", "cossim_last": "cossim_last", "attn_std_last": "attn_std_last",
            "cossim_norm": "cossim_norm"}
    init = RunSpec(paper=PAPER, table="figure2", scale=scale, kind="probe", name="random_init",
                   cell={"row": "random_init", "columns": cols},
                   config={"probe": "oversmoothing.random_init", "model": model(scale, 24),
                           "data": dict(PROTOCOL[scale]["data"])})
    rows = [("deit", "deit24", "none"), ("ours", "ours24", "contrastive_mixing")]  # row, run name, losses
    if PROTOCOL[scale].get("figure2_control"):
        rows.append(("deit_cutmix", "deit24_cutmix", "patch_cutmix"))
    return [init] + [train_spec(scale, "figure2", row, cols, seed, name, model_cfg=model(scale, 24),
                                recipe_cfg=recipe(scale, "deit"), losses=losses)
                     for seed in range(seeds) for row, name, losses in rows]


def table1(scale: str, seeds: int) -> list[RunSpec]:
    """Table 1: the seven combinations of the three losses on DeiT-B12 (no talking heads, 300 epochs)."""
    cols = {"top1": "top1", "cossim_last": "cossim_last", "cossim_norm": "cossim_norm"}
    return [train_spec(scale, "table1", row, cols, seed, row, model_cfg=model(scale, 12),
                       recipe_cfg=recipe(scale, "deit" if row == "none" else "release"), losses=row)
            for row in PROTOCOL[scale]["table1_rows"] for seed in range(seeds)]


def table2(scale: str, seeds: int) -> list[RunSpec]:
    """Table 2, our rows: model sizes of the paper's models at every scale (a probe); top-1 at full."""
    rows = {  # row -> (width, depth, ours)
        "deit_s12": ("small", 12, False), "deit_s12_ours": ("small", 12, True),
        "deit_s24": ("small", 24, False), "deit_s24_ours": ("small", 24, True),
        "deit_b12": ("base", 12, False), "deit_b12_ours": ("base", 12, True),
        "deit_b24": ("base", 24, False), "deit_b24_ours": ("base", 24, True),
    }
    width_names = {"small": "repro_deit_small", "base": "repro_deit_base"}
    specs = []
    for row, (width, depth, ours) in rows.items():
        size = {"name": width_names[width], "kwargs": {"depth": depth, "img_size": 224, "num_classes": 1000,
                                                       **({"attn": "talking_heads"} if ours else {})}}
        specs.append(RunSpec(paper=PAPER, table="table2", scale=scale, kind="probe", name=f"{row}_size",
                             cell={"row": row, "columns": {"params": "params"}},
                             config={"probe": "oversmoothing.count_params", "model": size}))
        if scale != "full":
            continue
        for seed in range(seeds):
            specs.append(train_spec(scale, "table2", row, {"top1": "top1"}, seed, row,
                                    model_cfg=model(scale, depth, talking_heads=ours, width=width),
                                    recipe_cfg=recipe(scale, "ours" if ours else "deit"),
                                    losses="contrastive_mixing" if ours else "none"))
    return specs


def table3(scale: str, seeds: int) -> list[RunSpec]:
    """Table 3: DeiT-B ablation at 224 px: losses, talking heads, 400 epochs, depth 24."""
    rows = {  # row -> (depth, losses, talking heads, recipe)
        "s224_d12_deit": (12, "none", False, "deit"),
        "s224_d12_mixing": (12, "mixing", False, "release"),
        "s224_d12_contrastive": (12, "contrastive", False, "release"),
        "s224_d12_both": (12, "contrastive_mixing", False, "release"),
        "s224_d12_both_th": (12, "contrastive_mixing", True, "release"),
        "s224_d12_both_th_400": (12, "contrastive_mixing", True, "refined"),
        "s224_d24_both_th_400": (24, "contrastive_mixing", True, "refined"),
    }
    cols = accuracy_and_cossim("top1", "cossim_last")
    return [train_spec(scale, "table3", row, cols, seed, row, model_cfg=model(scale, depth, th),
                       recipe_cfg=recipe(scale, kind), losses=losses)
            for row, (depth, losses, th, kind) in rows.items() for seed in range(seeds)]


def table4(scale: str, seeds: int) -> list[RunSpec]:
    """Table 4: DeiT vs ours when one of DeiT's training tricks is removed, and at depth 24.

    Ours is the refined model (talking heads, both losses, at full the refined recipe). Every row keeps
    every DeiT trick but its own, repeated augmentation included (which the tiny and small recipes
    otherwise leave off, and the release trains without), so that each row removes exactly one trick
    from both columns.
    """
    specs = []
    for row in PROTOCOL[scale]["table4_rows"]:
        depth = 24 if row == "depth24" else 12
        tricks = {"repeated_aug": True, **TRICKS[row]}
        for seed in range(seeds):
            specs.append(train_spec(scale, "table4", row, accuracy_and_cossim("deit", "deit_cossim"), seed,
                                    f"deit_{row}", model_cfg=model(scale, depth),
                                    recipe_cfg=recipe(scale, "deit", **tricks)))
            ours = recipe(scale, "ours", **tricks)
            specs.append(train_spec(scale, "table4", row, accuracy_and_cossim("ours", "ours_cossim"), seed,
                                    f"ours_{row}", model_cfg=model(scale, depth, talking_heads=True),
                                    recipe_cfg=ours, losses="contrastive_mixing"))
    return specs


def table5(scale: str, seeds: int) -> list[RunSpec]:
    """Table 5: 24-layer DeiT-B with talking heads and patch mixing: drop path 0.1 / 0.5 / 0.75, with and
    without the contrastive loss (drop path rising linearly with depth, as in DeiT)."""
    specs = []
    for drop_path in (0.1, 0.5, 0.75):
        row = f"dp{int(round(drop_path * 100)):03d}"
        for losses in ("mixing", "contrastive_mixing"):
            for seed in range(seeds):
                specs.append(train_spec(scale, "table5", row, accuracy_and_cossim(losses, f"{losses}_cossim"),
                                        seed, f"{losses}_{row}", model_cfg=model(scale, 24, talking_heads=True),
                                        recipe_cfg=recipe(scale, "refined", drop_path=drop_path), losses=losses))
    return specs


TABLES = {"figure2": figure2, "table1": table1, "table2": table2, "table3": table3, "table4": table4,
          "table5": table5}


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every run at a scale (``seeds`` overrides the scale's default seed count)."""
    p = PROTOCOL[scale]
    return [s for t in p["tables"] for s in TABLES[t](scale, seeds or p["seeds"])]
