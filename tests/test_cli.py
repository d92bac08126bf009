"""The command line: reproduce / list, skipping and resuming, bad input, smoke and dry runs, Hydra."""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from repro import records
from repro.cli import main
from repro.models import zoo
from repro.report.__main__ import main as report_main
from repro.report.assess import placed
from repro.report.build import invalid_records
from repro.plan.experiments import paper_runs
from repro.run import reproduce
from repro.runs import ConfigError, pointer_source
from repro.train import preempt

from conftest import EXPERIMENTS, PROBES, REPO, fast_args, image_folder, subprocess_env, write_paper
from test_cluster import SIGNAL_HOOK, _signal_args
from test_report import make_toy, plan_toy


def snapshot(*roots):
    """Every file under the roots with its bytes: 'loses nothing already written' is equality."""
    return {str(p): p.read_bytes() for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


def one_line_error(capsys, code, expected_code=2):
    err = capsys.readouterr().err.strip()
    assert code == expected_code, err
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_reproduce_writes_records_then_skips_and_list_shows_status(dirs, capsys):
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid)]) == 0
    out = capsys.readouterr().out
    assert out.count("not run") == 3 and "table1" in out and "table2" in out
    assert main(["reproduce", *fast_args(pid)]) == 0
    recs, bad = records.load_records(pid, root=dirs["results"])
    assert not bad and sorted(r["status"] for r in recs) == ["finished"] * 3
    probe = [r for r in recs if r["kind"] == "probe"][0]
    assert probe["metrics"]["params"] > 1000 and probe["cell"]["columns"] == {"params": "params"}
    train = [r for r in recs if r["kind"] == "train"][0]
    saved = (dirs["cache"] / "runs" / pid / "tiny" / train["run_id"] / "config.yaml").read_text()
    assert "vit_tiny_patch16_224" in saved and train["config"]["data"]["name"] == "synthetic"
    before = snapshot(dirs["results"])
    capsys.readouterr()
    assert main(["reproduce", *fast_args(pid)]) == 0
    assert capsys.readouterr().out.count("(finished)") == 3 and snapshot(dirs["results"]) == before
    assert main(["list", *fast_args(pid)]) == 0
    assert capsys.readouterr().out.count("finished") == 3
    assert main(["list", "scale=tiny"]) == 0
    assert pid in capsys.readouterr().out


SHARED = EXPERIMENTS.replace("    return out", """    twin = out[1]  # f100, seed 0: the same run asked for by another table
    out.append(RunSpec("PID", "table3", {"row": "full", "columns": {"top1": "top1"}}, scale, name="vit",
                       config=twin.config))
    return out""")


