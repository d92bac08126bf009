"""Aug-ViT (Tang et al., NeurIPS 2021): which runs fill which cells of paper.yaml, at each scale.

- table2 (params, FLOPs of the paper's Table 2 rows): probe runs on the real DeiT-S/B and Aug-ViT-S/B at
  224 and 384 px, CPU seconds each; the same measurement at every scale.
- table2_top1 (ImageNet top-1): train runs at full only, the release's recipe.
- diversity_init: the shortcut variants (a)-(d) of a freshly initialised Aug-ViT, and Eq. S.4 -- probe
  runs on the architecture trained at this scale (several weight seeds) and on Aug-ViT-S at 224 px.
- ablations: the reduced DeiT vs Aug-ViT pair and the ablations the paper discusses (T in {1, 2, 4},
  dense vs block-circulant Theta, augmented shortcuts on MSA only), trained at this scale; each run
  measures diversity and Eq. S.4 on its trained model (``probes``).

Scales (protocol and deviations: papers/augvit/README.md):
- tiny:  CIFAR-10 (JPEG copy) at 32 px, 200 / 100 images per class, depth-6 width-96 3-head models with
         patch 8, 4 epochs without Mixup / CutMix / RandAugment / erasing, 1 seed; CPU minutes.
- cpu:   the accuracy claim in its regime (issue #28): DeiT and Aug-ViT at depth 12, width 48, patch 4 (64
         tokens) on all of CIFAR-10 (JPEG copy) and its 10,000 test images, DeiT's augmentation, 80 epochs
         (chosen by a pilot on a held-out split), 3 seeds; the ablation rows are left to small.
- small: the whole CIFAR-10 at 32 px, DeiT-Ti / Aug-ViT-Ti with patch 4 (depth 12), 20 epochs, 3 seeds.
- full:  ImageNet-1k at 224 px with the release's recipe (batch 1024, lr 1e-3, AdamW wd 0.05, EMA 0.99996,
         DeiT augmentations, 300 epochs): DeiT-S/B vs Aug-ViT-S/B for table2_top1, the ablations on
         DeiT-Ti / Aug-ViT-Ti (so no 300-epoch run repeats a table2_top1 run).
"""
from __future__ import annotations

from repro.runs import RunSpec

PAPER = "augvit"
SCALES = ("tiny", "cpu", "small", "full")
# The training claims each reduced scale is designed to resolve (tiny: none; full: all of them).
RESOLVES = {"cpu": ("no_collapse", "beyond_identity", "beyond_identity_relative", "msa_shortcuts_matter_most",
                    "mlp_shortcuts_assist", "augvit_beats_deit_reduced", "s4_bound_holds",
                    "s6_s7_bounds_hold")}
AUG = {"aug_paths": 2, "aug_mlp": True, "aug_scale": 0.75}  # the release: T = 2 on MSA and MLP, sums x 3/4
# Trained models multiply the circulant matrix densely, as the release does: the same function as the FFT
# product (tested in the core), faster at these widths. FLOPs are still counted with FFTs (probes.py).
DENSE_PRODUCT = {"aug_fft": False}
# cpu: DeiT's augmentation (RandAugment, Mixup / CutMix, erasing, drop path 0.1) on the cpu recipe's optimiser
# settings; repeated augmentation stays off (the cpu scale's choice)
CPU_RECIPE = {"epochs": 80, "aa": "rand-m9-mstd0.5-inc1", "mixup": 0.8, "cutmix": 1.0, "reprob": 0.25,
              "drop_path": 0.1}
RELEASE_RECIPE = {"epochs": 300, "batch_size": 1024, "lr": 1.0e-3, "weight_decay": 0.05,
                  "ema": True, "ema_decay": 0.99996}

