"""What the scheduler says while it works: a run's outcome, the runs to go and their ETA, the line that
names the runs that failed, and the summary a stopped ``jobs=N`` command ends with."""
from __future__ import annotations

from .. import records
from ..runs import RunSpec
from ..train import preempt
from ..train.execute import DONE, record_status


def describe(rec: dict) -> str:
    """'finished, top1 71.20, top5 90.10, 12.3s, 850 img/s' from a record."""
    m, p = rec["metrics"], rec["provenance"]
    parts = [rec["status"], *([f"at step {m.get('diverged_step')}"] if rec["status"] == "diverged" else [])]
    parts += [f"{k} {m[k]:.2f}" for k in ("top1", "top5") if isinstance(m.get(k), (int, float))]
    parts += [form.format(p[k]) for k, form in (("wall_s", "{:.1f}s"), ("images_per_s", "{:.0f} img/s"))
              if isinstance(p.get(k), (int, float))]
    return ", ".join(parts)


def failures_line(failed: list[RunSpec]) -> str:
    """'2 run(s) failed: <id> (<its error>), <id>; ...' from their failed records."""
    path = records.record_path(failed[0].paper, failed[0].scale, failed[0].run_id)
    error = records.read_record(path)["metrics"].get("error", "") if path.exists() else ""
    ids = ", ".join(s.run_id for s in failed[1:4]) + (", ..." if len(failed) > 4 else "")
    return (f"{len(failed)} run(s) failed: {failed[0].run_id} ({error}){', ' + ids if ids else ''}; their records "
            f"keep the tracebacks; run the same command again to retry them")


def eta(took: list[float], left: int) -> str:
    """'run k of n to go, ETA ...' from the runs this command finished (their mean wall time)."""
    if not took:
        return f"{left} run(s) to go"
    mean = sum(took) / len(took)
    return f"{left} run(s) to go, ETA {duration(mean * left)} (mean {duration(mean)} per run so far)"


def duration(seconds: float) -> str:
    """'1h05m', '3m07s' or '42s'."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def stopped_runs(specs: list[RunSpec]) -> str:
    """The one line a stopped ``jobs=N`` command ends with: which runs finished, which stopped, which never began."""
    status = {s.run_id: record_status(s) for s in specs}
    stopped = [run for run, st in status.items() if st == "partial"]
    finished = sum(st in DONE for st in status.values())
    names = ", ".join(stopped[:3]) + (", ..." if len(stopped) > 3 else "")
    return (f"{preempt.cause()}: of {len(specs)} run(s), {finished} finished, {len(stopped)} stopped and "
            f"checkpointed{f' ({names})' if names else ''}, {len(specs) - finished - len(stopped)} not started; "
            f"run the same command again to resume")


def prefixed(say, prefix: str):
    """``say`` with every line starting with ``prefix`` (a shard's lines, among its siblings')."""
    def out(msg, **kw):
        say(f"{prefix} {msg}", **kw)
    return out
