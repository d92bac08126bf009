"""The plan stage: plan.json holds every run with its resolved config and id, and every committed record is
one of today's planned runs (its id recomputed from its own stored config)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from repro import cli
from repro.plan import store
from repro.plan.build import compose, plan, planned
from repro.runs import RunSpec

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
SCALES_WITH_RECORDS = sorted({(p.parts[-4], p.parts[-3]) for p in RESULTS.glob("*/*/records/*.json")})


def _records(paper: str, scale: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((RESULTS / paper / scale / "records").glob("*.json"))]


def _stored_id(rec: dict) -> str:
    """The record's id recomputed from what it stored (its config less the runtime it ran with)."""
    config = {k: v for k, v in rec["config"].items() if k != "runtime"}
    spec = RunSpec(rec["paper"], rec["table"], rec["cell"], rec["scale"], seed=rec["seed"], kind=rec["kind"],
                   config=config)
    return f"{rec['run_id'].rsplit('-', 1)[0]}-{spec.fingerprint}"


def test_every_committed_record_is_a_run_of_todays_plan():
    """Every committed record's id, recomputed from its stored config (import paths and all), is an id of
    the committed plan and of the plan built now, with the same fingerprint: moving code orphaned none."""
    assert len(SCALES_WITH_RECORDS) >= 13
    for paper, scale in SCALES_WITH_RECORDS:
        committed = store.read_plan(paper, scale, RESULTS)
        assert committed is not None, f"results/{paper}/{scale}/plan.json missing: python -m repro.plan"
        fresh = planned(paper, scale, committed.get("overrides", ()))  # as the campaign composed it
        assert store.dumps(committed) == store.dumps(fresh), f"{paper}/{scale}: plan.json is stale"
        by_id = {r["run_id"]: r for r in fresh["runs"]}
        for rec in _records(paper, scale):
            assert _stored_id(rec) == rec["run_id"], rec["run_id"]
            assert rec["run_id"] in by_id, f"{paper}/{scale}: {rec['run_id']} is in no planned run"
            assert by_id[rec["run_id"]]["fingerprint"] == rec["run_id"].rsplit("-", 1)[1]


def test_plan_names_functions_by_registered_name_and_dependencies_by_id():
    doc = plan(compose("convit", "cpu"))
    text = json.dumps(doc["runs"])
    assert not re.search(r'"(papers|repro)\.[\w.]+:\w+"', text), "an import path in a planned config"
    ids = [r["run_id"] for r in doc["runs"]]
    deps = [(r["run_id"], d) for r in doc["runs"] for d in r["depends_on"].values()]
    assert deps and all(ids.index(d) < ids.index(run) for run, d in deps)  # a dependency comes first
    by_id = {r["run_id"]: r for r in doc["runs"]}
    pointer = next(r for r in doc["runs"] if r["table"] == "table5")  # probes Table 2's trained pair
    assert by_id[pointer["depends_on"]["source"]]["table"] == "table2"
    assert doc["resolves"] and {tuple(c) for c in doc["cells"]} >= {("table2", "f10", "deit_top1")}
    assert doc["models"]["repro_convit_tiny9_c32"]["depth"] == 12  # the registered default, before kwargs


def test_a_cell_another_run_fills_names_that_run_and_is_no_run_of_its_own():
    """ConViT's Table 1 (the Ti pair), rows a and e of Table 3 and the gates figure are cells that runs of other
    tables fill at cpu: the plan names those runs (``fills``), holds each measured config once, and a command
    for such a table alone runs them, each source before its dependent."""
    from repro.run.specs import select

    c = compose("convit", "cpu")
    doc = plan(c)
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert len({r["fingerprint"] for r in doc["runs"]}) == len(doc["runs"])  # no run measured twice
    assert all(r["kind"] == "train" or r["config"]["probe"] != "convit.copy_metrics" for r in doc["runs"])
    assert {f["table"] for f in doc["fills"]} == {"table1", "table3", "fig6_gates"}
    assert all(by_id[f["run_id"]]["seed"] == f["seed"] for f in doc["fills"])
    assert {tuple(c) for c in doc["cells"]} >= {("table1", "convit_ti", "top1"), ("table3", "deit", "top1_10")}
    ids = [s.run_id for s in select({**c, "tables": ["table1"]}, doc)]
    assert {by_id[i]["table"] for i in ids} == {"table2"} and len(ids) == 6  # the f100 pair, 3 seeds
    gates = [s.run_id for s in select({**c, "tables": ["fig6_gates"]}, doc)]
    assert [by_id[i]["table"] for i in gates] == ["table2", "fig4_6"] * 3  # each probe after the run it reads


