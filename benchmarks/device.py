"""What every benchmark states beside its numbers: the device, its peak, the versions, the commit; and
where the numbers go (results/bench/<device><suffix>.json, written atomically)."""
from __future__ import annotations

import json
import platform
import re
from pathlib import Path

import timm
import torch

from repro.records import atomic_write_bytes, git_state

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 FLOP/s, vendor datasheets


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu-{platform.machine()}-{torch.get_num_threads()}t"


def peak_flops(name: str) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def save(out_dir: Path, suffix: str, numbers: dict) -> Path:
    """Write ``numbers`` with device, versions and commit to out_dir/<device><suffix>.json."""
    name = device_name()
    out = dict(device=name, torch=torch.__version__, timm=timm.__version__, **git_state(), **numbers)
    path = out_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}{suffix}.json"
    atomic_write_bytes(path, (json.dumps(out, indent=1) + "\n").encode())
    return path
