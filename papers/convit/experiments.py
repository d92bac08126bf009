"""ConViT (d'Ascoli et al., ICML 2021): which runs fill which cells of paper.yaml, at each scale.

- Table 1: every row's heads, width, parameters and FLOPs at 224 px and its speed (probe runs, seconds
  each); ``table1_speed`` puts the ConViT/DeiT speed ratio per size beside the paper's. Top-1/top-5:
  all 12 models on ImageNet at ``full`` ("+" models: lr 4e-4 at batch 512); at tiny/small the Ti pair,
  which at those scales is Table 2's pair on all the data (the cells name those runs).
- Table 2: DeiT and ConViT on a class-balanced fraction f of the training set (the first int(f * n)
  images of each class, as the official code takes them) for epochs x 1/f. The runs on all the data
  also record nonlocality per layer and head every epoch, and ConViT's gates (Figs. 4-6).
- Table 3: ablations a-g at 100 % and 10 % of the data. Rows a (ConViT) and e (DeiT) are the base pair
  itself: Table 2's runs at tiny/small, Table 1's S+ runs at full (100 %).
- Tables 5-6: test-time masking on the trained Ti pair (probe runs on its checkpoints).
- Figs. 4-6 as claims (tables ``fig4_6``, ``fig6_gates``): a probe on each f = 1 run measures the mean nonlocality of
  its attention layers at initialisation and after training, and ConViT's gates (first / last GPSA layer).
- Figure 8 (tables ``fig8_locality``, ``fig8_gpsa_layers``): ConViT on all the data with locality
  strength 0.01 / 0.1 / 1 and with 0 / 3 / 6 / 9 GPSA layers (the paper: first 100 ImageNet classes).
- Table 4 (distillation) is not run; paper.yaml says why.

Scales (protocol and every deviation from the paper: papers/convit/README.md):
- tiny:  CPU minutes. CIFAR-10 (JPEG copy) at 32 px, first 200 / 100 images per class, depth-4
         width-72 models with patch 8 (a 4x4 grid), batch 50 (every fraction makes whole batches, so
         each run takes 120 steps), 3 epochs at f = 1, 1 seed. The shallow models take the paper's
         layer counts as shares of the depth (3 GPSA layers of 4 stand for 10 of 12; Fig. 8's 0/3/6/9
         of 12 become 0/1/2/3 of 4; Table 6's k = 3/5/10 of 10 become 1/2/3 of 3). Speed at batch 1
         on one CPU thread.
- small: one GPU. The whole CIFAR-10 training set at 32 px, depth 12 and patch 4, the paper's Table 2
         structure at Ti width: ConViT with 9 heads of width 24 (width 216, 3x3 init, 10 GPSA layers)
         against DeiT with 6 heads of width 32 (width 192), the paper's head counts and its 432 / 384
         width ratio; 20 epochs at f = 1, 3 seeds; speed at batch 128.
- cpu:   the 2-core CPU, a campaign across sessions (about 30 core-hours of runs). All of CIFAR-10 (JPEG copy)
         and its 10,000 test images at 32 px; the paper's Table 2 structure shrunk to depth 6 and patch 4: ConViT
         with 9 heads of width 12 (width 108, a 3x3 convolutional init, 5 GPSA layers of 6 standing for 10 of 12)
         against DeiT with 6 heads of width 16 (width 96), the paper's head counts and its 432 / 384 width ratio.
         10 epochs at f = 1 (100 at f = 10 %), 3 seeds, two runs at a time. Chosen on a split held out of the
         training set (README, "Regime"): there DeiT gains 11.2 points from 10x the data (the data-limited regime
         Table 2 is about). Only the cells that carry the sample-efficiency and ablation claims: Table 2 at 10 %
         and 100 % with a third column, DeiT with 9 heads at width 108 (0.86M parameters, ConViT's own size: the
         control for capacity), Table 3 rows a and e pointing at Table 2's runs, its ablated rows b-d trained at
         10 % (3 seeds each), Tables 5-6 on the trained pair (k = 3/5/10 of 10 GPSA layers become 2/3/5 of 5),
         Figs. 4-6 from the f = 1 runs.
- full:  the paper's protocol: ImageNet-1k at 224 px, DeiT recipe, 300 epochs, 1 seed.
"""
from __future__ import annotations

