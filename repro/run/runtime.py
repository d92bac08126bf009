"""How a command runs (the ``runtime`` config: device threads, workers, amp, compile, fused groups) as the
engine's ``Runtime``, and how many torchrun processes it asks for."""
from __future__ import annotations

import os

import torch

from ..train.engine import Runtime


def runtime(c: dict, dist) -> Runtime:
    """The ``Runtime`` of the composed config ``c`` on ``dist``'s device ('auto' values filled in)."""
    r = c["runtime"]
    if r.get("threads"):
        torch.set_num_threads(int(r["threads"]))
    on_gpu = dist.device.type == "cuda"
    workers, check = r["num_workers"], r["check_every"]
    if workers == "auto":
        workers = min(8, (os.cpu_count() or 1) // max(1, dist.world_size)) if on_gpu else 0
    if check == "auto":
        check = 50 if on_gpu else 1
    return Runtime(dist=dist, amp=r["amp"], compile=bool(r["compile"]), deterministic=bool(r["deterministic"]),
                   num_workers=int(workers), progress=bool(r["progress"]), tensorboard=bool(r["tensorboard"]),
                   check_every=int(check), probe_batch=int(r["probe_batch"]),
                   checkpoint_every_s=float(r["checkpoint_every_s"]), fused=bool(r.get("fused", False)),
                   compile_mode=str(r.get("compile_mode") or "default"),
                   fused_optimizer=bool(r.get("fused_optimizer", False)))


def nproc(c: dict) -> int:
    """Processes per node: ``runtime.nproc_per_node``; 'auto' is every GPU at the full scale, else one."""
    n = c["runtime"]["nproc_per_node"]
    if n == "auto":
        return torch.cuda.device_count() if c["scale"] == "full" and torch.cuda.device_count() > 1 else 1
    return int(n)
