"""No silent wrong results, smoke runs kept apart, one run per config at a time, one-line errors.

Each test is an input that on commit d761d99 trained and recorded "finished" (or ended in a traceback).
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import timm
import torch

from repro import records
from repro.run import locks
from repro.cli import main
from repro.data import tensor_cache
from repro.models import zoo
from repro.report.cells import INVALID, compare
from repro.report.notebook import md_text
from repro.paper import Ref, load_paper

from conftest import EXPERIMENTS, PROBES, REPO, fast_args, image_folder, subprocess_env, write_paper
from test_cluster import SIGNAL_HOOK, _signal_args
from test_cli import one_line_error, snapshot

def _jpeg_dataset(root, per_class=4):
    image_folder(root / "cifar10-jpeg", per_class=per_class)


def _jpeg_args(pid, *extra):
    args = [a for a in fast_args(pid) if not a.startswith("data")]
    return [*args, "data=cifar10_jpeg", "data.max_per_class=4", "data.test_max_per_class=4", *extra]


def test_a_missing_class_folder_stops_before_training(dirs, capsys):
    _jpeg_dataset(dirs["data"])
    shutil.rmtree(dirs["data"] / "cifar10-jpeg" / "train" / "cat")  # 9 train labels, 10 test: shifted labels
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"])]))
    assert "different classes" in err and "only in test: cat" in err
    assert not list(dirs["results"].rglob("records/*.json"))


def test_an_undecodable_image_is_named(dirs, capsys):
    _jpeg_dataset(dirs["data"])
    bad = dirs["data"] / "cifar10-jpeg" / "train" / "dog" / "0001.jpg"
    bad.write_bytes(b"not a jpeg")
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"], "tables=[table2]")]))
    assert f"cannot decode image {bad}" in err and "replace or delete" in err


def test_a_truncated_data_cache_is_named_with_how_to_rebuild_it(dirs, capsys):
    _jpeg_dataset(dirs["data"])
    assert main(["reproduce", *_jpeg_args(dirs["pid"], "tables=[table2]", "seeds=1")]) == 0
    cache = sorted((dirs["cache"] / "data").glob("*.pt"))[0]
    cache.write_bytes(cache.read_bytes()[:100])
    tensor_cache._memo.clear()  # a new process would not have it in memory
    capsys.readouterr()
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"], "tables=[table2]", "seeds=2")]))
    assert f"data cache {cache} is unreadable" in err and f"rm {cache}" in err


def test_smoke_records_live_apart_and_a_cell_never_mixes_data(dirs, capsys):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "smoke=true")]) == 0
    assert not (dirs["results"] / pid / "tiny").exists() and (dirs["results"] / pid / "tiny-smoke" / "records").is_dir()
    paper = load_paper(_toy_paper(dirs["papers"]))
    recs = [dict(run_id=f"r{i}", paper="mix", table="t", cell={"row": "r", "columns": {"a": "top1"}}, scale="cpu",
                 seed=i, status="finished", metrics={"top1": 50.0 + i},
                 config={"data": {"name": name, "img_size": 32}, "model": {"name": "m"}}, provenance={})
            for i, name in enumerate(["cifar10_jpeg", "cifar10_jpeg", "synthetic"])]
    cell = compare(paper, recs).cell(Ref("t", "r", "a"), "cpu")
    assert cell.status == INVALID and "not averaged" in cell.notes[0] and "r2" in cell.notes[0]


def _toy_paper(root):
    (root / "mix").mkdir(exist_ok=True)
    path = root / "mix" / "paper.yaml"
    path.write_text("id: mix\ntitle: Mix\ntables:\n  - id: t\n    caption: c\n    source: s\n"
                    "    columns: [{key: a, label: A}]\n    rows: [{key: r, label: R, values: {a: '50.0'}}]\n")
    return path


def test_a_run_another_live_process_holds_is_skipped_and_said_whatever_the_cache(dirs, capsys, monkeypatch, tmp_path):
    """The lock lives in the results folder: a command with a cache of its own still sees it."""
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid)]) == 0
    run_id = next(line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("table2"))
    folder = dirs["results"] / pid / "tiny" / "locks" / run_id
    folder.mkdir(parents=True)
    (folder / locks.LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "since": 0}))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "another-cache"))
    assert main(["list", *fast_args(pid)]) == 0  # shown as training by its holder, the other runs not
    rows = {line.split()[4]: line for line in capsys.readouterr().out.splitlines() if line.startswith("table")}
    assert f"training (pid {os.getppid()} on {os.uname().nodename})" in rows.pop(run_id)
    assert rows and not any("training" in line for line in rows.values())
    assert main(["reproduce", *fast_args(pid)]) == 0
    out = capsys.readouterr().out
    assert f"skip {run_id}: another process holds it (pid {os.getppid()}" in out
    assert not records.record_path(pid, "tiny", run_id).exists()


def test_a_stale_lock_is_taken_over_and_released(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / locks.LOCK_NAME).write_text(json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename}))
    with locks.run_lock(tmp_path) as held:
        assert held and locks.owner(tmp_path / locks.LOCK_NAME)["pid"] == os.getpid()
        with locks.run_lock(tmp_path) as again:  # the same run from a second command: refused
            assert not again
    assert not (tmp_path / locks.LOCK_NAME).exists()


def test_two_identical_commands_train_each_run_once(dirs):
    env = subprocess_env(dirs)
    cmd = [sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"], "seeds=2", "recipe.epochs=3")]
    procs = [subprocess.Popen(cmd, env=env, cwd=dirs["papers"].parents[0], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    trained = [line for out in outs for line in out.splitlines() if " run table2" in line]
    assert len(trained) == len({line.split()[2] for line in trained}) == 4  # 2 fractions x 2 seeds, once each


def _as_permissions_say(cmd: list[str]) -> list[str]:
    """The command as a process that obeys folder permissions: root (CI runs as root) without the capabilities
    that let it write into a read-only folder (setpriv, util-linux)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.fail("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE to test a read-only folder")
    caps = "-dac_override,-dac_read_search"  # from the inheritable set too: root regains what it inherits
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *cmd]


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, (proc.returncode, proc.stderr[-2000:])
    return proc.stderr