def test_a_run_another_table_asks_for_is_trained_once_and_fills_both_cells(dirs, capsys):
    """The same run under a second table is no run of the plan: a cell naming the run that fills it, no record of
    its own, and the report reads that run's record there; ``tables=[table3]`` alone trains it."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, SHARED)
    assert main(["reproduce", *fast_args(pid, "tables=[table3]")]) == 0
    recs = records.load_records(pid, root=dirs["results"])[0]
    (first,) = recs
    doc = json.loads((dirs["results"] / pid / "tiny" / "plan.json").read_text())
    assert first["table"] == "table2" and first["run_id"] in {r["run_id"] for r in doc["runs"]}
    assert doc["fills"] == [{"table": "table3", "cell": {"row": "full", "columns": {"top1": "top1"}}, "seed": 0,
                             "run_id": first["run_id"]}]
    assert len(doc["runs"]) == 3 and all(r["table"] != "table3" for r in doc["runs"])
    capsys.readouterr()
    assert main(["reproduce", *fast_args(pid)]) == 0 and capsys.readouterr().out.count("(finished)") == 1
    recs = records.load_records(pid, root=dirs["results"])[0]
    assert len(recs) == 3  # no record for table3's cell: the report places table2's there
    (view,) = placed(recs, {"tiny": doc})[1]
    assert view["table"] == "table3" and view["run_id"] == first["run_id"] and view["metrics"] == first["metrics"]


def test_partial_run_resumes_from_checkpoint(dirs, capsys):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]", "num_shards=2", "shard=1")
    assert main(["reproduce", *args]) == 0
    (rec_path,) = list(dirs["results"].rglob("records/*.json"))
    first = json.loads(rec_path.read_text())
    rec_path.unlink()  # as if killed after the last checkpoint, before the record
    assert main(["list", *args]) == 0 and "partial" in capsys.readouterr().out
    assert main(["reproduce", *args]) == 0
    assert "resume" in capsys.readouterr().out
    again = json.loads(rec_path.read_text())
    assert again["metrics"]["top1"] == first["metrics"]["top1"] and again["metrics"]["steps"] == first["metrics"]["steps"]


BAD_INPUTS = [
    (["paper=nope"], "unknown paper 'nope'"),
    (["scale=huge"], "unknown scale 'huge'"),
    (["model.name=no_such_model"], "unknown model model.name='no_such_model'"),
    (["data.fraction=1.5"], "data.fraction=1.5 is outside (0, 1]"),
    (["data.fraction=0"], "data.fraction=0 is outside (0, 1]"),
    (["data=cifar10_jpeg"], "does not exist"),  # REPRO_DATA_DIR points at a missing folder
    (["tables=[table9]"], "unknown table(s) table9"),
    (["recipe.lr=abc"], "recipe.lr='abc' is not a number"),
    (["recipe.lr=-1"], "recipe.lr=-1: give a number >= 0"),  # lr 0: a frozen phase, a value a run can have
    (["recipe.base_lr=-1"], "recipe.base_lr=-1: give a number >= 0"),
    # clipping to norm 0 trains nothing; values typed under smoke=true, which replaces some of them
    (["recipe.clip_grad=0"], "recipe.clip_grad=0: give a number > 0"),
    (["recipe.momentum=1.5"], "recipe.momentum=1.5: give a number in [0, 1]"),
    (["smoke=true", "recipe.epochs=inf"], "recipe.epochs=inf: not a finite number"),
    (["smoke=true", "recipe.batch_size=0"], "recipe.batch_size=0: give a whole number >= 1"),
    (["smoke=true", "data.max_per_class=0"], "data.max_per_class=0: give a whole number >= 1, or null"),
    (["recipe.epochs=-3"], "recipe.epochs=-3: give a whole number >= 1"),
    (["recipe.epochs=0"], "recipe.epochs=0: give a whole number >= 1"),
    (["recipe.batch_size=0"], "recipe.batch_size=0: give a whole number >= 1"),
    (["recipe.batch_size=2.5"], "recipe.batch_size=2.5: give a whole number >= 1"),
    (["recipe.eval_batch_size=0"], "recipe.eval_batch_size=0"),
    (["recipe.smoothing=1.5"], "recipe.smoothing=1.5: give a probability in [0, 1]"),
    (["recipe.reprob=2"], "recipe.reprob=2: give a probability in [0, 1]"),
    (["recipe.drop_path=-0.1"], "recipe.drop_path=-0.1"),
    (["recipe.weight_decay=-1"], "recipe.weight_decay=-1: give a number >= 0"),
    (["recipe.warmup_epochs=-1"], "recipe.warmup_epochs=-1: give a number >= 0"),
    (["recipe.warmup_epochs=0.5", "recipe.step_on_epochs=true"], "recipe.warmup_epochs=0.5: a schedule stepped per epoch warms up whole epochs"),
    (["recipe.max_steps=0"], "recipe.max_steps=0: give a whole number >= 1"),
    (["recipe.lr_base_batch=0"], "recipe.lr_base_batch=0: give a number > 0"),
    (["tables=[table2"], "cannot parse the command line"),
    (["seeds=0"], "seeds=0: give a positive number of seeds"),
    (["shard=3", "num_shards=2"], "need 0 <= shard < num_shards"),
    (["data.name=nosuch"], "unknown dataset data.name='nosuch'"),
    # issue #31: counts that must be positive (0 never means "no limit"), enumerations, unknown keys
    (["data.max_per_class=0"], "data.max_per_class=0: give a whole number >= 1, or null"),
    (["data.test_max_per_class=0"], "data.test_max_per_class=0: give a whole number >= 1, or null"),
    (["data.test_limit=-1"], "data.test_limit=-1: give a whole number >= 1, or null"),
    (["jobs=0"], "jobs=0: give a whole number >= 1"),
    (["num_shards=0"], "num_shards=0: give a whole number >= 1"),
    (["runtime.nproc_per_node=0"], "runtime.nproc_per_node=0: give a whole number >= 1, or auto"),
    (["runtime.threads=0"], "runtime.threads=0: give a whole number >= 1, or null"),
    (["runtime.amp=fp8"], "runtime.amp='fp8': use one of bf16, fp16, none"),
    (["runtime.compile_mode=fast"], "runtime.compile_mode='fast': use one of default, reduce-overhead, max-autotune,"),
    (["runtime.device=tpu"], "runtime.device='tpu': use auto, cpu, cuda or cuda:N"),
    (["data.pipeline=foo"], "data.pipeline='foo': use one of tensor, loader, fastpath, auto"),
    (["recipe.epoch=3"], "unknown key recipe.epoch; did you mean recipe.epochs?"),
    (["epochs=3"], "unknown key epochs; did you mean recipe.epochs?"),
    (["data=folder", "data.pth=x"], "unknown key data.pth; did you mean data.path?"),
    (["data=nosuch"], "unknown data=nosuch; use one of cifar10, cifar100, cifar10_jpeg, folder"),
]

# Rows that need a dataset on disk: (command line, error, how to make the data under the data root).
BAD_DATA = [  # an empty class folder: on the code before issue #31 a 10-way head trained on 9 classes
    (["data=cifar10_jpeg"], "/cifar10-jpeg/train/cat (1 of 10 classes in train/ have no image)",
     lambda root: image_folder(root / "cifar10-jpeg", per_class=2, empty={("train", "cat")})),
    (["data=folder", "data.path=tree"], "/tree/val/dog (1 of 10 classes in val/ have no image)",
     lambda root: image_folder(root / "tree", ("train", "val"), per_class=2, empty={("val", "dog")})),
]


@pytest.mark.parametrize("extra,message,make_data", [(*row, None) for row in BAD_INPUTS] + BAD_DATA)
def test_bad_input_is_one_line_exit_2_and_loses_nothing(dirs, capsys, monkeypatch, extra, message, make_data):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0  # something already written
    root = dirs["data"] / "root"  # missing unless the row makes its data
    if make_data:
        make_data(root)
    before = snapshot(dirs["results"], dirs["cache"])
    capsys.readouterr()
    monkeypatch.setenv("REPRO_DATA_DIR", str(root))
    keys = {e.partition("=")[0] for e in extra}
    args = [a for a in fast_args(pid) if a.partition("=")[0] not in keys] + extra
    err = one_line_error(capsys, main(["reproduce", *args]))
    assert message in err
    assert snapshot(dirs["results"], dirs["cache"]) == before  # no record, checkpoint, lock or data cache


def test_images_per_class_are_one_line_per_command(dirs, capsys):
    image_folder(dirs["data"] / "cifar10-jpeg", per_class=3)
    args = [a for a in fast_args(dirs["pid"], "tables=[table2]", "seeds=2") if not a.startswith("data")]
    assert main(["reproduce", *args, "data=cifar10_jpeg", "data.test_max_per_class=2", "recipe.epochs=1"]) == 0
    out = capsys.readouterr().out
    assert out.count("data: ") == 1  # four runs, one dataset
    assert "data: cifar10_jpeg/train: 10 classes x 3 images; cifar10_jpeg/test: 10 classes x 2 images" in out


def _stopped_line(capsys, code, expected_code=preempt.INTERRUPT_EXIT_CODE) -> str:
    err = capsys.readouterr().err.strip()
    assert code == expected_code, err
    assert err.startswith("stopped: ") and "\n" not in err, err  # no traceback
    return err


def test_ctrl_c_checkpoints_releases_the_lock_and_says_how_to_resume(dirs, capsys, tmp_path):
    """Ctrl-C (SIGINT) takes SIGTERM's path: checkpoint where the run is, lock released, exit 130."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0  # something already written
    # plan.json is each command's own (written for its overrides); nothing else written before may change
    unplanned = lambda files: {k: v for k, v in files.items() if not k.endswith("plan.json")}  # noqa: E731
    before = unplanned(snapshot(dirs["results"], dirs["cache"]))
    handler = signal.getsignal(signal.SIGINT)  # Python's; SIG_IGN where pytest runs as a background job
    flag = tmp_path / "ctrl-c"
    flag.touch()
    args = _signal_args(pid, flag, "SIGINT")
    capsys.readouterr()
    err = _stopped_line(capsys, main(["reproduce", *args]))
    assert err.startswith("stopped: SIGINT: table2-f100") and "checkpointed at step 5 (epoch 1" in err
    assert err.endswith("run the same command again to resume it")
    after = unplanned(snapshot(dirs["results"], dirs["cache"]))
    assert {k: after.get(k) for k in before} == before  # nothing written before is lost or changed
    (run,) = {Path(k).parent for k in set(after) - set(before)}  # only the interrupted run's folder is new
    assert (run / "last.pt").exists() and not (run / "run.lock").exists()
    assert signal.getsignal(signal.SIGINT) is handler  # Ctrl-C is handled as before the command again
    flag.unlink()
    assert main(["reproduce", *args]) == 0 and f"resume {run.name}" in capsys.readouterr().out


