"""What a report was built from, per scale: a number means little without its data, hardware and commit."""
from __future__ import annotations

from collections import Counter

from repro.functions import short_name


DATASET_NAMES = {"cifar10_jpeg": "CIFAR-10 (JPEG q75)", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
                 "imagenet": "ImageNet-1k"}  # how results on each dataset are labelled (data README)
FAMILIES = {"deit": "DeiT", "convit": "ConViT", "cmhsa": "CMHSA", "augvit": "Aug-ViT", "vit": "ViT"}
NORMS = {"post_ln": "Post-LN", "res_post_ln": "Res-Post-LN"}  # block norms named beside the family
SHAPE = {"depth": "depth", "embed_dim": "width", "num_heads": "heads", "patch_size": "patch"}  # in a model's label


def data_label(config: dict) -> str:
    """A short name for a run's data: config.data.name / dataset (+ synthetic, image size)."""
    data = config.get("data", config.get("dataset"))
    if isinstance(data, str):
        return data
    if not isinstance(data, dict):
        return "unspecified"
    name = next((str(data[k]) for k in ("name", "dataset", "_name_") if data.get(k)), "unspecified")
    name = DATASET_NAMES.get(name, name)
    extras = [f"{data['img_size']} px"] if data.get("img_size") else []
    if data.get("synthetic"):
        extras.append("synthetic")
    share = fraction(config)
    part = "" if share is None else f"{percent(share)} of "  # a subset is never labelled as the whole set
    return part + name + (f" ({', '.join(extras)})" if extras else "")


def fraction(config: dict) -> float | None:
    """The share of the training set a run used (config.data.fraction), None for all of it."""
    f = as_dict(config.get("data")).get("fraction")
    return float(f) if isinstance(f, (int, float)) and 0 < f < 1 else None


def percent(share: float) -> str:
    return f"{100 * share:.3g} %"


def family(name: str, arch: dict) -> str:
    """The family a model is by what it builds (a DeiT with GPSA layers is a ConViT), its block norm named."""
    stem = name.removeprefix("repro_").split("_")[0]
    out = FAMILIES.get(stem, stem)
    if stem == "deit" and (arch.get("aug_paths") or 0) > 0:
        out = "Aug-ViT"
    elif stem == "deit" and (arch.get("gpsa_layers") or 0) > 0:
        out = "ConViT"
    out += " (conv)" if "conv" in name.split("_") else ""
    return out + (f" ({NORMS[arch['norm']]})" if arch.get("norm") in NORMS else "")


def model_label(rec: dict, models: dict | None = None, params: float | None = None, note: str = "") -> str:
    """'ConViT, depth 6, 9 heads, 0.86M': a model by what was measured (``params``/``note``: counted elsewhere)."""
    config, metrics = as_dict(rec.get("config")), as_dict(rec.get("metrics"))
    name = str(as_dict(config.get("model")).get("name") or "")
    if not name:
        return ""
    arch = {**{k: metrics[k] for k in ("depth",) if isinstance(metrics.get(k), int)},
            **({"num_heads": metrics["heads"]} if isinstance(metrics.get("heads"), int) else {}),
            **_architecture(config, models)}
    parts = [family(name, arch)]
    if isinstance(arch.get("depth"), int):
        parts.append(f"depth {arch['depth']}")
    if isinstance(arch.get("num_heads"), int) and arch["num_heads"] > 0:
        parts.append(f"{arch['num_heads']} head{'s' if arch['num_heads'] != 1 else ''}")
    params = metrics.get("params") if params is None else params
    if isinstance(params, (int, float)):
        parts.append(params_text(params) + (f" ({note})" if note else ""))
    return ", ".join(parts)