def test_a_read_only_results_folder_fails_before_training(dirs):
    cmd = _as_permissions_say([sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"])])
    dirs["results"].chmod(0o500)
    try:
        proc = subprocess.run(cmd, env=subprocess_env(dirs), cwd=dirs["papers"].parent, capture_output=True,
                              text=True, timeout=300)
    finally:
        dirs["results"].chmod(0o700)
    assert "is not writable" in _one_line_exit_2(proc) and not (dirs["cache"] / "runs").exists()


def test_a_results_folder_that_is_a_file_fails_before_training(dirs, capsys, monkeypatch):
    blocker = dirs["results"] / "file"
    blocker.write_text("x")
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(blocker))
    err = one_line_error(capsys, main(["reproduce", *fast_args(dirs["pid"])]))
    assert "is not writable" in err and not (dirs["cache"] / "runs").exists()


def test_a_report_that_cannot_be_built_is_exit_2_and_keeps_the_records(dirs, capsys, monkeypatch):
    pid = dirs["pid"]
    (dirs["papers"] / pid / "paper.yaml").write_text("id: x\ntitle: [unclosed\n")
    import repro.report.build as build
    monkeypatch.setattr(build, "paper_ids", lambda papers_dir: [pid])
    monkeypatch.setattr(build, "build_report", lambda *a, **k: (_ for _ in ()).throw(build.SpecError("bad yaml")))
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid, "tables=[table1]")]))
    assert "report of" in err and "the records are kept" in err
    assert len(list(dirs["results"].rglob("records/*.json"))) == 1
    monkeypatch.setattr(build, "build_report", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid, "tables=[table1]")]))
    assert "No space left on device" in err


