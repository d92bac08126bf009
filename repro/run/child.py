"""One group of a ``jobs=N`` command's runs in a process of its own (parallel.py starts it), from the parent's
composed config and plan: ``python -m repro.run.child <config.json> <plan.json> <group> <index> <digest>``."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..train.execute import record_status
from .outcome import outcome
from .reproduce import in_this_process, plan_written
from .specs import select


def run_group(c: dict, plan: Path, group: int, digest: str) -> int:
    """The plan's runs of ``group`` among those the command means, in order here (the plan still its parent's)."""
    doc = plan_written(plan, digest)
    specs = select(c, doc, group)
    return in_this_process(c, specs, {s.run_id: record_status(s) for s in specs}, doc)


def main(argv: list[str] | None = None) -> int:
    config, plan, group, index, digest = sys.argv[1:] if argv is None else argv
    c = {**json.loads(Path(config).read_text()), "shard": int(index)}  # "shard i/N" on its lines
    return outcome(lambda: run_group(c, Path(plan), int(group), digest))[0]


if __name__ == "__main__":
    sys.exit(main())
