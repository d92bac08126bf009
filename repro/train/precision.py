"""The numerics of a training step: bf16 autocast on CUDA (``runtime.amp``, how a run executes) and, where a
run's config asks for it (``cpu_precision: bf16``, part of what it measures), on a CPU with native bf16: without
the instructions PyTorch emulates bf16, slower than fp32. The math attention path, since flash attention in bf16
ran below the fp32 step under width 192 on such a CPU (benchmarks/README.md, "CPU: the step in bf16")."""
from __future__ import annotations

import contextlib
import platform
from functools import lru_cache
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..runs import CPU_PRECISIONS
AMP = {"bf16": torch.bfloat16, "fp16": torch.float16}


@lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (x86: avx512_bf16 or amx_bf16; Arm: bf16)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: no way to tell here, so no bf16
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    wanted = {"bf16"} if platform.machine().lower() in ("aarch64", "arm64") else {"avx512_bf16", "amx_bf16"}
    return bool(flags & wanted)


def amp_dtype(device: torch.device, runtime_amp: str, cpu_precision: str | None) -> torch.dtype | None:
    """The autocast dtype of a step on ``device`` (None: fp32)."""
    if device.type == "cuda":
        return AMP.get(runtime_amp)
    if (cpu_precision or "fp32") not in CPU_PRECISIONS:
        raise ValueError(f"cpu_precision={cpu_precision!r}: use one of {', '.join(CPU_PRECISIONS)}")
    return torch.bfloat16 if cpu_precision == "bf16" and cpu_has_native_bf16() else None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """Autocast to ``dtype`` (off when None); on a CPU in bf16 also SDPA's math path (module docstring)."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast(device.type, dtype=dtype, enabled=dtype is not None))
    if device.type == "cpu" and dtype is not None:
        stack.enter_context(sdpa_kernel([SDPBackend.MATH]))
    return stack


def provenance(device: torch.device, cpu_precision: str | None, dtype: torch.dtype | None) -> dict:
    """What a record says of its numerics beyond ``amp``: on a CPU, what was asked and what the CPU has."""
    if device.type != "cpu":
        return {}
    return {"cpu_precision": cpu_precision or "fp32", "cpu_native_bf16": cpu_has_native_bf16(),
            "cpu_precision_used": "bf16" if dtype is torch.bfloat16 else "fp32"}
