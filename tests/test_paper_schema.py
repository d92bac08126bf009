"""paper.yaml loading: printed precision, line-numbered errors, problems that never lose the paper."""
import re
from pathlib import Path

import pytest

from repro import paper as spec
from repro.paper import SpecError, load_paper, parse_printed

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, value, resolution, suffix", [
    ("72.2", 72.2, 0.1, ""),
    ("27M", 27e6, 1e6, "M"),
    ("27.78M", 27.78e6, 0.01e6, "M"),
    ("4.3G", 4.3e9, 0.1e9, "G"),
    ("37%", 37.0, 1.0, "%"),
    ("1442", 1442.0, 1.0, ""),
    ("48.0", 48.0, 0.1, ""),
    ("−0.50", -0.5, 0.01, ""),
])
def test_printed_values_keep_their_precision(text, value, resolution, suffix):
    pv = parse_printed(text)
    assert pv.text == text and pv.suffix == suffix
    assert pv.value == pytest.approx(value) and pv.resolution == pytest.approx(resolution)
    decimals = len(text.split(".")[1].rstrip("MG%")) if "." in text else 0
    assert spec.decimals_of(pv) == decimals


@pytest.mark.parametrize("text", ["-", "", None, "n/a", "—"])
def test_not_reported(text):
    pv = parse_printed(text)
    assert not pv.reported and pv.resolution is None


def test_non_numeric_text_is_kept_not_compared():
    pv = parse_printed("79.8->80.9")
    assert pv.text == "79.8->80.9" and pv.value is None


def _write(tmp_path: Path, text: str, pid: str = "toy") -> Path:
    path = tmp_path / pid / "paper.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


GOOD = """\
id: toy
title: Toy paper
tables:
  - id: t1
    caption: a caption
    source: Table 1
    columns:
      - {key: a, label: A}
      - {key: b, label: B}
      - {key: gap, label: Gap, derived: {op: rel_gap, a: a, b: b}}
    rows:
      - {key: r1, label: R1, values: {a: "1.0", b: "2.0"}}
      - {key: r2, label: R2, values: {a: "3.0", b: "4.0"}}
      - {key: other, label: Other, cited: "Someone 2020", values: {a: "9.9"}}
claims:
  - {id: c1, text: a beats b, table: t1, check: greater, columns: [a, b]}
"""


def test_good_file_loads_without_problems(tmp_path):
    paper = load_paper(_write(tmp_path, GOOD))
    assert paper.problems == []
    t = paper.table("t1")
    assert [c.key for c in t.columns] == ["a", "b", "gap"]
    assert t.column("gap").derived == {"op": "rel_gap", "a": "a", "b": "b"}
    assert [r.key for r in t.measured_rows] == ["r1", "r2"]  # the cited row is never measured
    c = paper.claims[0]
    assert c.relation == ">"
    assert [(str(a), str(b)) for a, b in c.pairs] == [("t1.r1.a", "t1.r1.b"), ("t1.r2.a", "t1.r2.b")]


def test_yaml_syntax_error_names_path_and_line(tmp_path):
    bad = GOOD.replace("      - {key: r2, label: R2,", "      - {key: r2, label: [R2,")
    path = _write(tmp_path, bad)
    with pytest.raises(SpecError) as e:
        load_paper(path)
    line = bad.splitlines().index(next(x for x in bad.splitlines() if "[R2," in x)) + 1
    assert str(path) in str(e.value)
    assert f":{line}:" in str(e.value) or f":{line + 1}:" in str(e.value)


def test_duplicate_key_is_an_error_with_line(tmp_path):
    path = _write(tmp_path, GOOD.replace("title: Toy paper\n", "title: Toy paper\ntitle: again\n"))
    with pytest.raises(SpecError, match=r"paper\.yaml:3: invalid YAML: duplicate key 'title'"):
        load_paper(path)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(SpecError, match=r"paper\.yaml:1: the top level must be a mapping"):
        load_paper(_write(tmp_path, "- just\n- a list\n"))


