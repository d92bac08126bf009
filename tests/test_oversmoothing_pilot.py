"""The over-smoothing pilot (papers/oversmoothing/pilot.py) and the poster's CosSim variant (probes.py):
talking heads is timm's CaiT layer, a candidate is the cpu campaign's DeiT-24 with one change, the rule picks
what README "Regime" says, and CosSim on training images computes the poster's definition."""
import math
from types import SimpleNamespace

import pytest
import timm
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from timm.models.cait import TalkingHeadAttn
from torch import nn

import repro.models  # noqa: F401
from papers.oversmoothing import pilot, probes
from repro.data import open_split
from repro.data.batch_aug import Normalize
from repro.data.tensor_cache import decoded
from repro.data.tensor_loader import spread
from repro.models.attention import TalkingHeadsAttention
from repro.probes.diversity import oversmoothing_metrics
from repro.records import SCHEMA, write_record
from repro.train.model import create_model

from conftest import REPO, build_specs

PILOT = "/data/pilot-split"


def oversmoothing_specs(*overrides):
    """The runs ``python -m repro reproduce paper=oversmoothing <overrides>`` means."""
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        c = OmegaConf.to_container(compose("config", overrides=["paper=oversmoothing", *overrides]), resolve=True)
    return build_specs(c)


def campaign_deit24():
    (s,) = [s for s in oversmoothing_specs("scale=cpu") if s.table == "figure2" and s.cell["row"] == "deit"
            and s.seed == 0]
    return s


# ------------------------------------------------------------------ talking heads

def test_talking_heads_is_timm_cait_talking_heads():
    """Our layer computes timm's CaiT TalkingHeadAttn given the same weights (mix_logits = proj_l, mix_weights
    = proj_w: head mixing before and after the softmax), and is initialised as CaiT initialises its linears."""
    torch.manual_seed(0)
    ours, cait = TalkingHeadsAttention(48, 3), TalkingHeadAttn(48, 3, qkv_bias=True)
    names = {"mix_logits": "proj_l", "mix_weights": "proj_w"}
    cait.load_state_dict({".".join([names.get(k.split(".")[0], k.split(".")[0]), *k.split(".")[1:]]): v
                          for k, v in ours.state_dict().items()})
    x = torch.randn(2, 65, 48)
    assert torch.allclose(ours(x), cait(x), atol=1e-5)
    model = timm.create_model("repro_deit_tiny_c32", depth=24, embed_dim=48, num_heads=3, patch_size=4,
                              attn="talking_heads")
    mix = torch.cat([b.attn.mix_logits.weight.detach().flatten() for b in model.blocks])
    assert 0.015 < float(mix.std()) < 0.025 and all(not b.attn.mix_logits.bias.any() for b in model.blocks)


@pytest.mark.parametrize("candidate", pilot.CANDIDATES, ids=lambda c: c.name)
def test_candidate_is_the_campaign_deit24_with_talking_heads_on_the_held_out_split(candidate):
    runs = pilot.specs(candidate, PILOT)
    init, trained = runs["init"], runs["trained"]
    assert init.run_id.startswith("figure2-random_init") and trained.run_id.startswith("figure2-deit-deit24-s0")
    base = campaign_deit24().config
    for spec in (init, trained):
        assert spec.config["model"] == {**base["model"], "kwargs": {**base["model"]["kwargs"], "attn": "talking_heads"}}
        data = spec.config["data"]
        assert (data["name"], data["path"], data["test_split"], data["num_classes"]) == ("folder", PILOT, "val", 10)
    # the training run differs from the committed campaign's only in attention, data and (e20) epochs
    epochs = 20 if "recipe.epochs=20" in candidate.overrides else base["recipe"]["epochs"]
    assert trained.config["recipe"] == {**base["recipe"], "epochs": epochs}
    assert {k: v for k, v in trained.config.items() if k not in ("model", "data", "recipe")} == \
        {k: v for k, v in base.items() if k not in ("model", "data", "recipe")}
    assert trained.seed == 0 and trained.scale == "cpu"


def test_candidates_cheapest_first():
    costs = [c.core_hours for c in pilot.CANDIDATES]
    assert costs == sorted(costs) and [c.name for c in pilot.CANDIDATES] == ["talking_heads", "talking_heads_e20"]