from repro.runs import RunSpec, fill, pointer


SCALES = ("tiny", "cpu", "small", "full")
# The training claims each reduced scale is designed to resolve (tiny resolves none; full all of them).
# cpu: Table 2 at 10 % and 100 % with an equal-size DeiT, Tables 5-6 and Figs. 4-6, and Table 3's low-data
# column (rows b-d trained at 10 %, rows a and e Table 2's runs); not its frozen rows or full-data column.
RESOLVES = {
    "cpu": ("t2_convit_ahead_top1", "t2_convit_ahead_top5", "t2_gap_shrinks_top1", "t2_gap_shrinks_top5",
            "t2_convit_ahead_of_equal_size_deit", "t5_convit_robust_to_masking",
            "t6_position_masking_hurts_less", "t6_more_masked_layers_hurt_more", "fig4_sa_layers_become_local",
            "fig4_gpsa_layers_escape_locality", "fig6_late_gates_favour_content", "t3_components_help_low_data",
            "t3_gpsa_beats_deit_low_data"),
    "small": ("t2_convit_ahead_top1", "t2_convit_ahead_top5", "t2_gap_shrinks_top1",
              "t2_gap_shrinks_top5", "t2_convit_ahead_of_equal_size_deit", "t3_components_help_low_data", "t3_convit_best_full_data",
              "t3_gpsa_beats_deit_low_data", "t3_frozen_conv_init_matters", "t5_convit_robust_to_masking",
              "t6_position_masking_hurts_less", "t6_more_masked_layers_hurt_more", "fig4_sa_layers_become_local",
              "fig4_gpsa_layers_escape_locality", "fig6_late_gates_favour_content", "fig8_locality_helps",
              "fig8_gpsa_layers_help"),
}
FRACTIONS = {"f5": 0.05, "f10": 0.10, "f30": 0.30, "f50": 0.50, "f100": 1.00}
SIZES = {"ti": "tiny", "ti_plus": "tiny_plus", "s": "small", "s_plus": "small_plus", "b": "base",
         "b_plus": "base_plus"}  # Table 1 size key -> our model name suffix
PLUS_RECIPE = {"base_lr": 4.0e-4, "batch_size": 512}  # "+" models (Table 1): lr 4e-4 at batch 512
LOCALITY = {"a001": 0.01, "a01": 0.1, "a1": 1.0}       # Figure 8, left: locality strength alpha
TABLE3 = {  # row -> ConViT constructor changes (Table 3); rows convit and deit are the base pair
    "no_gating": {"gating_init": 0.0, "train_gating": False},
    "no_conv_init": {"local_init": False},
    "neither": {"gating_init": 0.0, "train_gating": False, "local_init": False},
    "frozen_conv_init": {"freeze_gpsa": True},
    "frozen_random_init": {"freeze_gpsa": True, "local_init": False},
}
TABLE3_FRACTIONS = {"top1_full": "f100", "top1_10": "f10"}
LOCALITY_PROBE = {"fn": "convit.locality", "every_epoch": True}
TOP = {"top1": "top1", "top5": "top5"}

