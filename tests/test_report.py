"""Reports from synthetic records: cell values, deltas, noise, precision, verdicts, rendering, robustness."""
import csv
import json
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from repro.records import load_records, write_record
from repro.report import build_all, build_index, build_report
from repro.report import notebook as nbmod
from repro.report.__main__ import main
from repro.report.claims import judge_all
from repro.report.cells import compare
from repro.report.glance import chip
from repro.paper import Ref, load_paper

REPO = Path(__file__).resolve().parents[1]

TOY = """\
id: toy
title: "Toy paper <b>bold</b> & co"
authors: [A. Author]
tables:
  - id: t
    caption: "Sample efficiency <script>alert(1)</script> & more"
    source: "Table 1, toy.txt"
    columns:
      - {key: base, label: Base, unit: "%"}
      - {key: ours, label: Ours, unit: "%", measured_scale: 100}  # records hold a fraction
      - {key: gap, label: Gap, unit: "%", derived: {op: rel_gap, a: ours, b: base}}
    rows:
      - {key: f1, label: "10%", x: 0.1, values: {base: "41.5", ours: "60.0", gap: "20%"}}
      - {key: f2, label: "50%", x: 0.5, values: {base: "46.0", ours: "53.0"}}
      - {key: f3, label: "100%", x: 1.0, values: {base: "51.0", ours: "55.0"}}
      - {key: f4, label: "noisy", x: 2.0, values: {base: "60.0", ours: "60.0"}}
      - {key: other, label: "Other et al.", cited: "Other 2020, Table 3", values: {base: "99.9"}}
  - id: size
    caption: Model size
    source: Table 2
    columns:
      - {key: params, label: Params}
      - {key: params_fine, label: Params (fine)}
      - {key: heads, label: Heads, compare: exact}
      - {key: speed, label: Speed, unit: img/s, compare: show}
      - {key: top1, label: Top-1}
    rows:
      - {key: m1, label: M1, values: {params: "27M", params_fine: "27.78M", heads: "4", speed: "100", top1: "70.0"}}
      - {key: m2, label: M2, values: {params: "27M", heads: "4", top1: "71.0"}}
      - {key: m3, label: M3, values: {params: "5M", top1: "60.0"}}
  - id: layers
    caption: Per-layer norms at init
    source: Lemma 1
    columns:
      - {key: norm, label: "E|Y|^2"}
      - {key: bound, label: Bound}
    rows:
      - {key: init, label: init}
  - id: gone
    caption: Listed only
    source: Table 9
    reproduced: false
    reason: needs a teacher
    columns: [{key: acc, label: Acc}]
    rows: [{key: r, label: R, values: {acc: "1.0"}}]
figures:
  - {id: curve, caption: "norm per layer", kind: per_layer, table: layers,
     series: [{label: init, row: init, column: norm, metric: norm}]}
  - {id: frac, caption: "accuracy vs fraction & size", kind: vs_rows, table: t, x_scale: log,
     series: [{label: Base, column: base}, {label: Ours, column: ours}]}
claims:
  - {id: ahead, text: ours beats base, table: t, check: greater, columns: [ours, base], rows: [f1, f2, f3]}
  - {id: gap_shrinks, text: the gap shrinks, table: t, check: monotone, column: gap, rows: [f1, f2, f3],
     direction: decreasing}
  - {id: gap_grows, text: the gap grows, table: t, check: monotone, column: gap, rows: [f1, f2, f3],
     direction: increasing}
  - {id: noisy, text: "ours ahead in the noisy row", table: t, check: greater, pairs: [[f4.ours, f4.base]]}
  - {id: m1_first, text: M1 is more accurate than M2, table: size, check: greater, pairs: [[m1.top1, m2.top1]]}
  - {id: bounded, text: the norm stays under the bound, table: layers, check: bound, cell: init.norm, bound: init.bound}
  - {id: tight, text: the norm stays under 2.5, table: layers, check: bound, cell: init.norm, bound: 2.5}
  - {id: same, text: base and ours agree in the noisy row, table: t, check: within_noise, pairs: [[f4.ours, f4.base]]}
  - {id: ghost, text: names a missing cell, table: t, check: greater, pairs: [[f9.ours, f1.base]]}
  - {id: diverged, text: M3 beats M2, table: size, check: greater, pairs: [[m3.top1, m2.top1]]}
  - {id: unmeasured, text: M3 is larger than M2, table: size, check: greater, pairs: [[m3.params, m2.params]]}
  - {id: listed, text: about a listed table, table: gone, check: greater, pairs: [[r.acc, 0.5]]}
  - {id: above_chance, text: base beats 30 at 10%, table: t, check: greater, pairs: [[f1.base, 30]]}
"""

T_VALUES = {"f1": ([40, 41, 42], [50, 51, 52]), "f2": ([45, 46, 47], [52, 53, 54]),
            "f3": ([50, 51, 52], [54, 55, 56]), "f4": ([60, 62, 58], [61, 59, 60.5])}


def _rec(root, run_id, table, row, columns, metrics, seed=0, status="finished", scale="full"):
    write_record(dict(run_id=run_id, paper="toy", table=table, cell={"row": row, "columns": columns}, scale=scale,
                      seed=seed, status=status, metrics=metrics,
                      config={"data": {"name": "cifar10", "img_size": 32, "synthetic": True}},
                      provenance={"git_sha": "abcdef0123456789", "git_dirty": True, "device": "cpu", "cpu": "x86_64",
                                  "cpu_threads": 2, "torch": "2.5.0", "timm": "1.0.31", "world_size": 1,
                                  "start_time": "2025-01-02T03:04:05+00:00", "wall_s": 90.0}), root=root)


