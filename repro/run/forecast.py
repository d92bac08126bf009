"""A campaign's device time predicted from a committed benchmark, before any device is lent.

    python -m repro forecast [--bench results/bench/NVIDIA_H200-data_path.json] [--paper convit ...] scale=small

Why: deadline.py measures on the device it runs on; planning which campaign fits a 30-minute slot needs the
prediction first. Each run is priced from ``benchmarks/data_path.py``'s step on that device: a part outside the
model per image, and the model's step as the longer of a compute bound (scaled by forward FLOPs) and a launch
bound (scaled by parameter tensors: at 32 px the step is launch-bound); ConViT pays the measured ConViT / DeiT
ratio, fused groups a measured ``packed_speedup``. A prediction from one model's measurement, not a measurement."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Callable

import torch
from tabulate import tabulate

from .. import records
from ..errors import ConfigError, one_line
from ..models.cost import count_macs
from ..runs import RunSpec
from ..train.execute import DONE, record_status
from ..train.model import create_model
from .deadline import _arch_key, run_seconds, units, work
from .sequential import BAD_INPUT
from .specs import select

# images per class (train, test) of the datasets whose size is known without opening them
SIZES = {"cifar10": (5000, 1000), "cifar10_jpeg": (5000, 1000), "cifar100": (500, 100), "synthetic": (50, 10)}
DEFAULT_BENCH = Path("bench") / "NVIDIA_H200-data_path.json"


@dataclasses.dataclass
class Reference:
    """What one device measured: the engine's step of ``model`` at ``batch``, and ConViT's relative speed."""
    device: str
    model: str
    batch: int
    step_s: float
    model_s: float
    gflops: float
    tensors: int
    convit_ratio: float
    packed_speedup: float | None
    source: str

    @classmethod
    def load(cls, path: Path) -> "Reference":
        d = json.loads(path.read_text())
        s = d["settings"]
        stem = path.name.removesuffix("-data_path.json")
        side = {p: json.loads(f.read_text()) for p in ("", "-fastpath") if (f := path.with_name(stem + p + ".json")).is_file()}
        ratio = next((r["ours"] for r in side.get("", {}).get("convit_deit_ratio", [])
                      if r.get("train") and r.get("size") == "Ti/32px"), 1.0)
        _, tensors = cost({"model": {"name": s["model"]}, "data": {"img_size": 32, "num_classes": 10}})
        return cls(d["device"], s["model"], int(s["batch"]), d["step_s"], d["model_s"], d["gflops_per_image"],
                   tensors, ratio, side.get("-fastpath", {}).get("packed_speedup"), str(path))

    def rate(self, gflops: float, tensors: int, batch: int, gpsa: bool = False) -> float:
        """Training images/s at ``batch`` of a model with ``gflops`` forward GFLOPs per image and ``tensors``
        parameter tensors: the step outside the model per image, the model's step the longer of its bounds."""
        outside = (self.step_s - self.model_s) / self.batch * batch
        model = max(self.model_s * gflops * batch / (self.gflops * self.batch), self.model_s * tensors / self.tensors)
        return batch / (outside + model / (self.convit_ratio if gpsa else 1.0))

    def describe(self) -> str:
        return (f"{self.source}: {self.device}, {self.model} at batch {self.batch}, engine step "
                f"{1e3 * self.step_s:.2f} ms ({self.batch / self.step_s:,.0f} img/s), model alone "
                f"{1e3 * self.model_s:.2f} ms, {self.gflops:.3f} GFLOPs forward per image, {self.tensors} parameter "
                f"tensors; ConViT / DeiT training {self.convit_ratio:.3f} (Ti/32px); packed speedup "
                f"{'not measured' if self.packed_speedup is None else f'x{self.packed_speedup:.2f}'}")


