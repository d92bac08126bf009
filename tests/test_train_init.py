"""Engine hook for two-phase training: a run starting from another run's final model (config["init"])."""
import json

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from repro import records
from repro.cli import main
from repro.run.sources import InitError, load
from repro.runs import ConfigError, RunSpec, pointer, pointer_source, resolve, run_dir, source_spec, with_sources
from repro.train.engine import Runtime, train

from conftest import REPO, build_specs, fast_args, write_paper

EXPERIMENTS = '''
from repro.runs import RunSpec

MODEL = {"name": "vit_tiny_patch16_224",
         "kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}}

def phases(scale, seed=0):
    first = RunSpec("PID", "t1", {"row": "first", "columns": {"top1": "top1"}}, scale, seed=seed, name="first",
                    config={"model": MODEL, "recipe": {"epochs": 2}})
    # lr 0 everywhere: the second run's weights stay exactly what the init function made of the first's
    second = RunSpec("PID", "t2", {"row": "second", "columns": {"top1": "top1"}}, scale, seed=seed, name="second",
                     config={"model": MODEL, "recipe": {"epochs": 1, "lr": 0.0, "min_lr": 0.0, "warmup_lr": 0.0},
                             "probes": ["papers.PID.probes:seen_history"],
                             "init": {"from": first.as_source(), "fn": "papers.PID.probes:copy_scaled_head",
                                      "kwargs": {"head_scale": 2.0}}})
    return first, second

def runs(scale, seeds=None):
    return [s for seed in range(seeds or 1) for s in phases(scale, seed)]
'''

POINTED = EXPERIMENTS.replace("def runs(scale, seeds=None):", '''def runs(scale, seeds=None):
    from repro.runs import fill
    first, second = phases(scale)
    return [first, second, fill(second, "t3", {"row": "copy", "columns": {"top1": "top1"}})]

def unused(scale, seeds=None):''')

PROBES = '''
import torch

def copy_scaled_head(source, model, head_scale=1.0):
    model.load_state_dict(source.state_dict())
    with torch.no_grad():
        model.head.weight.mul_(head_scale)

def seen_history(model, ctx):
    return {"history_len": len(ctx.history), "history_losses": [r["train_loss"] for r in ctx.history],
            "source_record": (ctx.source or {}).get("run_id")}
'''


@pytest.fixture
def two_phase(dirs):
    write_paper(dirs["papers"], dirs["pid"], EXPERIMENTS, PROBES)
    return dirs


def _specs(pid, **extra):
    """The composed Hydra config of the fake paper at scale tiny on synthetic data (what the CLI sees)."""
    with initialize_config_dir(str(REPO / "repro" / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"paper={pid}", "scale=tiny", "data=synthetic"])
    c = OmegaConf.to_container(cfg, resolve=True)
    c.update(extra)
    return c


def _state(d, spec_or_rec):
    run_id = spec_or_rec["run_id"] if isinstance(spec_or_rec, dict) else spec_or_rec.run_id
    return torch.load(d["cache"] / "runs" / d["pid"] / "tiny" / run_id / "last.pt", weights_only=True)["model"]


# ------------------------------------------------------------------ config: resolve, sources, shards

def test_source_is_resolved_like_its_own_run_and_fixes_the_dependent_id(two_phase):
    pid = two_phase["pid"]
    c = _specs(pid)
    first, second = build_specs(c)
    assert second.config["init"]["from"]["config"] == first.config  # base + overrides resolved alike
    assert source_spec(second).run_id == first.run_id and source_spec(first) is None
    smoke = build_specs({**c, "smoke": True})
    assert smoke[1].config["init"]["from"]["config"]["recipe"]["max_steps"] == 2  # the mode reaches the source
    assert source_spec(smoke[1]).run_id == smoke[0].run_id != first.run_id
    longer = build_specs(c, {"recipe": {"epochs": 3}})  # a command-line override changes both runs
    assert source_spec(longer[1]).run_id == longer[0].run_id and longer[1].run_id != second.run_id


def test_with_sources_puts_missing_sources_first_and_shards_keep_chains(two_phase):
    pid = two_phase["pid"]
    c = _specs(pid, seeds=2)
    specs = build_specs(c)
    assert [s.table for s in specs] == ["t1", "t2", "t1", "t2"]
    only_second = build_specs({**c, "tables": ["t2"]})  # the sources come along, each before its user
    assert [s.run_id for s in only_second] == [s.run_id for s in specs]
    assert with_sources(list(reversed(specs[2:]))) == specs[2:]
    parts = [build_specs({**c, "num_shards": 2, "shard": i}) for i in range(2)]
    assert [[s.seed for s in p] for p in parts] == [[0, 0], [1, 1]]  # never a dependent without its source