def test_a_second_ctrl_c_stops_at_once_in_one_line(dirs, capsys, monkeypatch):
    """The first Ctrl-C asks for a checkpoint at the next check; a second (or one before any run) stops now."""
    with preempt.on_signals():
        os.kill(os.getpid(), signal.SIGINT)  # the first: stop at the next check, after a checkpoint
        assert preempt.requested() and preempt.exit_code() == preempt.INTERRUPT_EXIT_CODE
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the second: now
            time.sleep(5)
    with preempt.on_signals():  # clears the flag for the tests after this one
        pass
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    before = snapshot(dirs["results"], dirs["cache"])
    monkeypatch.setattr(reproduce, "validate", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    capsys.readouterr()
    err = _stopped_line(capsys, main(["reproduce", *fast_args(pid)]))
    assert "run the same command again to resume" in err
    assert snapshot(dirs["results"], dirs["cache"]) == before


def test_report_names_each_invalid_record_and_stops_unless_allowed(tmp_path, capsys):
    """python -m repro.report: one line per invalid record, exit 2 and nothing written; --allow-invalid builds
    the reports without them. The committed records are all valid, so make report works as before."""
    papers, results = make_toy(tmp_path)  # a truncated record and one naming a row paper.yaml lacks
    plan_toy(results)
    args = ["--papers-dir", str(papers), "--results-dir", str(results), "--notebook", "none"]
    before = snapshot(results)
    assert report_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") and e.endswith("--allow-invalid") for e in err)
    assert "zz-corrupt.json: unreadable record" in err[0] and "record 'stray' (full): table 't' row 'f7'" in err[1]
    assert snapshot(results) == before
    assert report_main([*args, "--allow-invalid"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("skipped: ") for e in err)
    assert (results / "toy" / "report.html").is_file()
    assert invalid_records(REPO / "papers", REPO / "results") == []


class Terminal(io.StringIO):
    """stderr as a terminal would be."""

    def isatty(self) -> bool:
        return True


def test_progress_bars_only_on_a_terminal(dirs, capsys, monkeypatch):
    """Training and `make zoo` draw tqdm bars (carriage-return redraws) on a terminal, never into redirected output."""
    args = [a for a in fast_args(dirs["pid"], "tables=[table2]") if not a.startswith("runtime.progress")]
    args += ["runtime.progress=true", "recipe.epochs=1"]
    assert main(["reproduce", *args]) == 0 and zoo.main(["--paper", "respostln"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "measuring the zoo" not in err
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["reproduce", *args, "force=true"]) == 0 and zoo.main(["--paper", "respostln"]) == 0
    drawn = terminal.getvalue()
    assert "\r" in drawn and "table2-f50" in drawn and "measuring the zoo" in drawn and "3/3" in drawn


def test_corrupt_record_stops_before_training(dirs, capsys):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    (path,) = list(dirs["results"].rglob("records/*.json"))
    path.write_text('{"run_id": "half-writ')
    before = snapshot(dirs["results"], dirs["cache"] / "runs")
    capsys.readouterr()
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid)]))
    assert str(path) in err and "unreadable record" in err
    assert snapshot(dirs["results"], dirs["cache"] / "runs") == before
    log = dirs["cache"] / "runs" / pid / "tiny" / path.stem / "log.csv"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("epoch,train_loss\n0,2.3\n")  # a log beside it is no progress to report
    assert main(["list", *fast_args(pid)]) == 0
    out = capsys.readouterr().out
    assert "corrupt record" in out and "corrupt record, epoch" not in out


