"""What a report counts: one record per run id, in the file and folder of its run, and only runs of a plan the
plan stage wrote. Each case below exited 0 with a wrong table on commit b6512bc (a backup copy pooled as one more
seed, a cpu record inside tiny/ reported as cpu, an edited or missing plan turning verdicts inconclusive)."""
from __future__ import annotations

import json
import shutil

import pytest

from repro import records
from repro.cli import main
from repro.paper import load_paper
from repro.plan import store
from repro.plan.__main__ import main as plan_main
from repro.report.__main__ import main as report_main
from repro.report.assess import assess, read_plans
from repro.report.build import invalid_records

from conftest import REPO, fast_args
from test_cli import one_line_error

MISPLACED = ["x.bak.json", "x (copy).json", "another run id", "another scale's record"]


def _misplace(good, case: str):
    """A second file for ``good``'s run as ``case`` makes it; returns (that file, the file named as its home)."""
    rec = json.loads(good.read_text())
    if case == "another run id":  # a record whose run_id differs from its file name
        other = "1" if rec["run_id"].endswith("0") else "0"  # the id hashes the test's temp path: any last digit
        bad = good.with_name(f"{rec['run_id'][:-1]}{other}.json")
        bad.write_text(json.dumps({**rec, "seed": 7}))
        return bad, good
    if case == "another scale's record":  # scale cpu inside tiny/records (tiny inside cpu/records)
        other = "tiny" if rec["scale"] == "cpu" else "cpu"
        bad = good.with_name(f"{other}-run.json")
        bad.write_text(json.dumps({**rec, "scale": other, "run_id": f"{other}-run"}))
        return bad, records.record_path(rec["paper"], other, f"{other}-run", good.parents[3])
    bad = good.with_name(good.stem + case.removeprefix("x"))
    shutil.copy(good, bad)
    return bad, good


def _names_its_home(err: str, home) -> bool:
    """The file the run's record is, or the place it belongs where there is none yet (it said "whose record is"
    of a file that does not exist)."""
    return (f"whose record is {home}: " if home.exists() else f"whose record belongs at {home} (no file there)") in err


@pytest.mark.parametrize("case", MISPLACED)
def test_a_record_out_of_its_place_stops_reproduce_naming_both_files(dirs, capsys, case):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "report=false")]) == 0
    (good,) = (dirs["results"] / pid / "tiny" / "records").glob("*.json")
    bad, home = _misplace(good, case)
    capsys.readouterr()
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid, "tables=[table1]", "report=false")]))
    assert err.startswith(f"error: {bad}: ") and _names_its_home(err, home)
    assert [r["run_id"] for r in records.load_records(pid, root=dirs["results"])[0]] == [good.stem]  # counted once


@pytest.fixture
def convit_cpu(tmp_path):
    """A copy of the committed ConViT cpu records and plan, and the report command's arguments for it."""
    shutil.copytree(REPO / "results" / "convit" / "cpu", tmp_path / "convit" / "cpu")
    args = ["--paper", "convit", "--papers-dir", str(REPO / "papers"), "--results-dir", str(tmp_path),
            "--notebook", "none"]
    return tmp_path / "convit" / "cpu", args


@pytest.mark.parametrize("case", MISPLACED)
def test_a_record_out_of_its_place_stops_the_report_naming_both_files(convit_cpu, capsys, case):
    folder, args = convit_cpu
    bad, home = _misplace(sorted((folder / "records").glob("*.json"))[0], case)
    err = one_line_error(capsys, report_main(args))
    assert err.startswith(f"error: {bad}: ") and _names_its_home(err, home) and err.endswith("--allow-invalid")


@pytest.mark.parametrize("case", ["missing", "garbage", "a folder", "a run taken out", "another scale's",
                                  "a run without its cell"])
