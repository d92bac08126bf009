"""RunSpecs: stable ids, config precedence, loading papers' experiments (fake and ConViT)."""
import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from repro import functions, runs
from repro.plan import experiments
from repro.runs import ConfigError, RunSpec

from conftest import REPO, build_specs

CELL = {"row": "f10", "columns": {"deit_top1": "top1"}}


def spec(**kw):
    base = dict(paper="p", table="table2", cell=CELL, scale="tiny", seed=0, config={"model": {"name": "m"}})
    base.update(kw)
    return RunSpec(**base)


def test_run_id_is_stable_readable_and_tracks_config_seed_scale():
    a = spec(name="deit")
    assert a.run_id == spec(name="deit").run_id
    assert a.run_id.startswith("table2-f10-deit-s0-") and len(a.fingerprint) == 10
    others = [spec(name="deit", seed=1), spec(name="deit", scale="small"),
              spec(name="deit", config={"model": {"name": "m2"}})]
    assert len({a.run_id, *(o.run_id for o in others)}) == 4
    # dict order does not matter; the label defaults to the model name without repro_
    assert spec(config={"a": 1, "b": 2}).fingerprint == spec(config={"b": 2, "a": 1}).fingerprint
    assert spec(config={"model": {"name": "repro_deit_tiny"}}).run_id.startswith("table2-f10-deit_tiny-s0-")


def test_bad_specs_are_refused():
    with pytest.raises(ConfigError, match="kind"):
        spec(kind="eval")
    with pytest.raises(ConfigError, match="cell"):
        spec(cell={"row": "f10"})
    with pytest.raises(ConfigError, match="same run id"):
        runs.check_unique([spec(), spec()])


def test_resolve_precedence_base_spec_overrides_mode():
    base = {"model": {"name": "base", "kwargs": {"depth": 12}}, "recipe": {"lr": 1, "epochs": 300},
            "runtime": {"device": "cpu"}, "paper": "ignored"}
    s = spec(config={"recipe": {"epochs": 5}, "model": {"name": "paper"}})
    r = runs.resolve(s, base, overrides={"recipe": {"lr": 2}}, mode={"mode": "smoke", "recipe": {"epochs": 1}})
    assert r.config == {"model": {"name": "paper", "kwargs": {"depth": 12}}, "recipe": {"lr": 2, "epochs": 1},
                        "mode": "smoke"}
    assert r.run_id != runs.resolve(s, base).run_id  # smoke runs never share an id with real ones
    assert s.config == {"recipe": {"epochs": 5}, "model": {"name": "paper"}}  # inputs untouched


def test_unknown_paper_scale_and_seeds(dirs):
    with pytest.raises(ConfigError, match="unknown paper 'nope'.*convit"):
        experiments.paper_runs("nope", "tiny")
    with pytest.raises(ConfigError, match="unknown scale 'huge'"):
        experiments.paper_runs(dirs["pid"], "huge")
    with pytest.raises(ConfigError, match="seeds"):
        experiments.paper_runs(dirs["pid"], "tiny", seeds=0)
    assert dirs["pid"] in experiments.known_papers() and "convit" in experiments.known_papers()
    assert len(experiments.paper_runs(dirs["pid"], "tiny", seeds=3)) == 2 * 3 + 1


def test_lookup_errors():
    assert functions.lookup("repro.runs:deep_merge") is runs.deep_merge  # code outside the registry
    for bad, msg in [("repro.runs.deep_merge", "no function registered"), ("no_such_mod:f", "cannot import"),
                     ("repro.runs:nothing", "no attribute"), ("convit.no_such_probe", "convit.locality")]:
        with pytest.raises(ConfigError, match=msg):
            functions.lookup(bad)


def composed(scale: str) -> dict:
    with initialize_config_dir(config_dir=str(REPO / "repro" / "conf"), version_base=None):
        return OmegaConf.to_container(compose("config", overrides=[f"scale={scale}", "paper=convit"]), resolve=True)


