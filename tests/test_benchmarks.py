"""`make bench` must run on any CPU and write its JSON; the numbers themselves are never asserted."""
import json

import pytest

from benchmarks import data_path, throughput


@pytest.mark.slow
def test_data_path_benchmark_writes_step_fractions(tmp_path, monkeypatch):
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path / "no-data"))  # falls back to synthetic pixels
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    data_path.main(["--steps", "1", "--batch", "8", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*-data_path.json")
    out = json.loads(path.read_text())
    assert out["settings"]["batch"] == 8 and out["settings"]["scale"] == "small"
    assert out["settings"]["aa"].startswith("rand-") and out["settings"]["data"].startswith("synthetic")
    assert 0 <= out["outside_model_fraction"] <= 1 and out["data_s"] > 0 and out["model_s"] > 0
    assert out["step_s"] > 0 and out["mfu"] is None and out["git_sha"]


@pytest.mark.slow
def test_throughput_benchmark_compares_with_timm(tmp_path):
    throughput.main(["--only", "^DeiT-Ti/32px$", "--steps", "1", "--batch", "4", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*.json")
    rows = json.loads(path.read_text())["rows"]
    assert [(r["model"], r["train"]) for r in rows] == [("DeiT-Ti/32px", False), ("DeiT-Ti/32px", True)]
    assert all(r["timm"] == "deit_tiny_patch16_224" and r["ratio"] > 0 and r["gmacs_per_img"] > 0 for r in rows)