def make_toy(tmp_path: Path) -> tuple[Path, Path]:
    papers, results = tmp_path / "papers", tmp_path / "results"
    (papers / "toy").mkdir(parents=True)
    (papers / "toy" / "paper.yaml").write_text(TOY)
    for row, (base, ours) in T_VALUES.items():
        for seed, (b, o) in enumerate(zip(base, ours)):
            _rec(results, f"base-{row}-{seed}", "t", row, {"base": "top1"}, {"top1": b}, seed)
            _rec(results, f"ours-{row}-{seed}", "t", row, {"ours": "acc"}, {"acc": o / 100}, seed)
    _rec(results, "m1", "size", "m1", {"params": "n", "params_fine": "n", "heads": "h", "speed": "ips", "top1": "top1"},
         {"n": 27.4e6, "h": 4, "ips": 250.0, "top1": 70.2})
    _rec(results, "m2", "size", "m2", {"params": "n", "heads": "h", "top1": "top1"},
         {"n": 27.6e6, "h": 5, "top1": 72.0})
    _rec(results, "m3", "size", "m3", {"top1": "top1"}, {"top1": None}, status="diverged")
    for seed in range(3):
        _rec(results, f"init-{seed}", "layers", "init", {"norm": "norm", "bound": "bound"},
             {"norm": [1.0, 2.0 + seed / 10, 3.0], "bound": [2.0, 3.0, 4.0]}, seed)
    records = results / "toy" / "full" / "records"
    (records / "zz-corrupt.json").write_text('{"run_id": "zz", "metrics": {"top1": 1')
    _rec(results, "stray", "t", "f7", {"base": "top1"}, {"top1": 1.0})
    return papers, results


def plan_toy(results: Path) -> None:
    """A plan for the toy's records (python -m repro.report checks each record against its scale's plan):
    every valid record is a planned run, the stray one included (its row is the invalid part)."""
    from repro.plan import store
    recs = load_records("toy", root=results)[0]
    store.write_plan({"schema": store.SCHEMA, "paper": "toy", "scale": "full",
                      "cells": sorted({(r["table"], r["cell"]["row"], c) for r in recs for c in r["cell"]["columns"]}),
                      "runs": [{k: r[k] for k in ("run_id", "table", "cell")} for r in recs]}, results)


def _toy_comparison(tmp_path):
    papers, results = make_toy(tmp_path)
    paper = load_paper(papers / "toy" / "paper.yaml")
    assert ["'f9.ours' does not exist" in p.message for p in paper.problems] == [True]  # the ghost claim only
    recs, bad = load_records("toy", root=results)
    cmp = compare(paper, recs, bad)
    return cmp, {(v.claim.id, v.scale): v for v in judge_all(cmp)}


def test_a_cell_whose_seeds_pool_torch_versions_says_so(tmp_path):
    """Records re-made under another torch differ in the 8th digit of their losses: the cell names the versions."""
    papers, results = make_toy(tmp_path)
    path = results / "toy" / "full" / "records" / "base-f1-2.json"
    rec = json.loads(path.read_text())
    rec["provenance"]["torch"] = "2.6.0"
    write_record(rec, results)
    paper = load_paper(papers / "toy" / "paper.yaml")
    cmp = compare(paper, *load_records("toy", root=results))
    notes = cmp.cell(Ref("t", "f1", "base"), "full").notes
    assert "seeds pool torch versions: 2.5.0 (seed 0, 1); 2.6.0 (seed 2)" in notes
    assert not [n for n in cmp.cell(Ref("t", "f1", "ours"), "full").notes if "torch" in n]


def test_cell_mean_std_n_delta_and_noise(tmp_path):
    cmp, _ = _toy_comparison(tmp_path)
    cell = cmp.cell(Ref("t", "f1", "base"), "full")
    assert (cell.mean, cell.std, cell.n) == (41.0, 1.0, 3)
    assert cell.delta == pytest.approx(-0.5)
    assert cell.tolerance == pytest.approx(2.0) and cell.within_noise is True  # beyond 41.45..41.55, 2 sd
    assert cell.within_text() == "yes (round + 2 sd)"
    ours = cmp.cell(Ref("t", "f1", "ours"), "full")
    assert ours.mean == pytest.approx(51.0) and ours.delta == pytest.approx(-9.0) and ours.within_noise is False
    assert ours.measured_text() == "51.00 ± 1.00" and ours.delta_text() == "-9.00"


def test_time_to_table_sums_the_distinct_runs_filling_it(tmp_path):
    cmp, _ = _toy_comparison(tmp_path)
    from repro.report.cells import cost_text
    cost = cmp.view("t", "full").cost  # 4 rows x 2 columns x 3 seeds, 90 s each; the stray f7 fills nothing
    assert (cost["runs"], cost["timed"], cost["compute_s"]) == (24, 24, 24 * 90.0)
    assert cost_text(cost) == "24 runs, 36.0 min of compute on cpu (x86_64, 2 threads)"
    size = cmp.view("size", "full").cost  # m1, m2 and the diverged m3: one record per row however many columns
    assert (size["runs"], size["compute_s"]) == (3, 270.0) and cost_text(size).startswith("3 runs, 4.5 min")
    assert cost_text({"runs": 1, "timed": 1, "compute_s": 42.0, "hardware": []}) == "1 run, 42 s of compute"