# ablations row -> (model kwargs over the base architecture, dense Theta instead of block-circulant)
ABLATIONS = {
    "deit": ({}, False),
    "augvit": (AUG, False),
    "augvit_msa": ({**AUG, "aug_mlp": False}, False),
    "augvit_t1": ({**AUG, "aug_paths": 1}, False),
    "augvit_t4": ({**AUG, "aug_paths": 4}, False),
    "augvit_dense": (AUG, True),
}

# Table 2 rows whose params / FLOPs are measured: row -> (model, resolution)
COST_ROWS = {
    "deit_s": ("repro_deit_small", 224), "augvit_s": ("repro_augvit_small", 224),
    "deit_b": ("repro_deit_base", 224), "augvit_b": ("repro_augvit_base", 224),
    "deit_b384": ("repro_deit_base", 384), "augvit_b384": ("repro_augvit_base", 384),
}
TOP1_ROWS = ("deit_s", "augvit_s", "deit_b", "augvit_b")
# The 384 px rows: the 224 px B models fine-tuned at 384 px (position embedding resampled), as DeiT does
# (facebookresearch/deit README: --input-size 384 --batch-size 32 on 8 GPUs --lr 5e-6 --weight-decay 1e-8
# --epochs 30 --min-lr 5e-6; main.py scales lr by batch / 512 and keeps its 5 warm-up epochs).
FINETUNE_384 = {"deit_b384": "deit_b", "augvit_b384": "augvit_b"}
FINETUNE_RECIPE = {"epochs": 30, "batch_size": 256, "base_lr": 5.0e-6, "weight_decay": 1.0e-8, "min_lr": 5.0e-6,
                   "ema": False}
RESAMPLE = "models.at_new_resolution"

# table column -> record metric, the same in diversity_init and ablations (gains are derived by the report);
# curve_v: the per-block r(Z_l)/r(Z_0), l = 1..L, of variant v (claim no_collapse checks it at every block)
DIVERSITY_COLUMNS = {**{k: k for k in ("div_d", "div_c", "div_b", "div_a", "rel_d", "rel_b", "s4_worst", "s6_worst",
                                        "s7_worst")},
                     **{f"curve_{v}": f"ratio_{v}" for v in "dcb"}}
TRAINED_PROBES = [{"fn": "augvit.trained_analysis"}]

PROTOCOL = {
    # tiny: no Mixup / CutMix / RandAugment / erasing: with them neither model moves off chance in 4 epochs
    "tiny": {"arch": ("repro_deit_tiny_c32", {"depth": 6, "embed_dim": 96, "num_heads": 3, "patch_size": 8}),
             "data": {"max_per_class": 200},
             "recipe": {"epochs": 4, "mixup": 0.0, "cutmix": 0.0, "aa": None, "reprob": 0.0},
             "seeds": 1, "init_seeds": 5, "s224_seeds": 3, "init_images": 64, "s224_images": 8},
    # cpu (issue #28): the accuracy claim at depth 12, patch 4 (64 tokens) with DeiT's augmentation, the
    # epochs chosen by the held-out pilot (README "Regime"); DeiT and Aug-ViT only, the ablations at small
    "cpu": {"arch": ("repro_deit_tiny_c32", {"depth": 12, "embed_dim": 48, "num_heads": 3, "patch_size": 4}),
            "recipe": CPU_RECIPE, "rows": ("deit", "augvit"),
            "seeds": 3, "init_seeds": 5, "s224_seeds": 3, "init_images": 64, "s224_images": 8},
    "small": {"arch": ("repro_deit_tiny_c32", {}), "recipe": {}, "seeds": 3, "init_seeds": 5, "s224_seeds": 5,
              "init_images": 64, "s224_images": 32},
    "full": {"arch": ("repro_deit_tiny", {}), "recipe": RELEASE_RECIPE, "seeds": 1, "init_seeds": 5,
             "s224_seeds": 5, "init_images": 64, "s224_images": 64},
}


