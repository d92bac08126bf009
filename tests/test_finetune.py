"""Fine-tuning at a new resolution from another run's model: the position embedding resampled, the rest kept."""
import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed

import repro.models  # noqa: F401
from repro import records
from repro.cli import main
from repro.models.resample import at_new_resolution

from conftest import fast_args, write_paper

EXPERIMENTS = '''
from repro.runs import RunSpec

MODEL = {"name": "repro_deit_tiny_c32", "kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 24, "num_heads": 2}}

def runs(scale, seeds=None):
    low = RunSpec("PID", "t", {"row": "low", "columns": {"top1": "top1"}}, scale, name="low",
                  config={"model": MODEL, "recipe": {"epochs": 1}})
    # the fine-tune at 48 px with lr 0: its final weights are what the init function made of low's
    high = RunSpec("PID", "t", {"row": "high", "columns": {"top1": "top1"}}, scale, name="high",
                   config={"model": {**MODEL, "kwargs": {**MODEL["kwargs"], "img_size": 48}},
                           "data": {"img_size": 48},
                           "recipe": {"epochs": 1, "lr": 0.0, "min_lr": 0.0, "warmup_lr": 0.0},
                           "init": {"from": low.as_source(), "fn": "models.at_new_resolution"}})
    return [low, high]
'''


def _pair(img_size=48):
    low = timm.create_model("repro_deit_tiny_c32", patch_size=8, depth=1, embed_dim=24, num_heads=2, num_classes=10)
    high = timm.create_model("repro_deit_tiny_c32", patch_size=8, depth=1, embed_dim=24, num_heads=2,
                             num_classes=10, img_size=img_size)
    return low, high


def test_weights_carry_over_and_the_position_embedding_is_resampled():
    low, high = _pair()
    at_new_resolution(low, high)
    src, dst = low.state_dict(), high.state_dict()
    assert dst["pos_embed"].shape == (1, 1 + 36, 24) and src["pos_embed"].shape == (1, 1 + 16, 24)
    assert all(torch.equal(src[k], dst[k]) for k in src if k != "pos_embed")
    expected = resample_abs_pos_embed(src["pos_embed"], new_size=[6, 6], old_size=[4, 4], num_prefix_tokens=1)
    assert torch.equal(dst["pos_embed"], expected)
    assert torch.equal(dst["pos_embed"][:, :1], src["pos_embed"][:, :1])  # the class token's entry is kept
    same = _pair(32)[1]
    at_new_resolution(low, same)  # same grid: an exact copy
    assert all(torch.equal(v, same.state_dict()[k]) for k, v in src.items())


def test_other_architectures_are_refused():
    low = _pair()[0]
    wider = timm.create_model("repro_deit_tiny_c32", patch_size=8, depth=1, embed_dim=48, num_heads=2, num_classes=10)
    with pytest.raises(ValueError, match="differ beyond the position embedding"):
        at_new_resolution(low, wider)


def test_fine_tune_run_starts_from_the_source_runs_model(dirs):
    pid = dirs["pid"]
    write_paper(dirs["papers"], pid, EXPERIMENTS)
    assert main(["reproduce", *fast_args(pid)]) == 0
    recs = {r["cell"]["row"]: r for r in records.load_records(pid, root=dirs["results"])[0]}
    low, high = recs["low"], recs["high"]
    assert high["status"] == "finished" and high["provenance"]["init_from"] == low["run_id"]
    assert high["config"]["data"]["img_size"] == 48 and high["config"]["model"]["kwargs"]["img_size"] == 48
    load = lambda r: torch.load(dirs["cache"] / "runs" / pid / "tiny" / r["run_id"] / "last.pt",
                                weights_only=True)["model"]
    w_low, w_high = load(low), load(high)
    assert all(torch.equal(w_low[k], w_high[k]) for k in w_low if k != "pos_embed")
    assert torch.equal(w_high["pos_embed"], resample_abs_pos_embed(w_low["pos_embed"], new_size=[6, 6],
                                                                   old_size=[4, 4], num_prefix_tokens=1))
    assert "switch_top1_source" not in high["metrics"]  # the source cannot read the new resolution