def test_write_plan_is_atomic_and_leaves_an_unchanged_plan_alone(tmp_path):
    doc = {"schema": store.SCHEMA, "paper": "p", "scale": "tiny",
           "runs": [{"run_id": "r", "table": "t", "cell": {}, "b": 1, "a": 2}]}
    path = store.write_plan(doc, tmp_path)
    first = path.stat().st_mtime_ns
    assert store.write_plan(json.loads(path.read_text()), tmp_path) == path and path.stat().st_mtime_ns == first
    assert store.read_plan("p", "tiny", tmp_path) == store.sealed(doc) and not list(path.parent.glob(".*tmp"))
    edited = {**store.sealed(doc), "runs": []}  # a run taken out by hand: its digest no longer matches
    path.write_bytes(store.dumps(edited))
    with pytest.raises(store.ConfigError, match="not match its digest.*python -m repro.plan --paper p --scale tiny"):
        store.read_plan("p", "tiny", tmp_path)
    assert store.read_plan("p", "tiny", tmp_path, verify=False) == edited  # what python -m repro.plan reads to rebuild
    path.write_text('{"schema": "other"}')
    with pytest.raises(store.ConfigError, match="python -m repro.plan"):
        store.read_plan("p", "tiny", tmp_path)


@pytest.mark.parametrize("paper,scale", [("convit", "cpu"), ("respostln", "cpu")])  # pointers; the most runs
def test_list_shows_every_committed_record_finished(paper, scale, capsys):
    """``python -m repro list`` lists the plan's runs (the same resolution as above) with their status."""
    assert cli.main(["list", f"paper={paper}", f"scale={scale}"]) == 0
    status = {}  # run id -> the word after it in its row (the status column)
    for line in capsys.readouterr().out.splitlines():
        words = line.split()
        status.update({w: words[i + 1] for i, w in enumerate(words[:-1]) if w.count("-") >= 3})
    for rec in _records(paper, scale):
        assert status.get(rec["run_id"]) == rec["status"] == "finished", rec["run_id"]


def test_reproduce_writes_the_scales_whole_plan_before_its_runs(dirs):
    """A command for one table still writes the scale's whole plan; the record it writes is a planned run."""
    from conftest import fast_args

    assert cli.main(["reproduce", *fast_args(dirs["pid"], "tables=[table1]", "report=false")]) == 0
    doc = store.read_plan(dirs["pid"], "tiny", dirs["results"])
    assert {r["table"] for r in doc["runs"]} == {"table1", "table2"} and len(doc["runs"]) == 3
    (record,) = (dirs["results"] / dirs["pid"] / "tiny" / "records").glob("*.json")
    assert record.stem in {r["run_id"] for r in doc["runs"] if r["table"] == "table1"}
    # the plan keeps the overrides that shaped its runs, and is built again from them
    assert doc["overrides"] == ["data=synthetic", "data.max_per_class=16", "data.test_max_per_class=4",
                                "recipe.batch_size=8"]
    assert store.dumps(planned(dirs["pid"], "tiny", doc["overrides"])) == store.dumps(doc)
    assert record.stem not in {r["run_id"] for r in planned(dirs["pid"], "tiny")["runs"]}  # the default's differ
    from repro.plan.__main__ import main as plan_main

    assert plan_main(["--paper", dirs["pid"], "--scale", "tiny"]) == 0
    assert store.read_plan(dirs["pid"], "tiny", dirs["results"]) == doc  # python -m repro.plan kept them
    # a record that is no run of its scale's plan (another data copy, say) is left out of the report, named
    from repro.report.assess import placed

    rec = json.loads(record.read_text())
    assert placed([rec], {"tiny": doc}) == ([rec], [], [])
    kept, _, out = placed([rec], {"tiny": planned(dirs["pid"], "tiny")})  # the default config's plan
    assert kept == [] and record.stem in str(out[0]) and "not a run of" in str(out[0])


