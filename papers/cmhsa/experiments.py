"""CMHSA (Li et al. 2021, "Can Vision Transformers Perform Convolution?"): which runs fill which cells
of paper.yaml, at each scale (protocol and every choice the paper leaves open: papers/cmhsa/README.md).

- theorem1, lemma2, head_bounds: probe runs (papers/cmhsa/theorems.py), CPU seconds, the same at
  every scale. Each theorem1 row has two: the transfer with the construction's heads (transfer_row)
  and the fewest heads that reproduce the convolution, found by trying H = 1, 2, ... (fewest_heads_row).
- table1: the eight rows. Baselines and single-phase rows train 2E epochs; a two-phase row trains the
  convolution phase E epochs (its record fills table two_phase), then the attention phase E epochs
  starting from it (``config["init"]``: the engine loads the conv run's final model and calls
  ``models.conv_to_mhsa``). CMHSA-3's attention phase is Figure 2's conv-init run with
  warm-up (the same training: evaluation never touches its random state), which fills both cells. The time
  column is a timing probe per row (papers/cmhsa/timing.py).
- figure2: the attention phase for E epochs from the CMHSA-3 conv phase or from random weights, with
  and without warm-up, evaluated every epoch.

Scales:
- tiny:  CIFAR-10 (JPEG copy) at 32 px, first 100 / 50 images per class, patch 8 (192-dim tokens,
         4x4 grid), CMHSA 1 layer, baselines 2 layers, E = 3; CPU minutes.
- cpu:   the 2-core CPU, spanning sessions. CIFAR-10 (JPEG copy) at 32 px, the first 20 % of each
         class (1,000 per class, the low-data regime) and all 10,000 test images; CMHSA with the paper's
         6 layers at patch 4 (48-dim tokens, 8x8 grid, 9 heads of 48), E = 20 (the rule of a held-out
         split: README "Regime"), 1 warm-up epoch, 3 seeds, two runs at a time. Table 1's CMHSA rows
         (the baselines' DeiT augmentation is off at cpu, so their rows would not be DeiT's), the switch
         table (CMHSA-3 with the exact transfer), Figure 2, and the time probes.
- small: CIFAR-10 at 32 px, the first 20 % of each class, patch 8, CMHSA 6 layers (9 heads of 192, FFN 768),
         baselines 12 layers at the same width, batch 128, 5 warm-up epochs, E = 20 (the held-out pilot's
         rule: README "Regime"); one GPU.
- full:  Appendix B: CIFAR-100 at 224 px, patch 16, CMHSA 6 layers, 9 heads of size 768, FFN 3072,
         GAP head, E = 200 (baselines 400), AdamW, batch 128, 5 warm-up epochs, cosine, DeiT recipe.
"""
from __future__ import annotations

from repro.models.transfer import bias_scale
from repro.runs import RunSpec, fill

PAPER = "cmhsa"
SCALES = ("tiny", "cpu", "small", "full")
# The training claims each reduced scale is designed to resolve (tiny: none; full: all of them).
RESOLVES = {"cpu": ("t1_two_phase_beats_single_phase", "f2_random_init_needs_warmup", "f2_conv_init_needs_no_warmup",
                    "f2_conv_init_losses_similar", "f2_conv_init_no_warmup_final_top1")}
TRANSFER = "models.conv_to_mhsa"
SUMMARY = ["cmhsa.run_summary"]
# ViT-base as a baseline: the DeiT-base architecture without DeiT's augmentation and regularisation
VIT_RECIPE = {"mixup": 0.0, "cutmix": 0.0, "aa": None, "reprob": 0.0, "smoothing": 0.0, "drop_path": 0.0,
              "repeated_aug": False}

