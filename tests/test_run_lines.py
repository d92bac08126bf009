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


def test_ctrl_c_while_a_jobs_group_starts_is_no_traceback(dirs):
    """Ctrl-C reaches every process of a jobs=N command; a group still importing printed a KeyboardInterrupt
    traceback. It now waits for its parent's SIGTERM, which ends it quietly."""
    env = {**subprocess_env(dirs), preempt.SUMMARIZED: "1"}
    p = subprocess.Popen([sys.executable, "-m", "repro", "reproduce", *fast_args(dirs["pid"])], env=env,
                         cwd=dirs["papers"].parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.2)  # inside its imports (torch alone takes longer)
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    p.terminate()  # what the parent's preempt.wait does
    out, err = p.communicate(timeout=120)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert preempt.stopped(p.returncode)
