"""Training / inference images per second and peak memory of our models beside timm's implementation
of the same architecture, measured in one process on one device, printed and saved as
``results/bench/<device>.json``.

    python -m benchmarks.throughput                 # CPU or the visible GPU, default settings
    python -m benchmarks.throughput --compile       # also torch.compile'd variants (GPU)

On GPU: bf16 autocast, batch 128 (ConViT Table 1's speed setting), MFU = counted FLOPs per image
(forward x 3 for a training step) x images/s / the device's peak dense bf16 FLOP/s.
On CPU (2 cores here) batches are small and numbers only compare models with each other; ours and
timm's are measured in alternating rounds (2 by default) and each keeps its best round, so that a
slow spell of a shared machine does not land on one side only.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import timm
import torch
from tabulate import tabulate

import repro.models  # noqa: F401  (registers repro_*)
from repro.models.cost import count_macs
from repro.probes.speed import throughput
from benchmarks.device import device_name, peak_flops, save

# (label, ours, timm reference, kwargs shared by both, image size)
PAIRS = [
    ("DeiT-Ti", "repro_deit_tiny", "deit_tiny_patch16_224", {}, 224),
    ("ConViT-Ti", "repro_convit_tiny", "convit_tiny", {}, 224),
    ("DeiT-S", "repro_deit_small", "deit_small_patch16_224", {}, 224),
    ("ConViT-S", "repro_convit_small", "convit_small", {}, 224),
    ("DeiT-Ti/32px", "repro_deit_tiny_c32", "deit_tiny_patch16_224", dict(img_size=32, patch_size=4, num_classes=10), 32),
    ("ConViT-Ti/32px", "repro_convit_tiny_c32", "convit_tiny", dict(img_size=32, patch_size=4, num_classes=10), 32),
]


def pair_row(pair: tuple, macs: int, batch: int, train: bool, compile_: bool, steps: int, rounds: int,
             device) -> dict:
    """Ours and timm's model of one pair, timed in alternating rounds, each side's best round kept;
    ``macs``: one image's forward pass, counted once per pair by the caller."""
    label, ours, ref, kw, img = pair
    best = {ours: {"images_per_s": 0.0}, ref: {"images_per_s": 0.0}}
    for _ in range(rounds):
        for name in (ours, ref):
            model = timm.create_model(name, **kw).to(device)
            r = throughput(torch.compile(model) if compile_ else model, batch=batch, img_size=img, train=train,
                           steps=steps, amp=True)
            best[name] = max(best[name], r, key=lambda x: x["images_per_s"])
            del model
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
    r_ours, r_ref = best[ours], best[ref]
    peak = peak_flops(device_name())
    mfu = (2 * macs * (3 if train else 1) * r_ours["images_per_s"] / peak) if peak else None
    return dict(model=label, ours=ours, timm=ref, img_size=img, batch=batch, train=train, compiled=compile_,
                ours_img_s=r_ours["images_per_s"], timm_img_s=r_ref["images_per_s"],
                ratio=r_ours["images_per_s"] / r_ref["images_per_s"], ours_peak_mib=r_ours["peak_mem_mib"],
                timm_peak_mib=r_ref["peak_mem_mib"], gmacs_per_img=macs / 1e9, mfu=mfu)


def _table_row(r: dict) -> list:
    return [r["model"], "train" if r["train"] else "infer", "yes" if r["compiled"] else "no", r["batch"],
            f"{r['ours_img_s']:.1f}", f"{r['timm_img_s']:.1f}", f"{r['ratio']:.2f}",
            "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"]


def convit_deit_ratios(rows: list[dict]) -> list[dict]:
    """ConViT/DeiT speed at equal size, ours beside timm's (the paper's 734/1442 = 0.51 for Ti)."""
    def find(model: str, train: bool):
        return next((r for r in rows if r["model"] == model and r["train"] == train and not r["compiled"]), None)
    out = []
    for size in ("Ti", "S", "Ti/32px"):
        for train in (False, True):
            d, c = find(f"DeiT-{size}", train), find(f"ConViT-{size}", train)
            if d and c:
                out.append(dict(size=size, train=train, ours=c["ours_img_s"] / d["ours_img_s"],
                                timm=c["timm_img_s"] / d["timm_img_s"]))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, help="batch size (default 128 on GPU, 8 at 224 px / 32 at 32 px on CPU)")
    ap.add_argument("--steps", type=int, help="timed steps (default 20 GPU, 5 CPU)")
    ap.add_argument("--rounds", type=int, help="alternating ours/timm rounds, best kept (default 1 GPU, 2 CPU)")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile'd models")
    ap.add_argument("--only", help="regex on the row label")
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    steps = args.steps or (20 if cuda else 5)
    rounds = args.rounds or (1 if cuda else 2)
    rows = []
    for pair in PAIRS:
        if args.only and not re.search(args.only, pair[0]):
            continue
        batch = args.batch or (128 if cuda else (8 if pair[4] == 224 else 32))
        _, ours, _, kw, img = pair
        macs = count_macs(timm.create_model(ours, **kw), img)
        for train in (False, True):
            for compile_ in ((False, True) if args.compile else (False,)):
                rows.append(pair_row(pair, macs, batch, train, compile_, steps, rounds, device))
                print(tabulate([_table_row(rows[-1])], tablefmt="plain"), flush=True)
    summary = convit_deit_ratios(rows)
    headers = ["model", "mode", "compiled", "batch", "ours img/s", "timm img/s", "ours/timm", "MFU"]
    print("\n" + tabulate([_table_row(r) for r in rows], headers=headers))
    print("\n" + tabulate([[s["size"], "train" if s["train"] else "infer", f"{s['ours']:.2f}", f"{s['timm']:.2f}"]
                           for s in summary], headers=["size", "mode", "ConViT/DeiT ours", "ConViT/DeiT timm"]))
    path = save(args.out, "", dict(settings=dict(steps=steps, rounds=rounds, amp_bf16=cuda, batch=args.batch),
                                   rows=rows, convit_deit_ratio=summary))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