def ablation_model(scale: str, row: str) -> dict:
    """The config['model'] of one ablations row at a scale."""
    name, base_kw = PROTOCOL[scale]["arch"]
    kwargs, dense = ABLATIONS[row]
    kwargs = {**base_kw, **kwargs, **(DENSE_PRODUCT if kwargs else {})}
    if dense:
        return {"name": "augvit_dense_proj", "kwargs": {"base": name, **kwargs}}
    return {"name": name, "kwargs": kwargs}


def table2(scale: str) -> list[RunSpec]:
    return [RunSpec(PAPER, "table2", {"row": row, "columns": {"params": "params", "flops": "macs",
                                                              "flops_dense": "macs_dense"}},
                    scale, kind="probe", name=f"cost_{res}",
                    config={"probe": "augvit.cost", "probe_args": {"img_size": res},
                            "model": {"name": model, "kwargs": {"num_classes": 1000}}})
            for row, (model, res) in COST_ROWS.items()]


def table2_top1(scale: str, seeds: int) -> list[RunSpec]:
    """ImageNet top-1 (full only): S and B at 224 px, then B fine-tuned at 384 px from its 224 px run."""
    if scale != "full":
        return []
    specs = {(row, seed): RunSpec(PAPER, "table2_top1", {"row": row, "columns": {"top1": "top1"}}, scale, seed=seed,
                                  name=row, config={"model": {"name": COST_ROWS[row][0],
                                                              "kwargs": dict(DENSE_PRODUCT) if "augvit" in row else {}},
                                                    "recipe": RELEASE_RECIPE, "probes": TRAINED_PROBES})
             for row in TOP1_ROWS for seed in range(seeds)}
    out = list(specs.values())
    for row, base in FINETUNE_384.items():
        for seed in range(seeds):
            src = specs[base, seed]
            model = {"name": src.config["model"]["name"], "kwargs": {**src.config["model"]["kwargs"], "img_size": 384}}
            out.append(RunSpec(PAPER, "table2_top1", {"row": row, "columns": {"top1": "top1"}}, scale, seed=seed,
                               name=row, config={"model": model, "data": {"img_size": 384}, "recipe": FINETUNE_RECIPE,
                                                 "probes": TRAINED_PROBES,
                                                 "init": {"from": src.as_source(), "fn": RESAMPLE}}))
    return out


def diversity_init(scale: str) -> list[RunSpec]:
    p = PROTOCOL[scale]
    name, base_kw = p["arch"]
    setups = {"trained_arch": ({"name": name, "kwargs": {**base_kw, **AUG, **DENSE_PRODUCT}}, p["init_seeds"],
                               p["init_images"]),
              "augvit_s": ({"name": "repro_augvit_small", "kwargs": {"img_size": 224}}, p["s224_seeds"],
                           p["s224_images"])}
    return [RunSpec(PAPER, "diversity_init", {"row": row, "columns": dict(DIVERSITY_COLUMNS)}, scale, seed=seed,
                    kind="probe", name="init",
                    config={"probe": "augvit.diversity_at_init", "model": model,
                            "probe_args": {"seed": seed, "images": images}})
            for row, (model, seeds, images) in setups.items() for seed in range(seeds)]


def ablations(scale: str, seeds: int) -> list[RunSpec]:
    columns = {"top1": "top1", "params": "params", "macs": "macs", **DIVERSITY_COLUMNS}
    return [RunSpec(PAPER, "ablations", {"row": row, "columns": dict(columns)}, scale, seed=seed, name=row,
                    config={"model": ablation_model(scale, row), "data": dict(PROTOCOL[scale].get("data", {})),
                            "recipe": dict(PROTOCOL[scale]["recipe"]), "probes": TRAINED_PROBES})
            for row in PROTOCOL[scale].get("rows", ABLATIONS) for seed in range(seeds)]


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every Aug-ViT run at a scale (``seeds`` overrides the number of training seeds)."""
    n = seeds or PROTOCOL[scale]["seeds"]
    return table2(scale) + diversity_init(scale) + ablations(scale, n) + table2_top1(scale, n)