def test_a_cell_filled_by_a_second_phase_names_that_run_and_copies_nothing(dirs, capsys):
    """A cell filled by a run that itself starts from another (cmhsa's switch table): the plan names that run
    for the cell (``fills``), so nothing trains twice and no record of the cell's own is written."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, POINTED, PROBES)
    assert main(["reproduce", *fast_args(pid)]) == 0
    out = capsys.readouterr().out
    assert out.count("] run t1-first") == 1 and out.count("epoch 1/1") == 1  # second trained once, by itself
    recs = {r["table"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    assert sorted(recs) == ["t1", "t2"]
    doc = json.loads((dirs["results"] / pid / "tiny" / "plan.json").read_text())
    assert [(f["table"], f["run_id"]) for f in doc["fills"]] == [("t3", recs["t2"]["run_id"])]


def test_a_table_of_filled_cells_alone_runs_their_runs_in_order_under_its_runtime(dirs, capsys):
    """``tables=[t3]`` (only cells another run fills): the command schedules that run, and the run it starts
    from before it, each under the command's runtime and its own lock; nothing is written for t3 itself."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, POINTED, PROBES)
    assert main(["reproduce", *fast_args(pid, "tables=[t3]", "runtime.checkpoint_every_s=7")]) == 0
    out = capsys.readouterr().out
    assert "2 run(s), 0 already done" in out
    assert out.index("] run t1-first") < out.index("] run t2-second")
    recs = {r["table"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    assert {t: r["status"] for t, r in recs.items()} == {"t1": "finished", "t2": "finished"}
    assert recs["t2"]["config"]["runtime"]["checkpoint_every_s"] == 7  # the command's runtime
    assert not list((dirs["results"] / pid / "tiny" / "locks").glob("*"))  # each lock taken and released


def test_malformed_init_is_a_config_error(two_phase):
    spec = RunSpec(two_phase["pid"], "t", {"row": "r", "columns": {}}, "tiny",
                   config={"init": {"from": {"table": "t1"}, "fn": "x:y"}})
    with pytest.raises(ConfigError, match="as_source"):
        source_spec(spec)
    with pytest.raises(ConfigError, match="as_source"):
        resolve(RunSpec(two_phase["pid"], "t", {"row": "r", "columns": {}}, "tiny", kind="probe",
                        config={"init": {"from": spec.as_source(), "fn": "x:y"}}), {})


# ------------------------------------------------------------------ the engine

def test_second_phase_starts_from_the_first_phases_final_model(two_phase, capsys):
    d, pid = two_phase, two_phase["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[t2]")]) == 0  # only t2 asked for: t1 runs first
    out = capsys.readouterr().out
    assert out.index("run t1-first") < out.index("run t2-second")
    recs = {r["table"]: r for r in records.load_records(pid, root=d["results"])[0]}
    first, second = recs["t1"], recs["t2"]
    assert first["status"] == second["status"] == "finished"
    assert second["provenance"]["init_from"] == first["run_id"]
    w1, w2 = _state(d, first), _state(d, second)
    for name, t in w1.items():  # lr 0: what the second run ends with is what init made of the first
        expected = 2 * t if name.startswith("head.weight") else t
        assert torch.equal(w2[name], expected), name
    assert second["metrics"]["history_len"] == 1 == len(second["metrics"]["history_losses"])
    assert second["metrics"]["source_record"] == first["run_id"]  # the record the run stage loaded, to its probes
    # at the switch: the source's own test top-1 (same model, same test set), the start's, the logit gap
    m = second["metrics"]
    assert m["switch_top1_source"] == pytest.approx(first["metrics"]["top1"], abs=1e-9)
    assert m["switch_logit_gap"] > 0  # head x 2 moves the logits
    assert m["switch_top1_start"] == pytest.approx(m["top1"], abs=1e-9)  # lr 0: the start is the model it ends as
    assert "switch_logit_gap" not in first["metrics"]


