"""`python -m repro.report [--paper ID ...]`: rebuild reports from records only, then results/index.html."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from repro.records import results_root
from repro.report.build import UnknownPaper, build_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.report", description=__doc__)
    ap.add_argument("--paper", action="append", help="paper id (repeatable); default: every papers/*/paper.yaml")
    ap.add_argument("--papers-dir", type=Path, default=Path("papers"))
    ap.add_argument("--results-dir", type=Path, default=None, help="default: $REPRO_RESULTS_DIR or ./results")
    ap.add_argument("--notebook", choices=("auto", "kernel", "inline", "none"), default="auto",
                    help="how to execute the exploration notebook (auto: a Jupyter kernel when installed)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    try:
        written, errors = build_all(args.papers_dir, args.results_dir or results_root(), args.paper,
                                    None if args.notebook == "none" else args.notebook)
    except UnknownPaper as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for pid, err in errors.items():
        print(f"error: {pid}: {err}", file=sys.stderr)
    reports = [p for p in written if p.name == "report.html"]
    print(f"wrote {len(reports)} report(s) and {written[-1]} in {time.perf_counter() - start:.1f}s")
    for p in reports:
        print(f"  {p}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