COUNTED = """
import os, traceback
with open(os.environ["EXPERIMENTS_RUN_LOG"], "a") as log:  # who imported this module, each time it runs
    log.write(" ".join(frame.filename for frame in traceback.extract_stack()) + "\\n")
"""


def test_only_the_plan_stage_imports_experiments_once_per_command(dirs, monkeypatch):
    """A reproduce command with two processes of groups imports the paper's experiments.py once, from the plan
    stage: its children and the run stage read plan.json."""
    from conftest import EXPERIMENTS, PROBES, fast_args, write_paper

    log = dirs["cache"] / "experiments.log"
    monkeypatch.setenv("EXPERIMENTS_RUN_LOG", str(log))
    write_paper(dirs["papers"], dirs["pid"], COUNTED + EXPERIMENTS, PROBES)
    assert cli.main(["reproduce", *fast_args(dirs["pid"], "jobs=2", "report=false")]) == 0
    assert len(list((dirs["results"] / dirs["pid"] / "tiny" / "records").glob("*.json"))) == 3
    (importer,) = log.read_text().splitlines()  # once, in the command's own process
    stack = importer.split()
    below_cli = stack[max(i for i, f in enumerate(stack) if f.endswith("/repro/cli.py")) + 1:]
    assert {f.split("/repro/")[1].split("/")[0] for f in below_cli if "/repro/" in f} == {"plan"}


def test_a_plan_another_command_rewrote_is_refused_in_one_line(dirs, capsys, monkeypatch):
    """Parallel multirun jobs that plan other runs of one scale: a job never runs the other job's plan."""
    from conftest import fast_args
    from repro.run import reproduce

    read = reproduce.plan_at
    monkeypatch.setattr(reproduce, "plan_at", lambda path: {**read(path), "digest": "another"})
    assert cli.main(["reproduce", *fast_args(dirs["pid"], "report=false")]) == 2
    err = capsys.readouterr().err.strip()
    assert "rewritten by another command" in err and "\n" not in err
    assert not list(dirs["results"].rglob("records/*.json"))


def test_a_jobs_child_refuses_a_plan_rewritten_after_its_parent_wrote_it(tmp_path, capsys):
    """A ``jobs=N`` child runs only the plan its parent checked: one rewritten since (another command planning
    other runs of the scale) is one line and exit 2, nothing run."""
    from repro.run import child

    plan_file = RESULTS / "cmhsa" / "tiny" / "plan.json"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"paper": "cmhsa", "scale": "tiny", "runtime": {}}))
    digest = store.plan_at(plan_file)["digest"]
    assert child.main([str(config), str(plan_file), "0", "0", "f" * len(digest)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rewritten by another command" in err and "\n" not in err


def test_the_run_stage_takes_each_runs_dependency_from_the_plan():
    """What a run starts from or reads is plan.json's ``depends_on``, as the plan holds that run (its stored
    config), not worked out again from the dependent's config: a plan whose edge names another run hands that one."""
    from repro.run.specs import sources_of

    doc = store.read_plan("cmhsa", "cpu", RESULTS)
    deps = sources_of(doc)
    edges = {r["run_id"]: d for r in doc["runs"] for d in r["depends_on"].values()}
    assert deps and {k: v.run_id for k, v in deps.items()} == edges
    by_id = {r["run_id"]: r for r in doc["runs"]}
    assert all(by_id[s.run_id]["config"] == s.config for s in deps.values())
    phase2 = next(r for r in doc["runs"] if r["run_id"].startswith("table1-cmhsa5-phase2-s0"))
    assert deps[phase2["run_id"]].run_id.startswith("two_phase-cmhsa5-phase1-s0")
    other = next(r["run_id"] for r in doc["runs"] if r["run_id"].startswith("two_phase-cmhsa3-phase1-s0"))
    phase2["depends_on"] = {"init": other}
    assert sources_of(doc)[phase2["run_id"]].run_id == other
