"""python -m repro forecast: a campaign's device time from a committed benchmark, with no data and no device."""
from __future__ import annotations

import pytest

from repro.cli import campaign, main
from repro.run import deadline
from repro.run.forecast import Reference, cost, forecast
from repro.run.specs import select

from conftest import REPO, fast_args, image_folder

H200 = REPO / "results" / "bench" / "NVIDIA_H200-data_path.json"


def _ref(**numbers) -> Reference:
    base = dict(device="dev", model="m", batch=100, step_s=1.0, model_s=0.0, gflops=1.0, tensors=10, convit_ratio=0.5,
                packed_speedup=None, source="test")
    return Reference(**{**base, **numbers})


def _forecast(args: list[str], ref: Reference) -> dict:
    return forecast(*campaign(args), ref)


def test_the_committed_h200_step_prices_its_own_model_at_the_measured_rate():
    ref = Reference.load(H200)
    assert ref.device == "NVIDIA H200" and ref.model == "repro_deit_tiny_c32" and ref.batch == 512
    own = (ref.gflops, ref.tensors, ref.batch)
    assert ref.rate(*own) == pytest.approx(512 / 0.05400975050000014)  # 9,480 img/s, measured
    assert 0.5 < ref.convit_ratio < 0.7  # ConViT-Ti/32px over DeiT-Ti/32px training, the same H200
    assert ref.rate(*own, gpsa=True) < ref.rate(*own)
    assert ref.rate(2 * ref.gflops, ref.tensors, 512) < ref.rate(*own) == ref.rate(ref.gflops / 2, ref.tensors, 512)


def test_the_model_step_takes_the_longer_of_its_compute_and_launch_bounds():
    ref = _ref(model_s=1.0)  # 1 s a step of 100 images in the model, nothing outside it
    assert ref.rate(2.0, 10, 100) == ref.rate(1.0, 20, 100) == pytest.approx(50.0)  # compute-, launch-bound
    assert ref.rate(0.1, 10, 100) == pytest.approx(100.0)  # fewer FLOPs, the same kernels: no faster
    assert ref.rate(1.0, 10, 50) == pytest.approx(50.0)  # half the batch, the same launches per step
    assert ref.rate(1.0, 10, 100, gpsa=True) == pytest.approx(50.0)
    assert _ref().rate(8.0, 80, 100) == _ref().rate(1.0, 10, 100) == 100.0  # outside the model: per image


def test_runs_epochs_and_evaluations_counted_as_the_deadline_counts_them(dirs):
    """f100: 2 epochs x 20 batches of 8, f50: 4 x 10 (epochs x 1/f); 40 test images at the end, priced at 100 img/s."""
    f = _forecast(fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2"), _ref())
    assert f["runs"] == 2 and f["groups"] == 0 and f["models"] == 1
    assert f["seconds"] == pytest.approx((320 + 320) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))
    longer = _forecast(fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=4"), _ref())
    assert longer["seconds"] == pytest.approx(2 * (320 + 320) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))


def test_a_packed_speedup_divides_only_fused_groups(dirs):
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2", "seeds=2", "runtime.fused=true",
                     "data.pipeline=fastpath")
    alone, fused = _forecast(args, _ref()), _forecast(args, _ref(packed_speedup=2.0))
    assert alone["groups"] == fused["groups"] == 2  # each fraction's two seeds
    assert fused["seconds"] == pytest.approx(alone["seconds"] / 2)


def test_flops_and_tensors_are_counted_without_weights(dirs):
    c, doc = campaign(fast_args(dirs["pid"], "tables=[table2]"))
    specs = select(c, doc)
    config = next(s for s in specs if s.kind == "train").config

    def changed(**kwargs):
        return cost({**config, "model": {**config["model"], "kwargs": {**config["model"].get("kwargs", {}), **kwargs}}})

    (flops, tensors), wider, deeper = cost(config), changed(embed_dim=64), changed(depth=4)
    assert 0 < flops < wider[0] and wider[1] == tensors
    assert deeper[0] > flops and deeper[1] > tensors


def test_a_folder_dataset_is_counted_from_its_files_and_a_missing_one_is_one_line(dirs, capsys):
    image_folder(dirs["data"] / "pilot", splits=("train", "val"), per_class=8)
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.epochs=2", "data=folder", "data.path=pilot")
    f = _forecast([a for a in args if not a.startswith("data.max_per_class")], _ref())
    assert f["seconds"] == pytest.approx((160 + 160) / 100 + 40 * 2 / (deadline.EVAL_SPEEDUP * 100))  # 80 images
    assert main(["forecast", "--bench", str(H200), "--paper", dirs["pid"], "scale=tiny", "data=folder",
                 "data.path=x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "data.path" in err


def test_paper_given_as_reproduce_takes_it_forecasts_that_paper_alone(capsys):
    """``forecast paper=cmhsa scale=cpu`` (reproduce's spelling) is one row for cmhsa, never cmhsa's plan under
    every paper's name."""
    assert main(["forecast", "--bench", str(H200), "paper=respostln", "scale=tiny"]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[3:] if not line.startswith("total")]
    assert rows == ["respostln"]


def test_overrides_may_follow_the_paper_option(capsys):
    """``forecast scale=small --paper cmhsa tables=[...]`` was 'unrecognized arguments' for the overrides after it."""
    assert main(["forecast", "--bench", str(H200), "scale=tiny", "--paper", "respostln", "seeds=1"]) == 0
    assert "seeds=1" in capsys.readouterr().out.splitlines()[-1]