def test_unknown_column_is_a_problem_with_line_and_rest_survives(tmp_path):
    text = GOOD.replace('values: {a: "3.0", b: "4.0"}', 'values: {a: "3.0", bb: "4.0"}')
    paper = load_paper(_write(tmp_path, text))
    line = text.splitlines().index(next(x for x in text.splitlines() if "bb:" in x)) + 1
    assert [p.line for p in paper.problems] == [line]
    assert "unknown column 'bb'" in str(paper.problems[0]) and "columns: a, b, gap" in str(paper.problems[0])
    row = paper.table("t1").row("r2")
    assert set(row.values) == {"a"} and paper.claims[0].invalid == ""


def test_claim_naming_missing_cell_is_marked_invalid(tmp_path):
    text = GOOD + "  - {id: c2, text: nope, table: t1, check: greater, pairs: [[r1.a, r9.b]]}\n"
    paper = load_paper(_write(tmp_path, text))
    c2 = next(c for c in paper.claims if c.id == "c2")
    assert "r9.b" in c2.invalid and "does not exist" in c2.invalid
    assert paper.problems[0].line == len(text.splitlines())
    assert next(c for c in paper.claims if c.id == "c1").invalid == ""


def test_claim_on_cited_row_or_unknown_check_is_invalid(tmp_path):
    text = GOOD + ("  - {id: c3, text: x, table: t1, check: greater, pairs: [[other.a, r1.a]]}\n"
                   "  - {id: c4, text: y, table: t1, check: sideways, pairs: [[r1.a, r1.b]]}\n")
    claims = {c.id: c for c in load_paper(_write(tmp_path, text)).claims}
    assert "cited row" in claims["c3"].invalid
    assert "sideways" in claims["c4"].invalid


def test_unknown_keys_unquoted_floats_and_bad_derived_are_flagged(tmp_path):
    text = (GOOD.replace("    caption: a caption", "    captoin: typo\n    caption: a caption")
            .replace('values: {a: "1.0", b: "2.0"}', 'values: {a: 1.10, b: "2.0"}')
            .replace("derived: {op: rel_gap, a: a, b: b}", "derived: {op: rel_gap, a: a, b: zz}"))
    paper = load_paper(_write(tmp_path, text))
    msgs = [str(p) for p in paper.problems]
    assert any("unknown key 'captoin'" in m for m in msgs)
    assert any("quote printed numbers" in m for m in msgs)
    assert any("derived column 'gap'" in m for m in msgs)
    assert [c.key for c in paper.table("t1").columns] == ["a", "b"]
    assert all(m.startswith(str(tmp_path / "toy" / "paper.yaml") + ":") for m in msgs)


def test_monotone_and_ordering_expand_to_pairs(tmp_path):
    text = GOOD + ("  - {id: m, text: m, table: t1, check: monotone, column: a, direction: increasing}\n"
                   "  - {id: o, text: o, table: t1, check: ordering, cells: [r2.b, r2.a, r1.b]}\n"
                   "  - {id: b, text: b, table: t1, check: bound, cell: r1.a, bound: 5}\n")
    claims = {c.id: c for c in load_paper(_write(tmp_path, text)).claims}
    assert [(str(a), str(b)) for a, b in claims["m"].pairs] == [("t1.r2.a", "t1.r1.a")]
    assert [(str(a), str(b)) for a, b in claims["o"].pairs] == [("t1.r2.b", "t1.r2.a"), ("t1.r2.a", "t1.r1.b")]
    assert claims["b"].relation == "<=" and claims["b"].pairs[0][1].const == 5.0


def test_cli_exit_code(tmp_path, capsys):
    good = _write(tmp_path, GOOD)
    bad = _write(tmp_path, GOOD.replace("b: \"4.0\"", "zz: \"4.0\""), pid="bad")
    assert spec.main([str(good)]) == 0
    assert spec.main([str(bad)]) == 1
    assert "unknown column 'zz'" in capsys.readouterr().out