PROTOCOL = {
    "tiny": {
        "suffix": "_c32", "cmhsa": {"depth": 1},
        "base": {"patch_size": 8, "depth": 2, "embed_dim": 192, "num_heads": 12},
        "small": {"patch_size": 8, "depth": 2, "embed_dim": 96, "num_heads": 6},
        "epochs": 3, "seeds": 1, "data": {"max_per_class": 100, "test_max_per_class": 50},
        "recipe": {}, "timing": {"rounds": 5, "steps": 1},
    },
    "cpu": {  # the paper's 6 layers at patch 4 (48-dim tokens, an 8x8 grid); E from the held-out pilot (README)
        "suffix": "_c32", "cmhsa": {"depth": 6, "patch_size": 4},
        "base": {"patch_size": 4, "depth": 12, "embed_dim": 48, "num_heads": 12},
        "small": {"patch_size": 4, "depth": 12, "embed_dim": 24, "num_heads": 6},
        "epochs": 20, "seeds": 3, "data": {"fraction": 0.2},
        "recipe": {"warmup_epochs": 1}, "timing": {"rounds": 5, "steps": 5},
        "table1_rows": ("cmhsa3_1st", "cmhsa5_1st", "cmhsa_2nd", "cmhsa3", "cmhsa5"),
    },
    "small": {  # E = 20 on 20 % of each class: the first candidate its held-out pilot put in the regime (README)
        "suffix": "_c32", "cmhsa": {},
        "base": {"patch_size": 8, "depth": 12, "embed_dim": 192, "num_heads": 12},
        "small": {"patch_size": 8, "depth": 12, "embed_dim": 96, "num_heads": 6},
        "epochs": 20, "seeds": 3, "data": {"fraction": 0.2},
        "recipe": {"batch_size": 128, "warmup_epochs": 5}, "timing": {"rounds": 5, "steps": 10},
    },
    "full": {
        "suffix": "", "cmhsa": {}, "base": {}, "small": {},
        "epochs": 200, "seeds": 1, "data": {"name": "cifar100", "img_size": 224, "num_classes": 100},
        "recipe": {"batch_size": 128, "warmup_epochs": 5}, "timing": {"rounds": 5, "steps": 10},
    },
}

THEOREM1 = [(k, p, c) for k in (3, 5) for p in (4, 8, 16) for c in (1, 3)] + [(3, 1, 3), (5, 1, 1), (5, 2, 1), (7, 2, 1)]
LEMMA2_SCALES = (0.5, 1, 2, 4, 8, 16, 30)
HEADS_COLUMNS = ("exact_heads", "err_exact_heads", "err_one_fewer")  # theorem1 columns of fewest_heads_row
HEAD_BOUNDS = [("patch", 3, 3, 1), ("patch", 5, 5, 1), ("patch", 3, 8, 1), ("pixel", 3, 1, 3), ("pixel", 5, 1, 5)]
TABLE1_COLUMNS = ("top1", "top5", "depth", "heads", "dim", "ffn", "params", "train_s", "epoch_s")
# what the transfer kept at the switch (the engine measures it in every run started from another run)
SWITCH_COLUMNS = {"switch_top1_conv": "switch_top1_source", "switch_top1_attn": "switch_top1_start",
                  "switch_logit_gap": "switch_logit_gap"}
EXACT_SCALE = 30.0  # Theorem 1's construction: W_Q = W_K = 0 and a bias scale past float32 resolution


def _grid(scale: str) -> tuple[int, int]:
    """(image size, patch size) of the CMHSA models at a scale."""
    return (224, 16) if scale == "full" else (32, PROTOCOL[scale]["cmhsa"].get("patch_size", 8))


def _model(name: str, kwargs: dict) -> dict:
    return {"name": name, "kwargs": dict(kwargs)}


def _cell(row: str, columns=TABLE1_COLUMNS, **extra: str) -> dict:
    return {"row": row, "columns": {**{c: c for c in columns}, **extra}}


def _train(scale: str, table: str, row: str, seed: int, name: str, model: dict, epochs: int, cell: dict,
           recipe: dict | None = None, init: RunSpec | None = None, init_kwargs: dict | None = None) -> RunSpec:
    p = PROTOCOL[scale]
    config = {"model": model, "data": dict(p["data"]), "probes": list(SUMMARY),
              "recipe": {**p["recipe"], **(recipe or {}), "epochs": epochs, "scale_epochs_with_fraction": False}}
    if init is not None:
        config["init"] = {"from": init.as_source(), "fn": TRANSFER, "kwargs": dict(init_kwargs or {})}
    return RunSpec(paper=PAPER, table=table, cell=cell, scale=scale, seed=seed, name=name, config=config)


def transfer_kwargs(scale: str, transfer: str = "trainable") -> dict:
    """How the trained convolutions become attention (README: exactness vs trainability).

    'trainable' (the default for training): the target's random W_Q, W_K kept and c for 90 % of each
    head's attention on its offset; 'exact': Theorem 1's construction (W_Q = W_K = 0, c = 30)."""
    if transfer == "exact":
        return {"scale": EXACT_SCALE, "keep_qk": False, "bias_form": "one_hot"}
    if transfer != "trainable":
        raise ValueError(f"transfer={transfer!r}; choose 'trainable' or 'exact'")
    img, patch = _grid(scale)
    return {"scale": bias_scale(img, patch), "keep_qk": True, "bias_form": "one_hot"}