def test_force_reruns_a_finished_run(dirs, capsys):
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    rec = next(dirs["results"].rglob("records/*.json"))
    first = json.loads(rec.read_text())["provenance"]["start_time"]
    time.sleep(1.1)  # start times are stamped to the second
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    assert " skip " in capsys.readouterr().out
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "force=true")]) == 0
    assert " run " in capsys.readouterr().out and json.loads(rec.read_text())["provenance"]["start_time"] != first


def test_zoo_unknown_paper_is_exit_2(capsys):
    assert zoo.main(["--paper", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no zoo rows for paper 'nosuch'") and "\n" not in err


def test_only_http_links_survive_in_notebook_text():
    text = md_text("see [this](javascript:alert(1)) and [that](https://arxiv.org/abs/2103.10697) <b>")
    assert "](javascript" not in text and "[that](https://arxiv.org/abs/2103.10697)" in text and "<b>" not in text


def test_zoo_covers_every_paper_and_builds_on_meta(capsys, tmp_path):
    """make zoo: every paper's models, counted from shapes (meta device: no weights allocated, so the
    whole zoo takes seconds); counts equal a real build's. Its progress bar: test_cli (terminal only)."""
    from repro.models.factory import PAPERS  # the five papers (crosspaper prints no architecture of its own)
    papers = {p.parent.name for p in (REPO / "papers").glob("*/paper.yaml")}
    assert {r["paper"] for r in zoo.load_rows()} == set(PAPERS) == papers - {"crosspaper"}
    row = next(r for r in zoo.load_rows("augvit") if r["row"] == "Aug-ViT-S")
    real = timm.create_model(row["model"], img_size=row["res"])
    assert zoo.measure_row(row)["params"] == sum(p.numel() for p in real.parameters())
    assert zoo.main(["--paper", "respostln", "--json", str(tmp_path / "zoo.json")]) == 0
    assert "Res-Post-LN" in capsys.readouterr().out


# ------------------------------------------------------------------ flags, re-measuring, locks, full disks

def test_boolean_flags_mean_what_they_say(dirs, capsys):
    """force=no, smoke=off and make's FORCE=0 are false (Hydra kept them as truthy strings); force=maybe is bad input."""
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    rec = next(dirs["results"].rglob("*.json"))
    before = rec.read_text()
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "force=no", "smoke=off")]) == 0
    assert rec.read_text() == before and " skip " in capsys.readouterr().out
    assert not (dirs["results"] / pid / "tiny-smoke").exists()
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid, "force=maybe")]))
    assert "force='maybe' is not a boolean" in err
    make = subprocess.run(["make", "-n", "reproduce", "PAPER=x", "FORCE=0"], cwd=REPO, capture_output=True, text=True)
    assert "force=0" in make.stdout and "force=true" not in make.stdout


def test_randaugment_at_posterizes_lowest_level_runs_through_the_loader_pipeline(monkeypatch):
    """timm's RandAugment posterizes to 0 bits at its top magnitude, which Pillow 13 refuses: the pin in
    pyproject.toml keeps a Pillow that takes it. Magnitude 10 without noise makes every posterize the lowest."""
    import random

    import numpy as np
    from timm.data import auto_augment

    from repro.data.image_loader import ImageTrainLoader
    from repro.data.sources import Split

    real, bits = auto_augment.NAME_TO_OP["PosterizeIncreasing"], []
    monkeypatch.setitem(auto_augment.NAME_TO_OP, "PosterizeIncreasing",
                        lambda img, b, **kw: bits.append(b) or real(img, b, **kw))
    random.seed(0), np.random.seed(0)
    n = 64
    split = Split("tiny", [i % 2 for i in range(n)], ["a", "b"],
                  array=np.random.default_rng(0).integers(0, 255, (n, 32, 32, 3), dtype=np.uint8), index=list(range(n)))
    data = {"img_size": 32, "mean": (0.5,) * 3, "std": (0.5,) * 3}
    loader = ImageTrainLoader(split, {"aa": "rand-m10-n2-inc1", "reprob": 0.0}, data, batch_size=16, seed=0)
    batches = list(loader.epoch(0))
    assert len(batches) == 4 and batches[0][0].shape == (16, 3, 32, 32)
    assert 0 in bits  # posterize's lowest setting was drawn, and the pipeline took it


