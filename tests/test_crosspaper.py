"""The cross-paper table (issue #29): every row is the shared baseline plus one idea, and nothing else."""
from __future__ import annotations

import pytest
import torch

from papers.crosspaper import experiments as xp
from papers.crosspaper.probes import grad_norm_at_init, images_per_s
from repro.cli import main
from repro.models.registry import architecture
from repro.plan.experiments import paper_runs
from repro.runs import RunSpec
from repro.paper import load_paper

# what each idea's paper changes in the model, by constructor argument (resolved through the registry)
ARCH_CHANGES = {"baseline": set(), "convit": {"gpsa_layers", "locality_strength", "qkv_bias"},
                "oversmoothing": set(), "augvit": set(xp.AUG), "respostln": {"norm"}}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(flat(v, key + ".") if isinstance(v, dict) and v else {key: v})
    return out


def changed(a: dict, b: dict) -> set:
    fa, fb = flat(a), flat(b)
    return {k for k in fa.keys() | fb.keys() if fa.get(k, "<absent>") != fb.get(k, "<absent>")}


def allowed(key: str, row: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in xp.CHANGES[row])


def rows_by_table(scale: str) -> dict:
    out = {}
    for s in paper_runs("crosspaper", scale):
        if s.table in xp.TABLES.values():
            out.setdefault((s.table, s.seed), {})[s.cell["row"]] = s
    return out


@pytest.mark.parametrize("scale", xp.SCALES)
def test_every_row_differs_from_the_baseline_only_in_its_idea(scale):
    groups = rows_by_table(scale)
    assert groups and all(set(g) == set(xp.ROWS) for g in groups.values())
    for (table, seed), rows in groups.items():
        base = rows["baseline"]
        for row, spec in rows.items():
            diff = changed(base.config, spec.config)
            assert all(allowed(k, row) for k in diff), (scale, row, sorted(k for k in diff if not allowed(k, row)))
            assert spec.seed == base.seed and spec.config["data"] == base.config["data"]
            if row == "cmhsa":
                continue
            assert diff or row == "baseline", f"{row} applies no idea at {scale}"
            arch = changed(architecture(base.config["model"]["name"], base.config["model"]["kwargs"]),
                           architecture(spec.config["model"]["name"], spec.config["model"]["kwargs"]))
            assert arch <= ARCH_CHANGES[row] and bool(arch) == bool(ARCH_CHANGES[row]), (scale, row, arch)


@pytest.mark.parametrize("scale", xp.SCALES)
def test_cmhsa_splits_the_baseline_epochs_into_a_conv_and_an_attention_phase(scale):
    for rows in rows_by_table(scale).values():
        base, attn = rows["baseline"], rows["cmhsa"]
        conv = RunSpec(**{k: attn.config["init"]["from"][k] for k in ("table", "cell", "seed", "name", "config")},
                       paper="crosspaper", scale=scale)
        e = base.config["recipe"]["epochs"]
        assert conv.config["recipe"]["epochs"] + attn.config["recipe"]["epochs"] == e
        assert conv.config["model"]["kwargs"].get("depth") == attn.config["model"]["kwargs"].get("depth") \
            == base.config["model"]["kwargs"].get("depth")
        assert "_conv" in conv.config["model"]["name"] and attn.config["model"]["name"].endswith(("attn", "attn_c32"))
        assert conv.run_id in {s.run_id for s in paper_runs("crosspaper", scale)}  # its conv phase is run


def test_an_odd_epoch_count_cannot_be_split_into_two_phases():
    cfg = xp.baseline("cpu", 1.0)
    cfg["recipe"]["epochs"] = 3
    with pytest.raises(ValueError, match="even"):
        xp.cmhsa_phases(cfg, "cpu")


