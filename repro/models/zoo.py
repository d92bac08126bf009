"""Print every paper model row: heads, width, parameters and GMACs measured on our models beside the
values the papers print (``papers/zoo.yaml``). ``python -m repro.models.zoo [--paper convit] [--json F]``.

GMACs are given two ways: all multiply-adds (attention matmuls included, DeiT's and Aug-ViT's
convention) and without the attention matmuls (ConViT Table 1's convention). A measured value agrees
with a printed one when it lies within one unit of the printed last digit ("27M" accepts 26-28M).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import timm
import yaml
from tabulate import tabulate

from ..probes.cost import count_macs, count_params, macs_without_attention
from . import registry  # noqa: F401  (registers repro_* names)

ZOO_FILE = Path(__file__).resolve().parents[2] / "papers" / "zoo.yaml"


def parse_printed(value) -> tuple[float, float] | None:
    """'27M' -> (27e6, 1e6); '4.3G' -> (4.3e9, 0.1e9): the value and one unit of its last digit."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMG]?)\s*", str(value))
    if not m:
        raise ValueError(f"cannot read printed number {value!r}")
    num, suffix = m.groups()
    scale = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}[suffix]
    decimals = len(num.split(".")[1]) if "." in num else 0
    return float(num) * scale, 10.0 ** -decimals * scale


def agrees(measured: float, printed) -> bool | None:
    p = parse_printed(printed)
    return None if p is None else abs(measured - p[0]) <= p[1]


def measure_row(row: dict) -> dict:
    """Build the row's model and measure it (a few seconds per model on CPU)."""
    model = timm.create_model(row["model"], img_size=row["res"], **row.get("kwargs", {}))
    macs, by_op = count_macs(model, row["res"], by_op=True)
    attn = next((m.attn for m in getattr(model, "blocks", []) if hasattr(m.attn, "num_heads")), None)
    out = {"heads": attn.num_heads if attn is not None else None, "dim": model.embed_dim,
           "params": count_params(model), "macs": macs, "macs_no_attn": macs_without_attention(by_op)}
    p, f = row.get("params"), row.get("flops")
    out["params_agree"] = agrees(out["params"], p)
    out["flops_agree_all"] = agrees(macs, f)
    out["flops_agree_no_attn"] = agrees(out["macs_no_attn"], f)
    return out


def load_rows(paper: str | None = None) -> list[dict]:
    rows = yaml.safe_load(ZOO_FILE.read_text())
    return [r for r in rows if paper is None or r["paper"] == paper]


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "DIFF")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", help="only this paper's rows")
    ap.add_argument("--json", type=Path, help="also write the measurements as JSON here")
    args = ap.parse_args(argv)
    rows, table = load_rows(args.paper), []
    for r in rows:
        m = r["measured"] = measure_row(r)
        table.append([r["paper"], r["row"], r["model"], r["res"], f"{m['heads']} / {r.get('heads', '-')}",
                      f"{m['dim']} / {r.get('dim', '-')}", f"{m['params'] / 1e6:.2f}", r.get("params", "-"),
                      _mark(m["params_agree"]), f"{m['macs'] / 1e9:.2f}", f"{m['macs_no_attn'] / 1e9:.2f}",
                      r.get("flops", "-"), _mark(m["flops_agree_all"]) + "/" + _mark(m["flops_agree_no_attn"])])
    print(tabulate(table, headers=["paper", "row", "model", "px", "heads ours/paper", "dim ours/paper",
                                   "params M", "paper", "", "GMACs all", "GMACs w/o attn", "paper",
                                   "all/w-o attn"]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
