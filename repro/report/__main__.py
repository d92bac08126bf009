"""`python -m repro.report [--paper ID ...] [--allow-invalid]`: rebuild reports from records only, then
results/index.html, then the READMEs' generated results blocks. An invalid record (unreadable, a copy or out
of its folder, no run of its scale's plan, or naming no cell of the paper) is one line on stderr and stops the
build (exit 2, nothing written) unless --allow-invalid builds the reports without it. A scale with records and
no plan.json, or a plan edited since python -m repro.plan wrote it, is one line and exit 2."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from repro.errors import ConfigError
from repro.records import results_root
from repro.report.build import UnknownPaper, build_all, invalid_records
from repro.report.readme import MissingMarkers, write_readmes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.report", description=__doc__)
    ap.add_argument("--paper", action="append", help="paper id (repeatable); default: every papers/*/paper.yaml")
    ap.add_argument("--papers-dir", type=Path, default=Path("papers"))
    ap.add_argument("--results-dir", type=Path, default=None, help="default: $REPRO_RESULTS_DIR or ./results")
    ap.add_argument("--notebook", choices=("auto", "kernel", "inline", "none"), default="none",
                    help="also build the exploration notebook, executed this way (auto: a Jupyter kernel when "
                         "installed); default none: it takes minutes and is never committed")
    ap.add_argument("--allow-invalid", action="store_true",
                    help="build the reports without the invalid records (each still named on stderr)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    try:
        results = args.results_dir or results_root()
        invalid = invalid_records(args.papers_dir, results, args.paper)
        for line in invalid:
            print(f"skipped: {line}" if args.allow_invalid else
                  f"error: {line}; to build the reports without it: --allow-invalid", file=sys.stderr)
        if invalid and not args.allow_invalid:
            return 2
        written, errors = build_all(args.papers_dir, results, args.paper,
                                    None if args.notebook == "none" else args.notebook)
        readmes = write_readmes(args.papers_dir, results, args.paper)  # README results blocks, from summary.json
    except (UnknownPaper, MissingMarkers, ConfigError) as e:  # ConfigError: an untrusted plan, REPRO_RESULTS_DIR=
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a read-only results folder, a full disk: the records are only read, never touched
        print(f"error: cannot write the reports to {results} ({e.strerror or e}: {e.filename or results}); fix its "
              f"permissions or free space, then run the same command again", file=sys.stderr)
        return 2
    for pid, err in errors.items():
        print(f"error: {pid}: {err}", file=sys.stderr)
    reports = [p for p in written if p.name == "report.html"]
    print(f"wrote {len(reports)} report(s) and {written[-1]} in {time.perf_counter() - start:.1f}s")
    for p in reports + readmes:
        print(f"  {p}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
