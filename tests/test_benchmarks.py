"""`make bench` and `make gpu-check` must run on any CPU (bench writes its JSON); the numbers themselves are
never asserted."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from benchmarks import data_path, fastpath, throughput
from conftest import REPO


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


FASTPATH_ARGS = ["--steps", "1", "--batch", "4", "--pack", "2", "--pack-batch", "4"]


@pytest.mark.slow
def test_fastpath_benchmark_writes_its_keys(tmp_path):
    fastpath.main([*FASTPATH_ARGS, "--variants", "eager,eager+fused", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*-fastpath.json")
    out = json.loads(path.read_text())
    for key in ("device", "model", "batch", "step_img_s", "engine_img_s_before", "data_share", "mfu",
                "packed_runs", "packed_speedup", "packed_softmax_dtypes", "commit"):
        assert key in out, key
    assert out["batch"] == 4 and out["packed_runs"] == 2 and out["threads"] == 1 and out["device"].endswith("-1t")
    assert out["step_img_s"] > 0 and out["engine_img_s_before"] > 0 and 0 <= out["data_share"] <= 1
    assert out["mfu"] is None and out["mfu_note"] and out["packed_speedup"] > 0
    assert set(out["stage_s"]) == {"data", "model"} and out["complete"] is True
    assert set(out["variants"]) == {"eager", "eager+fused"} and out["variant"] in out["variants"]
    assert out["step_img_s"] == max(v["step_img_s"] for v in out["variants"].values())
    assert all(v["first_steps_s"] > 0 for v in out["variants"].values())


def test_fastpath_benchmark_keeps_what_it_measured_when_a_part_fails(tmp_path, monkeypatch, capsys):
    """A variant that breaks (a compile error on a new machine, say) is recorded with its error and the others
    are measured; the fast path's numbers are saved before the packed runs, so a bench stopped there keeps them."""
    measure = fastpath.variant

    def broken(name, *args):
        if name == "eager+fused":
            raise RuntimeError("simulated compile failure\nwith a long traceback")
        return measure(name, *args)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # what a time limit's signal leaves
    monkeypatch.setattr(fastpath, "variant", broken)
    monkeypatch.setattr(fastpath, "packed", stopped)
    with pytest.raises(KeyboardInterrupt):
        fastpath.main([*FASTPATH_ARGS, "--variants", "eager+fused,eager", "--out", str(tmp_path)])
    out = json.loads(next(tmp_path.glob("*-fastpath.json")).read_text())
    assert out["complete"] is False and out["variant"] == "eager" and "packed_speedup" not in out
    assert out["variants"]["eager+fused"] == {"error": "RuntimeError: simulated compile failure"}
    assert "eager+fused: RuntimeError: simulated compile failure" in capsys.readouterr().out


def test_fastpath_benchmark_records_fused_runs_that_fail_on_the_device(tmp_path, monkeypatch):
    """On the H100 (bf16, torch 2.11) the fused group's backward raised; the bench died and lost the packed part's
    reason. Now the JSON names it beside the fast path's numbers, with the softmax nodes' dtypes of one step."""
    def failing(*args, **kwargs):
        raise RuntimeError("expected input and grad types to match\nwith a long traceback")
    monkeypatch.setattr(fastpath, "packed", failing)
    fastpath.main([*FASTPATH_ARGS, "--variants", "eager", "--out", str(tmp_path)])
    out = json.loads(next(tmp_path.glob("*-fastpath.json")).read_text())
    assert out["packed_error"] == "expected input and grad types to match" and out["complete"] is False
    assert out["step_img_s"] > 0 and "packed_speedup" not in out
    # one fused forward again: each softmax node of its graph, input and result dtypes (here fp32; SDPA's CPU
    # flash kernel, no softmax node)
    assert out["packed_softmax_dtypes"] == ["LogSoftmaxBackward0(torch.float32 -> torch.float32)"]


