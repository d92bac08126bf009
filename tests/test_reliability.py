"""No silent wrong results, smoke runs kept apart, one run per config at a time, one-line errors.

Each test is an input that on commit d761d99 trained and recorded "finished" (or ended in a traceback).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import timm

from repro import locks, records
from repro.cli import main
from repro.data import tensor_cache
from repro.models import zoo
from repro.report.cells import INVALID, compare
from repro.report.notebook import md_text
from repro.paper import Ref, load_paper

from conftest import REPO, fast_args, image_folder, subprocess_env
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


def test_a_run_another_live_process_holds_is_skipped_and_said(dirs, capsys):
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid)]) == 0
    run_id = next(line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("table2"))
    folder = dirs["cache"] / "runs" / pid / "tiny" / run_id
    folder.mkdir(parents=True)
    (folder / locks.LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "since": 0}))
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


def test_a_read_only_results_folder_fails_before_training(dirs, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only folders")
    dirs["results"].chmod(0o500)
    try:
        err = one_line_error(capsys, main(["reproduce", *fast_args(dirs["pid"])]))
    finally:
        dirs["results"].chmod(0o700)
    assert "is not writable" in err and not (dirs["cache"] / "runs").exists()


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
