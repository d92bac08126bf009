"""Aug-ViT paper package: run specs at every scale against paper.yaml, the Table 2 cost probe, the
shortcut-diversity probe and the dense-Theta ablation model."""
from pathlib import Path

import pytest
import timm
import torch

from papers.augvit import experiments, probes
from papers.augvit.diversity import circulant_spectral_norm
from repro.runs import DEFAULT_SCALES as SCALES, check_unique, import_object
from repro.spec import load_paper
from repro.train.model import register_models

PAPER = load_paper(Path(__file__).resolve().parents[1] / "papers" / "augvit" / "paper.yaml")
register_models("augvit")


def small(name="repro_deit_tiny_c32", seed=0, **kw):
    torch.manual_seed(seed)
    return timm.create_model(name, **{"depth": 3, "embed_dim": 48, "num_heads": 3, "patch_size": 8, **kw}).eval()


# ---------------------------------------------------------------- specs against paper.yaml

def test_paper_yaml_has_no_problems():
    assert PAPER.problems == []
    assert {t.id for t in PAPER.tables} >= {"table2", "table2_top1", "table2_backbones", "diversity_init", "ablations"}
    assert not PAPER.table("table2_backbones").reproduced


@pytest.mark.parametrize("scale", SCALES)
def test_every_run_fills_existing_measured_cells(scale):
    specs = experiments.runs(scale)
    check_unique(specs)
    for s in specs:
        table = PAPER.table(s.table)
        assert table is not None and table.reproduced, s.run_id
        assert table.row(s.cell["row"]) is not None, s.run_id
        for col in s.cell["columns"]:
            assert table.column(col) is not None and not table.column(col).derived, (s.run_id, col)
        if s.kind == "probe":
            assert callable(import_object(s.config["probe"]))
        else:
            assert timm.is_model(s.config["model"]["name"]), s.config["model"]["name"]
            for p in s.config["probes"]:
                assert callable(import_object(p["fn"]))


@pytest.mark.parametrize("scale", SCALES)
def test_every_measured_cell_has_a_run_except_the_documented_gaps(scale):
    """Each scale fills table2, diversity_init and ablations completely; table2_top1 only at full, without
    the 384 px rows (fine-tuned in the paper; the engine cannot start from a checkpoint)."""
    filled = {(s.table, s.cell["row"], c) for s in experiments.runs(scale) for c in s.cell["columns"]}
    for table in PAPER.tables:
        if not table.reproduced:
            continue
        for row in table.rows:
            for col in table.columns:
                if col.derived:
                    continue
                gap = table.id == "table2_top1" and (scale != "full" or row.key.endswith("384"))
                assert ((table.id, row.key, col.key) in filled) != gap, (scale, table.id, row.key, col.key)


def test_seeds_and_recipes_per_scale():
    tiny, small_, full = (experiments.runs(s) for s in SCALES)
    assert {s.seed for s in tiny if s.table == "ablations"} == {0}
    assert {s.seed for s in small_ if s.table == "ablations"} == {0, 1, 2}
    assert {s.seed for s in tiny if s.cell["row"] == "trained_arch"} == set(range(5))
    assert {s.seed for s in tiny if s.cell["row"] == "augvit_s"} == {0, 1, 2}
    top1 = [s for s in full if s.table == "table2_top1"]
    assert len(top1) == 4 and all(s.config["recipe"] == experiments.RELEASE_RECIPE for s in top1)
    assert experiments.RELEASE_RECIPE == {"epochs": 300, "batch_size": 1024, "lr": 1e-3, "weight_decay": 0.05,
                                          "ema": True, "ema_decay": 0.99996}
    # the ablations differ from the Aug-ViT row in exactly the knob they ablate
    base = experiments.ablation_model("tiny", "augvit")["kwargs"]
    assert experiments.ablation_model("tiny", "augvit_t4")["kwargs"] == {**base, "aug_paths": 4}
    assert experiments.ablation_model("tiny", "augvit_msa")["kwargs"] == {**base, "aug_mlp": False}
    assert experiments.ablation_model("tiny", "deit")["kwargs"] == experiments.PROTOCOL["tiny"]["arch"][1]
    dense = experiments.ablation_model("tiny", "augvit_dense")
    assert dense["name"] == "augvit_dense_proj" and dense["kwargs"] == {"base": "repro_deit_tiny_c32", **base}


# ---------------------------------------------------------------- Table 2 cost probe

