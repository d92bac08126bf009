"""cpu_precision: bf16 on a CPU changes a run's numerics, so its id; fp32 keeps every committed id; the bf16
step stays close to fp32's and goes through SDPA's math path."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.cpu_step import cpu_run, time_variant
from repro.runs import ConfigError, RunSpec, resolve
from repro.train import precision

CPU = torch.device("cpu")
# The first steps of bf16 against fp32 from the same weights on the same batches: the tolerance, fixed here
# as 0.2 % of a cross-entropy near ln(10) = 2.3 (bf16 keeps 8 bits of mantissa, 0.4 % a rounding).
STEP_LOSS_TOLERANCE = 0.005


def _spec(**extra) -> RunSpec:
    return RunSpec("p", "t", {"row": "r", "columns": {}}, "cpu",
                   config={"model": {"name": "m", "kwargs": {}}, "recipe": {"epochs": 2}, **extra})


def test_fp32_keeps_the_committed_run_ids_and_bf16_gets_its_own():
    plain = _spec()
    assert _spec(cpu_precision="fp32").run_id == plain.run_id
    assert _spec(cpu_precision="bf16").run_id != plain.run_id
    base = {"cpu_precision": "fp32", "runtime": {"amp": "bf16"}}  # Hydra's default, as reproduce passes it
    assert resolve(_spec(), base).run_id == plain.run_id
    assert resolve(_spec(), base, {"cpu_precision": "bf16"}).run_id == _spec(cpu_precision="bf16").run_id


def test_a_precision_it_does_not_know_is_a_config_error():
    with pytest.raises(ConfigError, match="cpu_precision='fp16'.*fp32, bf16"):
        resolve(_spec(cpu_precision="fp16"), {})


def test_bf16_only_where_the_cpu_has_it(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.amp_dtype(CPU, "bf16", "bf16") is torch.bfloat16
    assert precision.amp_dtype(CPU, "bf16", "fp32") is None and precision.amp_dtype(CPU, "bf16", None) is None
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert precision.amp_dtype(CPU, "bf16", "bf16") is None
    assert precision.provenance(CPU, "bf16", None) == {"cpu_precision": "bf16", "cpu_native_bf16": False,
                                                       "cpu_precision_used": "fp32"}
    assert precision.amp_dtype(torch.device("cuda"), "bf16", None) is torch.bfloat16  # CUDA: runtime.amp decides


def _attention_ops(dtype) -> set[str]:
    q = k = v = torch.randn(2, 3, 17, 8)
    with profile(activities=[ProfilerActivity.CPU]) as prof, precision.autocast(CPU, dtype):
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    return {e.key for e in prof.key_averages()}


def test_bf16_attention_takes_the_math_path_and_fp32_keeps_the_flash_kernel():
    flash = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert flash in _attention_ops(None)
    bf16 = _attention_ops(torch.bfloat16)
    assert flash not in bf16 and "aten::_scaled_dot_product_attention_math" in bf16


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="this CPU has no native bf16: nothing to compare")
def test_bf16_first_steps_stay_within_the_tolerance_of_fp32(tmp_path, monkeypatch):
    """The engine's step, each run built afresh from its seed: the same weights and batches every time."""
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path))
    specs = {p: cpu_run(48, 2, p, batch=16, steps=7) for p in ("fp32", "bf16")}
    assert specs["bf16"].config["cpu_precision"] == "bf16" and "cpu_precision" not in specs["fp32"].config
    losses = {p: time_variant(spec, p, 6)[1] for p, spec in specs.items()}
    assert time_variant(specs["fp32"], "fp32", 6)[1] == losses["fp32"]  # a rebuilt run repeats its steps exactly
    gaps = [abs(a - b) for a, b in zip(losses["fp32"], losses["bf16"])]
    assert max(gaps) < STEP_LOSS_TOLERANCE, gaps
    assert losses["fp32"] != losses["bf16"]  # bf16 did run: the numbers moved, a little
