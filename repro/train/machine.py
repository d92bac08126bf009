"""Where and with what a run ran: the device's name and a record's provenance (versions, device, git state,
start time). Run-stage code: it imports torch and timm, which records.py (read by the report) must not."""
from __future__ import annotations

import datetime as _dt
import platform
from typing import Iterable

import timm
import torch

from ..records import git_state


def device_name(device=None) -> str:
    """The name a record gives a device: the GPU's model name, or 'cpu' (no device: the one this process would use)."""
    if device is None:
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def out_of_memory(e: BaseException) -> bool:
    """A run that asked its device for more memory than it has (GPU or CPU): a batch or model no retry makes fit."""
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(e, RuntimeError) and "can't allocate memory" in str(e))


def provenance(world_size: int = 1) -> dict:
    """Who/what/where of a run: versions, device, git state, start time."""
    return {**git_state(), "python": platform.python_version(), "torch": torch.__version__, "timm": timm.__version__,
            "cuda": torch.version.cuda if torch.cuda.is_available() else None, "device": device_name(),
            "cpu": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(),
            "hostname": platform.node(), "world_size": world_size,
            "start_time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


def trained_how(run_id: str, group: Iterable[str] = ()) -> dict:
    """How a run was trained, for its provenance: alone, or fused with other runs (named); not part of the run id."""
    others = sorted(r for r in group if r != run_id)
    return {"trained": "fused", "fused_with": others} if others else {"trained": "alone"}
