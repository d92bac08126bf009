"""CMHSA paper package: experiments at every scale, the theorem probes judged by paper.yaml's claims,
the run summary (Figure 2 curves) and the training-time probe."""
import math
from types import SimpleNamespace

import pytest
import timm
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import repro.models  # noqa: F401  (registers the named models)
from papers.cmhsa import experiments
from papers.cmhsa.summary import run_summary
from papers.cmhsa.timing import time_ratio
from repro.models.transfer import bias_scale
from repro.report.claims import judge
from repro.report.cells import compare
from repro.functions import lookup
from repro.plan.experiments import paper_runs
from repro.runs import source_spec
from repro.paper import load_paper

from repro.plan.build import resolved_runs
from conftest import REPO, build_specs

PAPER = load_paper(REPO / "papers" / "cmhsa" / "paper.yaml")
THEOREM_TABLES = ("theorem1", "lemma2", "head_bounds")


def composed(scale: str) -> dict:
    with initialize_config_dir(str(REPO / "repro" / "conf"), version_base=None):
        cfg = compose("config", overrides=["paper=cmhsa", f"scale={scale}"])
    return OmegaConf.to_container(cfg, resolve=True)


# ------------------------------------------------------------------ experiments

@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_experiments_fill_every_measured_cell_with_valid_specs(scale):
    assert not PAPER.problems
    specs = resolved_runs(composed(scale))  # every cell's spec: resolved, unique ids, sources in place
    ids = {s.run_id: s for s in build_specs(composed(scale))}  # the plan's runs
    filled = set()
    for s in specs:
        table = PAPER.table(s.table)
        assert table is not None and table.row(s.cell["row"]) is not None, s.run_id
        for col in s.cell["columns"]:
            assert table.column(col) is not None and not table.column(col).derived, (s.run_id, col)
            filled.add((s.table, s.cell["row"], col))
        if s.kind == "train":
            assert timm.is_model(s.config["model"]["name"]), s.config["model"]["name"]
        else:
            lookup(s.config["probe"])
    seeds = experiments.PROTOCOL[scale]["seeds"]
    for table in PAPER.tables:  # every measured cell has a run
        for row in table.rows:
            for col in table.columns:
                if col.derived:
                    continue
                assert (table.id, row.key, col.key) in filled, (scale, table.id, row.key, col.key)
    phase2 = [s for s in specs if s.config.get("init") and s.kind == "train"
              and not (s.table == "switch" and s.cell["row"] != "cmhsa3_exact")]  # switch cells Table 1's runs fill
    assert len(phase2) == 5 * seeds  # CMHSA-3, CMHSA-5, CMHSA-3 exact, Figure 2's conv init with and without warm-up
    # Table 1's CMHSA-3 and Figure 2's conv-init warm-up run are one training (the figure evaluates every epoch)
    assert len({s.fingerprint for s in phase2}) == 4 * seeds
    warm_runs = {s.seed: s.run_id for s in phase2 if s.table == "figure2" and s.cell["row"] == "conv_init"
                 and s.name == "warm"}
    assert {s.seed: ids.get(s.run_id) for s in phase2 if s.table == "table1" and s.cell["row"] == "cmhsa3"} == \
        {seed: None for seed in warm_runs} and set(warm_runs.values()) <= set(ids)
    order = [s.run_id for s in specs]
    for s in phase2:
        src = source_spec(s)
        assert src.run_id in ids and order.index(src.run_id) < order.index(s.run_id)
        assert src.config["model"]["name"].startswith("repro_cmhsa_") and "_conv" in src.config["model"]["name"]
        assert s.config["init"]["fn"] == "models.conv_to_mhsa"
        exact = s.cell["row"] == "cmhsa3_exact"
        assert s.config["init"]["kwargs"]["keep_qk"] is not exact
        assert (s.config["init"]["kwargs"]["scale"] == experiments.EXACT_SCALE) is exact
        assert src.config["recipe"]["epochs"] == s.config["recipe"]["epochs"] == experiments.PROTOCOL[scale]["epochs"]
    switch = [s for s in specs if s.table == "switch"]
    assert len(switch) == 3 * seeds and {s.cell["row"] for s in switch} == {"cmhsa3", "cmhsa5", "cmhsa3_exact"}
    single = [s for s in specs if s.table == "table1" and s.kind == "train" and "init" not in s.config]
    assert len(single) == 6 * seeds and {s.config["recipe"]["epochs"] for s in single} == {2 * experiments.PROTOCOL[scale]["epochs"]}
    warm = {s.cell["row"] + s.name: s.config["recipe"]["warmup_epochs"] for s in specs if s.table == "figure2" and s.seed == 0}
    assert warm["conv_initnowarm"] == warm["random_initnowarm"] == 0 < warm["conv_initwarm"] == warm["random_initwarm"]