def conv_model(scale: str, kernel: int) -> dict:
    p = PROTOCOL[scale]
    return _model(f"repro_cmhsa_{kernel}_conv{p['suffix']}", p["cmhsa"])


def attn_model(scale: str) -> dict:
    p = PROTOCOL[scale]
    return _model(f"repro_cmhsa_attn{p['suffix']}", p["cmhsa"])


def phase1(scale: str, kernel: int, seed: int) -> RunSpec:
    """The convolution phase of the two-phase CMHSA-K row (E epochs); its record fills table two_phase."""
    return _train(scale, "two_phase", f"cmhsa{kernel}", seed, "phase1", conv_model(scale, kernel),
                  PROTOCOL[scale]["epochs"], _cell(f"cmhsa{kernel}", ("top1", "top5", "train_s", "epoch_s")))


def phase2(scale: str, row: str, seed: int, first: RunSpec, transfer: str, table: str = "table1",
           columns: dict | None = None) -> RunSpec:
    """The attention phase (E epochs) from ``first``'s conv model, transferred the ``transfer`` way."""
    cell = {"row": row, "columns": dict(columns)} if columns else _cell(row)
    return _train(scale, table, row, seed, "phase2" if transfer == "trainable" else "phase2_exact",
                  attn_model(scale), PROTOCOL[scale]["epochs"], cell, init=first,
                  init_kwargs=transfer_kwargs(scale, transfer))


def switch(scale: str, seeds: int, t1: list[RunSpec]) -> list[RunSpec]:
    """What each transfer keeps at the switch and where the attention phase ends: Table 1's two-phase runs
    (trainable transfer: cells their records fill) and CMHSA-3 with the exact transfer (run here)."""
    cols = {**SWITCH_COLUMNS, "top1": "top1"}
    specs = [fill(s, "switch", {"row": s.cell["row"], "columns": dict(cols)})
             for s in t1 if s.kind == "train" and s.table == "table1" and "init" in s.config]
    return specs + [phase2(scale, "cmhsa3_exact", seed, phase1(scale, 3, seed), "exact", "switch", cols)
                    for seed in range(seeds)]


def _table1_rows(scale: str) -> tuple[str, ...] | None:
    """Table 1's rows a scale runs (None: all of them)."""
    return PROTOCOL[scale].get("table1_rows")


def table1(scale: str, seeds: int) -> list[RunSpec]:
    p, e = PROTOCOL[scale], PROTOCOL[scale]["epochs"]
    rows = _table1_rows(scale)
    specs = []
    for seed in range(seeds):
        single = [("vit_base", "vit_base", _model("repro_vit_base", p["base"]), VIT_RECIPE),
                  ("deit_small", "deit_small", _model("repro_deit_small", p["small"]), None),
                  ("deit_base", "deit_base", _model("repro_deit_base", p["base"]), None),
                  ("cmhsa3_1st", "conv3", conv_model(scale, 3), None),
                  ("cmhsa5_1st", "conv5", conv_model(scale, 5), None),
                  ("cmhsa_2nd", "attn", attn_model(scale), None)]
        for row, name, model, recipe in single:
            if rows is None or row in rows:
                specs.append(_train(scale, "table1", row, seed, name, model, 2 * e, _cell(row), recipe))
        for kernel in (3, 5):
            if rows is None or f"cmhsa{kernel}" in rows:
                first = phase1(scale, kernel, seed)
                if kernel == 3:  # its attention phase is Figure 2's conv-init warm-up run, which fills this cell
                    warm = figure2_run(scale, "conv_init", seed, "warm", first)
                    specs += [first, warm, fill(warm, "table1", _cell("cmhsa3"))]
                else:
                    specs += [first, phase2(scale, f"cmhsa{kernel}", seed, first, "trainable")]
    return specs + timing(scale)


def timing(scale: str) -> list[RunSpec]:
    """One timing probe per Table 1 row: the row's phases against ViT-base, interleaved (timing.py)."""
    p, e = PROTOCOL[scale], PROTOCOL[scale]["epochs"]
    vit = {"model": _model("repro_vit_base", p["base"]), "recipe": VIT_RECIPE, "epochs": 2 * e}
    rows = {"vit_base": [vit],
            "deit_small": [{"model": _model("repro_deit_small", p["small"]), "epochs": 2 * e}],
            "deit_base": [{"model": _model("repro_deit_base", p["base"]), "epochs": 2 * e}],
            "cmhsa3_1st": [{"model": conv_model(scale, 3), "epochs": 2 * e}],
            "cmhsa5_1st": [{"model": conv_model(scale, 5), "epochs": 2 * e}],
            "cmhsa_2nd": [{"model": attn_model(scale), "epochs": 2 * e}],
            "cmhsa3": [{"model": conv_model(scale, 3), "epochs": e}, {"model": attn_model(scale), "epochs": e}],
            "cmhsa5": [{"model": conv_model(scale, 5), "epochs": e}, {"model": attn_model(scale), "epochs": e}]}
    wanted = _table1_rows(scale)
    return [RunSpec(paper=PAPER, table="table1", cell={"row": row, "columns": {"time": "time_ratio"}}, scale=scale,
                    kind="probe", name="time",
                    config={"probe": "cmhsa.time_ratio", "data": dict(p["data"]),
                            "recipe": dict(p["recipe"]), "timing": {**p["timing"], "phases": phases, "reference": vit}})
            for row, phases in rows.items() if wanted is None or row in wanted]