def test_checkpoint_from_a_different_config_is_refused(dirs, capsys):
    pid = dirs["pid"]
    args = fast_args(pid, "tables=[table2]")
    assert main(["reproduce", *args]) == 0
    run_dirs = sorted((dirs["cache"] / "runs" / pid / "tiny").iterdir())
    assert len(run_dirs) == 2
    for rec in dirs["results"].rglob("records/*.json"):
        rec.unlink()
    # put run A's checkpoint where run B looks for its own
    shutil.copy(run_dirs[0] / "last.pt", run_dirs[1] / "last.pt")
    before = snapshot(dirs["results"], dirs["cache"] / "runs")
    capsys.readouterr()
    assert "f50" in run_dirs[1].name  # the first run of the list: the error comes before anything else runs
    err = one_line_error(capsys, main(["reproduce", *args]))
    assert "checkpoint was written for config" in err and str(run_dirs[1]) in err
    assert snapshot(dirs["results"], dirs["cache"] / "runs") == before


def test_module_entry_point_error_and_no_outputs_dir(dirs, tmp_path):
    """`python -m repro` as a user runs it: one line on stderr, exit 2; Hydra leaves no outputs/ behind."""
    work = tmp_path / "cwd"
    work.mkdir()
    bad = subprocess.run([sys.executable, "-m", "repro", "reproduce", "paper=nope", "scale=tiny"],
                         env=subprocess_env(dirs), cwd=work, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "unknown paper 'nope'" in bad.stderr
    ok = subprocess.run([sys.executable, "-m", "repro", "list", f"paper={dirs['pid']}", "scale=tiny"],
                        env=subprocess_env(dirs), cwd=work, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "not run" in ok.stdout
    assert list(work.iterdir()) == []  # no outputs/, no .hydra/
    assert (dirs["cache"] / "hydra").is_dir()


def test_hydra_flags_after_overrides(dirs, capsys):
    assert main(["reproduce", f"paper={dirs['pid']}", "recipe.epochs=7", "--cfg", "job"]) == 0
    out = capsys.readouterr().out
    default_scale = "small" if torch.cuda.is_available() else "tiny"
    assert "command: reproduce" in out and f"scale: {default_scale}" in out and "epochs: 7" in out


def test_unknown_command_and_help(capsys):
    assert main(["frobnicate"]) == 2 and "unknown command 'frobnicate'" in capsys.readouterr().err
    assert main(["--help"]) == 0 and "python -m repro reproduce" in capsys.readouterr().out


def test_tables_comma_list_seeds_and_multirun(dirs, capsys):
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid, "tables=table1,table2", "seeds=2")]) == 0
    out = capsys.readouterr().out
    assert "5 run(s)" in out
    assert main(["list", "-m", *fast_args(pid, "seeds=1,3")]) == 0  # a Hydra sweep: two jobs
    out = capsys.readouterr().out
    assert "3 run(s)" in out and "7 run(s)" in out


