"""torch.compile for a training step: which mode, and what CUDA graphs ask of the loop around it. A launch-bound
small ViT replays its compiled step as CUDA graphs (``reduce-overhead``, ``max-autotune``); a replay rewrites
its outputs in place, so the loop marks each step's start and copies out the loss (PyTorch's "CUDAGraph Trees")."""
from __future__ import annotations

import os

import torch

from ..runs import cache_root

GRAPH_MODES = ("reduce-overhead", "max-autotune")  # of repro.checks.COMPILE_MODES, the ones that replay graphs


def compile_module(module: torch.nn.Module, mode: str = "default") -> torch.nn.Module:
    """``module`` under torch.compile in ``mode``; Inductor's on-disk cache kept beside the runs, so that
    other processes (and nodes sharing the cache folder) skip most of the work."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))
    return torch.compile(module, mode=None if mode == "default" else mode)


def graphed(mode: str | None, device: torch.device) -> bool:
    """True where a compiled step replays CUDA graphs (its outputs are overwritten by the next step)."""
    return mode in GRAPH_MODES and device.type == "cuda"


def step_begin(mode: str | None, device: torch.device) -> None:
    """Mark a new training step for CUDA graph trees (a no-op where no graphs replay)."""
    if graphed(mode, device):
        torch.compiler.cudagraph_mark_step_begin()