def test_the_claims_compare_each_idea_with_the_baseline_and_the_scales_judge_them():
    paper = load_paper(xp.__file__.replace("experiments.py", "paper.yaml"))
    assert not paper.problems
    claims = {c.id: c for c in paper.claims}
    for idea in xp.IDEAS:
        for sfx, table in (("", "ideas"), ("_f10", "ideas_f10")):
            (pair,) = claims[f"{idea}_beats_baseline{sfx}"].pairs
            assert (pair[0].table, pair[0].row, pair[1].row) == (table, idea, "baseline")
    assert set(xp.RESOLVES["cpu"]) | set(xp.RESOLVES["small"]) <= set(claims)
    assert {r.key for r in paper.table("ideas").rows} == set(xp.ROWS)


def test_the_gradient_probe_is_the_init_of_the_run_seed():
    cfg = xp.baseline("tiny", 1.0)
    cfg["data"] = {"num_classes": 10, "img_size": 32}
    x, y = torch.randn(4, 3, 32, 32), torch.arange(4)
    a, b, c = (grad_norm_at_init(cfg, s, x, y) for s in (0, 0, 1))
    assert a == b and a != c and a > 0


def test_images_per_s_is_images_over_seconds_across_epochs():
    spec = paper_runs("crosspaper", "tiny")[0]
    rows = [{"epoch": 1, "images_per_s": 100.0, "epoch_s": 10.0}, {"epoch": 2, "images_per_s": 300.0, "epoch_s": 30.0}]
    assert images_per_s(spec, rows) == pytest.approx(10000 / 40)
    assert images_per_s(spec, []) is None