def test_talking_heads_deit24_builds_and_trains_a_step():
    config = pilot.specs(pilot.CANDIDATES[0], PILOT)["trained"].config
    torch.manual_seed(0)
    model = create_model(config, 10)
    assert len(model.blocks) == 24 and all(isinstance(b.attn, TalkingHeadsAttention) for b in model.blocks)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = model.blocks[-1].attn.mix_weights.weight.detach().clone()
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and not torch.equal(before, model.blocks[-1].attn.mix_weights.weight)


# ------------------------------------------------------------------ the rule

def reading(top1=65.0, cossim=0.6, init=0.3, name="talking_heads"):
    return pilot.Reading(name, top1, cossim, init)


def test_rule_over_smoothing_from_training_in_a_baseline_that_learns():
    assert reading().meets()
    assert not reading(top1=59.9).meets()          # pre_deit24_learns: above 60 % top-1
    assert not reading(cossim=0.5).meets()         # pre_deit24_oversmooths: above 0.5
    assert not reading(cossim=0.6, init=0.7).meets()  # no higher than at init: not a product of training
    assert not reading(top1=math.nan).meets()      # a run that diverged


def test_rule_takes_the_first_candidate_in_order_that_meets_it():
    ok, no = reading(), reading(cossim=0.3)
    assert pilot.decide([None, None]) == ("next", "talking_heads")
    assert pilot.decide([no, None]) == ("next", "talking_heads_e20")
    assert pilot.decide([ok, None]) == ("taken", "talking_heads")  # the costlier candidate is never run
    assert pilot.decide([no, ok]) == ("taken", "talking_heads_e20")
    assert pilot.decide([no, no]) == ("none", None)
    assert "outside the regime" in pilot.describe([no, no], ("none", None))


def write_records(cand, root, trained, init=None):
    metrics = {"init": init or {"top1": 10.0, "cossim_last": 0.29, "cossim_train_last": 0.28}, "trained": trained}
    for key, spec in pilot.specs(cand, PILOT).items():
        write_record({"schema": SCHEMA, "run_id": spec.run_id, "paper": spec.paper, "table": spec.table,
                      "cell": spec.cell, "scale": spec.scale, "seed": spec.seed, "status": "finished",
                      "metrics": metrics[key], "config": spec.config, "provenance": {}}, root)


def test_read_takes_the_candidates_own_records(tmp_path):
    cand = pilot.CANDIDATES[0]
    assert pilot.read(cand, PILOT, root=tmp_path) is None
    write_records(cand, tmp_path, {"top1": 61.5, "cossim_last": 0.55, "cossim_train_last": 0.57})
    r = pilot.read(cand, PILOT, root=tmp_path)
    assert r == pilot.Reading("talking_heads", 61.5, 0.55, 0.29, 0.57, 0.28) and r.meets()
    assert pilot.read(pilot.CANDIDATES[1], PILOT, root=tmp_path) is None  # 20 epochs: other run ids


@pytest.mark.parametrize("first_meets", [False, True])
def test_pilot_runs_candidates_in_order_until_one_meets_the_rule(tmp_path, monkeypatch, capsys, first_meets):
    """Each command trains one candidate (here: writes its records); the pilot stops at the first that meets
    the rule, so the costlier candidate never runs when the cheaper one over-smooths; extra overrides go to
    every command (runtime ones leave the run ids alone)."""
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(tmp_path))
    ran = []

    def train(cmd, cwd):
        assert cmd[1:4] == ["-m", "repro", "reproduce"] and f"data.path={PILOT}" in cmd and "runtime.progress=false" in cmd
        cand = pilot.CANDIDATES[1] if "recipe.epochs=20" in cmd else pilot.CANDIDATES[0]
        ran.append(cand.name)
        meets = cand is pilot.CANDIDATES[1] or first_meets
        write_records(cand, tmp_path, {"top1": 62.0, "cossim_last": 0.6 if meets else 0.3})
        return 0

    monkeypatch.setattr(pilot.subprocess, "call", train)
    assert pilot.main([PILOT, "runtime.progress=false"]) == 0
    assert ran == (["talking_heads"] if first_meets else ["talking_heads", "talking_heads_e20"])
    assert f"taken: {ran[-1]}" in capsys.readouterr().out
    monkeypatch.setattr(pilot.subprocess, "call", lambda *a, **k: pytest.fail("--judge trains nothing"))
    assert pilot.main([PILOT, "--judge", "runtime.progress=false"]) == 0