def test_derived_gap_is_computed_per_seed(tmp_path):
    cmp, _ = _toy_comparison(tmp_path)
    gap = cmp.cell(Ref("t", "f1", "gap"), "full")
    per_seed = [(o / b - 1) * 100 for b, o in zip(*T_VALUES["f1"])]
    assert gap.measured.values == pytest.approx(per_seed) and gap.n == 3
    assert gap.paper.text == "20%" and gap.delta == pytest.approx(sum(per_seed) / 3 - 20)
    unprinted = cmp.cell(Ref("t", "f2", "gap"), "full")
    assert unprinted.paper_text() == f"({(53 / 46 - 1) * 100:.3g})"  # computed from the printed operands


def test_values_are_compared_at_printed_precision(tmp_path):
    cmp, _ = _toy_comparison(tmp_path)
    c = lambda row, col: cmp.cell(Ref("size", row, col), "full")  # noqa: E731
    assert c("m1", "params").within_noise is True            # 27.4M prints as 27M
    assert c("m1", "params").measured_text() == "27.4M"
    assert c("m2", "params").within_noise is False           # 27.6M prints as 28M
    assert c("m1", "params_fine").within_noise is False      # 27.4M is not 27.78M
    assert c("m1", "params_fine").delta_text() == "-0.380M"
    assert c("m1", "heads").within_noise is True and c("m1", "heads").measured_text() == "4"
    assert c("m2", "heads").within_noise is False             # exact: 5 heads is not 4
    assert c("m1", "speed").within_noise is None and c("m1", "speed").measured_text() == "250.0"  # shown only
    assert c("m1", "top1").within_noise is False              # n=1: only the rounding, 70.2 vs 70.0
    assert c("m3", "top1").status == "diverged" and c("m3", "params").status == "not run"


def test_claim_verdicts_and_statistics(tmp_path):
    _, v = _toy_comparison(tmp_path)
    assert v[("ahead", "full")].verdict == "holds"
    assert "Welch" in v[("ahead", "full")].statistic and "3/3 comparisons hold" in v[("ahead", "full")].statistic
    assert v[("gap_shrinks", "full")].verdict == "holds"
    assert v[("gap_grows", "full")].verdict == "fails" and "Welch" in v[("gap_grows", "full")].statistic
    noisy = v[("noisy", "full")]
    assert noisy.verdict == "inconclusive" and "p(holds)=" in noisy.checks[0].statistic
    m1 = v[("m1_first", "full")]  # one seed per side: never holds/fails, whichever way the means lean
    assert m1.verdict == "inconclusive" and "which way the means lean" in m1.statistic
    assert m1.checks[0].statistic.startswith("70.2 vs 72: effect -1.8, unknown") and "leans lhs < rhs" in \
        m1.checks[0].statistic
    assert v[("bounded", "full")].verdict == "holds"
    assert v[("tight", "full")].verdict == "fails" and "0.5" in v[("tight", "full")].checks[0].statistic
    assert v[("same", "full")].verdict == "holds"
    assert v[("ghost", "full")].verdict == "invalid" and "f9" in v[("ghost", "full")].statistic
    un = v[("unmeasured", "full")]
    assert un.verdict == "not run" and "make reproduce PAPER=toy SCALE=full TABLES=size" in un.statistic
    gone = v[("diverged", "full")]  # ran and left no value: not "not run", and no command to rerun it
    assert gone.verdict == "inconclusive" and "make reproduce" not in gone.statistic
    assert gone.checks[0].statistic == "training diverged for size.m3.top1: no final value to compare"
    assert v[("listed", "full")].verdict == "not reproduced"
    chance = v[("above_chance", "full")]
    assert chance.verdict == "holds" and "one-sample t" in chance.checks[0].statistic
    assert v[("ahead", "full")].on_paper == "holds" and v[("m1_first", "full")].on_paper == "fails"


def test_a_rebuild_removes_the_figures_of_a_scale_without_records(tmp_path):
    """Records removed (e.g. a protocol remade): that scale's PNG goes, the others stay; so does an SVG left from
    when each figure was also written as SVG."""
    papers, results = make_toy(tmp_path)
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    figs = results / "toy" / "figures"
    for name in ("curve-cpu.png", "curve-full.svg"):
        (figs / name).write_text("from records since removed")
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    assert sorted(p.name for p in figs.iterdir()) == ["curve-full.png", "frac-full.png"]


