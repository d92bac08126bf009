"""Checkpoints parked beside the records, so that a campaign longer than one machine's life goes on on the next.

``python -m repro park <a reproduce command's arguments>`` copies what the unfinished runs of that command's plan
need out of the cache into ``results/<paper>/<scale>/parked/<run_id>.pt``: each one's own last checkpoint and the
final model of each finished run one of them starts from. They are committed with the records: a machine can be
replaced between sessions with nothing but the repository carried over, and a cpu-scale checkpoint is a few MB.
Before the runs start, the run stage copies a parked checkpoint into the cache where the cache has none or an older
one (checked before anything is written: another config's is bad input). The record of a run resumed so names the
checkpoint and its step (``resumed_from``). A run that ends removes its own parked file; ``park`` removes those
nothing unfinished needs."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from .. import records
from ..errors import ConfigError
from ..runs import RunSpec, final_checkpoint
from ..train.checkpoint import CheckpointError
from ..train.execute import DONE, record_status

MAX_MB = 64  # a file git carries; larger runs keep REPRO_CACHE_DIR itself on a disk the next machine mounts


def parked_path(spec: RunSpec) -> Path:
    """Where ``spec``'s checkpoint is parked: beside its paper's records at its scale."""
    return records.results_root() / spec.paper / spec.scale / "parked" / f"{spec.run_id}.pt"


def _step(path: Path, spec: RunSpec, fix: str = "git rm it") -> int:
    """The step ``path`` was saved at; a file that is not ``spec``'s checkpoint is bad input saying ``fix``."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, a Git LFS pointer, another format
        raise CheckpointError(f"{path} is unreadable ({type(e).__name__}): {fix} to train {spec.run_id} "
                              f"afresh") from None
    if state.get("fingerprint") != spec.fingerprint:
        raise CheckpointError(f"{path} was written for config {state.get('fingerprint')}, not {spec.run_id}'s "
                              f"{spec.fingerprint}: {fix} to train the run afresh")
    return int(state["step"])


def _copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        records.atomic_write(dst, lambda out: shutil.copyfileobj(f, out))


def check(specs: list[RunSpec]) -> None:
    """Each parked checkpoint of ``specs`` (the runs a command will train, and their sources) is theirs."""
    for s in specs:
        if parked_path(s).exists():
            _step(parked_path(s), s)


def restore(specs: list[RunSpec]) -> None:
    """Copy each parked checkpoint of ``specs`` into the cache where the cache has none or an older one."""
    for s in specs:
        src, dst = parked_path(s), final_checkpoint(s)
        if src.exists() and (not dst.exists() or _step(src, s) > _step(dst, s, f"delete {dst.parent}")):
            _copy(src, dst)


def release(spec: RunSpec) -> None:
    """A run that ended needs its parked checkpoint no more (a run starting from it gets it parked by ``park``)."""
    parked_path(spec).unlink(missing_ok=True)


def needs(specs: list[RunSpec], deps: dict[str, RunSpec]) -> dict[str, RunSpec]:
    """Run id -> spec of each checkpoint the unfinished runs among ``specs`` need: their own, and their source's
    final model where they have none of their own (a resumed run holds its trained weights)."""
    out = {}
    for s in specs:
        if record_status(s) in DONE:
            continue
        own = final_checkpoint(s).exists() or parked_path(s).exists()
        out.update({r.run_id: r for r in (s, None if own else deps.get(s.run_id)) if r is not None})
    return out


def park(specs: list[RunSpec], deps: dict[str, RunSpec], say) -> int:
    """Park what the unfinished runs of a whole plan (``specs``) need and the cache holds, unless the parked copy is
    further on; drop the parked files of the plan's runs that nothing needs (another plan's are left, named)."""
    wanted = needs(specs, deps)
    keep = {i: r for i, r in wanted.items() if final_checkpoint(r).exists()}
    for r in keep.values():
        if (size_mb := final_checkpoint(r).stat().st_size / 2**20) > MAX_MB:
            raise ConfigError(f"{final_checkpoint(r)} is {size_mb:.0f} MB, over the {MAX_MB} MB a parked checkpoint "
                              f"may have: keep REPRO_CACHE_DIR on a disk the next machine mounts instead")
    ours = {parked_path(s).name: s for s in specs}
    for folder in sorted({parked_path(s).parent for s in specs}):
        for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
            if path.name not in ours:
                say(f"left {path.name}: not a run of this command's plan (another command's arguments?)")
            elif ours[path.name].run_id not in wanted:
                path.unlink()
                say(f"unparked {path.name} (nothing unfinished needs it)")
    for run_id, r in keep.items():
        cached, parked = _step(final_checkpoint(r), r, f"delete {final_checkpoint(r).parent}"), parked_path(r)
        if parked.exists() and _step(parked, r) > cached:
            say(f"kept parked {run_id} (step {_step(parked, r)}, further than the cache's {cached})")
            continue
        _copy(final_checkpoint(r), parked)
        state = "final model" if record_status(r) in DONE else "checkpoint"
        say(f"parked {run_id} ({state} at step {cached}, {parked.stat().st_size / 2**20:.1f} MB)")
    if not keep:
        say("nothing to park: no unfinished run of the plan has a checkpoint in the cache")
    return 0
