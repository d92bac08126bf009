"""Checkpoints that make a stopped run resume exactly from its last save: the first epoch end
``runtime.checkpoint_every_s`` after the previous save, or the point where SIGTERM stopped it.

One file per run (``<run dir>/last.pt``, replaced atomically, loaded ``weights_only``) with everything a resume
needs, RNG states included. The last epoch is always saved, so a finished run's ``last.pt`` is its final model
(what a later run starts from, or a pointer probes). A checkpoint of another config fingerprint is refused,
never ignored or overwritten: resuming from it would mix two experiments."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from ..records import atomic_write


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used for this run (other config, other model code, unreadable)."""


def rng_state() -> dict:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(_as_tuple(state["python"]))
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(x):
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


def save(path: Path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically: a reader (or a resumed run) sees old or new, never half."""
    atomic_write(path, lambda f: torch.save(state, f))


def load(path: Path, fingerprint: str) -> dict | None:
    """The checkpoint at ``path`` if there is one; CheckpointError if it is not this run's."""
    path = Path(path)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a kill during save
        stale.unlink(missing_ok=True)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or foreign file
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}); delete it to restart "
                              f"the run from scratch") from None
    if state.get("fingerprint") != fingerprint:
        raise CheckpointError(f"{path}: checkpoint was written for config {state.get('fingerprint')}, this run's "
                              f"config is {fingerprint}; delete {path.parent} to train this config afresh")
    return state


def for_record(state: dict | None, record: str, epochs: int, max_steps: int, path: Path
               ) -> tuple[dict | None, dict | None]:
    """The checkpoint a run writing ``record`` may resume, and the reuse its record names (``resumed_from``): another
    results folder's final checkpoint is not reused, so a fresh folder measures again; a partial one is resumed."""
    if state is None:
        return None, None
    final = state["epoch"] >= epochs or bool(max_steps and state["step"] >= max_steps)
    mine = state.get("record") == record
    if mine and not final:
        return state, None
    if final and not mine:
        return None, None
    return state, {"checkpoint": str(path), "record": state.get("record"), "epoch": state["epoch"],
                   "step": state["step"]}


def restore_module(module: torch.nn.Module, weights: dict, path: Path) -> None:
    """load_state_dict with a one-line error when the model code changed under the checkpoint."""
    try:
        module.load_state_dict(weights)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: checkpoint does not fit the model ({first}); the model code "
                              f"changed since it was written: delete {Path(path).parent} to restart") from None