def test_full_scale_is_appendix_b():
    specs = build_specs(composed("full"))
    train = [s for s in specs if s.kind == "train"]
    for s in train:
        r, d = s.config["recipe"], s.config["data"]
        assert (d["name"], d["img_size"], d["num_classes"]) == ("cifar100", 224, 100)
        assert (r["batch_size"], r["warmup_epochs"], r["opt"], r["sched"]) == (128, 5, "adamw", "cosine") or \
            r["warmup_epochs"] == 0  # Figure 2's runs without warm-up
        assert r["epochs"] in (200, 400) and s.config["model"]["kwargs"] == {}
    vit = next(s for s in train if s.cell["row"] == "vit_base")
    deit = next(s for s in train if s.cell["row"] == "deit_base")
    assert vit.config["recipe"]["mixup"] == 0 and vit.config["recipe"]["aa"] is None
    assert deit.config["recipe"]["mixup"] == 0.8 and deit.config["recipe"]["aa"].startswith("rand")
    attn = timm.create_model("repro_cmhsa_attn", device="meta")
    assert (len(attn.blocks), attn.blocks[0].attn.num_heads, attn.blocks[0].attn.head_dim, attn.embed_dim,
            attn.blocks[0].mlp.fc1.out_features, attn.global_pool) == (6, 9, 768, 768, 3072, "avg")


