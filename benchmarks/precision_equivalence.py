"""Whether ``cpu_precision=bf16`` trains what fp32 trains: one cheap cell both ways, before any verdict
rests on a bf16 record.

The cell: the cross-paper table's 2-epoch baseline at the cpu scale (depth 6, width 72, all of CIFAR-10
(JPEG q75), 3 seeds), whose fp32 records are committed. The bf16 seeds come from the same command with
``cpu_precision=bf16`` (their own run ids), into a folder of their own:

    REPRO_DATA_DIR=<data> REPRO_RESULTS_DIR=<out> python -m repro reproduce paper=crosspaper scale=cpu \\
        runs=[ideas-baseline-] cpu_precision=bf16 report=false
    python -m benchmarks.precision_equivalence <out>/crosspaper/cpu/records

The rule, fixed before the bf16 runs: equivalent when the 95 % interval of mean top-1 (bf16 - fp32)
(Welch, repro.report.stats) lies inside +/- MARGIN points, a band four times narrower than the smallest
effect the cpu campaigns resolve with 3 seeds a side (about 4 points). Writes results/bench/cpu_bf16_equivalence.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from repro.records import atomic_write_bytes, read_record
from repro.report.stats import compare_means

MARGIN = 1.0  # top-1 points
CELL = "ideas-baseline-baseline-s"
FP32 = Path("results/crosspaper/cpu/records")


def top1s(folder: Path, precision: str) -> dict[str, float]:
    """{run_id: top-1} of the cell's finished records in ``folder`` trained in ``precision``."""
    out = {}
    for path in sorted(folder.glob(f"{CELL}*.json")):
        rec = read_record(path)
        used = rec["provenance"].get("cpu_precision_used", "fp32")
        if rec["status"] == "finished" and used == precision and rec["config"].get("cpu_precision", "fp32") == precision:
            out[rec["run_id"]] = float(rec["metrics"]["top1"])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bf16", type=Path, help="the records folder of the bf16 runs")
    ap.add_argument("--fp32", type=Path, default=FP32)
    ap.add_argument("--out", type=Path, default=Path("results/bench/cpu_bf16_equivalence.json"))
    args = ap.parse_args(argv)
    fp32, bf16 = top1s(args.fp32, "fp32"), top1s(args.bf16, "bf16")
    if min(len(fp32), len(bf16)) < 3:
        raise SystemExit(f"need >= 3 seeds a side: {len(fp32)} fp32 in {args.fp32}, {len(bf16)} bf16 in {args.bf16}")
    t = compare_means(list(bf16.values()), list(fp32.values()), rhs_const=False, alpha=0.05)
    equivalent = t.ci is not None and -MARGIN < t.ci[0] and t.ci[1] < MARGIN
    out = {"cell": "crosspaper cpu ideas/baseline (2 epochs)", "margin_top1": MARGIN, "fp32": fp32, "bf16": bf16,
           "difference": t.effect, "ci95": t.ci, "test": t.name, "equivalent": equivalent}
    atomic_write_bytes(args.out, (json.dumps(out, indent=1) + "\n").encode())
    print(f"bf16 - fp32 mean top-1: {t.effect:+.2f} points, 95 % CI {t.ci[0]:+.2f} to {t.ci[1]:+.2f} ({t.name}; "
          f"{len(bf16)} vs {len(fp32)} seeds); margin +/- {MARGIN}: {'equivalent' if equivalent else 'not shown equivalent'}")


if __name__ == "__main__":
    main()
