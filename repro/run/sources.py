"""What a run reads of the runs it depends on (plan.json's ``depends_on``: ``init`` and a pointer's ``source``),
loaded before it runs by one loader, so neither the engine nor a probe reads another run: the source's finished
record and the final weights of its ``last.pt``. Sources run first, so an unusable one is one line saying what to do."""
from __future__ import annotations

from .. import records
from ..runs import RunSpec, Source, final_checkpoint
from ..train import checkpoint


class InitError(RuntimeError):
    """A source run whose final model cannot be used (not run, not finished, checkpoint gone)."""


def load(source: RunSpec | None, resuming: bool = False) -> Source | None:
    """The run a run depends on (``specs.sources_of``; None: nothing), as the engine (``init``) or its probe
    function (``source``) receives it; ``resuming``: a start-from run resumes its own checkpoint, so needs no weights."""
    if source is None:
        return None
    trained = source.kind == "train" and not resuming  # a probe run has no model; a resumed run holds its own
    return Source(source, _record(source), _weights(source) if trained else None)


def _run_first(source: RunSpec) -> str:
    scale = source.scale.removesuffix("-smoke")
    smoke = " smoke=true" if scale != source.scale else ""
    return f"python -m repro reproduce paper={source.paper} scale={scale} tables={source.table}{smoke}"


def _record(source: RunSpec) -> dict:
    rec_path = records.record_path(source.paper, source.scale, source.run_id)
    if not rec_path.exists():
        raise InitError(f"source run {source.run_id} has not run yet: run `{_run_first(source)}` first")
    rec = records.read_record(rec_path)
    if rec["status"] != "finished":
        raise InitError(f"source run {source.run_id} is {rec['status']}, so it has no final model; see {rec_path}")
    return rec


def _weights(source: RunSpec) -> dict:
    state = checkpoint.load(final_checkpoint(source), source.fingerprint)
    if state is None:
        rec_path = records.record_path(source.paper, source.scale, source.run_id)
        raise InitError(f"source run {source.run_id} is finished but its final model {final_checkpoint(source)} is "
                        f"gone (cache cleared?): delete {rec_path} and run `{_run_first(source)}` to retrain it")
    return state["model"]
