"""Data-parallel training under torchrun (NCCL on GPUs, gloo on CPU): every rank runs every run in the same
order, rank 0 alone takes locks and writes checkpoints, logs and records, and shares its decisions
(``from_main``); ``relaunch`` re-executes the command under torchrun."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from .preempt import wait


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def in_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    if pref in (None, "auto"):
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(pref)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device(f"cuda:{local_rank}")
    return dev


def setup(device_pref: str = "auto") -> Dist:
    """Join the torchrun process group if there is one (once per process)."""
    if not in_torchrun() or int(os.environ["WORLD_SIZE"]) == 1:
        return Dist(device=pick_device(device_pref))
    local_rank = int(os.environ["LOCAL_RANK"])
    device = pick_device(device_pref, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), local_rank, device)


def barrier(d: Dist) -> None:
    if d.world_size > 1:
        dist.barrier()


def all_reduce(t: torch.Tensor, d: Dist, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if d.world_size > 1:
        dist.all_reduce(t, op=op)
    return t


def from_main(obj, d: Dist):
    """Rank 0's ``obj`` on every rank: decisions all ranks must share (a run's lock held, its status on
    disk, read by each rank at a slightly different time, while another command may be writing it)."""
    if d.world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=d.device if d.device.type == "cuda" else None)
    return box[0]


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every rank when ``flag`` is true on at least one (SIGTERM reaches ranks at different steps)."""
    if d.world_size == 1:
        return flag
    return bool(all_reduce(torch.tensor(float(flag), device=d.device), d, dist.ReduceOp.MAX).item())


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def relaunch(nproc: int, args: list[str]) -> int:
    """Run ``python -m repro <args>`` under torchrun with ``nproc`` processes on this node."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "repro", *args]
    print("launching:", " ".join(cmd), flush=True)
    return wait(subprocess.Popen(cmd))  # SIGTERM to this process reaches the ranks through torchrun
