"""Res-Post-LN supplement (Lemma 1, Theorem 4) measured at small sizes on the shared blocks."""
import math

import numpy as np
import pytest
import torch

from papers.respostln import theory as th
from repro.models import Attention
from repro.models.blocks import Block


def test_lemma1_bound_holds_at_small_width():
    res = th.lemma1(d_values=(16, 32), L=4, n_tokens=8, samples=4, seed=0)
    assert [(r["d"], r["l"]) for r in res["rows"]] == [(d, l) for d in (16, 32) for l in range(1, 5)]
    for r in res["rows"]:
        assert r["bound"] == 2 * ((2 * r["l"] - 1) * r["d"] ** 2 + r["l"] * r["d"])
        assert r["holds"] and r["mean"] <= r["bound"], r
        # The stream grows by two LN-normalised increments per block: at least d more per block.
        assert r["mean"] > r["d"] * r["l"]


def test_res_post_ln_increments_have_squared_norm_d():
    d, n = 24, 7
    blk = th.init_as_proof(Block(d, Attention(d, 2), mlp_ratio=1.0, norm="res_post_ln"), seed=3)
    seen = {}
    hooks = [getattr(blk, name).register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o))
             for name in ("post_norm1", "post_norm2")]
    x = 5.0 * torch.randn(2, n, d) + 1.0
    with torch.no_grad():
        y = blk(x)
    for h in hooks:
        h.remove()
    for name in ("post_norm1", "post_norm2"):
        sq = seen[name].pow(2).sum(-1)
        assert torch.allclose(sq, torch.full_like(sq, d), rtol=1e-4), name
    torch.testing.assert_close(y, x + seen["post_norm1"] + seen["post_norm2"])


def test_init_gives_unit_preactivations_and_pairs_weights_across_norms():
    d = 256
    stacks = {n: th.init_as_proof(th.TokenStack(2, d, n), seed=11) for n in th.NORMS}
    w = {n: [m.weight for m in s.modules() if isinstance(m, torch.nn.Linear)] for n, s in stacks.items()}
    for n in ("post_ln", "res_post_ln"):
        assert all(torch.equal(a, b) for a, b in zip(w["pre_ln"], w[n]))
    fc1 = stacks["pre_ln"].blocks[0].mlp.fc1
    x = torch.nn.functional.layer_norm(torch.randn(64, d) * 3 + 2, (d,))
    z = fc1(x)
    assert abs(z.var().item() - 1.0) < 0.1 and abs(z.mean().item()) < 0.05
    assert fc1.bias.abs().max() == 0


def test_theorem4_direction_in_depth():
    res = th.theorem4(L_values=(2, 12), d_values=(32,), samples=12, seed=0)
    g = {(c["norm"], c["L"]): c["mean"] for c in res["grid"]}
    assert g["post_ln", 12] >= 0.9 * g["post_ln", 2]
    assert g["pre_ln", 12] < 0.75 * g["pre_ln", 2]
    assert g["res_post_ln", 12] < 0.75 * g["res_post_ln", 2]
    assert g["pre_ln", 12] < g["post_ln", 12]


def test_fit_exponents_recovers_known_power_law():
    rng = np.random.default_rng(0)
    L, d = np.meshgrid([6, 12, 24, 48], [64, 128, 256, 512])
    L, d = L.ravel(), d.ravel()
    g = 0.3 * L ** -0.5 * d ** 0.7 * np.sqrt(np.log(d)) * np.exp(rng.normal(0, 0.01, L.size))
    fit = th.fit_exponents(L, d, g)
    assert fit["a"] == pytest.approx(-0.5, abs=0.02) and fit["b"] == pytest.approx(0.7, abs=0.02)
    assert fit["se_a"] < 0.02 and fit["r2"] > 0.999
    raw = th.fit_exponents(L, d, g, ln_power=0.0)  # without removing sqrt(ln d) the d-exponent is larger
    assert raw["b"] > fit["b"] + 0.05
    one_d = th.fit_exponents(L[:4], d[:4], g[:4])
    assert one_d["a"] == pytest.approx(-0.5, abs=0.03) and math.isnan(one_d["b"])