def params_text(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n < 9.995e6 else f"{n / 1e6:.3g}M"


def protocol_parts(rec: dict, models: dict | None = None) -> dict:
    """What one run measured on, for a reader comparing it with the paper: data, model, shape, epochs."""
    config = as_dict(rec.get("config"))
    args, model, source = as_dict(config.get("args")), as_dict(config.get("model")), as_dict(config.get("source"))
    if args.get("model") and not model.get("name"):  # a probe on a named model (params, FLOPs, speed)
        return {"model": f"{args['model']}" + (f" at {args['img_size']} px" if args.get("img_size") else "")}
    if not model.get("name"):
        if source:
            return {"model": f"{source.get('table')}/{as_dict(source.get('cell')).get('row')}'s runs"}
        return {"model": short_name(config.get("probe") or "unspecified")}
    arch = _architecture(config, models)
    shape = " ".join(f"{label} {arch[k]}" for k, label in SHAPE.items() if k in arch)
    out = {"data": data_label(config), "model": str(model["name"]), "shape": shape, "label": model_label(rec, models),
           "fraction": fraction(config) or 1.0}
    params = as_dict(rec.get("metrics")).get("params")
    if isinstance(params, (int, float)):
        out["params"] = int(params)
    seen = str(as_dict(as_dict(rec.get("provenance")).get("data")).get("train") or "")
    if seen.startswith("synthetic") and "synthetic" not in out["data"]:  # smoke: a stand-in for missing data
        out["data"] = f"synthetic stand-in for {out['data']}"
    epochs = as_dict(rec.get("metrics")).get("epochs")
    if isinstance(epochs, int):
        out["epochs"] = epochs
    return out


def protocol_label(parts: list[dict]) -> str:
    """Several runs' protocol_parts in one line: 'cifar10_jpeg (32 px); repro_deit_tiny_c32 (...); 2-20 epochs'."""
    def joined(key: str) -> str:
        return ", ".join(sorted({str(p[key]) for p in parts if p.get(key)}))
    out = [joined("data"), joined("model") + (f" ({joined('shape')})" if joined("shape") else "")]
    epochs = sorted({p["epochs"] for p in parts if "epochs" in p})
    if epochs:
        out.append(f"{epochs[0]}" + (f"-{epochs[-1]}" if len(epochs) > 1 else "") + " epochs")
    return "; ".join(x for x in out if x)


def hardware_label(prov: dict) -> str:
    """'NVIDIA H100 80GB HBM3 x8', 'cpu (x86_64, 2 threads)', or 'cpu, then NVIDIA H200 from epoch 6'."""
    trail = device_trail(prov)
    if trail:
        later = [f"{t.get('device')} from epoch {int(t.get('from_epoch') or 0) + 1}" for t in trail[1:]]
        return ", then ".join([str(trail[0].get("device"))] + later)
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
    return [f"{k} ({n} run{'' if n == 1 else 's'})" for k, n in counter.most_common()]


def device_trail(prov: dict) -> list[dict]:
    """The devices of a run resumed elsewhere ({device, from_epoch} each, in order); empty for a run on one."""
    trail = prov.get("devices")
    ok = isinstance(trail, list) and len(trail) > 1 and all(isinstance(t, dict) for t in trail)
    return trail if ok else []


def device_names(prov: dict) -> list[str]:
    """The devices a run trained on, in order (a run moved between devices names each)."""
    return [str(t.get("device")) for t in device_trail(prov)] or [str(prov.get("device") or "unknown device")]


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
        out.append({"scale": scale, "runs": len(recs), "status": dict(status),
                    "data": _counted(Counter(data_label(as_dict(r.get("config"))) for r in recs)),
                    "hardware": _counted(Counter(hardware_label(p) for p in provs)),
                    "devices": sorted({d for p in provs for d in device_names(p)}),
                    "commits": _counted(Counter(commit_label(p) for p in provs)), "versions": _counted(versions),
                    "period": period, "compute_hours": round(sum(wall) / 3600, 2) if wall else None})
    return out


def commits(records: list[dict]) -> list[str]:
    """Distinct commits the records were produced at, most frequent first."""
    return [c for c, _ in Counter(commit_label(as_dict(r.get("provenance"))) for r in records).most_common()]


def _joined(values) -> str:
    """'6' / '12/24' / '48-96': distinct values, slash-joined (a range past three)."""
    vals = sorted({v for v in values if v is not None}, key=lambda v: (not isinstance(v, (int, float)), v))
    return "/".join(map(str, vals)) if len(vals) <= 3 else f"{vals[0]}-{vals[-1]}"


def _architecture(config: dict, models: dict | None) -> dict:
    """The model's constructor arguments from the plans' ``models`` under its kwargs (the report builds none)."""
    model, models = as_dict(config.get("model")), models or {}
    kwargs, name = as_dict(model.get("kwargs")), str(model.get("name"))
    if name not in models and kwargs.get("base") in models:  # a paper's wrapper around a registered model
        name = kwargs["base"]
    return {**models[name], **kwargs} if name in models else kwargs


def _params(records: list[dict]) -> str:
    n = sorted(p for r in records if isinstance(p := as_dict(r.get("metrics")).get("params"), (int, float)))
    if not n:
        return ""
    lo, hi = (f"{x / 1e6:.2g}M" for x in (n[0], n[-1]))
    return f"{lo} params" if lo == hi else f"{lo}-{hi} params"


def _seeds(records: list[dict]) -> str:
    cells = Counter((r.get("table"), json_key(r.get("cell")), r.get("run_id", "").rsplit("-s", 1)[0]) for r in records)
    seeds = _joined(cells.values())
    return f"{seeds} seed{'s' if seeds != '1' else ''}"


def setting(records: list[dict], models: dict | None = None) -> str:
    """One scale's training in words ('depth 6, width 96/108, ...; 10 epochs; CIFAR-10; 3 seeds') or 'probes only'."""
    train = [r for r in records if r.get("kind", "train") == "train" and as_dict(r.get("config")).get("model")]
    if not train:
        return f"probes only (no training); {_seeds(records)}" if records else "probes only (no training)"
    configs = [as_dict(r.get("config")) for r in train]
    arch = [_architecture(c, models) for c in configs]
    shape = ", ".join(f"{label} {_joined(a.get(k) for a in arch)}" for k, label in SHAPE.items()
                      if any(a.get(k) is not None for a in arch))
    params = _params(train)
    recipe = [as_dict(c.get("recipe")) for c in configs]
    epochs = f"{_joined(r.get('epochs') for r in recipe)} epochs"
    if any(as_dict(c.get("data")).get("fraction", 1) < 1 for c in configs) and any(
            r.get("scale_epochs_with_fraction") for r in recipe):
        epochs += " at full data (x 1/f on a fraction f)"
    data = "; ".join(sorted({data_label(c) for c in configs}))
    return "; ".join(x for x in (f"{shape} ({params})" if params else shape, epochs, data, _seeds(train)) if x)


def json_key(x) -> str:
    return repr(sorted(x.items())) if isinstance(x, dict) else repr(x)
