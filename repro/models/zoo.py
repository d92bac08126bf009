"""Print every paper model row: heads, width, parameters and GMACs measured on our models beside the
values the papers print (``papers/zoo.yaml``). ``python -m repro.models.zoo [--paper convit] [--json F]``.

GMACs are given two ways: all multiply-adds (attention matmuls included, DeiT's and Aug-ViT's
convention) and without the attention matmuls (ConViT Table 1's convention). A measured value agrees
with a printed one by the report's rule: it prints as that number under the row's ``printed`` convention
(round by default: "27M" accepts 26.5M-27.5M; truncate: 27M-28M).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import timm
import torch
import yaml
from tabulate import tabulate
from tqdm import tqdm

from ..paper import parse_printed, prints_as
from .cost import count_macs, count_params, macs_without_attention
from . import registry  # noqa: F401  (registers repro_* names)

ZOO_FILE = Path(__file__).resolve().parents[2] / "papers" / "zoo.yaml"


def agrees(measured: float, printed, convention: str = "round") -> bool | None:
    """The report's rule (repro.paper.prints_as): would ``measured`` print as ``printed`` under the paper's
    convention, rounding ("27M" is 26.5M-27.5M) or truncation ("27M" is 27M-28M)?"""
    if printed is None:
        return None
    pv = parse_printed(printed)
    if pv.value is None:
        raise ValueError(f"cannot read printed number {printed!r}")
    return prints_as(measured, pv, convention)


def measure_row(row: dict) -> dict:
    """Build the row's model on the meta device (shapes only, no weights) and count it: well under a second."""
    with torch.device("meta"):
        model = timm.create_model(row["model"], img_size=row["res"], **row.get("kwargs", {}))
    macs, by_op = count_macs(model, row["res"], by_op=True)
    attn = next((m.attn for m in getattr(model, "blocks", []) if hasattr(m.attn, "num_heads")), None)
    out = {"heads": attn.num_heads if attn is not None else None, "dim": model.embed_dim,
           "params": count_params(model), "macs": macs, "macs_no_attn": macs_without_attention(by_op)}
    p, f, how = row.get("params"), row.get("flops"), row.get("printed", "round")
    if row.get("params_count") == "no_head":  # the paper's own count leaves the classifier out
        out["params_compared"] = out["params"] - count_params(model.get_classifier())
    out["params_agree"] = agrees(out.get("params_compared", out["params"]), p, how)
    out["flops_agree_all"] = agrees(macs, f, how)
    out["flops_agree_no_attn"] = agrees(out["macs_no_attn"], f, how)
    return out


def load_rows(paper: str | None = None) -> list[dict]:
    rows = yaml.safe_load(ZOO_FILE.read_text())
    return [r for r in rows if paper is None or r["paper"] == paper]


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("ok" if ok else "DIFF")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paper", help="only this paper's rows")
    ap.add_argument("--json", type=Path, help="also write the measurements as JSON here")
    args = ap.parse_args(argv)
    rows, table = load_rows(args.paper), []
    if not rows:
        known = sorted({r["paper"] for r in load_rows()})
        print(f"error: no zoo rows for paper {args.paper!r}; papers with rows: {', '.join(known)}", file=sys.stderr)
        return 2
    # a bar only on a terminal (disable=None): redirected, its \r redraws would fill the log
    for r in tqdm(rows, desc="measuring the zoo", unit="model", file=sys.stderr, dynamic_ncols=True, disable=None):
        m = r["measured"] = measure_row(r)
        table.append([r["paper"], r["row"], r["model"], r["res"], f"{m['heads']} / {r.get('heads', '-')}",
                      f"{m['dim']} / {r.get('dim', '-')}",
                      f"{m.get('params_compared', m['params']) / 1e6:.2f}" + (" (no head)" if "params_compared" in m else ""),
                      r.get("params", "-"),
                      _mark(m["params_agree"]), f"{m['macs'] / 1e9:.2f}", f"{m['macs_no_attn'] / 1e9:.2f}",
                      r.get("flops", "-"), _mark(m["flops_agree_all"]) + "/" + _mark(m["flops_agree_no_attn"])])
    print(tabulate(table, headers=["paper", "row", "model", "px", "heads ours/paper", "dim ours/paper",
                                   "params M", "paper", "", "GMACs all", "GMACs w/o attn", "paper",
                                   "all/w-o attn"]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
