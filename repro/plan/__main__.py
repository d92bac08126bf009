"""`python -m repro.plan [--paper ID ...] [--scale S ...]`: write results/<id>/<scale>/plan.json again with the
overrides it was made with (a campaign's ``data=cifar10_jpeg``; none: the default config); without --scale,
every scale of the paper that has records or a plan."""
from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from ..records import results_root
from .build import planned
from .experiments import known_papers, paper_scales
from .store import FILE, plan_path, read_plan, write_plan


def _scales(paper: str) -> list[str]:
    folder = results_root() / paper
    return [s for s in paper_scales(paper) if (folder / s / "records").is_dir() or (folder / s / FILE).is_file()]


def _old_plan(paper: str, scale: str) -> dict | None:
    """The plan to rebuild, for the overrides it was made with: an edited one too (rebuilding is its fix); one
    that cannot be read at all names none, so it has to go first."""
    try:
        return read_plan(paper, scale, verify=False)
    except ConfigError:
        path = plan_path(paper, scale)
        raise ConfigError(f"{path} cannot be read, so the overrides it was made with are unknown: delete it, then "
                          f"python -m repro.plan --paper {paper} --scale {scale} writes the default config's plan "
                          f"(or run the campaign's own reproduce command again)") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m repro.plan", description=__doc__)
    ap.add_argument("--paper", action="append", help="paper id (repeatable); default: every paper")
    ap.add_argument("--scale", action="append", help="scale (repeatable); default: those with records or a plan")
    args = ap.parse_args(argv)
    try:
        for paper in args.paper or known_papers():
            for scale in args.scale or _scales(paper):
                old = _old_plan(paper, scale)
                doc = planned(paper, scale, (old or {}).get("overrides", ()))
                print(f"{write_plan(doc)}: {len(doc['runs'])} runs, {len(doc['cells'])} cells, "
                      f"{len(doc['resolves'])} claims to resolve")
    except ConfigError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
