"""python -m repro.run.forecast: a campaign's device time from a committed benchmark, with no data and no device."""
from __future__ import annotations

import dataclasses

import pytest

from repro.run import deadline
from repro.run.forecast import Reference, forecast, gflops, main

from conftest import REPO, fast_args

H200 = REPO / "results" / "bench" / "NVIDIA_H200-data_path.json"


def _ref(**numbers) -> Reference:
    base = dict(device="dev", model="m", batch=100, step_s=1.0, model_s=0.0, gflops=1.0, convit_ratio=0.5,
                packed_speedup=None, source="test")
    return Reference(**{**base, **numbers})


def test_the_committed_h200_step_prices_its_own_model_at_the_measured_rate():
    ref = Reference.load(H200)
    assert ref.device == "NVIDIA H200" and ref.model == "repro_deit_tiny_c32" and ref.batch == 512
    assert ref.rate(ref.gflops, gpsa=False) == pytest.approx(512 / 0.05400975050000014)  # 9,480 img/s, measured
    assert 0.5 < ref.convit_ratio < 0.7  # ConViT-Ti/32px over DeiT-Ti/32px training, the same H200
    assert ref.rate(ref.gflops, gpsa=True) < ref.rate(ref.gflops, gpsa=False)
    assert ref.rate(2 * ref.gflops, gpsa=False) < ref.rate(ref.gflops, gpsa=False)


def test_only_the_model_part_scales_with_flops():
    outside_only, model_only = _ref(), _ref(model_s=1.0)
    assert outside_only.rate(1.0, False) == outside_only.rate(8.0, False) == 100.0
    assert model_only.rate(2.0, False) == pytest.approx(50.0) and model_only.rate(1.0, True) == pytest.approx(50.0)


def test_runs_epochs_and_evaluations_counted_as_the_deadline_counts_them(dirs):
    """f100: 2 epochs x 20 batches of 8, f50: 4 x 10 (epochs x 1/f); 40 test images at the end, priced at 100 img/s."""
    f = forecast(fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2"), _ref())
    assert f["runs"] == 2 and f["groups"] == 0 and f["models"] == 1
    assert f["seconds"] == pytest.approx((320 + 320) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))
    longer = forecast(fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=4"), _ref())
    assert longer["seconds"] == pytest.approx(2 * (320 + 320) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))


def test_a_packed_speedup_divides_only_fused_groups(dirs):
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2", "seeds=2", "runtime.fused=true",
                     "data.pipeline=fastpath")
    alone, fused = forecast(args, _ref()), forecast(args, _ref(packed_speedup=2.0))
    assert alone["groups"] == fused["groups"] == 2  # each fraction's two seeds
    assert fused["seconds"] == pytest.approx(alone["seconds"] / 2)


def test_flops_are_counted_without_weights(dirs):
    from repro.run.deadline import campaign

    _, specs = campaign(fast_args(dirs["pid"], "tables=[table2]"))
    spec = next(s for s in specs if s.kind == "train")
    wider = dataclasses.replace(spec, config={**spec.config, "model": {
        **spec.config["model"], "kwargs": {**spec.config["model"].get("kwargs", {}), "embed_dim": 64}}})
    assert 0 < gflops(spec) < gflops(wider)


def test_a_dataset_of_unknown_size_is_one_line(dirs, capsys):
    assert main(["--bench", str(H200), "--paper", dirs["pid"], "scale=tiny", "data=folder", "data.path=x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "forecast knows the size of" in err
