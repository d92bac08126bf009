"""benchmarks/gpu_session.sh: what a GPU slot brings back is what it recorded, in one tar (the whole sequence,
bench, deadline campaign and resume, was tried by hand on the CPU: benchmarks/README.md, "A GPU slot")."""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile

from conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu_session.sh"


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_pack_brings_back_only_what_the_slot_recorded(tmp_path):
    res, data = tmp_path / "results", tmp_path / "data"
    (data / "cifar10-jpeg" / "train").mkdir(parents=True)  # already unpacked: setup leaves it
    committed = res / "convit" / "small" / "records" / "committed.json"
    committed.parent.mkdir(parents=True)
    committed.write_text("{}")
    os.utime(committed, (1e9, 1e9))
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GS_DIR": str(tmp_path / "gs"), "PY": sys.executable,
           "REPRO_RESULTS_DIR": str(res), "REPRO_DATA_DIR": str(data)}
    first = _run(env, "pack")
    assert first.returncode == 0 and "packed 0 record(s)" in first.stdout, first.stderr
    new = ["convit/small/records/new.json", "convit/small/plan.json", "bench/NVIDIA_H200-fastpath.json",
           "convit/tiny/records/other_scale.json"]
    for name in new:
        (res / name).parent.mkdir(parents=True, exist_ok=True)
        (res / name).write_text("{}")
    second = _run(env, "pack")
    assert second.returncode == 0 and "packed 1 record(s)" in second.stdout, second.stderr
    with tarfile.open(tmp_path / "out" / "results-small.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(new[:3])


def test_a_verb_it_does_not_know_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "data" / "cifar10-jpeg" / "train").mkdir(parents=True)
    (tmp_path / "results").mkdir()
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GS_DIR": str(tmp_path / "gs"), "PY": sys.executable,
           "REPRO_RESULTS_DIR": str(tmp_path / "results"), "REPRO_DATA_DIR": str(tmp_path / "data")}
    bad = _run(env, "train")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "prepare, bench, holdout, start" in bad.stderr


def test_wait_follows_every_tagged_campaign_to_its_end(tmp_path):
    """Two pilots side by side (TAG=a, TAG=b): `wait` returns once both have ended, not when the first has."""
    (tmp_path / "data" / "cifar10-jpeg" / "train").mkdir(parents=True)
    (tmp_path / "results").mkdir()
    fake = tmp_path / "py"  # stands in for python: imports anything (-c), else sleeps as its last argument says
    fake.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\nfor a; do last=$a; done\nsleep "$last"; echo "ended after $last s"\n')
    fake.chmod(0o755)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GS_DIR": str(tmp_path / "gs"), "PY": str(fake),
           "REPRO_RESULTS_DIR": str(tmp_path / "results"), "REPRO_DATA_DIR": str(tmp_path / "data")}
    for tag, secs in (("a", "1"), ("b", "8")):
        assert _run({**env, "TAG": tag}, "start", "1m", secs).returncode == 0
    done = _run(env, "wait", "40")
    assert done.returncode == 0, done.stderr
    assert "ended after 1 s" in done.stdout and "ended after 8 s" in done.stdout


def test_every_module_the_script_runs_is_runnable():
    """Each ``$PY -m <module>`` of the script names a module that runs as a program (a moved entry point would
    otherwise first fail on the GPU, inside a slot)."""
    import importlib.util
    import re

    modules = set(re.findall(r'"\$PY" -m ([\w.]+)', SCRIPT.read_text()))
    assert {"repro", "benchmarks.fastpath"} <= modules
    for name in modules:
        spec = importlib.util.find_spec(name)
        assert spec is not None, name
        if spec.submodule_search_locations:  # a package runs through its __main__
            assert importlib.util.find_spec(f"{name}.__main__") is not None, name
        else:
            assert 'if __name__ == "__main__"' in open(spec.origin).read(), name