def test_build_report_writes_every_output(tmp_path):
    papers, results = make_toy(tmp_path)
    paths = build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    out = results / "toy"
    assert {p.name for p in paths} == {"REPORT.md", "report.html", "summary.json", "cells.csv", "claims.csv", "comparisons.csv",
                                       "values.csv", "curve-full.png", "frac-full.png"}
    assert all(p.is_file() for p in paths)
    md, page = (out / "REPORT.md").read_text(), (out / "report.html").read_text()
    # scale, data, hardware, commit open the report
    assert "full" in page and "CIFAR-10 (32 px, synthetic)" in page and "abcdef012345-dirty" in page
    assert "cpu (x86_64, 2 threads)" in page and "torch 2.5.0" in page
    assert "0.78 h" in page  # 31 runs x 90 s of wall time
    assert "make reproduce PAPER=toy SCALE=full TABLES=size" in page  # the command filling 'not run' cells
    assert "Time to table: 24 runs, 36.0 min of compute on cpu (x86_64, 2 threads)." in page
    # paper text is text: no markup from the caption reaches the page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt; &amp; co" in page
    assert "<script>" not in md and "](report.html#t)" in md  # REPORT.md: the summary, linked into the page
    assert page.count('<img src="figures/') == 2 and "data:image" not in page  # the committed PNGs, linked
    s = json.loads((out / "summary.json").read_text())
    assert s["scales"] == ["full"] and s["commits"] == ["abcdef012345-dirty"]
    cost = {"runs": 24, "timed": 24, "compute_s": 2160.0, "hardware": ["cpu (x86_64, 2 threads)"]}
    assert s["tables"]["t"]["by_scale"]["full"].pop("setting") == s["settings"]["full"]  # one table's runs: here all
    assert s["tables"]["t"] == {"attempted": True, "cells": 8, "by_scale": {"full": {"measured": 8, "not_run": 0,
                                                                                      "invalid": 0, "cost": cost}}}
    assert {k: v for k, v in s["tables"]["size"]["by_scale"]["full"].items() if k not in ("cost", "setting")} == {
        "measured": 8, "not_run": 6, "invalid": 1}
    claims = {c["id"]: c for c in s["claims"]}
    assert claims["noisy"]["verdict"] == "inconclusive" and claims["m1_first"]["verdict"] == "inconclusive"
    assert claims["ahead"]["scale"] == "full" and "Welch" in claims["ahead"]["statistic"]
    assert sum(k.get("holds", 0) for k in s["verdicts"]["full"].values()) == 5


def test_corrupt_and_stray_records_are_visible_and_lose_nothing(tmp_path):
    papers, results = make_toy(tmp_path)
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    page = (results / "toy" / "report.html").read_text()
    s = json.loads((results / "toy" / "summary.json").read_text())
    assert any("zz-corrupt.json" in p and "unreadable record" in p for p in s["problems"])
    assert any("'stray'" in p and "'f7'" in p for p in s["problems"])
    assert page.count('class="verdict v-invalid">invalid</span>') >= 3  # 2 problems + the ghost claim
    assert 'data-table="t"' in page and 'data-table="size"' in page and 'data-table="layers"' in page
    assert "diverged" in page and "run m3 (seed 0) diverged; excluded" in page


def test_scales_are_reported_separately(tmp_path):
    papers, results = make_toy(tmp_path)
    for seed in range(3):
        _rec(results, f"small-base-{seed}", "t", "f1", {"base": "top1"}, {"top1": 30.0 + seed}, seed, scale="small")
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    s = json.loads((results / "toy" / "summary.json").read_text())
    assert s["scales"] == ["full", "small"]  # most informative first
    assert s["tables"]["t"]["by_scale"]["small"].pop("setting") == s["settings"]["small"]
    assert s["tables"]["t"]["by_scale"]["small"] == {"measured": 1, "not_run": 7, "invalid": 0, "cost": {
        "runs": 3, "timed": 3, "compute_s": 270.0, "hardware": ["cpu (x86_64, 2 threads)"]}}
    ahead = {c["scale"]: c["verdict"] for c in s["claims"] if c["id"] == "ahead"}
    assert ahead == {"full": "holds", "small": "not designed"}


def test_rebuild_is_fast_and_deterministic(tmp_path):
    papers, results = make_toy(tmp_path)
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    first = {p: p.read_bytes() for p in (results / "toy").rglob("*") if p.is_file() and "records" not in p.parts}
    start = time.perf_counter()
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    assert time.perf_counter() - start < 10
    again = {p: p.read_bytes() for p in (results / "toy").rglob("*") if p.is_file() and "records" not in p.parts}
    assert again == first  # the same files, byte for byte, and no file only the second build wrote


def test_notebook_without_kernel_is_executed_inline(tmp_path, monkeypatch):
    papers, results = make_toy(tmp_path)
    monkeypatch.setattr(nbmod, "kernel_available", lambda: False)  # as on a machine without ipykernel
    ipynb, page = nbmod.build("toy", papers, results, execute="auto")
    nb = nbformat.read(ipynb, as_version=4)
    assert nb.metadata["vitrepro"]["executed_with"] == "inline"
    # the notebook says how its outputs were computed
    assert "run_inline (no Jupyter kernel (ipykernel) is installed)" in nb.cells[0].source
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    htmls = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any('data-table="t"' in h and "41.00 ± 1.00" in h for h in htmls)
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
    text = page.read_text()
    assert "41.00 ± 1.00" in text and "<script>alert(1)</script>" not in text
    # unchanged inputs: the executed notebook is reused, not recomputed
    before = ipynb.stat().st_mtime_ns
    nbmod.build("toy", papers, results, execute="auto")
    assert ipynb.stat().st_mtime_ns == before