def test_images_per_s_of_a_second_phase_counts_the_record_it_started_from():
    """CMHSA's attention phase: its rate over both phases, from the source record the run stage loaded
    (ProbeContext.source); none in a dry run, which reads no other run."""
    second = next(s for s in paper_runs("crosspaper", "tiny") if s.config.get("init"))
    rows = [{"epoch": 0, "images_per_s": 100.0, "epoch_s": 10.0}]
    first = {"metrics": {"history": [{"epoch": 0, "images_per_s": 400.0, "epoch_s": 30.0}]}}
    assert images_per_s(second, rows, first) == pytest.approx((1000 + 12000) / 40)
    assert images_per_s(second, rows, None) is None


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["tiny", "small"])  # cpu and full: test_every_paper / test_full_dry_run
def test_every_row_dry_runs(scale, dirs, capsys):
    assert main(["reproduce", "paper=crosspaper", f"scale={scale}", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    for row in xp.ROWS:
        assert f"ideas-{row}-{row}-s0" in out and f"ideas-{row}-{row}-s0" in out.split("ok ", 1)[1]
    assert "cmhsa_phase1-ideas-cmhsa_conv-s0" in out


EFFECTS_PAPER = """
id: toyfx
title: toy
tables:
  - id: t
    caption: rows against a baseline
    source: none
    columns: [{key: top1, label: top-1}]
    rows:
      - {key: base, label: base}
      - {key: up, label: up}
      - {key: down, label: down}
figures:
  - {id: fx, caption: effects, kind: effects, table: t, baseline: base,
     series: [{label: goes down, row: down, column: top1}, {label: goes up, row: up, column: top1}]}
"""


TOY_VALUES = {"base": [50.0, 51.0, 52.0], "up": [55.0, 57.0, 56.0], "down": [47.0, 49.0, 50.0]}


def write_toy_records(results, scale: str) -> None:
    from repro.records import write_record

    for row, vals in TOY_VALUES.items():
        for seed, v in enumerate(vals):
            write_record({"run_id": f"{row}-{seed}", "paper": "toyfx", "table": "t", "scale": scale, "seed": seed,
                          "cell": {"row": row, "columns": {"top1": "top1"}}, "status": "finished",
                          "metrics": {"top1": v}, "config": {"data": {"name": "cifar10", "img_size": 32}},
                          "provenance": {"git_sha": "0" * 16, "git_dirty": False, "wall_s": 1.0}}, root=results)


def test_the_effects_figure_ranks_rows_by_their_difference_with_welch_intervals(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from repro.records import load_records
    from repro.report import figures
    from repro.report.cells import compare
    from repro.report.stats import compare_means

    (tmp_path / "papers" / "toyfx").mkdir(parents=True)
    (tmp_path / "papers" / "toyfx" / "paper.yaml").write_text(EFFECTS_PAPER)
    write_toy_records(tmp_path / "results", "cpu")
    paper = load_paper(tmp_path / "papers" / "toyfx" / "paper.yaml")
    assert not paper.problems
    cmp = compare(paper, *load_records("toyfx", root=tmp_path / "results"))
    mpl = figures.draw(cmp, paper.figures[0], "cpu")
    FigureCanvasAgg(mpl).draw()
    ax = mpl.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["goes down (n=3 vs 3)", "goes up (n=3 vs 3)"]
    up = compare_means(TOY_VALUES["up"], TOY_VALUES["base"], rhs_const=False, alpha=0.05)
    (_, caps, (bars,)) = ax.containers[1].lines
    (x0, _), (x1, _) = bars.get_segments()[0]
    assert (x0, x1) == pytest.approx(up.ci) and up.ci[0] > 0


def test_an_effects_figure_without_a_baseline_row_is_a_spec_problem(tmp_path):
    (tmp_path / "toyfx").mkdir()
    (tmp_path / "toyfx" / "paper.yaml").write_text(EFFECTS_PAPER.replace("baseline: base,", "baseline: nope,"))
    problems = load_paper(tmp_path / "toyfx" / "paper.yaml").problems
    assert any("needs baseline" in str(p) for p in problems)


def test_the_index_heads_with_the_index_table_and_repeats_the_report_numbers(tmp_path):
    import json

    from repro.report import build_index, build_report

    papers, results = tmp_path / "papers", tmp_path / "results"
    (papers / "toyfx").mkdir(parents=True)
    text = EFFECTS_PAPER.replace("title: toy\n", "title: toy\nindex_table: t\n") + """
claims:
  - {id: up_beats_base, text: up is better, table: t, check: greater, pairs: [[up.top1, base.top1]]}
"""
    (papers / "toyfx" / "paper.yaml").write_text(text)
    write_toy_records(results, "full")
    build_report("toyfx", papers, results, notebook_execute=None)
    claim = json.loads((results / "toyfx" / "summary.json").read_text())["claims"][0]
    comp = claim["comparisons"][0]
    html = build_index(papers, results).read_text()
    block = html.split('class="featured-table"', 1)[1].split("</table>", 1)[0]
    assert f"{comp['effect']:+.2f} [{comp['ci95'][0]:+.2f}, {comp['ci95'][1]:+.2f}]" in block
    assert claim["label"] in block and "55.9 ± 1 (n=3)" not in block and "56 ± 1 (n=3)" in block
    assert html.index("featured-toyfx") < html.index("papers-table")
    assert 'src="toyfx/figures/fx-full.png"' in html.split("papers-table")[0]  # the effects figure, linked


def test_the_index_table_shows_only_the_scales_that_measured_it(tmp_path):
    """A table run at one scale (the 10-epoch table: cpu only) heads the index without empty blocks for the others."""
    from repro.report.featured import featured

    (tmp_path / "toyfx").mkdir()
    (tmp_path / "toyfx" / "paper.yaml").write_text(EFFECTS_PAPER.replace("title: toy\n", "title: toy\nindex_table: t\n"))
    paper = load_paper(tmp_path / "toyfx" / "paper.yaml")
    cell = {"table": "t", "scale": "cpu", "row": "base", "column": "top1", "status": "measured", "mean": 51.0, "n": 3}
    summary = {"scales": ["cpu", "tiny"], "cells": [cell], "claims": [], "settings": {"cpu": "1-10 epochs; 1/3 seeds"},
               "tables": {"t": {"by_scale": {"cpu": {"setting": "10 epochs; 3 seeds"}}}}}
    block = featured(paper, summary, tmp_path)
    assert [s["scale"] for s in block["scales"]] == ["cpu"]
    assert block["scales"][0]["setting"] == "10 epochs; 3 seeds"  # the table's own runs, not the whole scale's
    assert featured(paper, {"scales": ["tiny"], "cells": [cell], "claims": []}, tmp_path) is None