def test_pilot_refuses_the_repository_results_folder(monkeypatch, capsys):
    monkeypatch.delenv("REPRO_RESULTS_DIR", raising=False)
    monkeypatch.chdir(REPO)
    assert pilot.main([PILOT]) == 2 and "REPRO_RESULTS_DIR" in capsys.readouterr().err


# ------------------------------------------------------------------ CosSim on the poster's image set

class Tokens(nn.Module):
    """A stand-in ViT with one identity block and no final norm: the 'images' are hand-made tokens
    (class token first), so CosSim is known in closed form."""

    def __init__(self, n: int):
        super().__init__()
        self.patch_embed = SimpleNamespace(num_patches=n)
        self.blocks = nn.ModuleList([nn.Identity()])
        self.blocks[0].attn = nn.Identity()

    def forward_features(self, x):
        return self.blocks[0](x)


def test_poster_cossim_on_hand_made_tokens(monkeypatch):
    """Identical patches give 1 whatever the class token, orthogonal ones 0, patches +v, +v, -v, -v give
    (4 - 8) / 12 = -1/3 (ordered pairs i != j); the value is the mean over images, across batches."""
    d, n = 6, 4
    e = torch.eye(d)
    cls = -e[5]
    same = torch.stack([cls, e[0], e[0], e[0], e[0]])
    orth = torch.stack([cls, e[0], e[1], e[2], e[3]])
    signs = torch.stack([e[0], e[1], e[1], -e[1], -e[1]])
    cases = {"same": [same[None]] * 2, "orth": [orth[None]], "signs": [signs[None]],
             "mixed": [torch.stack([same, same, same]), orth[None]]}
    want = {"same": 1.0, "orth": 0.0, "signs": -1 / 3, "mixed": 0.75}
    for name, batches in cases.items():
        monkeypatch.setattr(probes, "training_batches", lambda *a, b=batches, **k: iter(b))
        m = probes.poster_cossim(Tokens(n), {}, "cpu")
        assert m["cossim_train_last"] == pytest.approx(want[name], abs=1e-6), name
        assert m["cossim_train_layers"] == [m["cossim_train_last"]] and m["cossim_train_norm"] == pytest.approx(want[name])
        assert m["cossim_train_images"] == sum(len(b) for b in batches)


def test_poster_cossim_is_the_committed_definition_on_training_images(tmp_path, monkeypatch):
    """On a real model, the chunked mean equals Figure 2's one-batch metric on the same images, and the images
    are training images spread over every class with the test transform (no augmentation)."""
    monkeypatch.setenv("REPRO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(tmp_path / "cache"))
    data = {**campaign_deit24().config["data"], "synthetic": True, "max_per_class": 6, "test_max_per_class": 2}
    batches = list(probes.training_batches(data, 20, "cpu", batch_size=8))
    assert [len(b) for b in batches] == [8, 8, 4]
    split = open_split(data, "train")
    idx = spread(len(split), 20)
    norm = Normalize(data["mean"], data["std"], data["img_size"], "cpu")
    assert torch.equal(torch.cat(batches), norm(decoded(split)[0][idx]))
    assert sorted(split.labels[int(i)] for i in idx) == sorted(list(range(10)) * 2)
    torch.manual_seed(0)
    model = timm.create_model("repro_deit_tiny_c32", depth=3, embed_dim=24, num_heads=2, patch_size=8,
                              attn="talking_heads", num_classes=10)
    monkeypatch.setattr(probes, "CHUNK", 8)
    m = probes.poster_cossim(model, data, "cpu", images=20)
    whole = oversmoothing_metrics(model, torch.cat(batches))
    assert m["cossim_train_layers"] == pytest.approx(whole["cossim_layers"], abs=1e-5)
    assert m["cossim_train_norm"] == pytest.approx(whole["cossim_norm"], abs=1e-5) and m["cossim_train_images"] == 20


def test_smoke_and_dry_runs_read_the_poster_cossim_on_one_of_their_training_batches():
    """A paper-size dry run must not push 10,000 (or 64) images through DeiT-B-24 on a CPU (CI's full dry runs)."""
    def first_train_run(*overrides):
        return next(s.config for s in oversmoothing_specs(*overrides) if s.kind == "train")

    assert probes.train_images(first_train_run("scale=full", "dry_run=true")) == 2
    assert probes.train_images(first_train_run("scale=tiny", "smoke=true")) == 8
    assert probes.train_images(first_train_run("scale=full")) == probes.TRAIN_IMAGES == 10_000
