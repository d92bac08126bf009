"""Shared fixtures: isolated results/cache/data dirs and a throw-away paper built on timm's own ViT."""
from __future__ import annotations

import os
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[1]

def pytest_collection_modifyitems(config, items):
    """The longest files first (the real-scheduler tests, every paper's smoke and dry runs): under
    pytest-xdist (`make test` runs two workers, a file to one worker) they then run beside the rest instead
    of after it (`--no-loadscope-reorder`: xdist would order files by their number of tests, and ran the
    dry runs' 7 tests last). A stable sort: the same order in every worker, as xdist requires."""
    first = ("test_slurm.py", "test_full_dry_run.py", "test_every_paper.py")
    items.sort(key=lambda item: first.index(item.path.name) if item.path.name in first else len(first))


# Tiny models gain nothing from a second thread, and on a shared 2-core machine two OpenMP threads
# per process can be 10x slower than one: keep the suite's timings stable.
torch.set_num_threads(1)

# A paper package written into tmp: two fractions of a 1-block ViT, plus a probe run, plus hooks
# (an extra loss that can go NaN on demand, probes) so the engine's plug-in points get exercised.
EXPERIMENTS = '''
from repro.runs import RunSpec

MODEL = {"name": "vit_tiny_patch16_224",
         "kwargs": {"patch_size": 8, "depth": 1, "embed_dim": 32, "num_heads": 2}}

def runs(scale, seeds=None):
    out = []
    for row, f in (("f50", 0.5), ("f100", 1.0)):
        for seed in range(seeds or 1):
            out.append(RunSpec("PID", "table2", {"row": row, "columns": {"vit_top1": "top1", "vit_top5": "top5"}},
                               scale, seed=seed, name="vit",
                               config={"model": MODEL, "data": {"fraction": f}, "recipe": {"epochs": 2}}))
    out.append(RunSpec("PID", "table1", {"row": "vit", "columns": {"params": "params"}}, scale, kind="probe",
                       name="count", config={"probe": "papers.PID.probes:count_params", "model": MODEL}))
    return out
'''

PROBES = '''
import timm

def count_params(config):
    m = timm.create_model(config["model"]["name"], img_size=config["data"]["img_size"], **config["model"]["kwargs"])
    return {"params": sum(p.numel() for p in m.parameters())}

def feature_norm(model, ctx, scale=1.0):
    with __import__("torch").no_grad():
        feats = model.forward_features(ctx.images)
    return {"feature_norm": scale * float(feats.norm(dim=-1).mean()), "probe_epoch": ctx.epoch}

CALLS = {"n": 0}

def crash(model, flag=""):
    """Extra loss whose factory fails while the file `flag` exists: a bug in one run, not bad input."""
    import os
    if os.path.exists(flag):
        raise RuntimeError("simulated crash in a paper's loss")
    return lambda images, targets, logits: logits.sum() * 0.0

def nan_at(model, step=3):
    """Extra loss: 0 x (mean of the blocks' output) until call `step`, then NaN."""
    seen = {}
    model.blocks[-1].register_forward_hook(lambda m, i, o: seen.__setitem__("x", o))
    def term(images, targets, logits):
        CALLS["n"] += 1
        value = seen["x"].mean() * 0.0
        return value + float("nan") if CALLS["n"] >= step else value
    CALLS["n"] = 0
    return term
'''


def write_paper(root: Path, pid: str, experiments: str = EXPERIMENTS, probes: str = PROBES) -> Path:
    d = root / pid
    d.mkdir(parents=True, exist_ok=True)
    (d / "__init__.py").write_text("")
    (d / "experiments.py").write_text(textwrap.dedent(experiments).replace("PID", pid))
    (d / "probes.py").write_text(textwrap.dedent(probes).replace("PID", pid))
    return d


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """REPRO_* dirs under tmp, and a fresh fake paper id on the papers package path."""
    import papers

    out = {k: tmp_path / k for k in ("results", "cache", "data", "papers")}
    for p in out.values():
        p.mkdir()
    monkeypatch.setenv("REPRO_RESULTS_DIR", str(out["results"]))
    monkeypatch.setenv("REPRO_CACHE_DIR", str(out["cache"]))
    monkeypatch.setenv("REPRO_DATA_DIR", str(out["data"]))
    monkeypatch.setenv("REPRO_PAPERS_PATH", str(out["papers"]))
    monkeypatch.setattr(papers, "__path__", [*papers.__path__, str(out["papers"])])
    pid = "fake" + uuid.uuid4().hex[:6]
    write_paper(out["papers"], pid)
    out["pid"] = pid
    yield out
    for name in [m for m in sys.modules if m.startswith(f"papers.{pid}")]:
        del sys.modules[name]


# Command-line arguments that make the fake paper's runs take a second each on synthetic data.
def fast_args(pid: str, *extra: str) -> list[str]:
    return [f"paper={pid}", "scale=tiny", "data=synthetic", "data.max_per_class=16", "data.test_max_per_class=4",
            "recipe.batch_size=8", "runtime.progress=false", *extra]


CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def build_specs(c: dict, overrides: dict | None = None) -> list:
    """The runs a command composed as ``c`` (with the command line's run-key ``overrides``) means: its plan
    built by the plan stage, read by the run stage's selection (tables, runs, shard)."""
    from repro.plan.build import plan
    from repro.run.specs import select

    return select(c, plan(c, overrides))


def image_folder(base: Path, splits=("train", "test"), per_class: int = 4, empty=()) -> Path:
    """A small ImageFolder tree of random 32 px JPEGs, base/<split>/<class>/NNNN.jpg; the (split, class)
    folders in ``empty`` are made without images."""
    rng = np.random.default_rng(0)
    for split in splits:
        for c in CIFAR_CLASSES:
            d = base / split / c
            d.mkdir(parents=True)
            for i in range(0 if (split, c) in empty else per_class):
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(d / f"{i:04d}.jpg")
    return base


def subprocess_env(d: dict) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(REPO), REPRO_RESULTS_DIR=str(d["results"]), REPRO_CACHE_DIR=str(d["cache"]),
               REPRO_DATA_DIR=str(d["data"]), REPRO_PAPERS_PATH=str(d["papers"]), OMP_NUM_THREADS="1")
    return env


PAPER_IDS = ("convit", "cmhsa", "oversmoothing", "augvit", "respostln")


@pytest.fixture(scope="session")
def built_notebooks(tmp_path_factory) -> Path:
    """results/<id>/report.ipynb and notebook.html of the committed records. They are build outputs
    (git-ignored), so a fresh clone has none until `make report`: build the missing ones in-process, one
    test process at a time (pytest-xdist workers share the repository; the lock file sits in the run's
    shared temp folder)."""
    import fcntl

    from repro.report import notebook
    with open(tmp_path_factory.getbasetemp().parent / "built_notebooks.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for pid in PAPER_IDS:
            out = REPO / "results" / pid
            if not ((out / "report.ipynb").is_file() and (out / "notebook.html").is_file()):
                notebook.build(pid, REPO / "papers", REPO / "results", execute="inline")
    return REPO / "results"


def papers_with_models(scale):
    """Every paper; one whose runs name a model timm does not know fails here (at collection), not skips."""
    import timm
    from repro.plan.experiments import known_papers, paper_runs
    from repro.train.model import register_models
    for paper in known_papers():
        register_models(paper)
        missing = sorted({s.config["model"]["name"] for s in paper_runs(paper, scale)
                          if s.kind == "train" and not timm.is_model(s.config["model"]["name"])})
        assert not missing, f"{paper} at {scale}: models not registered: {', '.join(missing)}"
    return known_papers()