def sized(spec: RunSpec) -> RunSpec:
    """``spec`` on synthetic pixels of its dataset's real size, so that its work is counted without the data;
    a dataset of no known size (an ImageFolder: a pilot's held-out split) is counted from its files."""
    data = spec.config["data"]
    if data["name"] not in SIZES:
        return spec
    train, test = SIZES[data["name"]]
    cap = lambda n, limit: min(n, int(limit)) if limit else n  # noqa: E731
    shaped = {**data, "synthetic": True, "max_per_class": cap(train, data.get("max_per_class")),
              "test_max_per_class": cap(test, data.get("test_max_per_class"))}
    return dataclasses.replace(spec, config={**spec.config, "data": shaped})


def cost(config: dict) -> tuple[float, int]:
    """(forward GFLOPs per image, parameter tensors) of a run config's model, counted on the meta device."""
    with torch.device("meta"):
        model = create_model(config, int(config["data"].get("num_classes") or 10))
    return 2 * count_macs(model, int(config["data"]["img_size"])) / 1e9, len(list(model.parameters()))


def forecast(c: dict, doc: dict, ref: Reference) -> dict:
    """The training runs of config ``c`` and plan ``doc`` not yet recorded, their groups and predicted seconds."""
    specs = select(c, doc)
    todo = [s for s in specs if s.kind == "train" and record_status(s) not in DONE]
    rates: dict[str, float] = {}

    def rate(s: RunSpec) -> float:  # one count of FLOPs and tensors per distinct model and batch
        key = _arch_key(s)
        if key not in rates:
            rates[key] = ref.rate(*cost(s.config), int(s.config["recipe"]["batch_size"]),
                                  gpsa="convit" in str(s.config["model"]["name"]))
        return rates[key]
    parts = units(c, todo, run_seconds(todo, rate, lambda s: work(sized(s))), ref.packed_speedup or 1.0)
    return {"runs": len(todo), "groups": sum(len(u) > 1 for u, _ in parts), "models": len(rates),
            "seconds": sum(t for _, t in parts), "rates": sorted(rates.values())}


def main(argv: list[str], campaign: Callable[[list[str]], tuple[dict, dict]],
         papers_at: Callable[[str], list[str]]) -> int:
    """``python -m repro forecast ...`` (repro/cli.py): ``campaign(args)`` plans ``reproduce <args>`` (config and
    plan, built, not written); ``papers_at(scale)``: the papers with runs at a scale."""
    ap = argparse.ArgumentParser(prog="python -m repro forecast", description=__doc__.splitlines()[0])
    ap.add_argument("--bench", type=Path, default=None,
                    help=f"a <device>-data_path.json (default: <results>/{DEFAULT_BENCH})")
    ap.add_argument("--paper", action="append", help="a paper id (repeatable; default: every paper at the scale)")
    ap.add_argument("overrides", nargs="*", help="key=value, as reproduce takes them (scale=small ...)")
    ns = ap.parse_intermixed_args(argv)  # key=value before or after --paper
    bench = ns.bench or records.results_root() / DEFAULT_BENCH
    try:
        if not bench.is_file():
            raise ConfigError(f"{bench}: no such benchmark; run python -m benchmarks.data_path on the device")
        ref = Reference.load(bench)
        scale = next((o.split("=", 1)[1] for o in ns.overrides if o.startswith("scale=")), "tiny")
        # paper=ID as reproduce takes it selects the paper (else it would override every row's paper)
        named = [o.split("=", 1)[1] for o in ns.overrides if o.startswith("paper=")]
        overrides = [o for o in ns.overrides if not o.startswith("paper=")]
        rows = []
        for paper in [*(ns.paper or []), *named] or papers_at(scale):
            f = forecast(*campaign([f"paper={paper}", *overrides]), ref)
            rows.append([paper, f["runs"], f["groups"], f["models"],
                         " - ".join(f"{r:,.0f}" for r in (f["rates"][:1] + f["rates"][-1:])) or "-",
                         f"{f['seconds'] / 60:.1f}"])
    except BAD_INPUT as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    print(f"predicted from {ref.describe()}")
    print(tabulate(rows, headers=["paper", "training runs", "fused groups", "models", "img/s (predicted)",
                                  f"{ref.device} min"]))
    print(f"total: {sum(float(r[-1]) for r in rows):.1f} min for {sum(r[1] for r in rows)} runs "
          f"({' '.join(ns.overrides)})")
    return 0
