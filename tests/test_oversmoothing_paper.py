"""Patch diversification: experiments.py builds valid, resolved runs at every scale that fill real cells of
paper.yaml with the paper's recipes; the Figure 2 probes measure what they say."""
import functools

import numpy as np
import pytest
import timm
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import repro.models  # noqa: F401
from papers.oversmoothing import experiments as ex
from papers.oversmoothing.losses import AntiOversmoothingLoss
from papers.oversmoothing.probes import count_params, random_init
from repro.probes.diversity import oversmoothing_metrics
from repro.functions import lookup
from repro.runs import check_unique
from repro.paper import load_paper
from repro.train.hooks import build_objective

from repro.plan.build import resolved_runs
from conftest import REPO

PAPER = load_paper(REPO / "papers" / "oversmoothing" / "paper.yaml")


@functools.cache
def resolved(scale: str, seeds=None):
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        c = OmegaConf.to_container(compose("config", overrides=[f"scale={scale}", "paper=oversmoothing"]),
                                   resolve=True)
    return resolved_runs({**c, "seeds": seeds})  # every cell's spec, a cell another run fills included


def by(specs, table, row, name=None, seed=0):
    (s,) = [s for s in specs if s.table == table and s.cell["row"] == row and s.seed == seed
            and (name is None or s.name == name)]
    return s


@pytest.mark.parametrize("scale", ["tiny", "cpu", "small", "full"])
def test_every_run_fills_measured_cells_of_paper_yaml_and_is_runnable(scale):
    assert not PAPER.problems
    specs = resolved(scale)
    check_unique(specs)
    for s in specs:
        table = PAPER.table(s.table)
        row = table.row(s.cell["row"])
        assert table.reproduced and row is not None and not row.cited, s.run_id
        for col in s.cell["columns"]:
            assert table.column(col) is not None and not table.column(col).derived, (s.run_id, col)
        if s.kind == "probe":
            lookup(s.config["probe"])
            assert timm.is_model(s.config["model"]["name"])
            continue
        assert timm.is_model(s.config["model"]["name"]), s.config["model"]
        assert [p["fn"] for p in s.config["probes"]] == ["oversmoothing.oversmoothing"]
        obj = s.config.get("objective")
        if obj:
            assert obj["fn"] == ex.OBJECTIVE
            assert any(obj[k] for k in ("cos", "contrastive", "mixing")) or obj.get("patch_cutmix")
    # every figure of a table run at this scale has a run behind each series (at cpu, behind the series of
    # the rows it runs: no cosine rows there); Figure 2 runs at every scale
    tables = {s.table for s in specs}
    assert "figure2" in tables
    for fig in (f for f in PAPER.figures if f.table in tables):
        for series in fig.series:
            if scale == "cpu" and series.row in set(ex.POSTER_ROWS) - set(ex.PROTOCOL["cpu"]["table1_rows"]):
                continue
            assert any(s.table == fig.table and (not series.row or s.cell["row"] == series.row)
                       and series.column in s.cell["columns"] for s in specs), (fig.id, series.label)


def test_tiny_is_small_cpu_work_with_depth_12_and_24():
    specs = resolved("tiny")
    train = [s for s in specs if s.kind == "train"]
    assert {s.table for s in specs} == {"figure2", "table1", "table2", "table3", "table4", "table5"}
    rows = {t: {s.cell["row"] for s in train if s.table == t} for t in ("table1", "table3", "table4", "table5")}
    # every printed row, as at full (the arXiv cosine form, cos_abs, is measured once, at cpu)
    assert rows["table1"] == set(ex.POSTER_ROWS) and rows["table4"] == set(ex.TRICKS)
    assert ex.POSTER_ROWS == tuple(r.key for r in PAPER.table("table1").rows)[:7]
    assert len(rows["table3"]) == 7 and rows["table5"] == {"dp010", "dp050", "dp075"}
    depths = sorted(s.config["model"]["kwargs"]["depth"] for s in train)
    assert set(depths) == {12, 24} and len(train) == 2 + 7 + 7 + 12 + 6 and depths.count(24) == 2 + 1 + 2 + 6
    for s in train:
        assert s.config["data"]["name"] == "cifar10_jpeg" and s.config["data"]["img_size"] == 32
        assert s.config["model"]["kwargs"]["patch_size"] == 8 and s.config["model"]["kwargs"]["embed_dim"] <= 64
        assert s.config["data"]["max_per_class"] <= 200 and s.config["recipe"]["epochs"] <= 4
    # Figure 2: the same model and recipe, ours adds the contrastive and mixing losses and nothing else
    deit, ours = by(specs, "figure2", "deit"), by(specs, "figure2", "ours")
    assert deit.config["recipe"] == ours.config["recipe"] and deit.config["model"] == ours.config["model"]
    assert ours.config["objective"] == {"fn": ex.OBJECTIVE, "cos": False, "contrastive": True, "mixing": True}
    assert "objective" not in deit.config
    # Table 4: equal epochs at tiny; ours adds talking heads and the losses
    deit, ours = by(specs, "table4", "standard", "deit_standard"), by(specs, "table4", "standard", "ours_standard")
    assert deit.config["recipe"] == ours.config["recipe"]
    assert ours.config["model"]["kwargs"]["attn"] == "talking_heads" and "attn" not in deit.config["model"]["kwargs"]