def _synthetic_result(exponents):
    """A theorem4-shaped result whose per-sample norms follow g = L^a d^b sqrt(ln d) (x small noise)."""
    rng = np.random.default_rng(1)
    Ls, ds = [6, 12, 24, 48], [64, 128, 256, 512]
    grid = []
    for norm, (a, b, scale) in exponents.items():
        for d in ds:
            for L in Ls:
                s = list(scale * L ** a * d ** b * math.sqrt(math.log(d)) * np.exp(rng.normal(0, 0.02, 6)))
                grid.append({"norm": norm, "L": L, "d": d, "samples": s, "mean": float(np.mean(s)),
                             "std": float(np.std(s, ddof=1))})
    res = {"config": {"L_values": Ls, "d_values": ds, "blocks": list(exponents)}, "grid": grid,
           "theory": {n: th.THEORY[n] for n in exponents}, "fits": {}}
    for n in exponents:
        cells = [c for c in grid if c["norm"] == n]
        res["fits"][n] = th.fit_exponents([c["L"] for c in cells], [c["d"] for c in cells],
                                          [c["mean"] for c in cells])
    return res


def test_verdicts_follow_the_measurement():
    as_theory = _synthetic_result({"pre_ln": (-0.5, 1.0, 0.1), "post_ln": (0.0, 1.0, 1.0),
                                   "res_post_ln": (-0.5, 0.5, 0.1)})
    verdicts = {v["claim"]: v["verdict"] for v in th.theorem4_verdicts(as_theory)}
    assert set(verdicts.values()) == {"holds"}, verdicts
    # Pre-LN flat in depth and above Post-LN, Res-Post-LN above Pre-LN: the checks must say so.
    against = _synthetic_result({"pre_ln": (0.0, 1.0, 1.2), "post_ln": (0.0, 1.0, 1.0),
                                 "res_post_ln": (0.0, 1.0, 1.5)})
    verdicts = {v["claim"]: v["verdict"] for v in th.theorem4_verdicts(against)}
    assert verdicts["pre_ln: exponent of L (upper bound)"] == "fails"
    assert verdicts["res_post_ln: exponent of d beyond sqrt(ln d) (upper bound)"] == "fails"
    assert verdicts["res_post_ln gradient below pre_ln at L=48"] == "fails"
    assert verdicts["pre_ln gradient below post_ln at L=48"] == "fails"
    # The depth exponents are upper bounds: a gradient falling faster than L^-1/2 is within them, and loose.
    faster = _synthetic_result({"pre_ln": (-1.0, 1.0, 0.1), "post_ln": (0.0, 1.0, 1.0)})
    rows = {v["claim"]: v for v in th.theorem4_verdicts(faster)}
    assert rows["pre_ln: exponent of L (upper bound)"]["verdict"] == "holds"
    assert "loose by L^0.5" in rows["pre_ln: exponent of L (upper bound)"]["measured"]


