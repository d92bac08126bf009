"""How much of a training step the data path costs: the `small` scale's tensor pipeline beside the model.

    python -m benchmarks.data_path                  # CIFAR-10 JPEG copy under REPRO_DATA_DIR, else synthetic
    python -m benchmarks.data_path --synthetic      # same shapes, no dataset needed

Times three loops of the engine's own training step (engine.stepper), in one process on one device:
  data:  the batch from the device-resident uint8 tensor, crop + flip + RandAugment + normalise +
         random erasing (repro/data/batch_aug.py); no model;
  model: the engine's step on one fixed batch: timm Mixup/CutMix, forward, backward and AdamW (bf16
         autocast on GPU);
  step:  both, as repro/train/engine.py runs them.
The fraction of step time outside the model is 1 - model/step. Each loop is timed over all its steps
with one device sync at the end (a sync per step would serialise the GPU). Recipe: DeiT's with the
`small` scale's overrides (batch 512), composed by Hydra from repro/conf like a real run. Writes
results/bench/<device>-data_path.json.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import timm
import torch
from omegaconf import OmegaConf
from tabulate import tabulate

import repro.models  # noqa: F401  (registers repro_*)
from benchmarks.device import device_name, peak_flops, save
from benchmarks.engine_runs import engine_steps, run_spec
from repro.checks import check_keys
from repro.data import DataError
from repro.models.cost import count_macs


def run_config(scale: str, synthetic: bool, batch: int | None) -> dict:
    """The resolved data + recipe of a run at ``scale`` (what `python -m repro reproduce` would use)."""
    overrides = [f"scale={scale}"] + (["data.synthetic=true"] if synthetic else [])
    if batch:
        overrides.append(f"recipe.batch_size={batch}")
    return OmegaConf.to_container(check_keys(overrides), resolve=True)


def timed(fn, steps: int, device: torch.device) -> float:
    """Seconds per call of ``fn`` over ``steps`` calls, after two warm-up calls."""
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / steps


def engine_step(cfg: dict, model: str, steps: int, device: torch.device, compile_: bool = False):
    """(the engine's endless batches, its step on one batch) for a run of ``model`` at ``cfg``: on the
    scale's data, or synthetic pixels of its shape when that is not on disk (enough for ``steps`` batches)."""
    mode = "default" if compile_ else None
    if not cfg["data"].get("synthetic"):
        try:
            return engine_steps([run_spec(cfg, model, steps)], device, mode)
        except DataError as e:  # pixel values do not change the cost of any op timed here
            print(f"note: {e}\nnote: timing synthetic images of the same shape instead")
    return engine_steps([run_spec(cfg, model, steps, data={"synthetic": True})], device, mode)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="repro_deit_tiny_c32", help="timm name of the 32 px model")
    ap.add_argument("--scale", default="small", help="scale whose recipe overrides apply (default small)")
    ap.add_argument("--batch", type=int, help="batch size (default: the scale's; 64 on CPU)")
    ap.add_argument("--steps", type=int, help="timed steps per loop (default 50 GPU, 5 CPU)")
    ap.add_argument("--synthetic", action="store_true", help="synthetic pixels of CIFAR's shape")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cfg = run_config(args.scale, args.synthetic, args.batch or (None if cuda else 64))
    recipe, data_cfg = cfg["recipe"], cfg["data"]
    steps = args.steps or (50 if cuda else 5)
    batch = int(recipe["batch_size"])
    batches, step = engine_step(cfg, args.model, steps + 2, device, args.compile)
    data = step.run.data
    macs = count_macs(timm.create_model(args.model, num_classes=data.num_classes), int(data_cfg["img_size"]))
    fixed = next(batches)
    t_data = timed(lambda: next(batches), steps, device)
    t_model = timed(lambda: step(fixed), steps, device)
    t_step = timed(lambda: step(next(batches)), steps, device)
    outside = max(0.0, 1 - t_model / t_step)
    peak = peak_flops(device_name())
    images_s = batch / t_step
    mfu = 2 * macs * 3 * images_s / peak if peak else None
    print(tabulate([["data path", f"{1e3 * t_data:.2f}", f"{batch / t_data:.0f}"],
                    ["model step", f"{1e3 * t_model:.2f}", f"{batch / t_model:.0f}"],
                    ["engine step", f"{1e3 * t_step:.2f}", f"{images_s:.0f}"]],
                   headers=["loop", "ms / step", "images / s"]))
    print(f"\nstep time outside the model: {100 * outside:.1f} %  (data path alone: {100 * t_data / t_step:.1f} %)")
    print(f"MFU: {'n/a (no peak FLOP/s known for this device)' if mfu is None else f'{100 * mfu:.1f} %'}"
          f"  ({2 * macs / 1e9:.3f} GFLOPs forward per image)")
    path = save(args.out, "-data_path", dict(
               settings=dict(model=args.model, scale=args.scale, batch=batch, steps=steps, compile=args.compile,
                             amp_bf16=cuda, data=data.info["train"], aa=recipe.get("aa"), reprob=recipe.get("reprob"),
                             mixup=recipe.get("mixup"), cutmix=recipe.get("cutmix")),
               data_s=t_data, model_s=t_model, step_s=t_step, outside_model_fraction=outside,
               data_fraction=t_data / t_step, images_per_s=images_s, gflops_per_image=2 * macs / 1e9, mfu=mfu))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