def test_the_report_stops_at_a_plan_it_cannot_trust(convit_cpu, capsys, monkeypatch, case):
    folder, args = convit_cpu
    plan = folder / "plan.json"
    doc = json.loads(plan.read_text())
    if case == "missing":
        plan.unlink()
    elif case == "garbage":
        plan.write_text("{not json")
    elif case == "a folder":  # was a plan taken as missing, and python -m repro.plan a traceback
        plan.unlink()
        plan.mkdir()
    elif case == "a run taken out":
        plan.write_bytes(store.dumps({**doc, "runs": doc["runs"][1:]}))
    elif case == "a run without its cell":  # the report places each record by its run's cell in the plan
        runs = [{k: v for k, v in r.items() if k != "cell"} for r in doc["runs"]]
        plan.write_bytes(store.dumps(store.sealed({**doc, "runs": runs})))
    else:
        plan.write_bytes(store.dumps(store.sealed({**doc, "scale": "tiny"})))
    err = one_line_error(capsys, report_main(args))
    assert str(plan) in err and "python -m repro.plan --paper convit --scale cpu" in err
    assert case != "a folder" or f"{plan} is a folder, not a plan: move it away" in err
    if case == "garbage":  # what the plan stage says to it: the overrides it was made with are lost
        monkeypatch.setenv("REPRO_RESULTS_DIR", str(folder.parents[1]))
        err = one_line_error(capsys, plan_main(["--paper", "convit", "--scale", "cpu"]))
        assert err.startswith(f"error: {plan} cannot be read") and "delete it" in err


def test_a_record_that_is_no_run_of_the_plan_stops_the_report(convit_cpu, capsys):
    """Named on stderr (it was named only inside REPORT.md), and the build stops unless --allow-invalid."""
    folder, args = convit_cpu
    good = sorted((folder / "records").glob("*.json"))[0]
    rec = json.loads(good.read_text())
    other = f"{rec['run_id'].rsplit('-', 1)[0]}-0000000000"  # made with other overrides than the plan's
    (folder / "records" / f"{other}.json").write_text(json.dumps({**rec, "run_id": other}))
    err = one_line_error(capsys, report_main(args))
    assert err == (f"error: {other} (cpu): not a run of results/convit/cpu/plan.json (overrides none); to build the "
                   f"reports without it: --allow-invalid")


def _placed_cells(results) -> dict:
    """(table, row, column) -> the run ids and values the report places in each measured cell of ConViT at cpu."""
    recs, bad = records.load_records("convit", root=results)
    paper = load_paper(REPO / "papers" / "convit" / "paper.yaml")
    cmp = assess(paper, recs, bad, read_plans("convit", recs, results)).cmp
    return {(v.table.id, *key): (c.measured.run_ids, c.measured.values) for v in cmp.views if v.scale == "cpu"
            for key, c in v.cells.items() if c.measured and not c.column.derived}


def test_the_plan_places_every_record_whatever_the_record_says(convit_cpu):
    """A record lands in the cell its scale's plan names for its run: a plan that swaps Table 2's f10 and f100 runs
    swaps their seeds in the report, and records whose stored table and cell name nothing are placed as before.
    Both followed the records' own table and cell on commit 0959f5c. Without a plan.json the records are read
    where they say, as before (and no other table's cell is filled from them)."""
    folder, _ = convit_cpu
    results, plan = folder.parents[1], folder / "plan.json"
    before = _placed_cells(results)
    f10, f100 = before[("table2", "f10", "deit_top1")], before[("table2", "f100", "deit_top1")]
    assert f10 != f100 and len(f10[0]) == len(f100[0]) == 3
    doc = json.loads(plan.read_text())
    swap = {"f10": "f100", "f100": "f10"}
    moved = [{**r, "cell": {**r["cell"], "row": swap.get(r["cell"]["row"], r["cell"]["row"])}}
             if r["table"] == "table2" else r for r in doc["runs"]]
    plan.write_bytes(store.dumps(store.sealed({**doc, "runs": moved})))
    after = _placed_cells(results)
    assert after == {(t, swap.get(row, row) if t == "table2" else row, col): v for (t, row, col), v in before.items()}
    plan.write_bytes(store.dumps(doc))
    for path in (folder / "records").glob("*.json"):  # stored table and cell that name nothing of paper.yaml
        path.write_text(json.dumps({**json.loads(path.read_text()), "table": "nowhere", "cell": {"row": "none"}}))
    assert invalid_records(REPO / "papers", results, ["convit"]) == [] and _placed_cells(results) == before
    shutil.copytree(REPO / "results" / "convit" / "cpu" / "records", folder / "records", dirs_exist_ok=True)
    plan.unlink()
    fills = {(f["table"], f["cell"]["row"], col) for f in doc["fills"] for col in f["cell"]["columns"]}
    assert fills and _placed_cells(results) == {k: v for k, v in before.items() if k not in fills}