# scale -> Table 2 pair {column prefix: (timm name, kwargs)}, its ConViT's GPSA layer count, epochs at
# f = 1, seeds, data and recipe changes, the GPSA counts of Figure 8's rows and the k of Table 6's rows
# at this depth, and the speed protocol of Table 1.
PROTOCOL = {
    "tiny": {
        "pair": {"deit": ("repro_deit_tiny_c32", {"depth": 4, "embed_dim": 72, "num_heads": 3, "patch_size": 8}),
                 "convit": ("repro_convit_tiny_c32", {"depth": 4, "gpsa_layers": 3, "embed_dim": 72,
                                                      "num_heads": 4, "patch_size": 8})},
        "gpsa_layers": 3, "epochs": 3, "seeds": 1,
        "data": {"max_per_class": 200}, "recipe": {"batch_size": 50},
        "fig8_gpsa": {"g0": 0, "g3": 1, "g6": 2, "g9": 3}, "table6_k": {"k3": 1, "k5": 2, "k10": 3},
        "speed": {"batch": 1, "steps": 3, "warmup": 1},
    },
    "cpu": {
        "pair": {"deit": ("repro_deit_tiny_c32", {"depth": 6, "embed_dim": 96, "num_heads": 6}),
                 "convit": ("repro_convit_tiny9_c32", {"depth": 6, "gpsa_layers": 5, "embed_dim": 108,
                                                       "num_heads": 9})},
        "control": {"deit9": ("repro_deit_tiny_c32", {"depth": 6, "embed_dim": 108, "num_heads": 9})},
        "gpsa_layers": 5, "epochs": 10, "seeds": 3, "data": {}, "recipe": {},
        "fractions": ("f10", "f100"), "table3_fractions": ("top1_10",),
        "table3_rows": ("no_gating", "no_conv_init", "neither"), "table1_probes": False, "figure8": False,
        "table6_k": {"k3": 2, "k5": 3, "k10": 5},
    },
    "small": {  # ConViT-S / DeiT-S structure at Ti width: 9 heads of 24 (3x3 init) vs 6 heads of 32
        "pair": {"deit": ("repro_deit_tiny_c32", {"num_heads": 6}),
                 "convit": ("repro_convit_tiny9_c32", {"embed_dim": 216})},
        "control": {"deit9": ("repro_deit_tiny_c32", {"num_heads": 9, "embed_dim": 216})},
        "gpsa_layers": 10, "epochs": 20, "seeds": 3, "data": {}, "recipe": {},
        "fig8_gpsa": {"g0": 0, "g3": 3, "g6": 6, "g9": 9}, "table6_k": {"k3": 3, "k5": 5, "k10": 10},
        "speed": {"batch": 128, "steps": 10, "warmup": 3},
    },
    "full": {
        "pair": {"deit": ("repro_deit_small", {}), "convit": ("repro_convit_small", {})},
        "gpsa_layers": 10, "epochs": 300, "seeds": 1, "data": {}, "recipe": {},
        "fig8_gpsa": {"g0": 0, "g3": 3, "g6": 6, "g9": 9}, "table6_k": {"k3": 3, "k5": 5, "k10": 10},
        "speed": {"batch": 128, "steps": 10, "warmup": 3},
        # Figure 8 trains on the first 100 ImageNet classes: an ImageFolder of links (README).
        "fig8_data": {"name": "folder", "path": "imagenet100", "num_classes": 100, "test_split": "val"},
    },
}


def _train(scale: str, table: str, row: str, columns: dict, name: str, model: str, kwargs: dict,
           seed: int, fraction: float = 1.0, data: dict | None = None, recipe: dict | None = None,
           probes: list | None = None) -> RunSpec:
    p = PROTOCOL[scale]
    config = {"model": {"name": model, "kwargs": dict(kwargs)},
              "data": {**p["data"], **(data or {}), "fraction": fraction},
              "recipe": {**p["recipe"], "epochs": p["epochs"], "scale_epochs_with_fraction": True, **(recipe or {})}}
    if probes:
        config["probes"] = probes
    return RunSpec(paper="convit", table=table, scale=scale, seed=seed, name=name,
                   cell={"row": row, "columns": columns}, config=config)


def table1_probes(scale: str) -> list[RunSpec]:
    """Heads, width, parameters, FLOPs (both conventions) at 224 px and speed of all 12 rows."""
    if not PROTOCOL[scale].get("table1_probes", True):  # scale-free numbers: measured at tiny
        return []
    specs = []
    for size, suffix in SIZES.items():
        for family in ("deit", "convit"):
            row = f"{family}_{size}"
            specs.append(RunSpec(
                paper="convit", table="table1", scale=scale, kind="probe", name=row,
                cell={"row": row, "columns": {"heads": "heads", "dim": "dim", "params": "params_no_head",
                                              "flops": "macs_no_attn", "speed": "images_per_s"}},
                config={"probe": "convit.table1_measure",
                        "args": {"model": f"repro_{family}_{suffix}", "img_size": 224,
                                 "speed": dict(PROTOCOL[scale]["speed"])}}))
    return specs