def test_convit_paper_yaml_matches_agreed_keys_and_printed_numbers():
    paper = load_paper(REPO / "papers" / "convit" / "paper.yaml")
    assert paper.problems == []
    assert [t.id for t in paper.tables] == ["table1", "table1_speed", "table2", "table3", "table4", "table5", "table6",
                                            "fig4_6", "fig6_gates", "fig8_locality", "fig8_gpsa_layers"]
    t1, t2 = paper.table("table1"), paper.table("table2")
    assert [r.key for r in t1.rows] == ["deit_ti", "convit_ti", "deit_ti_plus", "convit_ti_plus", "deit_s", "convit_s",
                                        "deit_s_plus", "convit_s_plus", "deit_b", "convit_b", "deit_b_plus",
                                        "convit_b_plus"]
    assert [c.key for c in t1.columns] == ["heads", "dim", "params", "flops", "speed", "top1", "top5"]
    assert [r.key for r in t2.rows] == ["f5", "f10", "f30", "f50", "f100"]
    assert [c.key for c in t2.columns] == ["deit_top1", "convit_top1", "gap_top1",
                                           "deit_top5", "convit_top5", "gap_top5", "deit9_top1", "deit9_top5"]
    assert [r.x for r in t2.rows] == [0.05, 0.10, 0.30, 0.50, 1.00]
    assert t1.row("convit_s").values["params"].text == "27M" and t1.row("deit_s").values["flops"].text == "4.3G"
    assert not t1.row("deit_ti").values["top5"].reported
    assert {k: v.text for k, v in t2.row("f10").values.items()} == {
        "deit_top1": "48.0", "convit_top1": "59.6", "gap_top1": "24%", "deit_top5": "71.5", "convit_top5": "80.3",
        "gap_top5": "12%"}
    assert "59.5 vs 46.5" in t2.note
    assert not paper.table("table4").reproduced and paper.table("table4").reason
    assert {f.id for f in paper.figures} == {"nonlocality", "gating", "accuracy_vs_fraction", "nonlocality_training",
                                             "gating_training", "nonlocality_issue23", "fig8_locality",
                                             "fig8_gpsa_layers"}
    assert all(not c.invalid for c in paper.claims)


def test_figure_axis_scales_are_checked(tmp_path):
    fig = ("figures:\n  - {id: f, caption: c, kind: per_layer, table: t1, y_scale: %s,\n"
           "     series: [{label: a, row: r1, column: a, metric: a_layers}]}\n")
    good = load_paper(_write(tmp_path, GOOD + fig % "log"))
    assert good.problems == [] and good.figures[0].y_scale == "log" and good.figures[0].x_scale == "linear"
    bad = load_paper(_write(tmp_path / "other", GOOD + fig % "logarithmic"))
    assert [p.line for p in bad.problems] == [len(GOOD.splitlines()) + 2] and bad.figures == []
    assert "y_scale 'logarithmic' is not one of ('linear', 'log')" in str(bad.problems[0])


def test_printed_numbers_are_cited_by_the_papers_own_table_never_by_a_file_outside_the_repository():
    """A clone holds no ../shared folder and none of the extracted texts once read there (``*.txt``): every
    source (a table's, a figure's and a claim's, which the report shows, and the paper's own) names the paper's
    table, figure, section or text, and a table's source names the paper's arXiv id where it has one."""
    outside = re.compile(r"\.\./|\b[\w-]+\.txt\b")
    for path in sorted((REPO / "papers").glob("*/paper.yaml")):
        paper = load_paper(path)
        entries = [*paper.tables, *paper.figures, *paper.claims, *paper.preconditions]
        sources = {f"{path.parent.name}/{e.id}": e.source or "" for e in entries}
        sources[path.parent.name] = paper.source or ""
        assert not {k: s for k, s in sources.items() if outside.search(s)}, path
        if paper.arxiv:
            cited = [t.id for t in paper.tables if re.match(r"Tables? \d", t.source) and paper.arxiv not in t.source]
            assert not cited, f"{path}: a table cited without arXiv {paper.arxiv}"
    texts = [*REPO.glob("papers/**/*.yaml"), *REPO.glob("papers/**/*.md"), *REPO.glob("repro/**/*.md"),
             *REPO.glob("repro/**/*.py"), *REPO.glob("benchmarks/*.*"), REPO / "README.md"]
    assert not [p for p in texts if "../shared" in p.read_text(errors="replace")]