def test_fastpath_benchmark_measures_packed_runs_in_fp32_when_bf16_fails_on_a_gpu(tmp_path, monkeypatch):
    """A GPU slot whose bf16 fused group raises still measures what fusing buys, both sides without autocast,
    labelled as such; the bf16 error stays beside it. Only the control flow is run here (no GPU)."""
    asked = []

    def fake_packed(k, cfg, steps, device, rounds=1, compile_=False, amp="bf16"):
        asked.append(amp)
        if amp == "bf16":
            raise RuntimeError("expected input and grad types to match")
        return {"packed_runs": k, "packed_fused_img_s": 800.0, "packed_alone_img_s": 200.0, "packed_speedup": 4.0}
    monkeypatch.setattr(fastpath, "packed", fake_packed)
    monkeypatch.setattr(fastpath, "packed_softmax_dtypes", lambda cfg, device: ["SafeSoftmaxBackward0(...)"])
    args = fastpath.argparse.Namespace(pack_batch=4, compile=False, processes=False, out=tmp_path)
    fastpath.packed_part(args, {"step_img_s": 1.0, "complete": False}, 2, 1, 1, torch.device("cuda"))
    out = json.loads(next(tmp_path.glob("*-fastpath.json")).read_text())
    assert asked == ["bf16", "none"] and out["complete"] is True
    assert out["packed_amp"] == "none" and out["packed_speedup"] == 4.0
    assert out["packed_error"] == "expected input and grad types to match"


def test_fastpath_benchmark_refuses_an_unknown_variant_before_timing(tmp_path):
    with pytest.raises(SystemExit, match=r"'eager\+fast'"):
        fastpath.main([*FASTPATH_ARGS, "--variants", "eager,eager+fast", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_data_path_synthetic_stand_in_holds_a_gpu_batch(tmp_path, monkeypatch):
    """The small scale's batch of 512 with 50 steps: the synthetic stand-in (50 images a class by default)
    must hold enough batches in an epoch, as on a GPU with no CIFAR on disk; what is timed is the engine's run."""
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    cfg = data_path.run_config("small", synthetic=False, batch=None)
    assert cfg["recipe"]["batch_size"] == 512
    _, step = data_path.engine_step(cfg, "repro_deit_tiny_c32", 52, torch.device("cpu"))
    data = step.run.data
    assert data.info["train"].startswith("synthetic") and data.train.steps_per_epoch >= 52


@pytest.mark.slow
def test_throughput_benchmark_compares_with_timm(tmp_path):
    throughput.main(["--only", "^DeiT-Ti/32px$", "--steps", "1", "--batch", "4", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*.json")
    rows = json.loads(path.read_text())["rows"]
    assert [(r["model"], r["train"]) for r in rows] == [("DeiT-Ti/32px", False), ("DeiT-Ti/32px", True)]
    assert all(r["timm"] == "deit_tiny_patch16_224" and r["ratio"] > 0 and r["gmacs_per_img"] > 0 for r in rows)


@pytest.mark.slow
def test_make_gpu_check_prints_one_ok_line_per_paper(tmp_path):
    """`make gpu-check` on the CPU of CI: no dataset (synthetic pixels), every paper's small run trains a
    few steps, is stopped and resumed to the same loss, and says so in one line."""
    from repro.plan.experiments import known_papers, paper_scales
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = dict(os.environ, REPRO_DATA_DIR=str(tmp_path / "no-data"), REPRO_CACHE_DIR=str(tmp_path / "cache"),
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    out = subprocess.run(["make", "-s", "gpu-check", f"PY={sys.executable}"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    papers = [p for p in known_papers() if "small" in paper_scales(p)]
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("ok ")]
    assert sorted(ln.split(":")[0][3:] for ln in lines) == sorted(papers) and len(papers) == 6  # 5 + crosspaper
    assert all("img/s" in ln and "synthetic pixels" in ln and "resume = uninterrupted" in ln for ln in lines)
    assert f"gpu-check: {len(papers)} of {len(papers)} paper(s) ok" in out.stdout
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.pt"))


def test_cpu_step_benchmark_writes_each_variant_beside_fp32(tmp_path, monkeypatch):
    from benchmarks import cpu_step
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    cpu_step.main(["--sizes", "24x1", "--batch", "8", "--steps", "1", "--rounds", "1", "--peak-n", "256",
                   "--out", str(tmp_path)])
    (path,) = tmp_path.glob("*-cpu_step.json")
    out = json.loads(path.read_text())
    (size,) = out["sizes"]
    assert out["peak_n"] == 256
    if not out["native_bf16"]:  # the bf16 rows run fp32 here: read against fp32's ceiling
        assert out["peak_gflop_s"]["bf16"] == out["peak_gflop_s"]["fp32"]
    assert set(cpu_step.VARIANTS) <= set(size) and size["width"] == 24 and size["depth"] == 1
    for v in cpu_step.VARIANTS:
        assert size[v]["img_s"] > 0 and 0 < size[v]["peak_share"] and size[v]["gflop_s"] > 0