def test_a_fresh_results_folder_measures_again_and_names_a_reused_checkpoint(dirs, capsys, monkeypatch, tmp_path):
    """The cache's final checkpoints do not become a fresh folder's records; a partial one (a run stopped while
    writing another folder) is resumed, and the record names it and the record it was started for."""
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS, PROBES + SIGNAL_HOOK)
    assert main(["reproduce", *fast_args(pid, "tables=[table2]")]) == 0
    first = {r["run_id"]: r["provenance"] for r in records.load_records(pid, root=dirs["results"])[0]}
    flag = tmp_path / "stop"
    flag.touch()
    assert main(["reproduce", *_signal_args(pid, flag, "SIGINT")]) == 130  # a partial checkpoint for ./results
    flag.unlink()
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "fresh"))
    assert main(["reproduce", *fast_args(pid, "tables=[table2]")]) == 0
    assert main(["reproduce", *_signal_args(pid, flag, "SIGINT")]) == 0
    again = {r["run_id"]: r["provenance"] for r in records.load_records(pid, root=tmp_path / "fresh")[0]}
    assert len(again) == 3 and set(first) < set(again)
    for run_id, prov in first.items():  # trained and timed afresh
        assert "resumed_from" not in again[run_id] and again[run_id]["train_s"] != prov["train_s"]
    (resumed,) = [p["resumed_from"] for p in again.values() if "resumed_from" in p]
    assert resumed["record"] == str(records.record_path(pid, "tiny", resumed["checkpoint"].split("/")[-2],
                                                        root=dirs["results"]).resolve())
    deleted = records.record_path(pid, "tiny", next(iter(first)))
    deleted.unlink()  # its final checkpoint becomes its record again, and the record says so
    assert main(["reproduce", *fast_args(pid, "tables=[table2]")]) == 0
    assert records.read_record(deleted)["provenance"]["resumed_from"]["record"] == str(deleted.resolve())


@pytest.mark.parametrize("blocked", ["cache", "hydra"])
def test_a_cache_folder_that_cannot_be_written_is_one_line(dirs, capsys, monkeypatch, blocked):
    """A cache folder that is a file (or holds a file where Hydra's run dir goes) failed in Hydra, a traceback."""
    target = dirs["cache"] / "file" if blocked == "cache" else dirs["cache"] / "hydra"
    target.write_text("x")
    if blocked == "cache":
        monkeypatch.setenv("REPRO_CACHE_DIR", str(target))
    for command in ("reproduce", "list"):
        err = one_line_error(capsys, main([command, *fast_args(dirs["pid"])]))
        assert "cache folder" in err and "is not writable" in err and "REPRO_CACHE_DIR" in err
    assert not list(dirs["results"].rglob("*"))


@pytest.mark.parametrize("read_only", [False, True])
def test_the_report_on_a_folder_it_cannot_write_is_one_line(tmp_path, read_only):
    results = tmp_path / "results"
    if read_only:
        results.mkdir()
        results.chmod(0o500)
    else:
        results.write_text("a file where the results folder should be")
    cmd = _as_permissions_say([sys.executable, "-m", "repro.report", "--paper", "convit", "--papers-dir",
                               str(REPO / "papers"), "--results-dir", str(results), "--notebook", "none"])
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        if read_only:
            results.chmod(0o700)
    err = _one_line_exit_2(proc)
    assert (f"cannot write the reports to {results}" if read_only else f"{results} is a file, not a folder") in err


