"""Images per second for inference and training steps, timed on the device the model lives on.

GPU timing uses CUDA events after warm-up (bf16 autocast by default); CPU timing uses perf_counter.
Numbers are only comparable within one process and one device, which is how benchmarks/ uses them.
"""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch
from torch import nn

from ..train.machine import device_name


def throughput(model: nn.Module, batch: int = 128, img_size: int = 224, train: bool = False,
               steps: int = 10, warmup: int = 3, amp: bool = True, in_chans: int = 3) -> dict:
    """Median images/s over ``steps`` timed iterations (forward, or forward+backward+AdamW step)."""
    device = next(model.parameters()).device
    x = torch.randn(batch, in_chans, img_size, img_size, device=device)
    y = torch.randint(0, max(getattr(model, "num_classes", 1000), 1), (batch,), device=device)
    model.train(train)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6) if train else None
    cuda = device.type == "cuda"

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16) if amp and cuda else nullcontext():
            if train:
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            else:
                with torch.no_grad():
                    model(x)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    mem = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None
    return {"images_per_s": batch / med, "step_s": med, "batch": batch, "img_size": img_size,
            "train": train, "amp": amp and cuda, "device": device_name(device),
            "peak_mem_mib": mem}