def test_cpu_is_the_papers_regime_with_a_cutmix_control():
    """Issue #28: patch 4, depth 12 and 24, the pilot's 10 epochs and drop path 0.1 on every row, one recipe
    for DeiT, ours and the control, 3 seeds; the control is the mixing loss's patch-grid CutMix with CE alone (depth 12)."""
    specs = resolved("cpu")
    train = [s for s in specs if s.kind == "train"]
    assert {s.seed for s in train} == {0, 1, 2}
    assert {s.cell["row"] for s in train if s.table == "table1"} == {"none", "mixing", "contrastive",
                                                                      "contrastive_mixing", "patch_cutmix"}
    assert {s.cell["row"] for s in train if s.table == "figure2"} == {"deit", "ours"}
    recipes = {str(sorted(s.config["recipe"].items())) for s in train}
    assert len(recipes) == 1 and (train[0].config["recipe"]["drop_path"], train[0].config["recipe"]["epochs"]) == (0.1, 10)
    for s in train:
        kw = s.config["model"]["kwargs"]
        assert (kw["patch_size"], kw["embed_dim"]) == (4, 48) and s.config["data"]["name"] == "cifar10_jpeg"
        assert not s.config["data"].get("max_per_class")  # all of the training set
        assert kw["depth"] == (24 if s.table == "figure2" else 12) and "attn" not in kw
    control = by(specs, "table1", "patch_cutmix").config
    assert control["objective"] == {"fn": ex.OBJECTIVE, "cos": False, "contrastive": False, "mixing": False,
                                    "patch_cutmix": True}
    assert by(resolved("small"), "figure2", "deit_cutmix").config["objective"] == control["objective"]
    assert control["model"] == by(specs, "table1", "none").config["model"] == by(specs, "table1", "mixing").config["model"]
    model = timm.create_model(control["model"]["name"], **control["model"]["kwargs"])
    assert build_objective(control["objective"], model, torch.nn.CrossEntropyLoss(), 10).mix_patches
    for claim in ex.RESOLVES["cpu"]:  # every claim cpu is designed for compares rows cpu runs
        (c,) = [c for c in PAPER.claims if c.id == claim]
        assert c.scales is None or "cpu" in c.scales
        runs = {s.cell["row"] for s in train if s.table == c.table}
        assert any({ref.row for ref in pair if ref.const is None} <= runs for pair in c.pairs), claim


def test_full_follows_the_papers_recipes():
    specs = resolved("full")
    assert {s.table for s in specs} == {"figure2", "table1", "table2", "table3", "table4", "table5"}
    for s in specs:
        if s.kind == "train":
            assert s.config["data"]["name"] == "imagenet" and s.config["data"]["img_size"] == 224
            assert s.config["model"]["name"] in ("repro_deit_base", "repro_deit_small")
    deit = by(specs, "table1", "none").config["recipe"]
    assert (deit["drop_path"], deit["repeated_aug"], deit["epochs"]) == (0.1, True, 300)  # DeiT's recipe
    for row in ("cos", "mixing", "contrastive", "contrastive_mixing"):  # the release's recipe
        r = by(specs, "table1", row).config["recipe"]
        assert (r["drop_path"], r["repeated_aug"], r["epochs"]) == (0.5, False, 300)
    refined = by(specs, "table3", "s224_d24_both_th_400").config
    assert (refined["recipe"]["drop_path"], refined["recipe"]["epochs"]) == (0.75, 400)
    assert refined["model"]["kwargs"] == {"depth": 24, "attn": "talking_heads"}
    for row, dp in (("dp010", 0.1), ("dp050", 0.5), ("dp075", 0.75)):
        for name in ("mixing", "contrastive_mixing"):
            s = by(specs, "table5", row, f"{name}_{row}").config
            assert s["recipe"]["drop_path"] == dp and s["recipe"]["epochs"] == 400
            assert s["objective"]["contrastive"] is (name == "contrastive_mixing") and s["objective"]["mixing"]
    # Table 2's S rows use DeiT-S; its + Ours rows the refined model
    s24 = by(specs, "table2", "deit_s24_ours", "deit_s24_ours").config
    assert s24["model"] == {"name": "repro_deit_small", "kwargs": {"depth": 24, "attn": "talking_heads"}}