def test_dependent_resumes_without_its_source_and_refuses_unusable_sources(two_phase, capsys):
    """The run stage loads what a dependent starts from: the source's record and final model (the record alone
    when it resumes), or one line saying what to run or delete."""
    d, pid = two_phase, two_phase["pid"]
    args = fast_args(pid, "runtime.checkpoint_every_s=0")
    assert main(["reproduce", *args]) == 0
    first, second = build_specs(_specs(pid), {"data": {"max_per_class": 16, "test_max_per_class": 4},
                                              "recipe": {"batch_size": 8}})
    first_rec = records.record_path(pid, "tiny", first.run_id, d["results"])
    second_rec = records.record_path(pid, "tiny", second.run_id, d["results"])
    assert first_rec.exists() and second_rec.exists() and source_spec(first) is None
    source = load(source_spec(second))
    assert source.spec.run_id == first.run_id and source.record == json.loads(first_rec.read_text())
    final = _state(d, first)
    assert source.weights.keys() == final.keys() and all(torch.equal(v, final[k]) for k, v in source.weights.items())

    # final model gone: the error says what to delete and rerun
    (run_dir(first) / "last.pt").unlink()
    with pytest.raises(InitError, match=r"is gone .*delete .*python -m repro reproduce"):
        load(source_spec(second))
    assert load(source_spec(second), resuming=True).weights is None
    # the dependent's own checkpoint is complete: a rerun without its record resumes, needing no source weights
    second_rec.unlink()
    assert main(["reproduce", *args]) == 0
    assert json.loads(second_rec.read_text())["status"] == "finished"

    # a source that is not finished, or never ran
    rec = json.loads(first_rec.read_text())
    first_rec.write_text(json.dumps({**rec, "status": "diverged"}))
    with pytest.raises(InitError, match="is diverged"):
        load(source_spec(second), resuming=True)
    first_rec.unlink()
    with pytest.raises(InitError, match=rf"has not run yet: run `python -m repro reproduce paper={pid} scale=tiny "
                                        rf"tables=t1` first"):
        load(source_spec(second))


def test_a_pointer_at_a_probe_run_gets_its_record_and_no_model(two_phase):
    """A probe run has no final model: a run that reads it gets its finished record alone."""
    pid = two_phase["pid"]
    src = RunSpec(pid, "t1", {"row": "p", "columns": {"m": "m"}}, "tiny", kind="probe", config={"probe": "x.y"})
    reader = pointer(src, "t2", {"row": "q", "columns": {}}, "reader", probe="x.z")
    with pytest.raises(InitError, match=rf"source run {src.run_id} has not run yet"):
        load(pointer_source(reader.config))
    records.write_record({"run_id": src.run_id, "paper": pid, "table": "t1", "cell": src.cell, "scale": "tiny",
                          "seed": 0, "kind": "probe", "status": "finished", "metrics": {"m": 1.0},
                          "config": src.config, "provenance": {}})
    loaded = load(pointer_source(reader.config))
    assert loaded.spec.run_id == src.run_id and loaded.record["metrics"] == {"m": 1.0} and loaded.weights is None


def test_the_engine_starts_a_dependent_only_from_the_model_it_is_passed(two_phase):
    """Outside a dry run the engine never reads the source itself, nor starts from it untrained."""
    first, second = build_specs(_specs(two_phase["pid"]))
    with pytest.raises(ValueError, match=rf"{second.run_id} starts from {first.run_id}'s final model: pass it"):
        train(second, Runtime(progress=False))


def test_diverged_source_leaves_the_dependent_failed_and_others_go_on(two_phase, capsys):
    d, pid = two_phase, two_phase["pid"]
    first, _ = build_specs(_specs(pid), {"data": {"max_per_class": 16, "test_max_per_class": 4},
                                         "recipe": {"batch_size": 8}})
    rec = {"run_id": first.run_id, "paper": pid, "table": "t1", "cell": first.cell, "scale": "tiny", "seed": 0,
           "status": "diverged", "metrics": {}, "config": first.config, "provenance": {}}
    records.write_record(rec)
    assert main(["reproduce", *fast_args(pid)]) == 1
    recs = {r["table"]: r for r in records.load_records(pid, root=d["results"])[0]}
    assert recs["t1"]["status"] == "diverged" and recs["t2"]["status"] == "failed"
    assert "is diverged, so it has no final model" in recs["t2"]["metrics"]["error"]


def test_dry_run_transfers_from_an_untrained_source_and_writes_nothing(two_phase, capsys):
    d, pid = two_phase, two_phase["pid"]
    assert main(["reproduce", f"paper={pid}", "scale=full", "dry_run=true", "data.num_classes=20",
                 "data.img_size=64"]) == 0
    assert "2 distinct run config(s) of 2" in capsys.readouterr().out
    assert not list(d["results"].rglob("records/*.json")) and not (d["cache"] / "runs").exists()