def test_slurm_launcher_config_composes():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "scale=full"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher") and launcher.gpus_per_node == 8 and launcher.tasks_per_node == 1
    assert cfg.runtime.nproc_per_node == "auto" and cfg.data.name == "imagenet"


@pytest.mark.slow
def test_cpu_scale_runs_two_jobs_and_a_rerun_skips_everything(dirs, capfd):
    """jobs=2 (the cpu scale's default): one process per group of runs, two at a time, one report; pointers
    run beside their source (at one seed Table 2's 6 trained runs, the pair and the equal-size control, open
    6 groups; Table 5's 2 pointers read them)."""
    cmd = ["reproduce", "paper=convit", "scale=cpu", "smoke=true", "tables=[table2,table5]", "seeds=1"]
    assert main(cmd) == 0
    out = capfd.readouterr().out
    assert "6 of 6 group(s) of runs to do, 2 at a time, 1 thread(s) each" in out
    assert all(f"shard {g}/6" in out for g in range(6)) and "6/6 group(s) done" in out
    assert "2 jobs x 1 thread(s) finished" in out
    recs, bad = records.load_records("convit", root=dirs["results"])
    planned = [s for s in paper_runs("convit", "cpu", seeds=1) if s.table in ("table2", "table5")]
    assert not bad and len(recs) == len(planned) == 8 and any(pointer_source(s.config) for s in planned)
    assert main(cmd) == 0
    assert " run table" not in capfd.readouterr().out


