"""Every quoted number carries its own setting (issue 61): read from the committed reports, so each test fails
on a report that quotes a number under another setting than its own runs'."""
from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

from repro.paper import load_paper
from repro.report.setting import joined, run_setting

ROOT = Path(__file__).resolve().parents[1]


def _screen(paper: str, scale: str = "cpu") -> dict:
    summary = json.loads((ROOT / "results" / paper / "summary.json").read_text())
    block = next(b for b in summary["first_screen"] if b["scale"] == scale)
    return {r["id"]: r for r in block["rows"]}


def test_augvit_rows_show_their_own_image_size_state_and_size():
    """Each row quotes the setting of the comparison that decided it: the diversity claims whose trained cut
    decides rest on the 32-px, 80-epoch Aug-ViT; msa_shortcuts_matter_most on Aug-ViT-S at 224 px at
    initialisation; beyond_identity_relative on the small model at initialisation."""
    rows = _screen("augvit")
    for claim in ("no_collapse", "beyond_identity", "mlp_shortcuts_assist"):
        s = rows[claim]["setting"]
        assert s["img_size"] == [32] and s["state"] == ["trained"] and s["families"] == ["Aug-ViT"]
        assert s["epochs"] == "80" and "32 px · trained" in s["text"] and "0.36M" in s["text"]
    init = rows["msa_shortcuts_matter_most"]["setting"]
    assert init["img_size"] == [224] and init["state"] == ["at init"] and init["families"] == ["Aug-ViT"]
    assert "224 px · at init" in init["text"] and "22.1M" in init["text"] and "epochs" not in init["text"]
    rel = rows["beyond_identity_relative"]["setting"]
    assert rel["state"] == ["at init"] and "epochs" not in rel["text"] and rel["families"] == ["Aug-ViT"]
    pair = rows["augvit_beats_deit_reduced"]["setting"]
    assert pair["families"] == ["Aug-ViT", "DeiT"] and pair["short"] == "32 px, trained 80 epochs, 0.35M/0.36M"
    page = (ROOT / "results" / "augvit" / "report.html").read_text()
    index = (ROOT / "results" / "index.html").read_text()
    for text in (page, index):
        assert rows["no_collapse"]["setting"]["text"] in text


def test_cells_csv_carries_image_size_state_family_and_device():
    rows = list(csv.DictReader((ROOT / "results" / "augvit" / "cells.csv").open()))
    init = next(r for r in rows if (r["table"], r["row"], r["column"]) == ("diversity_init", "augvit_s", "div_b"))
    assert (init["img_size"], init["state"], init["family"], init["device"]) == ("224", "at init", "Aug-ViT", "cpu")
    key = ("table", "row", "column", "scale")
    trained = next(r for r in rows if tuple(r[k] for k in key) == ("ablations", "augvit", "top1", "tiny"))
    assert (trained["img_size"], trained["state"], trained["family"], trained["epochs"]) == ("32", "trained", "Aug-ViT", "4")


def test_a_comparison_pooling_hardware_says_so():
    rec = {"kind": "train", "config": {"model": {"name": "repro_deit_tiny"}, "data": {"img_size": 32}},
           "metrics": {"epochs": 5, "params": 5e5}}
    runs = [run_setting({**rec, "provenance": {"device": d}}) for d in ("cpu", "NVIDIA H100 80GB HBM3")]
    s = joined(runs)
    assert s["pooled"] and "pooled: NVIDIA H100 80GB HBM3 + cpu" in s["text"]
    assert not joined(runs[:1])["pooled"]
    pooled = _screen("oversmoothing")["t1_every_loss_raises_accuracy"]["setting"]  # its seeds ran on two CPUs' runs
    assert pooled["pooled"] and "pooled:" in pooled["text"]