def test_cpu_scale_is_the_papers_depth_at_patch_4():
    """cpu (issue #28): CMHSA's 6 layers with 9 heads of P*P*C = 48 on an 8x8 grid, the baselines twice as
    deep at the same width; the training transfer's bias scale is the 8x8 grid's, and the conv phase's
    trained kernels carry over to the attention model the run builds (Theorem 1 at patch 4, K <= 2P + 1)."""
    from repro.models.transfer import conv_to_mhsa
    from repro.probes.conv_theorems import model_transfer_gap
    from test_cmhsa_models import _perturbed
    specs = build_specs(composed("cpu"))
    train = [s for s in specs if s.kind == "train"]
    assert {s.config["model"]["kwargs"]["depth"] for s in train} == {6}
    assert {s.config["data"]["fraction"] for s in train} == {0.2}
    c = bias_scale(32, 4)
    assert {s.config["init"]["kwargs"]["scale"] for s in train if s.config.get("init")} == {c, experiments.EXACT_SCALE}
    conv_spec = next(s for s in train if s.name == "phase1" and s.cell["row"] == "cmhsa5")
    attn_spec = next(s for s in train if s.name == "phase2" and s.cell["row"] == "cmhsa5")
    conv = timm.create_model(conv_spec.config["model"]["name"], num_classes=10, **conv_spec.config["model"]["kwargs"])
    attn = timm.create_model(attn_spec.config["model"]["name"], num_classes=10, **attn_spec.config["model"]["kwargs"])
    assert (len(attn.blocks), attn.blocks[0].attn.num_heads, attn.blocks[0].attn.head_dim, attn.embed_dim,
            attn.patch_embed.grid_size) == (6, 9, 48, 48, (8, 8))
    conv_to_mhsa(_perturbed(conv, 0), attn_model=attn, **experiments.transfer_kwargs("cpu", "exact"))
    with torch.no_grad():  # exact where a block's receptive field is inside the image: 6x6, 4x4, 2x2 patches
        rows = model_transfer_gap(conv, attn, torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
    assert [r["interior_patches"] for r in rows[:4]] == [36, 16, 4, 0]
    assert all(r["interior_max_err"] < 1e-5 for r in rows[:3])
    base = experiments.timing("cpu")[0].config["timing"]["reference"]  # ViT-base: every time column's unit
    assert base["model"]["kwargs"] == {"patch_size": 4, "depth": 12, "embed_dim": 48, "num_heads": 12}


def test_training_bias_scale_puts_ninety_percent_on_the_target():
    for img, patch in ((32, 4), (32, 8), (224, 16)):
        n = (img // patch) ** 2
        c = bias_scale(img, patch)
        assert math.exp(c) / (math.exp(c) + n - 1) == pytest.approx(0.9, abs=2e-3)
    assert experiments.transfer_kwargs("full")["scale"] > experiments.transfer_kwargs("tiny")["scale"]


# ------------------------------------------------------------------ theorem probes judged by the claims

@pytest.fixture(scope="module")
def theorem_comparison():
    recs = []
    for s in paper_runs("cmhsa", "tiny"):
        if s.table in THEOREM_TABLES:
            metrics = lookup(s.config["probe"])(s.config)
            recs.append({"run_id": s.run_id, "paper": "cmhsa", "table": s.table, "cell": s.cell, "scale": "tiny",
                         "seed": s.seed, "status": "finished", "metrics": metrics, "config": s.config,
                         "provenance": {}})
    return compare(PAPER, recs)


def test_theorem_claims_hold_on_the_probe_outputs(theorem_comparison):
    cmp = theorem_comparison
    assert not cmp.problems
    claims = [c for c in PAPER.claims if c.table in THEOREM_TABLES]
    assert len(claims) >= 12
    verdicts = {c.id: judge(cmp, c, "tiny") for c in claims}
    assert {k: v.verdict for k, v in verdicts.items()} == {k: "holds" for k in verdicts}, \
        {k: v.statistic for k, v in verdicts.items() if v.verdict != "holds"}
    for view in cmp.views:  # every theorem cell measured, and the exact columns agree with the paper
        if view.table.id in THEOREM_TABLES:
            assert view.counts()["measured"] == view.counts()["cells"]
            for cell in view.cells.values():
                if cell.column.compare == "exact" and cell.comparable:
                    assert cell.within_noise, (cell.row, cell.column.key)


def _judged_with(cmp, claim_id: str, table: str, row: str, column: str, value: float) -> str:
    """The claim's verdict after replacing one measured cell's value (records restored afterwards)."""
    claim = next(c for c in PAPER.claims if c.id == claim_id)
    rec, metric = cmp.runs("tiny", table, row, column)[0]
    good = rec["metrics"][metric]
    rec["metrics"][metric] = value
    try:
        return judge(compare(PAPER, cmp.records), claim, "tiny").verdict
    finally:
        rec["metrics"][metric] = good


def test_theorem_claims_would_catch_a_broken_construction(theorem_comparison):
    """The same claims fail on numbers that are not the theorems' (a bias scale too small, a head short)."""
    cmp = theorem_comparison
    # interior error of the transfer at c = 8 instead of 30 (Lemma 2 table: ~0.03)
    assert _judged_with(cmp, "thm1_interior_exact", "theorem1", "k3_p16_c3", "interior_max_err", 0.03) == "fails"
    assert _judged_with(cmp, "thm56_fewer_heads_cannot", "head_bounds", "patch_k3_p3", "one_hot_below", 0.0) == "fails"
    assert _judged_with(cmp, "thm56_exact_at_bound", "head_bounds", "pixel_k5_p1", "positional_at", 0.01) == "fails"
    assert _judged_with(cmp, "lemma2_onehot_closed_form", "lemma2", "c4", "onehot_excess", 1e-6) == "fails"
    assert _judged_with(cmp, "cor4_nine_heads", "theorem1", "k5_p16_c3", "exact_heads", 8) == "fails"
    assert _judged_with(cmp, "cor4_nine_heads", "theorem1", "k3_p1_c3", "exact_heads", 10) == "fails"


def test_cor4_heads_are_measured_on_the_layer_not_taken_from_heads_required(monkeypatch):
    """cor4_nine_heads reads the fewest heads with which an MHSA layer built from the convolution reproduces
    it, found by trying head counts on the layer: the construction's own count (heads_required, the
    `heads` column) must not be the measured side, and breaking it must not move the measurement."""
    import repro.models.transfer
    import repro.probes.conv_theorems
    from papers.cmhsa import theorems

    claim = next(c for c in PAPER.claims if c.id == "cor4_nine_heads")
    specs = {s.cell["row"]: s for s in experiments.theorems("tiny")
             if s.table == "theorem1" and s.config["probe"] == "cmhsa.fewest_heads_row"}
    assert claim.pairs and {lhs.column for lhs, _ in claim.pairs} == {"exact_heads"}
    assert all(specs[lhs.row].cell["columns"]["exact_heads"] == "exact_heads" for lhs, _ in claim.pairs)
    # the claim covers every row for which the paper prints a head count, at that count
    printed = {r.key: r.values["heads"].value for r in PAPER.table("theorem1").rows if "heads" in r.values}
    assert {lhs.row: rhs.const for lhs, rhs in claim.pairs} == printed

    def broken(*args, **kwargs):
        raise AssertionError("the measured head count must not come from the construction's formula")

    for module in (repro.models.transfer, repro.probes.conv_theorems, theorems):
        for name in ("heads_required", "neighbourhood_radius"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, broken)
    out = {row: theorems.fewest_heads_row(specs[row].config) for row in ("k3_p4_c1", "k5_p8_c1", "k5_p1_c1", "k7_p2_c1")}
    assert {row: o["exact_heads"] for row, o in out.items()} == {"k3_p4_c1": 9, "k5_p8_c1": 9, "k5_p1_c1": 25,
                                                                  "k7_p2_c1": 25}
    for o in out.values():  # reproduced with that many heads, not with one fewer
        assert o["err_exact_heads"] <= 1e-9 < 1e-3 < o["err_one_fewer"]
        assert o["errors_by_heads"][-2:] == [o["err_one_fewer"], o["err_exact_heads"]]


# ------------------------------------------------------------------ training probes

def _ctx(history):
    return SimpleNamespace(history=history)


def test_run_summary_architecture_seconds_and_early_loss():
    history = [{"epoch": e, "epoch_s": 2.0 + e, "train_loss": 3.0 - e, "eval_loss": 2.5 - 0.5 * e, "top1": 10.0 * e}
               for e in range(4)]
    conv = timm.create_model("repro_cmhsa_3_conv_c32", depth=2, num_classes=10)
    out = run_summary(conv, _ctx(history))
    assert (out["depth"], out["heads"], out["dim"], out["ffn"]) == (2, 0, 192, 768)  # no attention heads
    assert out["train_s"] == 14.0 and out["epoch_s"] == 3.5
    assert out["eval_loss_curve"] == [2.5, 2.0, 1.5, 1.0] and out["top1_curve"] == [0.0, 10.0, 20.0, 30.0]
    assert out["eval_loss_early"] == 2.25  # mean over the first half (epochs 1-2)
    attn = timm.create_model("repro_cmhsa_attn_c32", depth=1, num_classes=10)
    assert run_summary(attn, _ctx(history[:3]))["heads"] == 9
    assert run_summary(attn, _ctx(history[:3]))["eval_loss_early"] == 2.25  # ceil(1.5) = 2 epochs
    gaps = [dict(r) for r in history]
    del gaps[0]["eval_loss"]
    assert run_summary(attn, _ctx(gaps))["eval_loss_early"] is None  # not evaluated every epoch


def test_time_ratio_sums_phases_over_the_reference():
    small = {"name": "repro_deit_tiny_c32", "kwargs": {"depth": 1, "embed_dim": 32, "num_heads": 2, "patch_size": 8}}
    big = {"name": "repro_deit_tiny_c32", "kwargs": {"depth": 4, "embed_dim": 128, "num_heads": 2, "patch_size": 8}}
    config = {"data": {"img_size": 32, "num_classes": 10}, "recipe": {"batch_size": 8, "lr": 1e-3},
              "timing": {"phases": [{"model": small, "epochs": 3}, {"model": big, "epochs": 1}],
                         "reference": {"model": big, "epochs": 2}, "rounds": 3, "steps": 2}}
    torch.manual_seed(0)
    out = time_ratio(config)
    (s_small, s_big), s_ref = out["step_s"], out["reference_step_s"]
    assert out["time_ratio"] == pytest.approx((3 * s_small + s_big) / (2 * s_ref))
    assert 0 < s_small < s_big and out["device"] == "cpu" and out["timed_batch"] == 8
    with pytest.raises(ValueError, match="timing"):
        time_ratio({"data": {}, "recipe": {}})
