"""Per-run logs: a CSV of the epoch history (rewritten whole, so a resumed run never duplicates
rows), optional TensorBoard scalars, and the one-line epoch summary."""
from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path


def write_csv(path: Path, history: list[dict]) -> None:
    keys: list[str] = []
    for row in history:
        keys += [k for k, v in row.items() if k not in keys and isinstance(v, (int, float, str, type(None)))]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    w.writerows(history)
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")  # replace whole; no fsync: it is only a log
    tmp.write_text(buf.getvalue())
    os.replace(tmp, path)


def summary_line(run_id: str, row: dict, epochs: int) -> str:
    def fmt(key, spec):
        v = row.get(key)
        return f"{key} {v:{spec}}" if isinstance(v, (int, float)) and math.isfinite(v) else None
    parts = [f"epoch {row['epoch'] + 1}/{epochs}", fmt("train_loss", ".4f"), fmt("top1", ".2f"),
             fmt("top5", ".2f"), fmt("lr", ".2e"), fmt("images_per_s", ".0f"), fmt("epoch_s", ".1f")]
    return f"[{run_id}] " + "  ".join(p for p in parts if p)


class TensorBoard:
    """Epoch scalars to TensorBoard when it is installed and asked for; silent no-op otherwise."""

    def __init__(self, logdir: Path, enabled: bool):
        self.writer = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.writer = SummaryWriter(str(logdir))
            except ImportError:
                print("note: runtime.tensorboard=true but tensorboard is not installed; CSV log only")

    def log(self, row: dict) -> None:
        if self.writer is None:
            return
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "epoch":
                self.writer.add_scalar(k, v, row["epoch"] + 1)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