def test_a_variant_is_named_by_what_it_builds():
    """A DeiT class with augmented shortcuts is an Aug-ViT; a Res-Post-LN block norm is named."""
    rec = {"kind": "train", "config": {"model": {"name": "repro_deit_tiny_c32", "kwargs": {"aug_paths": 2}}},
           "metrics": {}}
    assert run_setting(rec)["family"] == "Aug-ViT"
    rec["config"]["model"]["kwargs"] = {"norm": "res_post_ln"}
    assert run_setting(rec)["family"] == "DeiT (Res-Post-LN)"


# Every block is cut from one source: the README blocks quote the report's rows.

def _block(path: Path) -> str:
    text = path.read_text()
    return text[text.index("<!-- results:begin -->"):text.index("<!-- results:end -->")]


def _papers() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "papers").glob("*/paper.yaml"))


def test_top_readme_counts_every_kind_as_claims_csv_and_report_md_do():
    """Each column of the top README's table counts the claims of its kind (the paper's training claims, cited,
    ours, theory, preconditions) with their verdicts, as claims.csv lists them and REPORT.md's headline counts
    them: a theory claim of ours is in "ours", not in "theory"; a designed claim not run yet is counted."""
    block = _block(ROOT / "README.md")
    assert "| the paper's training claims | cited | ours | theory | preconditions |" in block
    columns = {"training": 3, "cited": 4, "ours": 5, "theory": 6, "precondition": 7}
    paper = None
    for line in (x for x in block.splitlines() if x.startswith("| ") and "| scale |" not in x):
        cells = [c.strip() for c in line.split("|")]
        paper = re.search(r"\[(\w+)\]", cells[1]).group(1) if cells[1] else paper
        if cells[2] != "cpu":
            continue
        rows = [r for r in csv.DictReader((ROOT / "results" / paper / "claims.csv").open())
                if r["scale"] == "cpu" and r["verdict"] not in ("not designed", "smoke")]
        for kind, i in columns.items():
            want = Counter(r["verdict"] for r in rows if r["kind"] == kind)
            shown = {v: int(n) for n, v in re.findall(r"(\d+) ([a-z ]+?)(?:,|;|$| \()", cells[i].split(";")[0])}
            assert shown == dict(want), (paper, kind, cells[i])
    tiny = [line for line in block.splitlines() if "| tiny |" in line]
    assert tiny and all(line.split("|")[3].strip() == "smoke" for line in tiny)  # no training judged there


def test_every_readme_row_quotes_the_reports_deciding_comparison():
    """A paper README's effect is the report's (claims.csv, the comparison its verdict rests on), never the
    weakest of several comparisons chosen apart."""
    for pid in _papers():
        claims = {(r["claim"], r["scale"]): r for r in csv.DictReader((ROOT / "results" / pid / "claims.csv").open())}
        comps = list(csv.DictReader((ROOT / "results" / pid / "comparisons.csv").open()))
        scale = None
        for line in _block(ROOT / "papers" / pid / "README.md").splitlines():
            if line.startswith("**"):
                scale = line.split("**")[1]
            if line.startswith("| `"):
                cells = [c.strip() for c in line.split("|")]
                claim = claims[(cells[1].split("`")[1], scale)]
                effect = f"{float(claim['effect']):+.3g}" if claim["effect"] else "-"  # "-": a claim not run yet
                assert cells[3].split(" ")[0] == effect, (pid, cells[1])  # one sign
                if " <= " in claim["compared"]:  # below a bound: + is how far below, the raw lhs - rhs negated
                    raw = [float(c["effect"]) for c in comps if (c["claim"], c["scale"]) == (claim["claim"], scale)
                           and c["effect"]]
                    assert any(abs(r + float(claim["effect"])) <= 1e-3 * max(1.0, abs(r)) for r in raw), cells[1]
                paper = f"{float(claim['paper_effect']):+.3g}" if claim["paper_effect"] else "-"
                assert cells[4] == paper, (pid, cells[1])