def table1_speed(probes: list[RunSpec]) -> list[RunSpec]:
    """Each size's DeiT and ConViT speed side by side (the report derives the ratio)."""
    specs = []
    for s in probes:
        family, size = s.cell["row"].split("_", 1)
        specs.append(fill(s, "table1_speed", {"row": size, "columns": {f"{family}_speed": "images_per_s"}}))
    return specs


def table2(scale: str, seeds: int) -> list[RunSpec]:
    """The pair at each fraction, plus (where the scale has one) a DeiT of ConViT's own size: the paper
    pairs ConViT-S (27M) with DeiT-S (22M), so the control tells capacity from GPSA."""
    p = PROTOCOL[scale]
    specs = []
    for row in p.get("fractions", FRACTIONS):
        fraction = FRACTIONS[row]
        for prefix, (model, kwargs) in {**p["pair"], **p.get("control", {})}.items():
            for seed in range(seeds):
                specs.append(_train(scale, "table2", row, {f"{prefix}_top1": "top1", f"{prefix}_top5": "top5"},
                                    prefix, model, kwargs, seed, fraction,
                                    probes=[LOCALITY_PROBE] if row == "f100" else None))
    return specs


def table1_accuracy(scale: str, seeds: int, t2: dict) -> list[RunSpec]:
    """Top-1/top-5: the 12 models on ImageNet (full), else the Ti pair = Table 2's pair at f = 1."""
    if scale != "full":
        return [fill(t2["f100", prefix, seed], "table1", {"row": f"{prefix}_ti", "columns": TOP})
                for prefix in PROTOCOL[scale]["pair"] for seed in range(seeds)]
    return [_train(scale, "table1", f"{family}_{size}", TOP, f"{family}_{size}", f"repro_{family}_{suffix}", {},
                   seed, recipe=PLUS_RECIPE if size.endswith("plus") else None)
            for size, suffix in SIZES.items() for family in ("deit", "convit") for seed in range(seeds)]


def table3(scale: str, seeds: int, t2: dict, t1: dict) -> list[RunSpec]:
    """Ablations a-g at 100 % and 10 %: the base pair is S+ (full) or Table 2's pair (tiny, small)."""
    if scale == "full":
        base = {"deit": ("repro_deit_small_plus", {}), "convit": ("repro_convit_small_plus", {})}
        recipe = PLUS_RECIPE
    else:
        base, recipe = PROTOCOL[scale]["pair"], None
    specs = []
    rows = PROTOCOL[scale].get("table3_rows", TABLE3)
    for column in PROTOCOL[scale].get("table3_fractions", TABLE3_FRACTIONS):
        frow = TABLE3_FRACTIONS[column]
        for seed in range(seeds):
            for prefix, (model, kwargs) in base.items():  # rows a and e: the base runs themselves
                cell = {"row": prefix, "columns": {column: "top1"}}
                if scale != "full":
                    specs.append(fill(t2[frow, prefix, seed], "table3", cell))
                elif frow == "f100":
                    specs.append(fill(t1[f"{prefix}_s_plus", seed], "table3", cell))
                else:
                    specs.append(_train(scale, "table3", prefix, {column: "top1"}, frow, model, kwargs, seed,
                                        FRACTIONS[frow], recipe=recipe))
            model, kwargs = base["convit"]
            for row in rows:
                change = TABLE3[row]
                specs.append(_train(scale, "table3", row, {column: "top1"}, frow, model, {**kwargs, **change},
                                    seed, FRACTIONS[frow], recipe=recipe))
    return specs


