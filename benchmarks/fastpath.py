"""The fast path beside today's engine step, and K small runs fused beside one at a time, in one process.

    python -m benchmarks.fastpath                  # a GPU: DeiT-Ti/32px at the small scale's batch 512, bf16
    python -m benchmarks.fastpath --variants eager,reduce-overhead+fused   # which ways to run the step
    python -m benchmarks.fastpath --processes      # also the K runs as K concurrent processes

Every loop is the engine's own step (engine.stepper, benchmarks/engine_runs.py), on synthetic uint8 pixels
of CIFAR's shape (pixel values change the cost of no op timed here), one device:
  engine_img_s_before  the engine's step on the tensor pipeline (RandAugment per group of 16, timm
                       Mixup/CutMix in the step), eager, the `small` recipe;
  step_img_s           the engine's step on the fast path (``data.pipeline=fastpath``, repro/data/fastpath.py:
                       RandAugment per image, erasing and Mixup/CutMix as tensor ops), in the fastest of its
                       variants (``variants``: eager or a torch.compile mode, "+fused"
                       for the fused AdamW kernel; each with its first steps' seconds, compile included);
                       its stages timed with CUDA events on a GPU, perf_counter on a CPU;
  data_share           the share of that variant's step outside the model: 1 - (its model step alone on a
                       fixed batch) / (its whole step);
  mfu                  counted FLOPs x 3 x step_img_s / the device's dense bf16 peak (benchmarks/device.py);
                       null on a CPU, for which no peak is stated;
  packed_speedup       K cpu-size runs (the cpu scale's recipe and batch) fused into one batched model
                       (the engine's K-wide step, repro/train/fused.py), aggregate images/s, against the same
                       runs one at a time; where the bf16 group raises, ``packed_error`` (and its softmax ops'
                       dtypes) and, on a GPU, the same measured in fp32, ``packed_amp: none``.
Each loop is timed over all its steps with one device sync at its end; the engine's first, then each
variant's step and model step alternating in rounds (2 on a CPU), each keeping its best. Writes
results/bench/<device>-fastpath.json.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import time
from pathlib import Path

import timm
import torch
from tabulate import tabulate

import repro.models  # noqa: F401  (registers repro_*)
from benchmarks.data_path import run_config, timed
from benchmarks.device import device_name, peak_flops, save
from benchmarks.engine_runs import engine_steps, run_spec
from repro.checks import COMPILE_MODES
from repro.models.cost import count_macs
from repro.records import git_state
from repro.train.fused import softmax_dtypes

PACK_MODEL = {"depth": 6, "embed_dim": 96, "num_heads": 6}  # ConViT's cpu-scale DeiT (width 96, 32 px, patch 4)
GPU_VARIANTS = ("eager", "default", "default+fused", "reduce-overhead+fused")


class Stages:
    """Mean seconds per named stage: CUDA events on a GPU (read after one sync), perf_counter on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda, self.marks = device.type == "cuda", {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.marks.setdefault(name, []).append((start, end))
        else:
            t0 = time.perf_counter()
            yield
            self.marks.setdefault(name, []).append(time.perf_counter() - t0)

    def seconds(self) -> dict:
        if self.cuda:
            torch.cuda.synchronize()
        return {name: sum(s.elapsed_time(e) / 1e3 for s, e in v) / len(v) if self.cuda else sum(v) / len(v)
                for name, v in self.marks.items()}


def alternated(rounds: int, steps: int, device: torch.device, **loops) -> dict[str, float]:
    """Seconds per step of each loop, timed in alternating rounds, each keeping its best round: a slow spell
    of a shared machine then lands on every loop alike."""
    best = {name: float("inf") for name in loops}
    for _ in range(rounds):
        for name, fn in loops.items():
            best[name] = min(best[name], timed(fn, steps, device))
    return best


def parse_variant(name: str) -> tuple[str | None, bool]:
    """'reduce-overhead+fused' -> (torch.compile mode or None for eager, fused AdamW)."""
    mode, plus, extra = name.partition("+")
    if (mode != "eager" and mode not in COMPILE_MODES) or (plus and extra != "fused"):
        raise SystemExit(f"--variants: {name!r}: write eager or a torch.compile mode ({', '.join(COMPILE_MODES)}), "
                         f"optionally with +fused")
    return (None if mode == "eager" else mode), bool(plus)


def run_steps(cfg: dict, model, steps: int, device: torch.device, mode: str | None = None,
              stages: Stages | None = None, fused_opt: bool = False, pipeline: str = "fastpath", amp: str = "bf16"):
    """(step, model_step, a fixed batch) of the engine's run of ``model`` at ``cfg`` on ``pipeline``: ``step``
    draws a batch and trains on it, ``model_step`` trains on a given one; ``mode`` None runs the model
    eagerly, else under torch.compile in that mode."""
    spec = run_spec(cfg, model, steps, data={"synthetic": True, "pipeline": pipeline})
    batches, train = engine_steps([spec], device, mode, fused_opt, amp)
    stage = stages or (lambda name: contextlib.nullcontext())

    def step():
        with stage("data"):
            batch = next(batches)
        with stage("model"):
            train(batch)
    return step, train, next(batches)


def packed(k: int, cfg: dict, steps: int, device: torch.device, rounds: int = 1, compile_: bool = False,
           amp: str = "bf16") -> dict:
    """Aggregate images/s of K cpu-size runs fused, and of one of them alone (the K cost the same)."""
    batch, name, model = int(cfg["recipe"]["batch_size"]), "repro_deit_tiny_c32", _pack_model()
    mode = "default" if compile_ else None
    batches, fused = fused_steps(k, cfg, steps + 2, device, mode, amp)
    one, _, _ = run_steps(cfg, model, steps + 2, device, mode, amp=amp)
    t = alternated(rounds, steps, device, fused=lambda: fused(next(batches)), alone=one)
    t_fused, t_alone = t["fused"], t["alone"]
    return {"packed_runs": k, "packed_model": f"{name} {PACK_MODEL}", "packed_batch": batch,
            "packed_fused_img_s": k * batch / t_fused, "packed_alone_img_s": batch / t_alone,
            "packed_speedup": t_alone * k / t_fused}


def packed_fp32(k: int, cfg: dict, steps: int, device: torch.device, rounds: int, compile_: bool) -> dict:
    """The packed measurement again without autocast (fused and alone both fp32), once the bf16 group failed:
    the speedup of fusing is then still measured, labelled ``packed_amp: none``, or its own error kept."""
    try:
        return {**packed(k, cfg, steps, device, rounds, compile_, amp="none"), "packed_amp": "none"}
    except RuntimeError as e:
        return {"packed_fp32_error": first_line(e)}


def packed_softmax_dtypes(cfg: dict, device: torch.device) -> list[str]:
    """The forward of one step of 2 fused cpu-size runs: each softmax node of its graph with its input and
    result dtypes (fused.softmax_dtypes), or the error that forward raised."""
    batches, step = fused_steps(2, cfg, 3, device)
    pair = next(batches)
    try:
        x, t = torch.stack([b[0] for b in pair]), torch.stack([b[1] for b in pair])
        return softmax_dtypes(step.fused.losses(x, t))
    except RuntimeError as e:
        return [f"raised: {first_line(e)}"]


def fused_steps(k: int, cfg: dict, steps: int, device: torch.device, mode: str | None = None, amp: str = "bf16"):
    """(batches, the engine's fused step) of K cpu-size runs, seeds 0..K-1, on the fast path's synthetic data."""
    return engine_steps([run_spec(cfg, _pack_model(), steps, seed, data={"synthetic": True, "pipeline": "fastpath"})
                         for seed in range(k)], device, mode, amp=amp)


def first_line(e: BaseException) -> str:
    """An error's first line (at most 300 characters), for a JSON field; empty for an error with no message."""
    return str(e).splitlines()[0][:300] if str(e) else ""


def _pack_model() -> dict:
    return {"name": "repro_deit_tiny_c32", "kwargs": dict(PACK_MODEL)}


def _alone_in_process(job: tuple) -> float:
    cfg, steps, device, threads, amp = job
    torch.set_num_threads(threads)
    step, _, _ = run_steps(cfg, _pack_model(), steps + 2, torch.device(device), amp=amp)
    return int(cfg["recipe"]["batch_size"]) / timed(step, steps, torch.device(device))


def processes(k: int, cfg: dict, steps: int, device: torch.device, amp: str = "bf16") -> float:
    """Aggregate images/s of the K runs as K concurrent processes (one thread each on a CPU)."""
    with mp.get_context("spawn").Pool(k) as pool:
        return sum(pool.map(_alone_in_process, [(cfg, steps, str(device), 1, amp)] * k))


def variant(name: str, model: str, cfg: dict, steps: int, rounds: int, device: torch.device) -> dict:
    """One way of running the fast path's step: its images/s, its model step alone on a fixed batch, the share
    of its step outside the model, its stages, and its first steps' seconds (compile and graph capture)."""
    mode, fused_opt = parse_variant(name)
    batch = int(cfg["recipe"]["batch_size"])
    stages = Stages(device)
    step, model_step, fixed = run_steps(cfg, model, steps + 2, device, mode, stages, fused_opt)
    t0 = time.perf_counter()
    for _ in range(3):  # CUDA graph trees warm up, then record, then replay
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    first_s = time.perf_counter() - t0
    stages.marks.clear()
    t = alternated(rounds, steps, device, fast=step, model=lambda: model_step(fixed))
    return {"step_img_s": batch / t["fast"], "model_img_s": batch / t["model"], "first_steps_s": first_s,
            "data_share": max(0.0, 1 - t["model"] / t["fast"]), "stage_s": stages.seconds()}


def variants(names: list[str], model: str, cfg: dict, steps: int, rounds: int, device: torch.device) -> dict:
    """Every variant's numbers; one that fails (a compile error, say) records its error and the rest go on."""
    out = {}
    for name in names:
        try:
            out[name] = variant(name, model, cfg, steps, rounds, device)
        except Exception as e:  # noqa: BLE001 (a benchmark reports what broke and measures the rest)
            out[name] = {"error": f"{type(e).__name__}: {first_line(e)}"}
        print(f"  {name}: " + (f"{out[name]['step_img_s']:.0f} img/s, first steps {out[name]['first_steps_s']:.1f} s"
                               if "error" not in out[name] else out[name]["error"]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def fast_path(args, cfg: dict, names: list[str], steps: int, rounds: int, device: torch.device) -> dict:
    """Today's engine step, then the fast path in each variant; the numbers of the fastest, and a table."""
    batch = int(cfg["recipe"]["batch_size"])
    engine_step, _, _ = run_steps(cfg, args.model, steps + 2, device, pipeline="tensor")  # the tensor pipeline
    t_engine = alternated(rounds, steps, device, engine=engine_step)["engine"]
    del engine_step
    measured = variants(names, args.model, cfg, steps, rounds, device)
    ok = {n: v for n, v in measured.items() if "error" not in v}
    if not ok:
        raise SystemExit(f"every variant failed: {measured}")
    best = max(ok, key=lambda n: ok[n]["step_img_s"])
    step_img_s, per_stage, t_model = ok[best]["step_img_s"], ok[best]["stage_s"], batch / ok[best]["model_img_s"]
    macs = count_macs(timm.create_model(args.model, num_classes=10), 32)
    peak = peak_flops(device_name())
    print(tabulate([["engine step (today)", f"{1e3 * t_engine:.1f}", f"{batch / t_engine:.0f}"],
                    [f"fast path step ({best})", f"{1e3 * batch / step_img_s:.1f}", f"{step_img_s:.0f}"],
                    ["  its data stage", f"{1e3 * per_stage['data']:.1f}", ""],
                    ["  its model stage", f"{1e3 * per_stage['model']:.1f}", ""],
                    ["model step alone", f"{1e3 * t_model:.1f}", f"{batch / t_model:.0f}"]],
                   headers=["loop", "ms / step", "images / s"]))
    return dict(model=args.model, batch=batch, step_img_s=step_img_s, engine_img_s_before=batch / t_engine,
                speedup_vs_engine=step_img_s * t_engine / batch, data_share=ok[best]["data_share"], variant=best,
                variants=measured, stage_s=per_stage, model_img_s=batch / t_model, gflops_per_image=2 * macs / 1e9,
                mfu=2 * macs * 3 * step_img_s / peak if peak else None, peak_bf16_flops=peak,
                mfu_note=None if peak else "no dense bf16 peak is stated for this device (benchmarks/device.py)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="repro_deit_tiny_c32", help="timm name of the 32 px model")
    ap.add_argument("--batch", type=int, help="batch size (default: the small scale's 512 on a GPU, 64 on a CPU)")
    ap.add_argument("--steps", type=int, help="timed steps per loop (default 50 GPU, 5 CPU)")
    ap.add_argument("--pack", type=int, help="runs fused for packed_speedup (default 8 GPU, 4 CPU)")
    ap.add_argument("--pack-batch", type=int, help="their batch size (default: the cpu scale's 64)")
    ap.add_argument("--rounds", type=int, help="alternating rounds, each loop's best kept (default 1 GPU, 2 CPU)")
    ap.add_argument("--processes", action="store_true", help="also time the K runs as K concurrent processes")
    ap.add_argument("--variants", help="comma-separated ways to run the fast path's step: eager or a torch.compile "
                    "mode (default, reduce-overhead, ...), each optionally +fused (fused AdamW); default on a GPU "
                    f"{','.join(GPU_VARIANTS)}, on a CPU eager")
    ap.add_argument("--compile", action="store_true", help="torch.compile the fused runs' update")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default 1 on a CPU: the cpu scale's per run)")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if args.threads or not cuda:
        torch.set_num_threads(args.threads or 1)
    steps, k = args.steps or (50 if cuda else 5), args.pack or (8 if cuda else 4)
    rounds = args.rounds or (1 if cuda else 2)
    names = (args.variants or ",".join(GPU_VARIANTS if cuda else ("eager",))).split(",")
    for name in names:
        parse_variant(name)  # a typo stops here, before anything is timed
    cfg = run_config("small", synthetic=True, batch=args.batch or (None if cuda else 64))
    out = dict(commit=git_state()["git_sha"][:7], steps=steps, rounds=rounds, compile=args.compile, amp_bf16=cuda,
               threads=torch.get_num_threads(), **fast_path(args, cfg, names, steps, rounds, device),
               complete=False)  # saved now, so that a bench stopped at its time limit still leaves these
    mfu = "n/a (no peak stated for this device)" if out["mfu"] is None else f"{100 * out['mfu']:.1f} %"
    print(f"\nfast path ({out['variant']}) / engine: {out['speedup_vs_engine']:.2f}x; outside the model: "
          f"{100 * out['data_share']:.1f} %; MFU: {mfu}; wrote {save(args.out, '-fastpath', out)}")
    packed_part(args, out, k, steps, rounds, device)


def packed_part(args, out: dict, k: int, steps: int, rounds: int, device: torch.device) -> None:
    """K cpu-size runs fused against one alone (and, --processes, as K processes), added to ``out`` and saved.
    First the softmax nodes' dtypes of one fused forward; a fused group failing in bf16 is kept as
    ``packed_error``, and on a GPU the packed part is then measured in fp32 (``packed_amp: none``)."""
    cpu_cfg = run_config("cpu", synthetic=True, batch=args.pack_batch)
    out["packed_softmax_dtypes"] = packed_softmax_dtypes(cpu_cfg, device)
    try:
        pack = packed(k, cpu_cfg, steps, device, rounds, args.compile)
    except RuntimeError as e:  # a fused group failing on this device is a finding: kept, with what was measured
        out["packed_error"] = first_line(e)
        print(f"{k} cpu-size runs fused: failed ({out['packed_error']}); wrote {save(args.out, '-fastpath', out)}")
        pack = packed_fp32(k, cpu_cfg, steps, device, rounds, args.compile) if device.type == "cuda" else {}
        if "packed_speedup" not in pack:
            save(args.out, "-fastpath", {**out, **pack})
            return
    out.update(pack)
    save(args.out, "-fastpath", out)
    if args.processes:
        pack["packed_processes_img_s"] = processes(k, cpu_cfg, steps, device, pack.get("packed_amp", "bf16"))
        pack["packed_processes_speedup"] = pack["packed_processes_img_s"] / pack["packed_alone_img_s"]
    out.update(pack, complete=True, load_avg_1min=os.getloadavg()[0])
    print(f"{k} cpu-size runs fused{' (fp32)' if 'packed_amp' in pack else ''}: {pack['packed_fused_img_s']:.0f} "
          f"img/s together, {pack['packed_alone_img_s']:.0f} img/s one at a time: {pack['packed_speedup']:.2f}x"
          + (f"; as {k} processes: {pack['packed_processes_img_s']:.0f} img/s ({pack['packed_processes_speedup']:.2f}x)"
             if args.processes else ""))
    print(f"wrote {save(args.out, '-fastpath', out)}")


if __name__ == "__main__":
    main()
