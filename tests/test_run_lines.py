"""What a command says about each run is what it does: "run" for a run that starts from scratch, "resume" only
for one that continues its checkpoint, and a lock that blocks because of clock skew is named."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro import records
from repro.cli import main
from repro.run import locks
from repro.train import preempt

from conftest import fast_args, subprocess_env


def test_a_run_that_starts_from_scratch_never_says_resume(dirs, capsys, monkeypatch, tmp_path):
    """The cache holds final checkpoints made for another results folder's records: a fresh folder trains again,
    from scratch, and said "resume" for each."""
    pid = dirs["pid"]
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", "report=false")]) == 0
    capsys.readouterr()
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path / "fresh"))
    assert main(["reproduce", *fast_args(pid, "tables=[table2]", "report=false")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert len([line for line in lines if line.split()[1] == "run"]) == 2, lines
    assert not [line for line in lines if "resume" in line], lines
    fresh = records.load_records(pid, root=tmp_path / "fresh")[0]
    assert len(fresh) == 2 and not [r for r in fresh if "resumed_from" in r["provenance"]]


def test_a_lock_from_a_clock_ahead_of_ours_is_named(dirs, capsys):
    """A lock whose heartbeat lies in the future (another host's clock ahead) blocked its run silently."""
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid)]) == 0
    run_id = next(line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("table1"))
    lock = dirs["results"] / pid / "tiny" / "locks" / run_id / locks.LOCK_NAME
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": 4242, "host": "node-ahead", "since": time.time() + 3600}))
    os.utime(lock, (time.time() + 3600, time.time() + 3600))
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "report=false")]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if f"skip {run_id}" in line]
    assert re.search(r"heartbeat is 3\d\d\d s in the future \(clock skew", line) and f"delete {lock}" in line
    assert not records.record_path(pid, "tiny", run_id).exists()


def _groups(pid: int) -> list[int]:
    """The jobs=N group processes whose parent is ``pid`` (Linux /proc; imports start other helpers)."""
    out = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:  # ended while we looked
            continue
        if parent == pid and b"repro.run.child" in cmdline:
            out.append(int(proc.name))
    return out


def test_ctrl_c_the_instant_jobs_groups_start_is_one_line_and_resumes(dirs):
    """Ctrl-C reaches the terminal's whole process group; a group's process still starting Python (its site
    import, before any handler of ours) printed "Fatal Python error" or a KeyboardInterrupt traceback (2 of 8
    tries in the last replay). Now the parent alone gets it: one line, exit 130, and the same command again
    finishes every run."""
    args = [sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"], "jobs=2", "report=false")]
    env, cwd = subprocess_env(dirs), dirs["papers"].parent
    for delay in (0.05, 0.15):  # after the exec: inside Python's start-up
        p = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=_as_from_a_terminal)  # killpg is Ctrl-C
        deadline = time.time() + 120
        while not _groups(p.pid) and p.poll() is None and time.time() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=300)
        assert p.returncode == preempt.INTERRUPT_EXIT_CODE and len(err.splitlines()) == 1, err
        assert err.startswith("stopped: SIGINT") and "Traceback" not in err
    again = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert len(records.load_records(dirs["pid"], root=dirs["results"])[0]) == 3


def _as_from_a_terminal() -> None:
    """Ctrl-C's default action in the command, as a terminal starts it: a suite started in the background by a
    non-interactive shell (``.ci/run &``) ignores SIGINT, and Python started so sets no KeyboardInterrupt handler
    (the signal then did nothing: exit 0)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_a_command_imports_is_one_line(dirs):
    """Before any handler of ours is set (torch alone takes seconds to import), Ctrl-C was a traceback."""
    p = subprocess.Popen([sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"])],
                         env=subprocess_env(dirs), cwd=dirs["papers"].parent, stderr=subprocess.PIPE, text=True,
                         preexec_fn=_as_from_a_terminal)
    maps, deadline = Path(f"/proc/{p.pid}/maps"), time.time() + 60
    while "libtorch" not in maps.read_text() and time.time() < deadline:  # inside `import torch`, past Python's
        time.sleep(0.005)  # own start-up (a Ctrl-C there is Python's "Fatal Python error", before any code of ours)
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=120)[1]
    assert p.returncode == preempt.INTERRUPT_EXIT_CODE and err.startswith("stopped: interrupted before"), err
    assert len(err.splitlines()) == 1 and not (dirs["results"] / dirs["pid"]).exists()


def test_a_jobs_group_runs_outside_the_terminals_process_group():
    from repro.run.parallel import start_group

    p = start_group([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert os.getpgid(p.pid) not in (os.getpgid(0), 0)
    finally:
        p.kill()
        p.wait()


def test_a_value_smoke_replaces_is_named(dirs, capsys):
    """smoke=true replaced recipe.epochs=3 typed on the command line with 1, without a word."""
    assert main(["reproduce", *fast_args(dirs["pid"], "smoke=true", "recipe.epochs=3", "tables=[table1]",
                                        "report=false")]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: smoke")]
    assert note.startswith("note: smoke=true replaces recipe.epochs=3 with 1, ") and "data.max_per_class=16 with 20" in note


@pytest.mark.parametrize("future", [False, True])
def test_a_lock_whose_owner_cannot_be_read_says_so_and_what_to_do(dirs, capsys, future):
    """It said "pid None on None"; with a future mtime it named no clock skew either."""
    pid = dirs["pid"]
    assert main(["list", *fast_args(pid)]) == 0
    run_id = next(line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("table1"))
    lock = dirs["results"] / pid / "tiny" / "locks" / run_id / locks.LOCK_NAME
    lock.parent.mkdir(parents=True)
    lock.write_text('{"pid": "cut')
    if future:
        os.utime(lock, (time.time() + 3600, time.time() + 3600))
    assert main(["reproduce", *fast_args(pid, "tables=[table1]", "report=false")]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if f"skip {run_id}" in line]
    assert "None" not in line and "its owner cannot be read from the lock" in line
    assert f"if no command is running this run, delete {lock}" in line
    assert ("in the future (clock skew" in line) == future