def ti_pair(scale: str, seeds: int, t2: dict, t1: dict) -> dict:
    """(prefix, seed) -> the trained Ti-size run: Table 1's Ti rows (full) or Table 2's pair at f = 1."""
    if scale == "full":
        return {(prefix, seed): t1[f"{prefix}_ti", seed] for prefix in ("deit", "convit") for seed in range(seeds)}
    return {(prefix, seed): t2["f100", prefix, seed] for prefix in PROTOCOL[scale]["pair"] for seed in range(seeds)}


def table5(pair: dict) -> list[RunSpec]:
    """Position embedding masked at test time, on the trained Ti pair."""
    return [pointer(src, "table5", {"row": f"{prefix}_ti", "columns": {"top1_masked": "top1_pos_masked",
                                                                       "top1": "top1"}},
                    prefix, probe="convit.table5_run") for (prefix, _), src in pair.items()]


def table6(scale: str, pair: dict) -> list[RunSpec]:
    """Content / positional attention masked in the first k GPSA layers of the trained ConViT-Ti."""
    columns = {"mask_content": "top1_content_masked", "mask_position": "top1_position_masked",
               "mask_none": "top1_none"}
    return [pointer(src, "table6", {"row": row, "columns": columns}, "convit", probe="convit.table6_run",
                    args={"k": k, "k_paper": int(row[1:])})
            for (prefix, _), src in pair.items() if prefix == "convit"
            for row, k in PROTOCOL[scale]["table6_k"].items()]


def figures4_6(scale: str, seeds: int, t2: dict) -> list[RunSpec]:
    """Figs. 4-6 as claims: nonlocality at init and after training (both models), and ConViT's gates."""
    probe = "convit.locality_change"
    nonlocality = {"nonlocality_init": "nonlocality_init", "nonlocality_final": "nonlocality_final"}
    gates = {"gate_init": "gate_init", "gate_first": "gate_first", "gate_last": "gate_last"}
    specs = [pointer(t2["f100", prefix, seed], "fig4_6", {"row": prefix, "columns": nonlocality}, prefix, probe=probe)
             for prefix in PROTOCOL[scale]["pair"] for seed in range(seeds)]
    return specs + [fill(s, "fig6_gates", {"row": "convit", "columns": gates}) for s in specs if s.name == "convit"]


def figure8(scale: str, seeds: int, t2: dict) -> list[RunSpec]:
    """ConViT on all the data with locality strength alpha, and with n GPSA layers (Figure 8)."""
    p = PROTOCOL[scale]
    if not p.get("figure8", True):
        return []
    model, kwargs = p["pair"]["convit"]
    specs = []
    for seed in range(seeds):
        variants = [("fig8_locality", row, {"locality_strength": a}, a == 1.0) for row, a in LOCALITY.items()]
        variants += [("fig8_gpsa_layers", row, {"gpsa_layers": n}, n == p["gpsa_layers"])
                     for row, n in p["fig8_gpsa"].items()]
        for table, row, change, is_base in variants:
            if is_base and scale != "full":  # the unchanged ConViT: Table 2's run on all the data
                specs.append(fill(t2["f100", "convit", seed], table, {"row": row, "columns": TOP}))
            else:
                specs.append(_train(scale, table, row, TOP, "convit", model, {**kwargs, **change}, seed,
                                    data=p.get("fig8_data")))
    return specs


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every ConViT run at a scale (``seeds`` overrides the scale's default seed count).

    Sources come before the cells they fill or that probe them: the plan runs the first spec of a config.
    """
    seeds = seeds or PROTOCOL[scale]["seeds"]
    probes = table1_probes(scale)
    t2_specs = table2(scale, seeds)
    t2 = {(s.cell["row"], s.name, s.seed): s for s in t2_specs}
    t1_acc = table1_accuracy(scale, seeds, t2)
    t1 = {(s.cell["row"], s.seed): s for s in t1_acc if s.kind == "train"}
    pair = ti_pair(scale, seeds, t2, t1)
    return [*probes, *table1_speed(probes), *t2_specs, *t1_acc, *table3(scale, seeds, t2, t1),
            *table5(pair), *table6(scale, pair), *figures4_6(scale, seeds, t2), *figure8(scale, seeds, t2)]
