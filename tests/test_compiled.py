"""How a step runs (runtime.compile_mode, runtime.fused_optimizer) changes its speed, never what it trains:
the same runs trained either way agree to float rounding, and their records say which way they ran."""
from __future__ import annotations

import pytest
import torch

from repro import records
from repro.cli import main
from repro.train.compiled import graphed
from tests.conftest import fast_args


def _train(dirs, *extra: str) -> dict:
    """Every run of the fake paper's table 2 (3 steps each), trained again with ``extra``: {run id: record}."""
    args = fast_args(dirs["pid"], "tables=[table2]", "recipe.max_steps=3", "recipe.epochs=1", "force=true", *extra)
    assert main(["reproduce", *args]) == 0
    return {r["run_id"]: r for r in records.load_records(dirs["pid"], root=dirs["results"])[0]}


def _same_training(a: dict, b: dict, rel: float) -> None:
    assert a.keys() == b.keys() and a
    for run_id, ra in a.items():
        la, lb = ra["metrics"]["history"], b[run_id]["metrics"]["history"]
        assert [r["train_loss"] for r in la] == pytest.approx([r["train_loss"] for r in lb], rel=rel)
        assert ra["metrics"]["eval_loss"] == pytest.approx(b[run_id]["metrics"]["eval_loss"], rel=rel)


def test_fused_optimizer_trains_the_same_runs_and_says_so(dirs):
    plain = _train(dirs)
    fused = _train(dirs, "runtime.fused_optimizer=true")
    _same_training(plain, fused, rel=1e-5)
    assert all(r["provenance"]["fused_optimizer"] is True for r in fused.values())
    assert all("fused_optimizer" not in r["provenance"] for r in plain.values())


@pytest.mark.slow
def test_a_graph_mode_compiles_the_same_training_and_names_its_mode(dirs):
    """reduce-overhead (CUDA graphs on a GPU; compiled without them on a CPU) through the whole engine: the
    loop marks each step and keeps its loss past the next replay; the record names the mode."""
    eager = _train(dirs)
    compiled = _train(dirs, "runtime.compile=true", "runtime.compile_mode=reduce-overhead")
    _same_training(eager, compiled, rel=1e-4)
    assert all(r["provenance"]["compile_mode"] == "reduce-overhead" for r in compiled.values())


def test_only_the_graph_modes_on_a_gpu_replay_graphs():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert graphed("reduce-overhead", gpu) and graphed("max-autotune", gpu)
    assert not graphed("reduce-overhead", cpu) and not graphed("default", gpu) and not graphed(None, gpu)
    assert not graphed("max-autotune-no-cudagraphs", gpu)