@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_table4_rows_remove_exactly_one_trick_from_both_columns(scale):
    specs = resolved(scale)
    for name in ("deit", "ours"):
        base = by(specs, "table4", "standard", f"{name}_standard").config
        for row in ex.PROTOCOL[scale]["table4_rows"]:
            cfg = by(specs, "table4", row, f"{name}_{row}").config
            changed = {k for k in cfg["recipe"] if cfg["recipe"][k] != base["recipe"].get(k)}
            assert changed == set(ex.TRICKS[row]), (scale, name, row, changed)
            assert cfg["model"]["kwargs"]["depth"] == (24 if row == "depth24" else 12)
    full = resolved("full")
    assert by(full, "table4", "no_random_erasing", "deit_no_random_erasing").config["recipe"]["reprob"] == 0.0
    assert by(full, "table4", "no_mixup", "ours_no_mixup").config["recipe"]["cutmix"] == 1.0  # CutMix kept
    for name in ("deit", "ours"):  # every row but its own keeps repeated augmentation, at every scale
        assert by(specs, "table4", "standard", f"{name}_standard").config["recipe"]["repeated_aug"] is True
        assert by(specs, "table4", "no_repeated_aug", f"{name}_no_repeated_aug").config["recipe"]["repeated_aug"] is False


def test_seeds_multiply_training_runs_not_probes():
    one, three = resolved("small", 1), resolved("small", 3)
    train1 = [s for s in one if s.kind == "train"]
    assert len([s for s in three if s.kind == "train"]) == 3 * len(train1)
    assert len([s for s in three if s.kind == "probe"]) == len([s for s in one if s.kind == "probe"]) == 9


# ------------------------------------------------------------------ the objective and the probes

def test_objective_entry_builds_the_poster_losses_through_the_engine_hook():
    model = timm.create_model("repro_deit_tiny_c32", depth=2, embed_dim=24, num_heads=2, patch_size=8)
    spec = by(resolved("tiny"), "table1", "contrastive_mixing")
    obj = build_objective(spec.config["objective"], model, torch.nn.CrossEntropyLoss(), 10)
    assert isinstance(obj, AntiOversmoothingLoss) and obj.enabled == {"cos": False, "contrastive": True, "mixing": True}
    assert obj.anchor == "block0" and obj.negatives == "mean" and obj.patch_head.in_features == 24
    loss, terms = obj(torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3]))
    assert set(terms) == {"ce", "contrastive", "mixing"} and torch.isfinite(loss)


def test_oversmoothing_metrics_per_layer_and_their_known_extremes():
    torch.manual_seed(0)
    model = timm.create_model("repro_deit_tiny_c32", depth=3, embed_dim=24, num_heads=2, patch_size=8)
    m = oversmoothing_metrics(model, torch.randn(5, 3, 32, 32))
    assert len(m["cossim_layers"]) == len(m["attn_std_layers"]) == 3
    assert m["cossim_last"] == m["cossim_layers"][-1] and m["attn_std_last"] == m["attn_std_layers"][-1]
    assert all(-1 <= c <= 1 for c in m["cossim_layers"]) and all(s >= 0 for s in m["attn_std_layers"])
    # zero query/key weights: uniform attention (std 0); every patch gets the same value mix
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.weight[:48].zero_()
            blk.attn.qkv.bias[:48].zero_()
    flat = oversmoothing_metrics(model, torch.randn(5, 3, 32, 32))
    assert np.allclose(flat["attn_std_layers"], 0, atol=1e-7)
    # identical images patch by patch (a constant image) with no position embedding: identical patch tokens
    with torch.no_grad():
        model.pos_embed.zero_()
    same = oversmoothing_metrics(model, torch.ones(2, 3, 32, 32))
    assert np.allclose(same["cossim_layers"], 1, atol=1e-5) and same["cossim_norm"] == pytest.approx(1, abs=1e-5)


def test_random_init_probe_run_and_model_sizes(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    spec = by(resolved("tiny"), "figure2", "random_init")
    config = {**spec.config, "data": {**spec.config["data"], "synthetic": True, "max_per_class": 4,
                                      "test_max_per_class": 8}}
    m = random_init(config)
    assert len(m["cossim_layers"]) == len(m["attn_std_layers"]) == 24
    assert m == random_init(config)  # seeded: the same init every time
    sizes = {s.cell["row"]: count_params(s.config)["params"] for s in resolved("tiny") if s.table == "table2"}
    assert sizes["deit_s12"] == 22_050_664 and sizes["deit_b12"] == 86_567_656  # timm's DeiT-S / DeiT-B
    assert sizes["deit_b24"] - sizes["deit_b12"] == 12 * 7_087_872  # 12 more DeiT-B blocks
    assert sizes["deit_b12_ours"] - sizes["deit_b12"] == 12 * 2 * (12 * 12 + 12)  # talking-heads mixing maps