def test_no_precondition_reads_holds_or_fails_in_any_file():
    words = ("holds", "fails")
    for pid in _papers():
        summary = json.loads((ROOT / "results" / pid / "summary.json").read_text())
        ids = {c["id"] for c in summary["preconditions"]}
        for c in summary["preconditions"]:
            assert c["verdict"] not in words and all(x["verdict"] not in words for x in c["comparisons"]), c["id"]
        for c in summary["claims"]:
            assert all(r["verdict"] not in words for r in c["requires"]), c["id"]
        for name, field in (("claims.csv", "verdict"), ("comparisons.csv", "comparison_verdict")):
            for r in csv.DictReader((ROOT / "results" / pid / name).open()):
                assert r["claim"] not in ids or (r[field] not in words and r["verdict"] not in words), (pid, name)
        for line in _block(ROOT / "papers" / pid / "README.md").splitlines():
            if line.startswith("Preconditions:"):
                assert not any(f"` {w}" in line for w in words), pid


# A claim family corrected together.

def test_the_cross_paper_rows_against_one_baseline_are_holm_corrected_across_the_family():
    rows = _screen("crosspaper")
    e10 = {k: r["family"] for k, r in rows.items() if k.endswith("_e10")}
    assert len(e10) == 5 and {f["size"] for f in e10.values()} == {5} and {f["table"] for f in e10.values()} == {"ideas_e10"}
    convit = e10["convit_beats_baseline_e10"]
    assert (convit["side"], convit["p"], convit["p_holm"]) == ("holds", 0.0135, 0.0674)  # 5 x 0.0135, Holm's first step
    assert rows["convit_beats_baseline_e10"]["p"] == convit["p"]  # the row's own p kept beside it
    index = (ROOT / "results" / "index.html").read_text()
    table = index.split('class="featured-table"', 1)[1].split("</table>", 1)[0]
    assert "p across the 5 rows (Holm)" in table and "p (one-sided, Holm within the claim)" in table
    assert "holds on its own p, not across the family" in table
    assert "A claim family: these 5 rows are each compared with the one reference row" in index
    assert "Holm across the 5 rows compared with" in (ROOT / "results" / "crosspaper" / "REPORT.md").read_text()


# The effect column reads one way; the index opens with a line per paper.

def test_effects_read_in_the_claims_direction_with_p_labelled_and_the_reason_for_open_rows():
    rows = _screen("augvit")
    bound = rows["no_collapse"]  # (b)'s curve at or below (d)'s: lhs - rhs < 0 is the claim's side
    assert bound["relation"] == "<=" and bound["effect"] > 0 > bound["toward"]["effect"] == -bound["effect"]
    greater = rows["augvit_beats_deit_reduced"]  # lhs - rhs > 0 is the claim's side: shown as it is
    assert greater["relation"] == ">" and greater["toward"]["effect"] == greater["effect"] < 0
    readme = _block(ROOT / "papers" / "augvit" / "README.md")
    assert "| `no_collapse` | " in readme and f"| {bound['toward']['effect']:+.3g} [" in readme
    assert "+ = the claim's direction" in readme
    page = (ROOT / "results" / "augvit" / "report.html").read_text()
    assert "ours, 95 % CI (+ = the claim's direction)" in page and "p (one-sided, Holm) " in page
    assert "<title>in the claim's direction" in page  # the forest plot's axis
    for row in (r for r in _screen("cmhsa").values() if r["verdict"] == "inconclusive"):
        assert row["why"], row["id"]
        assert f"inconclusive ({row['why']})" in _block(ROOT / "papers" / "cmhsa" / "README.md") or row["result"]
    assert 'data-label="verdict"' in page  # the 390-px cards keep their labels