@pytest.mark.slow
def test_notebook_executes_in_a_kernel(tmp_path, monkeypatch):
    if not nbmod.kernel_available():
        pytest.skip("ipykernel is not installed: the notebook is executed in-process instead")
    papers, results = make_toy(tmp_path)
    (papers / "toy2").mkdir()
    (papers / "toy2" / "paper.yaml").write_text(TOY.replace("id: toy", "id: toy2"))
    monkeypatch.chdir(REPO)  # the kernel imports repro from the working directory
    build_all(papers, results, notebook_execute="kernel")  # one kernel shared by both notebooks
    for pid in ("toy", "toy2"):
        nb = nbformat.read(results / pid / "report.ipynb", as_version=4)
        assert nb.metadata["vitrepro"]["executed_with"] == "kernel"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert [c.execution_count for c in code] == list(range(1, len(code) + 1))
        outputs = [o for c in code for o in c.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        if pid == "toy":
            assert any("41.00 ± 1.00" in o.get("data", {}).get("text/html", "") for o in outputs)


def test_the_notebook_is_built_on_request_only(tmp_path):
    """A report build writes no notebook (minutes of execution, never committed) unless --notebook asks."""
    papers, results = make_toy(tmp_path)
    plan_toy(results)
    args = ["--papers-dir", str(papers), "--results-dir", str(results), "--allow-invalid", "--paper", "toy"]
    assert main(args) == 0
    assert (results / "toy" / "report.html").is_file() and not (results / "toy" / "report.ipynb").exists()
    assert main([*args, "--notebook", "inline"]) == 0
    assert nbformat.read(results / "toy" / "report.ipynb", as_version=4).metadata["vitrepro"]["executed_with"]


def test_index_lists_papers_with_verdicts_and_broken_papers(tmp_path):
    papers, results = make_toy(tmp_path)
    (papers / "broken").mkdir()
    (papers / "broken" / "paper.yaml").write_text("id: broken\ntitle: [unclosed\n")
    plan_toy(results)
    assert main(["--papers-dir", str(papers), "--results-dir", str(results), "--notebook", "none",
                 "--allow-invalid"]) == 1  # make_toy's invalid records are skipped; the broken paper fails
    index = (results / "index.html").read_text()
    assert 'href="toy/report.html"' in index and "inconclusive" in index and "m1_first" in index
    assert "broken" in index and "paper.yaml:3" in index  # the YAML error with its line, the other paper intact
    assert (results / "toy" / "report.html").is_file()
    build_index(papers, results)  # without errors passed in, a paper with no summary says how to build it
    assert "no report built yet" in (results / "index.html").read_text()


def test_cli_unknown_paper_exits_2_listing_known(tmp_path, capsys):
    papers, results = make_toy(tmp_path)
    assert main(["--paper", "nope", "--papers-dir", str(papers), "--results-dir", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown paper 'nope'; known papers: toy"


def test_convit_claims_hold_on_the_printed_numbers():
    """A transcription check: every claim in papers/convit/paper.yaml holds on the paper's own numbers
    (Figure 8's claims have none: the paper only plots them)."""
    paper = load_paper(REPO / "papers" / "convit" / "paper.yaml")
    verdicts = judge_all(compare(paper, []))
    plotted = {"fig8_locality_helps", "fig8_gpsa_layers_help", "fig4_sa_layers_become_local",
               "fig4_gpsa_layers_escape_locality", "fig6_late_gates_favour_content",
               "t2_convit_ahead_of_equal_size_deit"}  # ours: the equal-size control is not in the paper
    assert {v.claim.id: v.on_paper for v in verdicts} == {c.id: "" if c.id in plotted else "holds" for c in paper.claims}
    assert all(v.verdict == ("timing" if v.claim.evidence == "timing" else "not run") for v in verdicts)


def test_convit_report_from_synthetic_records(tmp_path):
    results = tmp_path / "results"
    for i, row in enumerate(["f5", "f10", "f30", "f50", "f100"]):
        for seed in range(3):
            for model, gain in (("deit", 0.0), ("convit", 8.0 - i)):
                acc = 30 + 5 * i + gain + seed * 0.3
                write_record(dict(run_id=f"{model}-{row}-{seed}", paper="convit", table="table2",
                                  cell={"row": row, "columns": {f"{model}_top1": "top1", f"{model}_top5": "top5"}},
                                  scale="full", seed=seed, status="finished",
                                  metrics={"top1": acc, "top5": acc + 20, "nonlocality": [3.0, 2.0, 1.0 + seed / 10]},
                                  config={}, provenance={"git_sha": "x", "device": "cpu"}), root=results)
    build_report("convit", papers_dir=REPO / "papers", results_dir=results, notebook_execute=None)
    s = json.loads((results / "convit" / "summary.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in s["claims"]}
    assert verdicts["t2_convit_ahead_top1"] == "holds" and verdicts["t2_gap_shrinks_top1"] == "holds"
    assert verdicts["t1_convit_beats_deit"] == "not run"
    t2 = s["tables"]["table2"]["by_scale"]["full"]
    assert t2.pop("cost")["timed"] == 0  # these synthetic records carry no wall time
    assert t2.pop("setting").startswith("probes only")  # their configs name no model
    assert t2 == {"measured": 20, "not_run": 10, "invalid": 0}  # the equal-size DeiT's 10 cells: no records here
    assert (results / "convit" / "figures" / "nonlocality-full.png").is_file()
    assert (results / "convit" / "figures" / "accuracy_vs_fraction-full.png").is_file()
    assert not (results / "convit" / "figures" / "gating-full.png").exists()  # no gating metric recorded


def test_cells_a_scale_never_runs_are_not_offered_a_command(tmp_path):
    from repro.report.html import cell_title, fragment

    papers, results = make_toy(tmp_path)
    paper = load_paper(papers / "toy" / "paper.yaml")
    recs, bad = load_records("toy", root=results)
    view = compare(paper, recs, bad).view("size", "full")
    assert view.unscheduled() == 0 and view.counts()["not_run"] == 6  # nothing known: every cell fillable
    defined = {"full": {("size", "m3", "params"), ("size", "m1", "params")}}
    cmp = compare(paper, recs, bad, defined)
    view = cmp.view("size", "full")
    assert view.counts()["not_run"] == 6 and view.unscheduled() == 5
    assert cell_title(view.cells[("m3", "params")], view.command).endswith("TABLES=size")
    assert cell_title(view.cells[("m3", "heads")], view.command) == (
        "not run: this scale's experiments define no run for it")
    text = fragment("table_view", view)
    assert "Not run: 1 cell(s). Fill them with <code class=\"cmd\">make reproduce PAPER=toy SCALE=full TABLES=size" in text
    assert "Not run at scale <code>full</code>: 5 cell(s) that this scale's experiments do not define" in text


# ------------------------------------------------------------------ figures that read, notebooks that run

def _drawn(tmp_path, figure_id, yaml_edit=None):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from repro.report import figures
    papers, results = make_toy(tmp_path)
    if yaml_edit:
        path = papers / "toy" / "paper.yaml"
        path.write_text(yaml_edit(path.read_text()))
    paper = load_paper(papers / "toy" / "paper.yaml")
    cmp = compare(paper, *load_records("toy", root=results))
    mpl = figures.draw(cmp, next(f for f in paper.figures if f.id == figure_id), "full")
    FigureCanvasAgg(mpl).draw()
    return mpl, mpl.axes[0]


def test_figures_have_integer_counts_distinct_series_outside_legends_and_say_what_they_show(tmp_path):
    _, ax = _drawn(tmp_path, "curve")
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks)  # layers are counts: no "layer 1.25"
    title = ax.get_title()
    assert "norm per layer" in title and "scale full" in title and "CIFAR-10 (32 px, synthetic)" in title
    _, ax = _drawn(tmp_path / "b", "frac")
    lines = [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    styles = {(ln.get_marker(), ln.get_linestyle()) for ln in lines}
    assert len(lines) >= 2 and len(styles) == len(lines)  # every series tells itself apart
    legend = ax.get_legend()
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # beside the axes, not over data


def test_vs_rows_axis_shows_the_values_our_runs_used(tmp_path):
    """x_from: our points sit at the x in the runs' configs (here the image size, 32), not the paper's."""
    _, ax = _drawn(tmp_path, "frac", lambda t: t.replace("kind: vs_rows, table: t, x_scale: log,",
                                                           "kind: vs_rows, table: t, x_from: data.img_size,"))
    measured = [c for c in ax.containers if "(measured)" in str(c.get_label())]
    assert measured and all(set(c.lines[0].get_xdata()) == {32.0} for c in measured)
    assert "32" in [t.get_text() for t in ax.get_xticklabels()]


def test_figures_are_written_once_as_png(tmp_path):
    """One format per figure: the PNG the pages show (the notebook draws its own)."""
    papers, results = make_toy(tmp_path)
    build_report("toy", papers_dir=papers, results_dir=results, notebook_execute=None)
    figs = sorted((results / "toy" / "figures").iterdir())
    assert figs and all(p.suffix == ".png" and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in figs)


def test_notebook_finds_its_paper_from_its_own_folder_and_from_the_root(monkeypatch, built_notebooks):
    """The committed notebook's cells run where `jupyter nbconvert --execute` runs them (results/<id>/) and
    from the repository root; its cells.csv cell gives a DataFrame."""
    nb = nbformat.read(REPO / "results" / "convit" / "report.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "ReportView('convit')" in code[0] and "pd.read_csv(report.cells_csv)" in "\n".join(code)
    for where in (REPO / "results" / "convit", REPO):
        monkeypatch.chdir(where)
        namespace: dict = {}
        exec(code[0], namespace)  # noqa: S102 - the committed notebook's own cell
        cells_cell = next(c for c in code if "read_csv" in c)
        exec(cells_cell, namespace)  # noqa: S102
        cells = namespace["cells"]
        assert len(cells) > 100 and {"table", "row", "scale", "mean", "paper_value"} <= set(cells.columns)


@pytest.mark.slow
def test_report_build_with_a_kernel_is_quiet(tmp_path):
    """Building reports prints what it wrote, and no kernel chatter (the IPKernelApp TCP warning)."""
    import subprocess
    import sys
    if not nbmod.kernel_available():
        pytest.skip("ipykernel is not installed: the notebook is executed in-process instead")
    papers, results = make_toy(tmp_path)
    plan_toy(results)
    out = subprocess.run([sys.executable, "-m", "repro.report", "--paper", "toy", "--papers-dir", str(papers),
                          "--results-dir", str(results), "--notebook", "kernel", "--allow-invalid"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IPKernelApp" not in out.stderr and "WARNING" not in out.stderr, out.stderr[-2000:]
    assert nbformat.read(results / "toy" / "report.ipynb", as_version=4).metadata["vitrepro"]["executed_with"] == "kernel"


@pytest.mark.slow
def test_jupyter_executes_the_committed_notebook_from_its_folder(tmp_path, built_notebooks):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute", "report.ipynb",
                          "--output", str(tmp_path / "nb.html")], cwd=REPO / "results" / "convit",
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in (tmp_path / "nb.html").read_text()


@pytest.mark.parametrize("paper", ["convit", "cmhsa", "oversmoothing", "augvit", "respostln"])
def test_committed_summary_quotes_every_judged_training_comparison_in_numbers(paper):
    """Every training claim judged at a scale above tiny names that scale's setting, and each of its measured
    comparisons carries a numeric effect inside its 95 % interval, both one-sided p (raw and Holm), >= 3 seeds
    per measured side and the smallest effect those seeds resolve; comparisons.csv has one row per comparison (one
    for a claim without any) of summary.json's claims and preconditions, with the same numbers, and claims.csv one
    row per claim and scale. A comparison with
    fewer than 3 seeds on a side (a campaign still running) is inconclusive with its effect and n, and no test."""
    summary = json.loads((REPO / "results" / paper / "summary.json").read_text())
    judged = [c for c in summary["claims"] if c["kind"] == "training" and c["scale"] != "tiny"
              and c["verdict"] not in ("not run", "not designed")]
    for claim in judged:
        assert claim["setting"] == summary["settings"][claim["scale"]] and "seed" in claim["setting"], claim["id"]
        measured = [c for c in claim["comparisons"] if c["verdict"] not in ("not run", "not testable")]
        assert measured, claim["id"]
        for c in (c for c in measured if c["method"] == "lean"):
            assert c["verdict"] == "inconclusive" and c["effect"] is not None and c["ci95"] is None, c
            assert min(n for n in c["n"] if n != "const") < 3 and "< 3 seeds" in c["statistic"], c
        for c in (c for c in measured if c["method"] != "lean"):
            lo, hi = c["ci95"]
            assert lo <= c["effect"] <= hi, (claim["id"], c)
            assert all(0 <= c[k] <= 1 for k in ("p_holds", "p_fails", "p_holds_holm", "p_fails_holm")), c
            assert c["p_holds_holm"] >= c["p_holds"] and c["p_fails_holm"] >= c["p_fails"], c
            seeds = [n for n in c["n"] if n != "const"]  # a side may be a constant (a bound, a chance level)
            assert seeds and min(seeds) >= 3 and c["resolvable_effect"] > 0, c
    rows = list(csv.DictReader((REPO / "results" / paper / "comparisons.csv").open()))
    entries = summary["claims"] + summary["preconditions"]
    assert len(rows) == sum(len(c["comparisons"] or [None]) for c in entries)
    claims = list(csv.DictReader((REPO / "results" / paper / "claims.csv").open()))
    assert [(r["claim"], r["scale"]) for r in claims] == [(c["id"], c["scale"] or "") for c in entries]
    quoted = {(r["claim"], r["scale"], r["comparison"]): r for r in rows}
    for claim in judged:
        for c in claim["comparisons"]:
            row = quoted[claim["id"], claim["scale"], f"{c['lhs']} {c['relation']} {c['rhs']}"]
            assert row["verdict"] == claim["verdict"] and row["setting"] == claim["setting"]
            assert row["effect"] == ("" if c["effect"] is None else str(c["effect"]))


def _row_verdicts(page: str) -> dict:
    """(claim, scale) -> verdict class of each claim row of a report page, its comparisons' badges left out."""
    out = {}
    for chunk in page.split('<tr id="claim-')[1:]:
        key, body = chunk.split('"', 1)
        body = re.sub(r"<details>.*?</details>", "", body.split("</tr>\n  <tr", 1)[0], flags=re.S)
        found = re.search(r'class="verdict v-([a-z-]+)" data-scale="(\w+)"', body)
        claim, scale = key.rsplit("-", 1)
        assert found and found.group(2) == scale, key
        out[claim, scale] = found.group(1)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("paper", ["convit", "cmhsa", "oversmoothing", "augvit", "respostln"])
def test_report_index_and_notebook_built_from_the_records_agree_on_every_verdict(paper, tmp_path):
    """One code path decides verdicts: report.html, REPORT.md, summary.json, claims.csv, the index and the
    executed notebook, all rebuilt here from the committed records, give every (claim, scale) the same one."""
    out = tmp_path / "results"
    shutil.copytree(REPO / "results" / paper, out / paper, ignore=shutil.ignore_patterns("figures", "*.html",
                                                                                         "*.ipynb"))
    build_report(paper, REPO / "papers", out)
    build_index(REPO / "papers", out)
    nbmod.build(paper, REPO / "papers", out, execute="inline")
    summary = json.loads((out / paper / "summary.json").read_text())
    expected = {(c["id"], c["scale"] or "none"): c["verdict"].replace(" ", "-") for c in summary["claims"]}
    regime = {(c["id"], c["scale"] or "none"): chip(c["verdict"], "precondition")["cls"].removeprefix("v-")
              for c in summary["preconditions"]}  # a precondition reads met / not met
    assert _row_verdicts((out / paper / "report.html").read_text()) == expected | regime
    assert _row_verdicts((out / paper / "notebook.html").read_text()) == expected | regime
    index = re.findall(rf'class="verdict v-([a-z-]+)" data-scale="(\w+)">[^<]*</span>\s*'
                       rf'<a href="{paper}/report\.html#claim-([^"]+)-(\w+)">', (out / "index.html").read_text())
    assert {(claim, scale): v for v, s, claim, scale in index if s == scale} == expected and len(index) == len(expected)
    rows = csv.DictReader((out / paper / "claims.csv").open())
    assert {(r["claim"], r["scale"] or "none"): r["verdict"].replace(" ", "-") for r in rows if r["claim"] in
            {c for c, _ in expected}} == expected
    markdown = (out / paper / "REPORT.md").read_text()  # the summary: the first screen's rows
    for row in (r for b in summary["first_screen"] for r in b["rows"]):
        assert re.search(rf"^\| \[\*\*{row['id']}\*\*\]\(report\.html#claim-{row['id']}-{row['scale']}\).*\| "
                         rf"{re.escape(row['symbol'])} {re.escape(row['label'])}", markdown, re.M), row["id"]


def _committed(paper: str, figure_id: str, scale: str = "cpu"):
    """A figure drawn from the committed records, with its comparison (one paper: under a second)."""
    from repro.report import figures
    from repro.report.assess import assess, read_plans

    spec = load_paper(REPO / "papers" / paper / "paper.yaml")
    records, bad = load_records(paper, root=REPO / "results")
    cmp = assess(spec, records, bad, read_plans(paper, records, REPO / "results")).cmp
    fig = next(f for f in spec.figures if f.id == figure_id)
    return cmp, fig, figures.draw(cmp, fig, scale).axes[0]


def _levels(ax, prefix: str) -> list[tuple]:
    return [(tuple(ln.get_xdata()), tuple(ln.get_ydata())) for ln in ax.get_lines()
            if ln.get_label().startswith(prefix)]


@pytest.mark.parametrize("figure_id", ["gating", "gating_training"])
def test_gate_figures_draw_the_level_the_gates_precondition_judges_the_last_gpsa_layer_against(figure_id):
    """pre_gates_moved judges fig6_gates' last-layer gate (a point of these curves, measured on the same runs)
    against the gate at init less 0.05: that level, named and said to be about the last GPSA layer."""
    cmp, _, ax = _committed("convit", figure_id)
    init = cmp.cell(Ref("fig6_gates", "convit", "gate_init"), "cpu").mean
    (level,) = _levels(ax, "pre_gates_moved")
    assert level[1] == pytest.approx((init - 0.05,) * 2)
    label = next(ln.get_label() for ln in ax.get_lines() if ln.get_label().startswith("pre_gates_moved"))
    assert "last GPSA layer" in label.replace("\n", " ") and "< 0.681" in label


def test_loss_figure_draws_the_early_means_its_claims_compare_and_the_similarity_bound():
    """CMHSA's Figure 2 claims compare each curve's mean over the first half of the epochs (early loss), and
    bound the conv-init gap (w/o - w/ warm-up) by 0.05: the four means as segments over those epochs, the
    bound as the w/ warm-up mean + 0.05 over the same span, and the caption says what is compared."""
    scale = "tiny"  # the committed scale with Figure 2's runs all recorded (cpu's campaign fills in)
    cmp, fig, ax = _committed("cmhsa", "figure2", scale)
    early = {(row, col): cmp.cell(Ref("figure2", row, col), scale).mean
             for row in ("conv_init", "random_init") for col in ("early_loss_warm", "early_loss_nowarm")}
    epochs = len(next(ln for ln in ax.get_lines() if ln.get_label().startswith("Conv init")).get_xdata())
    half = (1, -(-epochs // 2))  # the first half of the epochs, the middle one included
    segments = {ys[0] for xs, ys in _levels(ax, "_") if xs == half and ys[0] == ys[1]}
    assert all(any(abs(v - y) < 1e-9 for y in segments) for v in early.values())
    assert _levels(ax, f"mean of epochs 1-{half[1]}")  # one legend entry says what the segments are
    (bound,) = _levels(ax, "f2_conv_init_losses_similar: <=")
    assert bound == (half, (early["conv_init", "early_loss_warm"] + 0.05,) * 2)
    assert "the claims compare the curves' means over the first half of the epochs" in fig.caption


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 - 1 and b.x0 < a.x1 - 1 and a.y0 < b.y1 - 1 and b.y0 < a.y1 - 1


@pytest.mark.slow
@pytest.mark.parametrize("paper", ["convit", "cmhsa", "oversmoothing", "augvit", "respostln", "crosspaper"])
def test_committed_figures_show_their_whole_text(paper):
    """Every figure drawn from the committed records: the title holds the whole caption, the title clears the
    legend and the axes, the y label is no taller than its axes, and the committed PNG has the extent of the
    tight box around every artist (so nothing of the text is cut from the saved file)."""
    from PIL import Image
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from repro.report import figures
    from repro.report.assess import assess, read_plans

    spec = load_paper(REPO / "papers" / paper / "paper.yaml")
    records, bad = load_records(paper, root=REPO / "results")
    cmp = assess(spec, records, bad, read_plans(paper, records, REPO / "results")).cmp
    drawn = 0
    for fig in spec.figures:
        for scale in cmp.scales:
            mpl = figures.draw(cmp, fig, scale)
            if mpl is None:
                continue
            drawn += 1
            mpl.set_dpi(110)  # the saved PNG's resolution
            renderer = FigureCanvasAgg(mpl).get_renderer()
            mpl.draw(renderer)
            ax = mpl.axes[0]
            title = ax.title.get_window_extent(renderer)
            assert " ".join(fig.caption.split()) in " ".join(ax.get_title().split()), fig.id
            assert not _overlap(title, ax.get_window_extent(renderer)), (fig.id, scale)
            if ax.get_legend():
                assert not _overlap(title, ax.get_legend().get_window_extent(renderer)), (fig.id, scale)
            assert ax.yaxis.label.get_window_extent(renderer).height <= ax.get_window_extent(renderer).height
            png = REPO / "results" / paper / "figures" / f"{fig.id}-{scale}.png"
            box = mpl.get_tightbbox(renderer)  # inches; saved with bbox_inches="tight" at 110 dpi (+ padding)
            width, height = Image.open(png).size
            assert abs(width - (box.width + 0.2) * 110) <= 3 and abs(height - (box.height + 0.2) * 110) <= 3, png
    assert drawn