def figure2_run(scale: str, row: str, seed: int, warm: str, init: RunSpec | None) -> RunSpec:
    """One attention phase of Figure 2, evaluated every epoch (the per-epoch validation loss is the figure)."""
    cell = {"row": row, "columns": {f"early_loss_{warm}": "eval_loss_early", f"top1_{warm}": "top1",
                                    f"loss_{warm}": "eval_loss"}}
    recipe = {**({} if warm == "warm" else {"warmup_epochs": 0}), "eval_every": 1}
    return _train(scale, "figure2", row, seed, warm, attn_model(scale), PROTOCOL[scale]["epochs"], cell, recipe,
                  init, transfer_kwargs(scale) if init is not None else None)


def figure2(scale: str, seeds: int) -> list[RunSpec]:
    """Attention phase from the CMHSA-3 conv phase or from random weights, with and without warm-up."""
    return [figure2_run(scale, row, seed, warm, phase1(scale, 3, seed) if row == "conv_init" else None)
            for seed in range(seeds) for row in ("conv_init", "random_init") for warm in ("warm", "nowarm")]


def _probe(scale: str, table: str, row: str, columns: dict, fn: str, theorem: dict, name: str = "") -> RunSpec:
    return RunSpec(paper=PAPER, table=table, cell={"row": row, "columns": columns}, scale=scale, kind="probe",
                   name=name or table, config={"probe": f"cmhsa.{fn}", "theorem": theorem})


def theorems(scale: str) -> list[RunSpec]:
    """Theorem 1 / Corollaries 3-4, Lemma 2 and Theorems 5-6 as probe runs (one per table row)."""
    specs = []
    cols = ("heads", "interior_max_err", "border_max_err", "border_mean_err", "vs_predicted_max_err",
            "attention_vs_predicted_max")
    for k, p, c in THEOREM1:
        specs.append(_probe(scale, "theorem1", f"k{k}_p{p}_c{c}", {x: x for x in cols}, "transfer_row",
                            {"kernel": k, "patch": p, "channels": c}))
        # Corollaries 3-4 measured: fewest heads that reproduce the conv (not the construction's count)
        specs.append(_probe(scale, "theorem1", f"k{k}_p{p}_c{c}", {x: x for x in HEADS_COLUMNS}, "fewest_heads_row",
                            {"kernel": k, "patch": p, "channels": c}, name="heads"))
    for c in LEMMA2_SCALES:
        for form, prefix in (("one_hot", "onehot"), ("quadratic", "quad")):
            columns = {f"{prefix}_mass": "off_target_mass", f"{prefix}_excess": "excess_over_closed_form",
                       f"{prefix}_err": "interior_max_err"}
            specs.append(_probe(scale, "lemma2", f"c{c:g}".replace(".", "p"), columns, "lemma2_row", {"scale": c, "bias_form": form},
                                name=prefix))
    cols = ("heads_needed", "positional_rank", "one_hot_below", "one_hot_at", "positional_below", "positional_at",
            "lstsq_below", "lstsq_at")
    for setting, k, p, c in HEAD_BOUNDS:
        specs.append(_probe(scale, "head_bounds", f"{setting}_k{k}_p{p}", {x: x for x in cols}, "head_bound_row",
                            {"kernel": k, "patch": p, "channels": c}))
    return specs


def runs(scale: str, seeds: int | None = None) -> list[RunSpec]:
    """Every CMHSA run at a scale (``seeds`` overrides the scale's default seed count)."""
    n = seeds or PROTOCOL[scale]["seeds"]
    t1 = table1(scale, n)
    specs = theorems(scale) + t1 + switch(scale, n, t1) + figure2(scale, n)
    return list({s.run_id: s for s in specs}.values())  # Table 1 already asked for Figure 2's conv-init warm run
