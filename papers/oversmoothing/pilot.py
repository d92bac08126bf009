"""The held-out pilot: does an affordable 24-layer baseline over-smooth at cpu? (Figure 2's precondition)

    python -m repro.data.holdout <data>/cifar10-jpeg <pilot dir> --per-class 500
    REPRO_DATA_DIR=<data> REPRO_RESULTS_DIR=<out> python -m papers.oversmoothing.pilot <pilot dir> [override ...]
    REPRO_RESULTS_DIR=<out> python -m papers.oversmoothing.pilot <pilot dir> --judge   # read <out>, train nothing

A candidate is Figure 2's DeiT-24 at cpu (width 48, 3 heads, patch 4, drop path 0.1, fp32) with its overrides,
trained with one seed on the held-out split's 45,000 images and measured on its 5,000 (the test set is never
read), together with the same model's random-init probe run. Candidates run in ``CANDIDATES`` order until one
meets the rule (``Reading.meets``, README "Regime"); the later ones are not run. Extra overrides (e.g.
``smoke=true``) go to every command. The pilot asks what the campaign's precondition reads, ``cossim_last``;
the poster's image set (``cossim_train_last``, probes.py) is printed beside it.
"""
from __future__ import annotations

import argparse
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from repro.plan.build import compose, for_command
from repro.records import read_record, record_path, results_root
from repro.run.specs import select
from repro.runs import RunSpec

PAPER, SCALE = "oversmoothing", "cpu"
RUNS = ("figure2-random_init", "figure2-deit-deit24-s0")  # the 24-layer DeiT at init and trained, seed 0
FLOOR, SMOOTH = 60.0, 0.5  # top-1 and CosSim levels of pre_deit24_learns and pre_deit24_oversmooths
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Candidate:
    name: str
    overrides: tuple[str, ...]
    core_hours: float  # predicted: the plain DeiT-24 pilot's 0.81 h per 10 epochs x talking heads' 2.0x step


TALKING_HEADS = "+model.kwargs.attn=talking_heads"
CANDIDATES = (
    Candidate("talking_heads", (TALKING_HEADS,), 1.6),
    Candidate("talking_heads_e20", (TALKING_HEADS, "recipe.epochs=20"), 3.3),
)


@dataclass(frozen=True)
class Reading:
    """A candidate's records: held-out top-1 and last-block CosSim, trained and at init (None: not measured)."""
    candidate: str
    top1: float
    cossim_last: float
    cossim_init: float
    cossim_train_last: float | None = None
    cossim_train_init: float | None = None

    def meets(self) -> bool:
        """Over-smooths, as a product of training, in a baseline that learns."""
        return self.top1 > FLOOR and self.cossim_last > SMOOTH and self.cossim_last > self.cossim_init


def command(candidate: Candidate, pilot: Path, extra=()) -> list[str]:
    """The ``python -m repro reproduce`` overrides that train and probe ``candidate`` on the held-out split."""
    return [f"paper={PAPER}", f"scale={SCALE}", "tables=[figure2]", "seeds=1", f"runs=[{','.join(RUNS)}]",
            "data=folder", f"data.path={Path(pilot).resolve()}", "data.num_classes=10", "data.pipeline=tensor",
            "report=false", *candidate.overrides, *extra]


def specs(candidate: Candidate, pilot: Path, extra=()) -> dict[str, RunSpec]:
    """{'init': the probe run, 'trained': the training run} of the candidate's command, resolved as it resolves them."""
    args = command(candidate, pilot, extra)[2:]
    c = compose(PAPER, SCALE, args)
    runs = select(c, for_command(c, args))
    return {"init" if s.kind == "probe" else "trained": s for s in runs}


def read(candidate: Candidate, pilot: Path, extra=(), root: Path | None = None) -> Reading | None:
    """The candidate's reading from its two records under ``root`` (REPRO_RESULTS_DIR), None while one is missing."""
    paths = {k: record_path(PAPER, s.scale, s.run_id, root) for k, s in specs(candidate, pilot, extra).items()}
    if not all(p.exists() for p in paths.values()):
        return None
    init, trained = (read_record(paths[k])["metrics"] for k in ("init", "trained"))
    return Reading(candidate.name, trained.get("top1", math.nan), trained.get("cossim_last", math.nan),
                   init["cossim_last"], trained.get("cossim_train_last"), init.get("cossim_train_last"))


def decide(readings: list[Reading | None]) -> tuple[str, str | None]:
    """('taken', name) for the first candidate in order that meets the rule, ('next', name) for the candidate to
    run when none read so far does, ('none', None) when every candidate was read and none does."""
    for cand, reading in zip(CANDIDATES, readings):
        if reading is None:
            return "next", cand.name
        if reading.meets():
            return "taken", cand.name
    return "none", None


def describe(readings: list[Reading | None], verdict: tuple[str, str | None]) -> str:
    """One line per candidate read (top-1; CosSim init -> trained, ours and on the poster's images), then the verdict."""
    def num(x):
        return "-" if x is None else f"{x:.3f}"
    lines = [f"{r.candidate}: top-1 {r.top1:.2f}; CosSim {num(r.cossim_init)} -> {num(r.cossim_last)} (held-out probe "
             f"batch), {num(r.cossim_train_init)} -> {num(r.cossim_train_last)} (training images); "
             f"{'meets' if r.meets() else 'does not meet'} the rule" for r in readings if r is not None]
    status, name = verdict
    lines.append({"taken": f"taken: {name} (Figure 2 at cpu in its setting, 3 seeds)",
                  "next": f"next: {name}",
                  "none": "none over-smooths: Figure 2's claims stay outside the regime at cpu"}[status])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pilot", type=Path, help="the held-out split (python -m repro.data.holdout)")
    ap.add_argument("--judge", action="store_true", help="read the records only; train nothing")
    ap.add_argument("overrides", nargs="*", help="extra overrides for every command, e.g. smoke=true")
    args = ap.parse_intermixed_args(argv)
    if not args.judge and results_root().resolve() == (REPO / "results").resolve():
        print("error: set REPRO_RESULTS_DIR to a folder of the pilot's own (not the repository's results/)",
              file=sys.stderr)
        return 2
    tried = set()
    while True:
        readings = [read(c, args.pilot, args.overrides) for c in CANDIDATES]
        verdict = decide(readings)
        if args.judge or verdict[0] != "next":
            break
        if verdict[1] in tried:
            print(f"error: {verdict[1]} ran but left no records; see its output above", file=sys.stderr)
            return 1
        tried.add(verdict[1])
        (cand,) = [c for c in CANDIDATES if c.name == verdict[1]]
        code = subprocess.call([sys.executable, "-m", "repro", "reproduce", *command(cand, args.pilot, args.overrides)],
                               cwd=REPO)
        if code:
            return code
    print(describe(readings, verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