def test_loglog_figure_writes_png(tmp_path):
    res = th.theorem4(L_values=(2, 4), d_values=(16, 32), samples=2, seed=0)
    path = tmp_path / "fig.png"
    th.loglog_figure(res, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ probes, runs and paper.yaml

from pathlib import Path  # noqa: E402

import timm  # noqa: E402

from papers.respostln import experiments as ex  # noqa: E402
from papers.respostln import probes  # noqa: E402
from repro.functions import lookup  # noqa: E402
from repro.runs import check_unique  # noqa: E402
from repro.paper import load_paper  # noqa: E402

PAPER_YAML = Path(__file__).resolve().parents[1] / "papers" / "respostln" / "paper.yaml"


def _table1(placement, norm):
    return probes.table1({"model": {"name": "repro_deit_tiny_c32"},
                          "probe_args": {"placement": placement, "norm": norm, "dim": 32, "heads": 2, "tokens": 9}})


def test_blocks_compute_table1_and_not_the_literal_reading():
    for placement in ("pre_ln", "res_post_ln", "post_ln"):
        assert _table1(placement, placement)["rel_err"] < 1e-5, placement
    # The same block against the table as extracted (MSA of Y_l), and blocks against each other's
    # equations: the check must see the difference.
    assert _table1("res_post_ln_literal", "res_post_ln")["rel_err"] > 0.01
    assert _table1("pre_ln", "res_post_ln")["rel_err"] > 0.01
    assert _table1("res_post_ln", "pre_ln")["rel_err"] > 0.01


def test_lemma1_probe_arrays_run_over_l():
    m = probes.lemma1({"probe_args": {"d": 16, "L": 5, "samples": 2, "seed": 1}})
    assert len(m["sq_norm"]) == len(m["bound"]) == len(m["log2_ratio"]) == 5
    assert m["bound"] == [th.lemma1_bound(l, 16) for l in range(1, 6)]
    assert m["holds_everywhere"] and max(m["log2_ratio"]) < 0 and m["ratio_max"] < 1
    assert m["sq_norm_last"] == m["sq_norm"][-1] and m["sq_norm_first"] == m["sq_norm"][0]
    # the stream grows: every block adds two increments of squared norm d
    assert all(b > a for a, b in zip(m["sq_norm"], m["sq_norm"][1:]))


def test_theorem4_probe_fits_and_log2_arrays():
    cfg = {"probe_args": {"norm": "post_ln", "L_values": [2, 4, 8], "d_values": [16, 32], "samples": 3}}
    m = probes.theorem4(cfg)
    assert len(m["log2_g_vs_L_d16"]) == len(m["log2_g_vs_L_d32"]) == 3 and len(m["log2_g_vs_d_deepest"]) == 2
    grid = {(c["L"], c["d"]): c["mean"] for c in m["grid"]}
    assert m["g_deep_wide"] == grid[8, 32] and m["g_shallow_wide"] == grid[2, 32]
    assert m["log2_g_vs_L_d32"][-1] == pytest.approx(math.log2(grid[8, 32]))
    assert math.isfinite(m["a"]) and math.isfinite(m["b"])
    with pytest.raises(ValueError, match="twice the previous"):
        probes.theorem4({"probe_args": {**cfg["probe_args"], "L_values": [2, 3]}})
    smoke = probes.theorem4({"mode": "smoke", "probe_args": {"norm": "pre_ln", "L_values": [6, 12, 24, 48],
                                                            "d_values": [64, 512], "samples": 16}})
    assert smoke["config"]["L_values"] == [2, 4] and smoke["config"]["samples"] == 2


def test_paper_yaml_has_no_problems():
    paper = load_paper(PAPER_YAML)
    assert paper.problems == []
    assert {t.id for t in paper.tables} == {"table1", "lemma1", "theorem4", "stability", "stability_d12",
                                            "stability_d24", "compression_search"}
    assert not paper.table("compression_search").reproduced
    # the bound printed as the paper value of the lemma1 cells is Lemma 1's formula
    lem = paper.table("lemma1")
    for row in lem.rows:
        d = int(row.key[1:])
        assert row.values["sq_norm_first"].value == th.lemma1_bound(1, d)
        assert row.values["sq_norm_last"].value == th.lemma1_bound(48, d)
    t4 = paper.table("theorem4")
    for norm, (a, b) in th.THEORY.items():
        assert t4.row(norm).values["a"].value == a and t4.row(norm).values["b"].value == b


@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_runs_fill_cells_of_paper_yaml(scale):
    import repro.models  # noqa: F401

    paper = load_paper(PAPER_YAML)
    specs = ex.runs(scale)
    check_unique(specs)
    for s in specs:
        table = paper.table(s.table)
        assert table is not None and table.reproduced and table.row(s.cell["row"]) is not None, s.run_id
        assert all(table.column(c) is not None for c in s.cell["columns"]), s.run_id
        if s.kind == "probe":
            assert callable(lookup(s.config["probe"]))
        else:
            assert timm.is_model(s.config["model"]["name"])
    # every measured cell of every reproduced table is filled by some run
    filled = {(s.table, s.cell["row"], c) for s in specs for c in s.cell["columns"]}
    grid_tables = {"stability_d12", "stability_d24"}  # cpu only (test below); the other scales: one lr
    for t in paper.tables:
        if t.reproduced and t.id not in grid_tables:
            assert {(t.id, r.key, c.key) for r in t.rows for c in t.columns} <= filled, t.id
    assert not any(s.table in grid_tables for s in specs)
    train = [s for s in specs if s.kind == "train"]
    extra = sum(n - ex.STABILITY[scale]["seeds"] for n in ex.STABILITY[scale].get("rate_cells", {}).values())
    assert len(train) == 6 * ex.STABILITY[scale]["seeds"] + extra  # a rate cell's seeds beyond the others'
    if scale == "small":  # Post-LN's failure without warm-up is judged as a rate over 12 seeds
        assert sum(s.name == "post_ln_nowarm" for s in train) == 12 and extra == 9
    warm = {next(iter(s.cell["columns"])): s.config["recipe"]["warmup_epochs"] for s in train}
    assert warm["top1_nowarm"] == 0 and warm["top1_warm"] > 0
    # a probe seed is in its arguments (the probe sees only the config) and changes the run id
    t4 = [s for s in specs if s.table == "theorem4" and s.cell["row"] == "res_post_ln"]
    assert [s.config["probe_args"]["seed"] for s in t4] == list(range(ex.PROBES[scale]["seeds"]))


def test_cpu_grid_fills_every_cell_and_varies_only_lr_warmup_placement_and_depth():
    """cpu: 3 placements x 4 learning rates x {no warm-up, 10 % of the updates} at depth 12 and 24, 3 seeds,
    and 12 seeds for the cell whose failure is judged as a rate (Post-LN at depth 24, lr 1e-2, no warm-up):
    153 trainings that differ from each other only in those four settings and the seed."""
    import repro.models  # noqa: F401

    paper = load_paper(PAPER_YAML)
    specs = ex.runs("cpu")
    check_unique(specs)
    train = [s for s in specs if s.kind == "train"]
    assert len(train) == 3 * 4 * 2 * 2 * 3 + 9 and {s.table for s in train} == {"stability_d12", "stability_d24"}
    rate = [s for s in train if (s.table, s.cell["row"], s.name) == ("stability_d24", "lr1e2", "post_ln_nowarm")]
    assert sorted(s.seed for s in rate) == list(range(12))
    assert paper.precondition("grid_d24_post_ln_fails_without_warmup").check == "rate"
    filled = {(s.table, s.cell["row"], c) for s in train for c in s.cell["columns"]}
    for depth in (12, 24):
        t = paper.table(f"stability_d{depth}")
        assert {(t.id, r.key, c.key) for r in t.rows for c in t.columns} == {x for x in filled if x[0] == t.id}
    for s in train:
        r, kw = s.config["recipe"], s.config["model"]["kwargs"]
        row = paper.table(s.table).row(s.cell["row"])
        assert r["lr"] == row.x and kw["depth"] == int(s.table.removeprefix("stability_d"))
        assert kw["norm"] in ex.NORMS and s.cell["columns"] == {s.name: "top1"}
        assert r["warmup_epochs"] == (pytest.approx(0.2) if s.name.endswith("_warm") else 0)
    base = {k: v for k, v in train[0].config["recipe"].items() if k not in ("lr", "warmup_epochs")}
    assert all({k: v for k, v in s.config["recipe"].items() if k not in ("lr", "warmup_epochs")} == base
               for s in train)
    assert {tuple(sorted(set(s.config["model"]["kwargs"]) - {"depth", "norm"})) for s in train} == {
        ("embed_dim", "num_heads", "patch_size")}
    # every claim judged at cpu reads the grid, and needs the grid's own precondition
    for claim_id in ex.RESOLVES["cpu"]:
        claim = next(c for c in paper.claims if c.id == claim_id)
        grid = claim.table.replace("stability_", "grid_")
        assert claim.table.startswith("stability_d") and claim.requires[0] == f"{grid}_post_ln_fails_without_warmup"
        # the warm-up claim also needs a grid where the warmed-up Post-LN trains somewhere it is needed
        assert claim.requires[1:] == ([f"{grid}_warmup_lets_post_ln_train"] if "warmup_rescues" in claim.id else [])


def test_seeds_override_applies_to_probes_and_training():
    specs = ex.runs("tiny", seeds=2)
    assert sum(s.table == "theorem4" for s in specs) == 3 * 2
    assert sum(s.kind == "train" for s in specs) == 6 * 2
