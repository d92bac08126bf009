import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import pytest

from repro import records


def _rec(run_id="r1", **kw):
    base = dict(run_id=run_id, paper="convit", table="table2", cell={"row": "10", "columns": {"top1": "top1"}},
                scale="tiny", seed=0, status="finished", metrics={"top1": 12.5}, config={"a": 1},
                provenance={"git_sha": "x"})
    base.update(kw)
    return base


def test_roundtrip_and_nonfinite_become_null(tmp_path):
    p = records.write_record(_rec(metrics={"top1": 1.0, "loss": float("nan")}), root=tmp_path)
    assert p == tmp_path / "convit" / "tiny" / "records" / "r1.json"
    rec = records.read_record(p)
    assert rec["metrics"] == {"top1": 1.0, "loss": None}
    good, bad = records.load_records("convit", root=tmp_path)
    assert [r["run_id"] for r in good] == ["r1"] and bad == []


def test_written_files_take_the_umask_not_owner_only(tmp_path):
    """A record and a rebuilt report are readable as an ``open`` would leave them (a results folder shared
    with a group), not the temp file's 0600."""
    umask = os.umask(0o022)
    os.umask(umask)
    p = records.write_record(_rec(), root=tmp_path)
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask
    records.atomic_write_bytes(tmp_path / "report.html", b"<p>")
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask


def test_corrupt_record_is_reported_not_raised(tmp_path):
    records.write_record(_rec("ok"), root=tmp_path)
    d = records.record_dir("convit", "tiny", tmp_path)
    (d / "broken.json").write_text('{"run_id": "broken", "metr')
    (d / "partial.json").write_text(json.dumps({"run_id": "partial"}))
    good, bad = records.load_records("convit", root=tmp_path)
    assert [r["run_id"] for r in good] == ["ok"]
    assert len(bad) == 2 and all(str(d) in str(e) for e in bad)


def test_invalid_status_rejected(tmp_path):
    with pytest.raises(records.RecordError, match="status"):
        records.write_record(_rec(status="maybe"), root=tmp_path)


def _writer(root, tag, n):
    for i in range(n):
        records.write_record(_rec("shared", metrics={"top1": float(i), "blob": [tag] * 20000}), root=root)


def test_concurrent_writers_never_leave_partial_file(tmp_path):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(tmp_path, t, 40)) for t in ("a", "b")]
    for p in procs:
        p.start()
    path = records.record_path("convit", "tiny", "shared", tmp_path)
    seen = 0
    while any(p.is_alive() for p in procs):
        if path.exists():
            rec = records.read_record(path)  # raises if a reader ever sees a half-written file
            assert len(set(rec["metrics"]["blob"])) == 1
            seen += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert seen > 0  # the reader overlapped the writers
    records.read_record(path)
    assert not [f for f in path.parent.iterdir() if f.suffix == ".tmp"]


class _Stalled:
    """A file that writes the first half of what it is given, says so (``flag``) and hangs: a kill now lands
    inside the write."""

    def __init__(self, f, flag):
        self.f, self.flag = f, flag

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.f.__exit__(*exc)

    def fileno(self):
        return self.f.fileno()

    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        _stall(self.flag)


def _stall(flag):
    Path(flag).touch()
    time.sleep(600)


def _stalled_writer(root, flag, stage):
    """A record write that hangs half-way through its bytes ("write") or with all of them written and synced,
    before the rename ("rename")."""
    if stage == "write":
        real = os.fdopen
        os.fdopen = lambda fd, mode: _Stalled(real(fd, mode), flag)
    else:
        os.fsync = lambda fd: _stall(flag)
    records.write_record(_rec("killed", metrics={"top1": 2.0}), root=root)


@pytest.mark.parametrize("stage", ["write", "rename"])
def test_kill_during_write_keeps_old_record(tmp_path, stage):
    records.write_record(_rec("killed", metrics={"top1": 1.0}), root=tmp_path)
    flag = tmp_path / "stalled"
    p = mp.get_context("spawn").Process(target=_stalled_writer, args=(tmp_path, flag, stage))
    p.start()
    deadline = time.monotonic() + 120
    while not flag.exists() and p.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists(), "the writer never reached the stall"
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert p.exitcode == -signal.SIGKILL
    path = records.record_path("convit", "tiny", "killed", tmp_path)
    assert records.read_record(path)["metrics"] == {"top1": 1.0}
    assert [f.suffix for f in path.parent.iterdir() if f != path] == [".tmp"]  # the killed write's, never read


def test_git_dirty_means_code_changed_not_results(tmp_path):
    import subprocess

    from repro.records import git_state

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "REPORT.md").write_text("old")
    (tmp_path / "model.py").write_text("x = 1")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "init")
    sub = tmp_path / "results"
    assert git_state(tmp_path)["git_dirty"] is False and len(git_state(tmp_path)["git_sha"]) == 40
    (tmp_path / "results" / "REPORT.md").write_text("rebuilt by a run")  # what every run does
    (tmp_path / "results" / "new.json").write_text("{}")
    assert git_state(tmp_path)["git_dirty"] is False and git_state(sub)["git_dirty"] is False
    (tmp_path / "model.py").write_text("x = 2")
    assert git_state(tmp_path)["git_dirty"] is True and git_state(sub)["git_dirty"] is True


def test_a_copy_takes_its_commit_from_where_it_was_copied(tmp_path, monkeypatch):
    """A device machine runs a copy of the tree whose .git, if any, may name another commit (one slot's said the
    session's first commit, dirty): its records name the commit the copy was made at."""
    from repro.records import git_state

    monkeypatch.delenv("REPRO_GIT_SHA", raising=False)
    assert git_state(tmp_path) == {"git_sha": "unknown", "git_dirty": False}
    monkeypatch.setenv("REPRO_GIT_SHA", "a" * 40)
    monkeypatch.setenv("REPRO_GIT_DIRTY", "0")
    assert git_state(tmp_path) == {"git_sha": "a" * 40, "git_dirty": False}
    monkeypatch.delenv("REPRO_GIT_DIRTY")  # not said: not claimed clean
    assert git_state(tmp_path)["git_dirty"] is True


def test_a_rebuilt_report_keeps_a_group_writable_umask(tmp_path, monkeypatch):
    """Reports follow the umask as records do: under 002 (a shared results folder) the group may rewrite them."""
    from repro.report import build_index

    monkeypatch.setattr(records, "_UMASK", 0o002)  # the umask the module read at import
    page = build_index(tmp_path / "papers", tmp_path / "results")
    assert page.stat().st_mode & 0o777 == 0o664
