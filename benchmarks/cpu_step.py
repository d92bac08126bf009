"""The cpu scale's training step in fp32 and in bf16 (``cpu_precision=bf16``), side by side in one process.

Times the engine's own step (``engine.stepper``: forward, loss, backward, AdamW, schedule) on the cpu scale's
recipe at batch 64, one thread, for three sizes of the repro ViT at 32 px, patch 4. Rounds alternate the variants
so that load on the machine hits all of them alike; each keeps its best round. Variants: ``fp32`` (every cpu
record so far), ``bf16`` (autocast and SDPA's math path: what ``cpu_precision=bf16`` runs), ``bf16-flash``
(autocast through the CPU flash-attention kernel, for the record of why the math path). Besides img/s it prints
GFLOP/s (3 x the forward's FLOPs an image) against this core's measured matmul peak in each dtype, and each
variant's mean loss over the same timed steps from the same weights and batches (each round's run built afresh
from one seed), how far bf16 moves the numbers. Writes results/bench/<device>-cpu_step.json.

    python -m benchmarks.cpu_step [--sizes 72x6,108x6,192x12] [--steps 8] [--rounds 3] [--peak-n 2048]
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import time
from pathlib import Path
from unittest import mock

import torch
from omegaconf import OmegaConf
from tabulate import tabulate

import repro.models  # noqa: F401  (registers repro_*)
from benchmarks.device import save
from benchmarks.engine_runs import engine_steps, run_spec
from repro.checks import check_keys
from repro.models.cost import count_macs
from repro.runs import RunSpec
from repro.train import precision
from repro.train.model import create_model

VARIANTS = ("fp32", "bf16", "bf16-flash")


def matmul_peak(dtype: torch.dtype, n: int = 2048, reps: int = 8) -> float:
    """FLOP/s of the fastest of ``reps`` n x n x n matmuls in ``dtype`` on this thread: the ceiling the step
    is read against (the fastest, since other work on the machine only slows a matmul down)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def cpu_run(width: int, depth: int, cpu_precision: str, batch: int, steps: int) -> RunSpec:
    """A cpu-scale run of the repro ViT at (width, depth) on synthetic CIFAR-shaped data (``steps`` batches)."""
    base = OmegaConf.to_container(check_keys(["scale=cpu", "data=synthetic", f"recipe.batch_size={batch}"]), resolve=True)
    model = {"name": "repro_deit_tiny_c32",
             "kwargs": {"depth": depth, "embed_dim": width, "num_heads": heads(width), "patch_size": 4}}
    data = {"max_per_class": batch * steps // 10 + 1, "test_max_per_class": 1}
    return run_spec(base, model, steps, scale="cpu", cpu_precision=cpu_precision, data=data)


def heads(width: int) -> int:
    """Heads of the sizes the cpu scale trains: 9 at width 72 and 108 (crosspaper, ConViT), 3 at DeiT-Ti's 192."""
    return 3 if width % 9 else 9


def flash_autocast(device, dtype):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def time_variant(spec: RunSpec, name: str, steps: int) -> tuple[float, list[float]]:
    """(seconds a step, each step's loss) over ``steps`` steps after a warm-up step, of the engine's step on a run
    built afresh from ``spec``: from its seed's weights, on its seed's batches, drawn before the clock starts."""
    stream, step = engine_steps([spec], torch.device("cpu"))
    batches = list(itertools.islice(stream, steps + 1))
    patch = mock.patch.object(precision, "autocast", flash_autocast) if name == "bf16-flash" else contextlib.nullcontext()
    with patch:
        step(batches[0])  # warm-up: allocations, one-off kernel choice
        t0, losses = time.perf_counter(), [step(b) for b in batches[1:]]
    return (time.perf_counter() - t0) / len(losses), [float(v) for v in losses]


def bench_size(width: int, depth: int, batch: int, steps: int, rounds: int) -> dict:
    specs = {v: cpu_run(width, depth, "fp32" if v == "fp32" else "bf16", batch, steps + 1) for v in VARIANTS}
    best = {v: (float("inf"), 0.0) for v in VARIANTS}
    for _ in range(rounds):
        for v in VARIANTS:
            t, losses = time_variant(specs[v], v, steps)
            best[v] = min(best[v], (t, sum(losses) / len(losses)))
    model = create_model(specs["fp32"].config, int(specs["fp32"].config["data"]["num_classes"]))
    flops = 3 * 2 * count_macs(model, 32)  # forward + backward per image
    return {"width": width, "depth": depth, "heads": heads(width), "gflops_per_image": flops / 1e9,
            **{v: {"img_s": batch / t, "gflop_s": flops * batch / t / 1e9, "mean_loss": loss}
               for v, (t, loss) in best.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="72x6,108x6,192x12", help="width x depth, comma-separated")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8, help="timed steps a round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peak-n", type=int, default=2048, help="size of the n x n x n matmuls that measure the peak")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    native = precision.cpu_has_native_bf16()
    if not native:
        print("this CPU has no native bf16: cpu_precision=bf16 trains in fp32 here, and the bf16 rows time fp32")
    peak = {"fp32": matmul_peak(torch.float32, args.peak_n)}
    # without native bf16 the bf16 rows run fp32 (their ceiling is fp32's), and an emulated bf16 matmul
    # (under 1 GFLOP/s) would take minutes at n = 2048 to measure a ceiling nothing uses
    peak["bf16"] = matmul_peak(torch.bfloat16, args.peak_n) if native else peak["fp32"]
    sizes = [bench_size(*map(int, s.split("x")), args.batch, args.steps, args.rounds) for s in args.sizes.split(",")]
    rows = []
    for s in sizes:
        for v in VARIANTS:
            ceiling = peak["fp32" if v == "fp32" else "bf16"]
            s[v]["peak_share"] = s[v]["gflop_s"] * 1e9 / ceiling
            rows.append([f"{s['width']} x {s['depth']}", v, f"{s[v]['img_s']:.0f}", f"{s[v]['img_s'] / s['fp32']['img_s']:.2f}x",
                         f"{s[v]['gflop_s']:.1f}", f"{100 * s[v]['peak_share']:.0f} %", f"{s[v]['mean_loss']:.4f}"])
    print(f"one thread, batch {args.batch}; matmul peak fp32 {peak['fp32'] / 1e9:.0f}, bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s")
    print(tabulate(rows, headers=["width x depth", "step", "img/s", "vs fp32", "GFLOP/s", "of peak", "mean loss"]))
    out = {"batch": args.batch, "steps": args.steps, "rounds": args.rounds, "threads": 1,
           "load_avg_1min": os.getloadavg()[0],  # other work on the machine: ratios hold, absolute numbers less
           "native_bf16": native, "peak_gflop_s": {k: v / 1e9 for k, v in peak.items()}, "peak_n": args.peak_n,
           "sizes": sizes}
    print(f"wrote {save(args.out, '-cpu_step', out)}")


if __name__ == "__main__":
    main()