def test_the_index_opens_with_one_line_per_paper():
    index = (ROOT / "results" / "index.html").read_text()
    lead = index.split('<table class="lead" id="lead">', 1)[1].split("</table>", 1)[0]
    assert index.index('id="lead"') < index.index('id="glance"')
    for pid in _papers():
        line = lead.split(f'href="#glance-{pid}"', 1)[1].split("</tr>", 1)[0]
        if not _screen(pid):  # a paper whose campaign has not yet judged a training claim says so
            assert "no scale judges a training claim yet" in line, pid
            continue
        shown = [r for r in _screen(pid).values() if r["verdict"] != "not run"]
        rows = [r for r in shown if r["kind"] == "training"] or shown
        in_regime = [r for r in rows if r["verdict"] in ("holds", "fails", "inconclusive")]
        row = (in_regime or rows)[0]
        assert row["id"] in line and row["setting"]["short"] in line, pid
    augvit = lead.split('href="#glance-augvit"', 1)[1].split("</tr>", 1)[0]
    assert "augvit_beats_deit_reduced" in augvit and "no_collapse" not in augvit  # judged in regime, not outside it
    oversmoothing = lead.split('href="#glance-oversmoothing"', 1)[1].split("</tr>", 1)[0]
    assert "outside the paper" in oversmoothing  # no claim in its regime: the first, outside it, leads


def test_a_claim_over_a_tables_rows_says_which_rows_it_was_tested_at():
    row = _screen("convit")["t2_convit_ahead_top1"]
    assert row["scope"] == "tested at 10%, 100% (2 of 5 rows the paper prints)"
    assert row["scope"] in (ROOT / "results" / "convit" / "REPORT.md").read_text()
    assert row["scope"] in (ROOT / "results" / "index.html").read_text()


def test_values_csv_is_the_long_table_one_row_per_record_with_its_own_setting():
    rows = list(csv.DictReader((ROOT / "results" / "augvit" / "values.csv").open()))
    cells = {(r["table"], r["row"], r["column"], r["scale"]): r
             for r in csv.DictReader((ROOT / "results" / "augvit" / "cells.csv").open())}
    init = [r for r in rows if (r["table"], r["row"], r["column"], r["scale"]) == ("diversity_init", "augvit_s", "div_b", "cpu")]
    cell = cells[("diversity_init", "augvit_s", "div_b", "cpu")]
    assert len(init) == int(cell["n"]) and {r["run_id"] for r in init} == set(cell["record_ids"].split(";"))
    assert {(r["img_size"], r["state"], r["device"]) for r in init} == {("224", "at init", "cpu")}
    assert [f"{float(r['value']):.6g}" for r in init] == cell["values"].split(";")  # cells.csv rounds to 6 digits


def test_the_cross_paper_table_in_the_index_states_each_rows_scope():
    """The index's table says what REPORT.md says: the budget caveat of the 10-epoch table, and that the
    Res-Post-LN row is a question of ours (the supplement claims stability, not accuracy)."""
    table = (ROOT / "results" / "index.html").read_text().split('id="featured-crosspaper"', 1)[1].split("</details>")[0]
    assert "whether 10 epochs still limit the comparison is not measured" in table
    assert "the supplement claims stability, not accuracy" in table


def test_a_setting_pairs_each_data_fraction_with_its_own_epochs():
    """Epochs x 1/f: '10 %/all ... 10/100 epochs' read 10 % with 10 epochs; the pair is named together."""
    run = {"img_size": 32, "state": "trained", "label": "DeiT", "family": "DeiT", "params": 680_000,
           "dataset": "CIFAR-10 (JPEG q75)", "device": "cpu"}
    s = joined([{**run, "fraction": 0.1, "epochs": 100}, {**run, "fraction": 1.0, "epochs": 10}])
    assert "trained 10 % at 100 / all at 10 epochs" in s["short"] and "10/100" not in s["short"]
    assert "10 % at 100 / all at 10 epochs" in s["text"]
    same = joined([{**run, "fraction": 0.1, "epochs": 10}, {**run, "fraction": 1.0, "epochs": 10}])
    assert "trained 10 epochs" in same["short"] and "10 %/all" in same["text"]  # one epoch count: shown apart
