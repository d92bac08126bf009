"""``make gpu-check``: each paper's ``small`` training run for a few real steps on this machine's device,
through the engine that ``make reproduce`` uses, one line per paper with its images/s.

    python -m benchmarks.gpu_check [--paper convit ...] [--compile on|off|auto]

Per paper, its first ``small`` run that trains from scratch (the paper's main model at that scale):
1. two short epochs as the run would train them (bf16 autocast and device-resident data on a GPU),
   images/s from the second epoch (after warm-up, and after compiling);
2. with ``--compile`` (default on a GPU; on a CPU compiling takes minutes per model) the same compiled;
3. the same steps again, stopped mid-epoch as SIGTERM stops a run (checkpoint), then resumed: the
   result must equal step 1's (exactly on a CPU; on a GPU within rounding of its nondeterministic kernels).
Data: the scale's dataset when it is on disk (nothing is downloaded), else synthetic pixels of its
shape. On a GPU, 20 steps of the small batch (512) per epoch and 10 test images a class; on a CPU, 2 steps
of 8 and 2 a class: the check is that each path runs and resumes exactly, and at 4 steps of 16 the six papers
took a busy 2-core machine (CI runs it) 4 minutes. Exit code 1 when a paper fails.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
import tempfile
import time
from unittest import mock

import torch
from omegaconf import OmegaConf

from repro.data import DataError, open_split
from repro.plan.build import planned
from repro.plan.experiments import known_papers, paper_scales
from repro.run.specs import planned_specs
from repro.runs import RunSpec
from repro.train import ddp, preempt
from repro.train.engine import Runtime, train
from repro.train.model import register_models
from benchmarks.device import device_name


def small_run(paper: str, cuda: bool, steps_per_epoch: int) -> tuple[RunSpec, str]:
    """The paper's first small run that trains from scratch (its plan's first train run with no ``init``), cut to
    two epochs of ``steps_per_epoch``, on its dataset when present (else synthetic pixels); and a note saying
    which data it got."""
    register_models(paper)
    doc = planned(paper, "small")
    fresh = {r["run_id"] for r in doc["runs"] if r["kind"] == "train" and "init" not in r["depends_on"]}
    spec = next(s for s in planned_specs(doc) if s.run_id in fresh)
    data, recipe = spec.config["data"], spec.config["recipe"]
    batch = int(recipe["batch_size"]) if cuda else 8
    per_class = math.ceil(steps_per_epoch * batch / int(data["num_classes"]))
    cut = {"data": {"download": False, "fraction": 1.0, "max_per_class": per_class,
                    "test_max_per_class": 10 if cuda else 2},
           "recipe": {"batch_size": batch, "eval_batch_size": batch, "max_steps": 2 * steps_per_epoch,
                      "epochs": max(2, int(recipe["epochs"])), "scale_epochs_with_fraction": False}}
    spec = RunSpec(**{**vars(spec), "config": OmegaConf.to_container(OmegaConf.merge(spec.config, cut))})
    try:
        open_split(spec.config["data"], "test")
        return spec, data["name"]
    except DataError:
        synthetic = {**spec.config, "data": {**spec.config["data"], "synthetic": True}}
        return RunSpec(**{**vars(spec), "config": synthetic}), f"synthetic pixels ({data['name']} not on disk)"


def runtime(d: ddp.Dist, compiled: bool, persist: bool) -> Runtime:
    return Runtime(dist=d, amp="bf16", compile=compiled, num_workers=0, progress=False, check_every=1, persist=persist)


def images_per_s(result) -> float:
    return result.metrics["history"][-1]["images_per_s"]  # the second epoch: warm-up and compile done


def check(paper: str, d: ddp.Dist, compiled: bool, steps_per_epoch: int) -> str:
    """One paper: train, maybe compiled, then stop + resume; its report line (raises on a mismatch)."""
    cuda = d.device.type == "cuda"
    spec, data = small_run(paper, cuda, steps_per_epoch)
    # checkpoints in a throw-away REPRO_CACHE_DIR (the check never touches real runs); the engine's epoch lines muted
    with (tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp, mock.patch.dict(os.environ, REPRO_CACHE_DIR=tmp),
          contextlib.redirect_stdout(io.StringIO())):
        plain = train(spec, runtime(d, False, persist=False))
        speed = f"{images_per_s(plain):,.0f} img/s"
        if compiled:
            speed += f", compiled {images_per_s(train(spec, runtime(d, True, persist=False))):,.0f} img/s"
        stop_at = steps_per_epoch + steps_per_epoch // 2
        try:
            train(spec, runtime(d, False, persist=True), stop_at=stop_at)
            raise AssertionError(f"the run did not stop at step {stop_at}")
        except preempt.Preempted:
            pass
        resumed = train(spec, runtime(d, False, persist=True))
    a, b = plain.metrics["train_loss"], resumed.metrics["train_loss"]
    tolerance = 2e-2 * abs(a) if cuda else 0.0
    if abs(a - b) > tolerance or resumed.metrics["steps"] != plain.metrics["steps"]:
        raise AssertionError(f"stopped at step {stop_at} and resumed, train loss {b:.6f}; uninterrupted {a:.6f}")
    model = spec.config["model"]["name"]
    return (f"{model} {plain.metrics['params'] / 1e6:.1f}M, {d.device.type} {'bf16' if cuda else 'fp32'}, {data}, "
            f"batch {spec.config['recipe']['batch_size']}: {speed}{'' if compiled else ' (not compiled)'}; "
            f"stop at step {stop_at} + resume = uninterrupted (train loss {b:.4f})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", action="append", help="only this paper (repeatable); default every paper")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="also time the compiled model (auto: on a GPU only)")
    args = ap.parse_args(argv)
    d = ddp.setup("auto")
    cuda = d.device.type == "cuda"
    if not cuda:  # small models gain little from a second thread and lose a lot on a busy machine
        torch.set_num_threads(1)
    compiled = args.compile == "on" or (args.compile == "auto" and cuda)
    papers = args.paper or [p for p in known_papers() if "small" in paper_scales(p)]
    print(f"gpu-check on {device_name()}: {len(papers)} paper(s), each paper's small run for a few steps", flush=True)
    start, failed = time.time(), 0
    for paper in papers:
        t0 = time.time()
        try:
            line = check(paper, d, compiled, 20 if cuda else 2)
            print(f"ok {paper}: {line} ({time.time() - t0:.0f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - one paper's failure is reported, the others still run
            failed += 1
            print(f"FAIL {paper}: {type(e).__name__}: {' '.join(str(e).split())[:400]}", flush=True)
    print(f"gpu-check: {len(papers) - failed} of {len(papers)} paper(s) ok in {time.time() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
