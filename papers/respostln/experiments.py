"""Res-Post-LN (Kim & Kim, ACCV 2022 supplement): which runs fill which cells of paper.yaml, per scale.

Four kinds of table are measured (the main paper's compression search is listed, not run):
- table1:    each block placement (built by the registered ViT) against Table 1's equations, one probe
             per placement; plus the table as extracted (Y^2 = MSA(Y_l)) to show the reading matters.
- lemma1:    E||Y_{l+1}||^2 of a Res-Post-LN stack at init for l = 1..L, one probe per width d.
- theorem4:  ||dL~/dW^{2,L}||_F at init over a depth x width grid and its power-law fit, one probe per
             placement and seed (seeds draw independent weights and tokens; a seed pairs the placements).
- stability: a deep narrow ViT with each placement trained with and without warm-up at a learning rate
             where Post-LN without warm-up fails; a diverged run is recorded as such (engine status).
- stability_d12, stability_d24 (cpu): the same at depth 12 and 24 over a grid of learning rates, each
             with and without a warm-up of 10 % of the updates, so the claims are judged across the range
             and not at one learning rate chosen so that Post-LN fails.

Scales (protocol and deviations: papers/respostln/README.md):
- tiny:  probes on a reduced grid (L 6-48, d 64-256, 4 samples; Lemma 1 at every d up to 512, L = 48);
         training: 12 blocks of width 64 (2 heads, patch 8) on 250 CIFAR-10 images per class for 3 epochs
         at lr 1e-2, augmentation off. CPU seconds for the probes, ~2 CPU minutes for training.
- cpu:   the 2-core CPU in about 3.5 hours (a campaign that spans sessions). Probes as small. Training:
         tiny's narrow model (width 64, 2 heads, patch 8, augmentation off) at depth 12 and 24, on all of
         CIFAR-10 (JPEG q75) and its 10,000 test images for 2 epochs, at lr 1e-3, 3e-3, 5e-3 and 1e-2,
         each without warm-up and with a warm-up of 10 % of the updates, 3 seeds (12 for Post-LN without
         warm-up at depth 24 and lr 1e-2, judged as a rate), two runs at a time (153 trainings). Checked on a split held out of the training set (README, "Regime"), which added 1e-2.
- small: probes on the whole grid of the issue (L 6-48, d 64-512, 8 samples, 3 seeds): CPU minutes,
         no GPU needed. Training: 24 blocks of width 96 (3 heads, patch 4), whole CIFAR-10, 20 epochs at
         lr 5e-3 (chosen from tiny-sized trials at depth 24, not yet run), 3 seeds: one GPU.
- full:  probes as small with 32 samples and 5 seeds; training: DeiT-S placements on ImageNet-1k with
         the DeiT recipe, warm-up 5 epochs vs none.
"""
from __future__ import annotations

from repro.runs import RunSpec

PAPER = "respostln"
SCALES = ("tiny", "cpu", "small", "full")
# The training claims each reduced scale is designed to resolve (tiny: none; full: all of them).
RESOLVES = {"cpu": tuple(f"grid_d{depth}_{claim}" for depth in (12, 24) for claim in (
    "res_post_ln_trains_without_warmup", "res_post_ln_trains_where_post_ln_fails",
    "pre_ln_trains_without_warmup", "warmup_rescues_post_ln"))}
NORMS = ("pre_ln", "post_ln", "res_post_ln")
TABLE1_ROWS = {"pre_ln": "pre_ln", "res_post_ln": "res_post_ln", "res_post_ln_literal": "res_post_ln",
               "post_ln": "post_ln"}  # row (= equations checked) -> block placement built
LEMMA1_WIDTHS = (64, 128, 256, 512)

PROBES = {
    "tiny": {"lemma1": {"L": 48, "samples": 4}, "seeds": 1,
             "theorem4": {"L_values": [6, 12, 24, 48], "d_values": [64, 128, 256], "samples": 4}},
    "small": {"lemma1": {"L": 48, "samples": 8}, "seeds": 3,
              "theorem4": {"L_values": [6, 12, 24, 48], "d_values": [64, 128, 256, 512], "samples": 8}},
    "full": {"lemma1": {"L": 48, "samples": 32}, "seeds": 5,
             "theorem4": {"L_values": [6, 12, 24, 48], "d_values": [64, 128, 256, 512], "samples": 32}},
}
PROBES["cpu"] = PROBES["small"]  # the cpu scale's probes are small's

# Training without the regularisers below full: the question is whether the optimiser makes
# progress at all, and Mixup / RandAugment / erasing would only slow the runs that do.
PLAIN = {"mixup": 0.0, "cutmix": 0.0, "aa": None, "reprob": 0.0, "smoothing": 0.0, "drop_path": 0.0}
STABILITY = {
    "tiny": {"model": ("repro_deit_tiny_c32", {"depth": 12, "embed_dim": 64, "num_heads": 2, "patch_size": 8}),
             "recipe": {**PLAIN, "epochs": 3, "lr": 1.0e-2, "eval_every": 0}, "warmup_epochs": 1, "seeds": 1},
    "small": {"model": ("repro_deit_tiny_c32", {"depth": 24, "embed_dim": 96, "num_heads": 3}),
              "recipe": {**PLAIN, "epochs": 20, "lr": 5.0e-3}, "warmup_epochs": 3, "seeds": 3,
              "rate_cells": {("post_ln", "nowarm"): 12}},  # Post-LN's failure as a rate, as at cpu
    "full": {"model": ("repro_deit_small", {}), "recipe": {"epochs": 300}, "warmup_epochs": 5, "seeds": 1},
}
WARMUP = {"nowarm": False, "warm": True}  # column suffix -> with warm-up
# cpu: the grid (issue #28). Rows of table stability_d<depth> are learning rates; its columns are
# placement x warm-up. The warm-up is 10 % of the updates (0.2 of 2 epochs, stepped per update).
GRID = {
    "cpu": {"model": ("repro_deit_tiny_c32", {"embed_dim": 64, "num_heads": 2, "patch_size": 8}),
            "depths": (12, 24), "lrs": {"lr1e3": 1.0e-3, "lr3e3": 3.0e-3, "lr5e3": 5.0e-3, "lr1e2": 1.0e-2},
            "recipe": {**PLAIN, "epochs": 2}, "warmup_share": 0.1, "seeds": 3,
            # Post-LN without warm-up at depth 24 and lr 1e-2 either stays at chance or escapes it: its
            # failure is judged as a rate over many seeds (an exact binomial test), not a mean over three.
            "rate_cells": {(24, "lr1e2", "post_ln", "nowarm"): 12}},
}


