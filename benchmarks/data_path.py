"""How much of a training step the data path costs: the `small` scale's tensor pipeline beside the model.

    python -m benchmarks.data_path                  # CIFAR-10 JPEG copy under REPRO_DATA_DIR, else synthetic
    python -m benchmarks.data_path --synthetic      # same shapes, no dataset needed

Times three loops of the engine's training step, in one process on one device:
  data:  the batch from the device-resident uint8 tensor, crop + flip + RandAugment + normalise +
         random erasing (repro/data/batch_aug.py), then timm Mixup/CutMix; no model;
  model: forward, backward and AdamW step on one fixed batch (bf16 autocast on GPU);
  step:  both, as repro/train/engine.py runs them.
The fraction of step time outside the model is 1 - model/step. Each loop is timed over all its steps
with one device sync at the end (a sync per step would serialise the GPU). Recipe: DeiT's with the
`small` scale's overrides (batch 512), composed by Hydra from repro/conf like a real run. Writes
results/bench/<device>-data_path.json.
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import timm
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tabulate import tabulate

import repro
import repro.models  # noqa: F401  (registers repro_*)
from benchmarks.device import device_name, peak_flops, save
from repro.data import DataError, build_data
from repro.models.cost import count_macs
from repro.train.recipe import build_criterion, build_mixup, build_optimizer


def run_config(scale: str, synthetic: bool, batch: int | None) -> dict:
    """The resolved data + recipe of a run at ``scale`` (what `python -m repro reproduce` would use)."""
    overrides = [f"scale={scale}"] + (["data.synthetic=true"] if synthetic else [])
    if batch:
        overrides.append(f"recipe.batch_size={batch}")
    with initialize_config_dir(config_dir=str(Path(repro.__file__).parent / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=True)


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


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="repro_deit_tiny_c32", help="timm name of the 32 px model")
    ap.add_argument("--scale", default="small", help="scale whose recipe overrides apply (default small)")
    ap.add_argument("--batch", type=int, help="batch size (default: the scale's; 64 on CPU)")
    ap.add_argument("--steps", type=int, help="timed steps per loop (default 50 GPU, 5 CPU)")
    ap.add_argument("--synthetic", action="store_true", help="synthetic pixels of CIFAR's shape")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    return ap


def _data(data_cfg: dict, recipe: dict, device: torch.device, images: int):
    """The scale's data, or synthetic pixels of its shape, at least ``images`` of them (the synthetic
    default, 50 a class, is under one GPU batch of 512)."""
    if not data_cfg.get("synthetic"):
        try:
            return build_data(data_cfg, recipe, seed=0, device=device)
        except DataError as e:  # pixel values do not change the cost of any op timed here
            print(f"note: {e}\nnote: timing synthetic images of the same shape instead")
    classes = int(data_cfg.get("num_classes") or 10)
    synthetic = {**data_cfg, "synthetic": True, "max_per_class": max(50, -(-images // classes))}
    return build_data(synthetic, recipe, seed=0, device=device)


def _step_fns(args, recipe: dict, data, device: torch.device):
    """(next_batch, model_step): the engine's data path and its forward/backward/AdamW step, separately."""
    mixup = build_mixup(recipe, data.num_classes)
    criterion = build_criterion(recipe, mixup)
    model = timm.create_model(args.model, num_classes=data.num_classes,
                              drop_path_rate=float(recipe.get("drop_path", 0.0))).to(device).train()
    train_model = torch.compile(model) if args.compile else model
    optimizer = build_optimizer(model, recipe)
    cuda = device.type == "cuda"
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    batches = (b for epoch in itertools.count() for b in data.train.epoch(epoch))

    def next_batch():
        x, y = next(batches)
        return mixup(x, y) if mixup is not None else (x, y)

    def model_step(x, targets):
        with amp:
            loss = criterion(train_model(x), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return next_batch, model_step


def main(argv=None) -> None:
    args = _parser().parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    cfg = run_config(args.scale, args.synthetic, args.batch or (None if cuda else 64))
    recipe, data_cfg = cfg["recipe"], cfg["data"]
    steps = args.steps or (50 if cuda else 5)
    batch = int(recipe["batch_size"])
    data = _data(data_cfg, recipe, device, images=batch * (steps + 2))
    if data.train.steps_per_epoch < steps + 2:
        raise SystemExit(f"{data.info['train']}: {data.train.steps_per_epoch} batches of {batch} per epoch, "
                         f"fewer than the {steps + 2} needed; lower --steps or --batch")
    next_batch, model_step = _step_fns(args, recipe, data, device)
    macs = count_macs(timm.create_model(args.model, num_classes=data.num_classes), int(data_cfg["img_size"]))
    fixed = next_batch()
    t_data = timed(next_batch, steps, device)
    t_model = timed(lambda: model_step(*fixed), steps, device)
    t_step = timed(lambda: model_step(*next_batch()), steps, device)
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
