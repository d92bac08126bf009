"""What a report was built from, per scale: data, hardware, commit, versions (read from the records).

Why: a number means little without the scale, data and machine it was measured at, so every report
opens with this. Only the records' own ``config`` and ``provenance`` fields are read.
"""
from __future__ import annotations

from collections import Counter


def data_label(config: dict) -> str:
    """A short name for a run's data: config.data.name / dataset (+ synthetic, image size)."""
    data = config.get("data", config.get("dataset"))
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        return "unspecified"
    name = next((str(data[k]) for k in ("name", "dataset", "_name_") if data.get(k)), "unspecified")
    extras = [f"{data['img_size']} px"] if data.get("img_size") else []
    if data.get("synthetic"):
        extras.append("synthetic")
    return name + (f" ({', '.join(extras)})" if extras else "")


def hardware_label(prov: dict) -> str:
    """Device and world size, e.g. 'NVIDIA H100 80GB HBM3 x8' or 'cpu (x86_64, 2 threads)'."""
    dev = str(prov.get("device") or "unknown device")
    if dev == "cpu":
        extra = [str(prov["cpu"])] if prov.get("cpu") else []
        if prov.get("cpu_threads"):
            n = prov["cpu_threads"]
            extra.append(f"{n} thread{'s' if n != 1 else ''}")
        dev = "cpu" + (f" ({', '.join(extra)})" if extra else "")
    ws = prov.get("world_size") or 1
    return dev + (f" x{ws}" if ws and ws > 1 else "")


def commit_label(prov: dict) -> str:
    sha = str(prov.get("git_sha") or "unknown")
    return sha[:12] + ("-dirty" if prov.get("git_dirty") else "")


def _counted(counter: Counter) -> list[str]:
    """'value (n runs)' sorted by frequency; a single value is shown bare."""
    if len(counter) == 1:
        return [next(iter(counter))]
    return [f"{k} ({n} runs)" for k, n in counter.most_common()]


def as_dict(x) -> dict:
    return x if isinstance(x, dict) else {}


def describe(records: list[dict], scales: list[str]) -> list[dict]:
    """Per scale: number of runs and their statuses, data, hardware, commits, versions, time span."""
    out = []
    for scale in scales:
        recs = [r for r in records if r.get("scale") == scale]
        provs = [as_dict(r.get("provenance")) for r in recs]
        status = Counter(r.get("status") for r in recs)
        versions = Counter(", ".join(f"{k} {p[k]}" for k in ("torch", "timm", "cuda") if p.get(k)) or "unknown"
                           for p in provs)
        starts = sorted(str(p["start_time"]) for p in provs if p.get("start_time"))
        period = "unknown" if not starts else starts[0] if starts[0] == starts[-1] else f"{starts[0]} .. {starts[-1]}"
        wall = [float(p[k]) for p in provs for k in ("wall_s", "wall_seconds") if isinstance(p.get(k), (int, float))]
        out.append({
            "scale": scale,
            "runs": len(recs),
            "status": dict(status),
            "data": _counted(Counter(data_label(as_dict(r.get("config"))) for r in recs)),
            "hardware": _counted(Counter(hardware_label(p) for p in provs)),
            "commits": _counted(Counter(commit_label(p) for p in provs)),
            "versions": _counted(versions),
            "period": period,
            "compute_hours": round(sum(wall) / 3600, 2) if wall else None,
        })
    return out


def commits(records: list[dict]) -> list[str]:
    """Distinct commits the records were produced at, most frequent first."""
    return [c for c, _ in Counter(commit_label(as_dict(r.get("provenance"))) for r in records).most_common()]
