"""Checkpoints parked beside the records, so that a campaign longer than one machine's life goes on on the next.

``python -m repro park paper=.. scale=..`` copies what the plan's unfinished runs need out of the cache into
``results/<paper>/<scale>/parked/<run_id>.pt``: each one's own last checkpoint and the final model of each
finished run one of them starts from. Committed with the records, they travel with the repository; on a machine
whose cache lacks one, the run stage copies it back before the run resumes (its fingerprint checked as any
checkpoint's). A run that ends removes its own; ``park`` removes those nothing needs any more."""
from __future__ import annotations

import shutil
from pathlib import Path

from .. import records
from ..errors import ConfigError
from ..runs import RunSpec, final_checkpoint
from ..train import checkpoint
from ..train.execute import DONE, record_status

# Cpu-scale models park a few MB; a larger checkpoint belongs on a shared disk (REPRO_CACHE_DIR), not in git.
MAX_MB = 64


def parked_path(spec: RunSpec) -> Path:
    return records.results_root() / spec.paper / spec.scale / "parked" / f"{spec.run_id}.pt"


def _copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        records.atomic_write(dst, lambda out: shutil.copyfileobj(f, out))


def restore(spec: RunSpec) -> bool:
    """Copy ``spec``'s parked checkpoint into its run folder where the cache has none; whether it did."""
    src, dst = parked_path(spec), final_checkpoint(spec)
    if dst.exists() or not src.exists():
        return False
    try:
        checkpoint.load(src, spec.fingerprint)
    except checkpoint.CheckpointError as e:  # its advice would delete the whole parked folder
        why = str(e).split(": ", 1)[-1].split(";")[0]
        raise checkpoint.CheckpointError(f"parked {src} cannot resume {spec.run_id} ({why}): git rm that file to "
                                         f"train the run afresh") from None
    _copy(src, dst)
    return True


def release(spec: RunSpec) -> None:
    """A run that ended needs its parked checkpoint no more (a run starting from it gets it parked by ``park``)."""
    parked_path(spec).unlink(missing_ok=True)


def _unfinished(specs: list[RunSpec]) -> list[RunSpec]:
    return [s for s in specs if record_status(s) not in DONE]


def needs(specs: list[RunSpec], deps: dict[str, RunSpec]) -> dict[str, RunSpec]:
    """Run id -> spec of each checkpoint the unfinished runs among ``specs`` need: their own, their sources'."""
    return {r.run_id: r for s in _unfinished(specs) for r in (s, deps.get(s.run_id)) if r is not None}


def park(specs: list[RunSpec], deps: dict[str, RunSpec], say) -> int:
    """Park what the unfinished runs among ``specs`` need and the cache holds; drop the parked files of these runs
    that nothing needs any more (a file of a run outside them is left alone, named). Exit code 0."""
    wanted = needs(specs, deps)
    keep = {i: r for i, r in wanted.items() if final_checkpoint(r).exists()}
    for r in keep.values():
        size_mb = final_checkpoint(r).stat().st_size / 2**20
        if size_mb > MAX_MB:
            raise ConfigError(f"{final_checkpoint(r)} is {size_mb:.0f} MB, over the {MAX_MB} MB a parked checkpoint "
                              f"may have: keep REPRO_CACHE_DIR on a disk the next machine mounts instead")
    ours = {parked_path(r).name: r for s in specs for r in (s, deps.get(s.run_id)) if r is not None}
    for folder in sorted({parked_path(r).parent for r in ours.values()}):
        for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
            if path.name not in ours:
                say(f"left {path.name}: not a run of this command's plan")
            elif ours[path.name].run_id not in wanted:
                path.unlink()
                say(f"unparked {path.name} (nothing unfinished needs it)")
    for run_id, r in keep.items():
        _copy(final_checkpoint(r), parked_path(r))
        state = "final model" if record_status(r) in DONE else "checkpoint"
        say(f"parked {run_id} ({state}, {final_checkpoint(r).stat().st_size / 2**20:.1f} MB)")
    if not keep:
        say("nothing to park: no unfinished run of the plan has a checkpoint in the cache")
    return 0