def test_cost_probe_gives_deit_s_and_augvit_s_counts():
    deit = probes.cost({"model": {"name": "repro_deit_small", "kwargs": {"num_classes": 1000}},
                        "probe_args": {"img_size": 224}})
    aug = probes.cost({"model": {"name": "repro_augvit_small", "kwargs": {"num_classes": 1000}},
                       "probe_args": {"img_size": 224}})
    assert deit["params"] == 22_050_664  # timm's deit_small_patch16_224
    # 12 blocks x 2 sub-layers x T = 2 paths x (4 x 4 circulant blocks of 96 + 384 bias)
    assert aug["params"] - deit["params"] == 12 * 2 * 2 * (16 * 96 + 384) == 92_160
    assert deit["macs"] == deit["macs_dense"] and 4.55e9 < deit["macs"] < 4.65e9  # printed 4.6G
    # the release's dense product: 48 extra 197 x 384 x 384 matmuls
    assert aug["macs_dense"] - deit["macs"] == 48 * 197 * 384 * 384
    # the FFT product costs a few % of that: below the paper's +0.1G
    assert 0.02e9 < aug["macs"] - deit["macs"] < 0.1e9
    assert aug["macs_no_attn"] == deit["macs_no_attn"]  # FFTs and attention both left out


# ---------------------------------------------------------------- shortcut analysis

def test_shortcut_analysis_of_an_augvit():
    model = small(aug_paths=2, aug_scale=0.75)
    torch.manual_seed(1)
    out = probes.shortcut_analysis(model, torch.randn(4, 3, 32, 32))
    for v in "dcba":
        assert len(out[f"ratio_{v}"]) == len(out[f"relative_{v}"]) == 3
        assert out[f"div_{v}"] == out[f"ratio_{v}"][-1] and 0 <= out[f"rel_{v}"] <= 1
    assert out["div_a"] < 1e-3 < out["div_b"]  # attention alone collapses the tokens
    assert out["div_d"] != out["div_c"] != out["div_b"]
    assert len(out["s4_r_out"]) == len(out["s4_linear"]) == len(out["s4_alpha"]) == len(out["s4_ratio"]) == 3
    assert out["s4_worst"] == max(out["s4_ratio"]) and out["s4_model_worst"] == max(out["s4_model_ratio"])
    assert 0 < out["s4_worst"] <= 1  # the linear term of Eq. S.4 bounds every step of this stack
    assert all(a > 1 for a in out["s4_alpha"])


def test_shortcut_analysis_of_a_deit_cuts_nothing_but_the_identity():
    out = probes.shortcut_analysis(small(), torch.randn(2, 3, 32, 32))
    assert out["div_d"] == out["div_c"] == out["div_b"] and out["div_a"] < out["div_b"]
    assert out["s4_alpha"] == [1.0, 1.0, 1.0]


def test_trained_probe_counts_fft_macs_for_the_dense_product():
    fft = small(aug_paths=2)
    dense = small(aug_paths=2, aug_fft=False)
    dense.load_state_dict(fft.state_dict())
    ctx = type("Ctx", (), {"images": torch.randn(2, 3, 32, 32), "config": {"data": {"img_size": 32}}})()
    a, b = probes.trained_analysis(fft, ctx), probes.trained_analysis(dense, ctx)
    assert a["macs"] == b["macs"] == probes.count_macs(fft, 32)
    assert a["div_d"] == pytest.approx(b["div_d"], rel=1e-4)
    assert not dense.blocks[0].aug_attn.paths[0].fft  # the copy was switched, not the model


# ---------------------------------------------------------------- dense-Theta ablation model

def test_dense_projection_model_has_dense_paths_with_release_init():
    torch.manual_seed(0)
    model = timm.create_model("augvit_dense_proj", base="repro_deit_tiny_c32", depth=2, embed_dim=96, num_heads=3,
                              patch_size=8, aug_paths=2, aug_mlp=False)
    circ = small(depth=2, embed_dim=96, aug_paths=2, aug_mlp=False)
    assert model.blocks[0].aug_mlp is None
    path = model.blocks[1].aug_attn.paths[1]
    assert path.dense_weight().shape == (96, 96) and path.block == 1
    assert float(path.weight.detach().std()) == pytest.approx(0.02, rel=0.1)
    assert float(path.bias.detach().abs().max()) == 0.0
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in circ.parameters())
    assert extra == 2 * 2 * ((96 * 96 + 96) - (16 * 24 + 96))
    assert circulant_spectral_norm(path) == pytest.approx(torch.linalg.matrix_norm(path.dense_weight().double(),
                                                                                   ord=2).item(), rel=1e-9)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="aug_paths"):
        timm.create_model("augvit_dense_proj", depth=1)