def table1(scale: str) -> list[RunSpec]:
    """One deterministic check per row, the same at every scale (seeds would only repeat it)."""
    return [RunSpec(PAPER, "table1", {"row": row, "columns": {"max_abs_err": "max_abs_err", "rel_err": "rel_err"}},
                    scale, kind="probe", name=f"eq_{row}",
                    config={"probe": "respostln.table1", "model": {"name": "repro_deit_tiny_c32"},
                            "probe_args": {"placement": row, "norm": norm, "dim": 64, "heads": 2, "seed": 0}})
            for row, norm in TABLE1_ROWS.items()]


def lemma1(scale: str, seeds: int) -> list[RunSpec]:
    cols = {"sq_norm": "sq_norm", "bound": "bound", "sq_norm_first": "sq_norm_first",
            "sq_norm_last": "sq_norm_last", "ratio_max": "ratio_max", "orth_ratio_last": "orth_ratio_last"}
    return [RunSpec(PAPER, "lemma1", {"row": f"d{d}", "columns": dict(cols)}, scale, seed=seed, kind="probe",
                    name=f"lemma1_d{d}",
                    config={"probe": "respostln.lemma1",
                            "probe_args": {**PROBES[scale]["lemma1"], "d": d, "seed": seed}})
            for d in LEMMA1_WIDTHS for seed in range(seeds)]


def theorem4(scale: str, seeds: int) -> list[RunSpec]:
    cols = {"a": "a", "b": "b", "r2": "r2", "g_shallow_wide": "g_shallow_wide", "g_deep_wide": "g_deep_wide"}
    return [RunSpec(PAPER, "theorem4", {"row": norm, "columns": dict(cols)}, scale, seed=seed, kind="probe",
                    name=f"grad_{norm}",
                    config={"probe": "respostln.theorem4",
                            "probe_args": {**PROBES[scale]["theorem4"], "norm": norm, "seed": seed}})
            for norm in NORMS for seed in range(seeds)]


def stability(scale: str, seeds: int) -> list[RunSpec]:
    """Each placement with and without warm-up at the scale's learning rate; a cell judged as a failure rate
    gets its own, larger seed count (``seeds`` overrides the others only)."""
    p = STABILITY[scale]
    rate = p.get("rate_cells", {})
    name, kwargs = p["model"]
    specs = []
    for norm in NORMS:
        for suffix, warm in WARMUP.items():
            for seed in range(max(seeds, rate.get((norm, suffix), 0))):
                specs.append(RunSpec(
                    PAPER, "stability", {"row": norm, "columns": {f"top1_{suffix}": "top1", f"loss_{suffix}": "train_loss"}},
                    scale, seed=seed, name=f"{norm}_{suffix}",
                    config={"model": {"name": name, "kwargs": {**kwargs, "norm": norm}},
                            "recipe": {**p["recipe"], "warmup_epochs": p["warmup_epochs"] if warm else 0}}))
    return specs


def stability_grid(scale: str, seeds: int) -> list[RunSpec]:
    """Each placement with and without warm-up at every (depth, learning rate) of the scale's grid; a cell
    judged as a failure rate gets its own, larger seed count (``seeds`` overrides the others only)."""
    g = GRID[scale]
    name, kwargs = g["model"]
    warmup = g["warmup_share"] * g["recipe"]["epochs"]
    rate = g.get("rate_cells", {})
    return [RunSpec(PAPER, f"stability_d{depth}", {"row": row, "columns": {f"{norm}_{suffix}": "top1"}},
                    scale, seed=seed, name=f"{norm}_{suffix}",
                    config={"model": {"name": name, "kwargs": {**kwargs, "depth": depth, "norm": norm}},
                            "recipe": {**g["recipe"], "lr": lr, "warmup_epochs": warmup if warm else 0}})
            for depth in g["depths"] for row, lr in g["lrs"].items() for norm in NORMS
            for suffix, warm in WARMUP.items()
            for seed in range(max(seeds, rate.get((depth, row, norm, suffix), 0)))]


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every Res-Post-LN run at a scale (``seeds`` overrides both the probe and the training seed counts)."""
    probes = (table1(scale) + lemma1(scale, seeds or PROBES[scale]["seeds"])
              + theorem4(scale, seeds or PROBES[scale]["seeds"]))
    if scale in GRID:
        return probes + stability_grid(scale, seeds or GRID[scale]["seeds"])
    return probes + stability(scale, seeds or STABILITY[scale]["seeds"])