def test_shards_keep_a_probe_with_the_run_it_reads():
    from repro.plan.build import compose, plan
    from repro.run.specs import select

    c = compose("convit", "cpu")
    doc = plan(c)
    source = {r["run_id"]: r["depends_on"].get("source") for r in doc["runs"]}
    parts = [{s.run_id for s in select({**c, "num_shards": 2, "shard": i}, doc)} for i in range(2)]
    assert len(parts[0] | parts[1]) == len(doc["runs"]) and not parts[0] & parts[1]
    assert all(source[run] is None or source[run] in mine for mine in parts for run in mine)


def test_a_paper_without_a_scale_says_so(dirs):
    """A paper whose experiments.py lists no SCALES has tiny/small/full only (every real paper now has cpu)."""
    with pytest.raises(ConfigError, match="defines no runs at scale 'cpu'"):
        paper_runs(dirs["pid"], "cpu")


def test_list_resolved_prints_the_config_each_run_uses(capsys):
    """`list --resolved`: every run's merged config, the paper's protocol included (ConViT tiny trains on
    the first 200 images per class, not the base config's 250); `--cfg job` says where that protocol lives."""
    import yaml
    assert main(["list", "paper=convit", "scale=tiny", "tables=table2", "--resolved"]) == 0
    out = capsys.readouterr().out
    blocks = [b for b in out.split("# ")[1:]]
    assert len(blocks) == 10  # Table 2 at tiny: 5 fractions x 2 models, 1 seed
    header, body = blocks[0].split("\n", 1)
    config = yaml.safe_load(body)["config"]
    assert header.startswith("table2-f5-deit") and config["data"]["max_per_class"] == 200
    assert config["model"]["name"] == "repro_deit_tiny_c32" and config["recipe"]["batch_size"] == 50
    assert main(["list", "paper=convit", "scale=tiny", "--cfg", "job"]) == 0
    assert "papers/<paper>/experiments.py" in capsys.readouterr().out


def test_each_run_line_says_how_many_remain_and_the_eta(dirs, capsys):
    """Progress over the whole command: every run line counts the runs to go; from the second run on it
    gives an ETA from the runs already finished; a rerun that skips everything runs nothing."""
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "seeds=2")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "] run " in ln]
    assert len(lines) >= 2
    total = len(lines)
    assert f"{total} run(s) to go" in lines[0] and "ETA" not in lines[0]
    assert all(f"{total - k} run(s) to go, ETA " in ln for k, ln in enumerate(lines) if k > 0)
    assert main(["reproduce", *fast_args(pid, "seeds=2")]) == 0
    assert "] run " not in capsys.readouterr().out