def test_a_full_disk_is_one_line_and_leaves_no_temp_file(dirs, capsys, monkeypatch):
    """ENOSPC while the data cache is written: no traceback, no failed record, no half-written file kept."""
    _jpeg_dataset(dirs["data"])
    save = torch.save

    def full(obj, f, *a, **k):
        f.write(b"x" * 1000)  # part of it got out before the disk filled
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    err = one_line_error(capsys, main(["reproduce", *_jpeg_args(dirs["pid"], "tables=[table2]")]))
    assert f"no space left on the device writing {dirs['cache'] / 'data'}" in err and "free space" in err
    assert not [p for p in (dirs["cache"], dirs["results"]) for p in p.rglob("*.tmp")]
    assert not list(dirs["results"].rglob("*.json"))
    monkeypatch.setattr(torch, "save", save)


@pytest.mark.parametrize("top1", ["abc", 1e300, 100.5])
def test_an_invalid_record_in_any_table_is_named_before_anything_runs(dirs, capsys, top1):
    """Values are checked against their unit (top-1 in [0, 100] %, finite) wherever a record is read, and
    reproduce checks every record of the paper, not only those of the tables it runs."""
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table1]")]) == 0
    good = json.loads(next(dirs["results"].rglob("records/*.json")).read_text())
    bad = records.record_path(pid, "tiny", "table9-r-vit-s0-0123456789", root=dirs["results"])
    bad.write_text(json.dumps({**good, "table": "table9", "metrics": {"top1": top1}}))
    with pytest.raises(records.RecordError, match=r"metrics.top1 = .* is not an accuracy in \[0, 100\]"):
        records.read_record(bad)
    capsys.readouterr()
    err = one_line_error(capsys, main(["reproduce", *fast_args(pid, "tables=[table1]")]))
    assert err.startswith(f"error: {bad}: metrics.top1") and "allow_invalid=true" in err
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "allow_invalid=true")]) == 0
    assert f"skipped: {bad}" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["corrupt image", "batch over the data", "folder without a path"])
def test_data_is_checked_before_any_run_starts(dirs, capsys, case):
    """Each was caught only once a run had started (its folder, lock and log written, earlier runs trained)."""
    pid = dirs["pid"]
    _jpeg_dataset(dirs["data"])
    args, expected = {
        "corrupt image": (_jpeg_args(pid), "cannot decode image"),
        "batch over the data": (fast_args(pid, "recipe.batch_size=500"), "make no full batch of 500"),
        "folder without a path": (fast_args(pid, "tables=[table1]", "data=folder"), "data=folder needs data.path"),
    }[case]
    last = sorted((dirs["data"] / "cifar10-jpeg" / "train" / "truck").iterdir())[-1]
    last.write_bytes(last.read_bytes()[:200])  # a JPEG cut short: its header reads, its pixels do not
    err = one_line_error(capsys, main(["reproduce", *args]))
    assert expected in err
    assert not (dirs["cache"] / "runs").exists() and not list(dirs["results"].rglob("*.json"))


@pytest.mark.slow
def test_ctrl_c_with_jobs_says_once_what_finished_and_what_stopped(dirs, tmp_path):
    """Ctrl-C reaches the whole process group: the groups running stop and checkpoint, the parent alone sums up
    (it printed "3/3 group(s) done" and "finished in" for groups that never ran, and each child its own line)."""
    cmd = [sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"], "jobs=2", "recipe.epochs=500")]
    p = subprocess.Popen(cmd, env=subprocess_env(dirs), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    t0 = time.time()
    while len(list((dirs["cache"] / "runs").rglob("config.yaml"))) < 2:  # both groups inside their first run
        assert p.poll() is None and time.time() - t0 < 300, p.communicate()
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, out + err
    assert "group(s) done" not in out and "finished in" not in out, out
    (line,) = [line for line in err.splitlines() if "stopped" in line]
    assert line.startswith("stopped: SIGINT: of 3 run(s), 0 finished, 2 stopped and checkpointed (table2-") , err
    assert line.endswith("1 not started; run the same command again to resume")