def test_convit_table2_cells_at_every_scale():
    """ConViT Table 2: rows f5..f100; a DeiT run fills deit_top1/deit_top5 from metrics top1/top5."""
    expected_models = {"tiny": ("repro_deit_tiny_c32", "repro_convit_tiny_c32"),
                       "small": ("repro_deit_tiny_c32", "repro_convit_tiny9_c32"),
                       "full": ("repro_deit_small", "repro_convit_small")}
    for scale, seeds in (("tiny", 1), ("small", 3), ("full", 1)):
        specs = build_specs({**composed(scale), "tables": ["table2"]})
        controls = 1 if scale == "small" else 0  # small adds a DeiT of ConViT's size (the capacity control)
        assert len(specs) == 5 * (2 + controls) * seeds
        assert {s.cell["row"] for s in specs} == {"f5", "f10", "f30", "f50", "f100"}
        f10_deit = [s for s in specs if s.cell["row"] == "f10" and s.name == "deit" and s.seed == 0][0]
        assert f10_deit.cell == {"row": "f10", "columns": {"deit_top1": "top1", "deit_top5": "top5"}}
        assert f10_deit.config["data"]["fraction"] == 0.1
        assert {s.config["model"]["name"] for s in specs} == set(expected_models[scale])
        assert f10_deit.config["recipe"]["scale_epochs_with_fraction"] is True
        if scale == "full":  # the paper's protocol: ImageNet at 224, DeiT recipe, 300 epochs
            assert f10_deit.config["data"]["name"] == "imagenet" and f10_deit.config["data"]["img_size"] == 224
            assert f10_deit.config["recipe"]["epochs"] == 300 and f10_deit.config["recipe"]["batch_size"] == 1024
            assert f10_deit.config["recipe"]["repeated_aug"] is True
        else:  # small: torchvision's CIFAR-10, which a GPU user can download; tiny: our JPEG copy
            data = {"tiny": "cifar10_jpeg", "small": "cifar10"}[scale]
            assert f10_deit.config["data"]["name"] == data and f10_deit.config["data"]["img_size"] == 32
    # --seeds changes the seed count, tables filters, shards split the list without overlap
    c = {**composed("small"), "tables": ["table2"]}
    assert len(build_specs({**c, "seeds": 1})) == 15  # 5 fractions x (the pair + the equal-size control)
    parts = [build_specs({**c, "num_shards": 3, "shard": k}) for k in range(3)]
    ids = [s.run_id for p in parts for s in p]
    assert len(ids) == len(set(ids)) == 45


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec().seed = 3


def test_config_merge_is_omegaconf_and_keeps_values_as_data():
    """deep_merge is OmegaConf.merge on plain containers: nested dicts merge, lists and scalars are
    replaced, a '${...}' string stays a string (a config value is never an interpolation here)."""
    from repro.runs import deep_merge
    a = {"recipe": {"lr": 1e-3, "epochs": 5}, "probes": [{"fn": "x"}], "model": {"kwargs": {"depth": 4}}}
    b = {"recipe": {"epochs": 2}, "probes": [{"fn": "y"}], "model": {"kwargs": None}, "note": "${not.a.ref}"}
    merged = deep_merge(a, b)
    assert merged == {"recipe": {"lr": 1e-3, "epochs": 2}, "probes": [{"fn": "y"}], "model": {"kwargs": None},
                      "note": "${not.a.ref}"}
    assert a["recipe"]["epochs"] == 5 and type(merged) is dict  # inputs untouched, plain containers out


def test_engine_seeds_with_timms_random_seed():
    import random

    import numpy as np
    import torch
    from timm.utils import random_seed

    import repro.train.engine as engine
    assert not hasattr(engine, "seed_all") and engine.random_seed is random_seed
    random_seed(3, 1)  # seed + rank, for random, numpy and torch alike
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(4), np.random.seed(4), torch.manual_seed(4)
    assert draws == (random.random(), np.random.rand(), torch.rand(1).item())
