"""A number's setting per run, and a row's at its scale: an effect is quoted from its comparison's own runs."""
from __future__ import annotations

import json

from repro.report.provenance import (DATASET_NAMES, _architecture, _joined, as_dict, device_names, family, fraction,
                                      model_label, params_text, percent)
from repro.paper import Table

NOT_SHAPE = ("num_classes", "drop_rate", "drop_path_rate", "attn_drop_rate", "proj_drop_rate")  # no weight count


def state(rec: dict) -> str:
    """'trained' (a training run, or a probe of one's checkpoint) or 'at init' (a probe of a fresh model)."""
    return "trained" if rec.get("kind", "train") == "train" or as_dict(rec.get("config")).get("source") else "at init"


def image_size(config: dict) -> int | None:
    """The size the model saw: its own img_size, a probe's, else the data's (how create_model resolves it)."""
    for part in (as_dict(as_dict(config.get("model")).get("kwargs")), as_dict(config.get("probe_args")),
                 as_dict(config.get("args")), as_dict(config.get("data"))):
        if isinstance(part.get("img_size"), int):
            return part["img_size"]
    return None


def classes(config: dict) -> int | None:
    kwargs, data = as_dict(as_dict(config.get("model")).get("kwargs")), as_dict(config.get("data"))
    n = kwargs.get("num_classes", data.get("num_classes"))
    return n if isinstance(n, int) else None


def _shape_key(config: dict, models: dict) -> str:
    """The registered name and the constructor arguments that set a weight count (the class head apart)."""
    arch = {k: v for k, v in _architecture(config, models).items() if k not in NOT_SHAPE}
    name = str(as_dict(config.get("model")).get("name") or "")
    return json.dumps([name, {**arch, "img_size": image_size(config)}], sort_keys=True, default=str)


def counted_params(records: list[dict], models: dict | None = None) -> dict[str, tuple[int, int | None]]:
    """Architecture -> (parameters, classes in the head they were counted with), from every record counting them."""
    out = {}
    for rec in records:
        config, n = as_dict(rec.get("config")), as_dict(rec.get("metrics")).get("params")
        if as_dict(config.get("model")).get("name") and isinstance(n, (int, float)):
            out.setdefault(_shape_key(config, models or {}), (int(n), classes(config)))
    return out


def device(prov: dict) -> str:
    """'cpu' or the accelerator's name; a run resumed elsewhere names each device in turn."""
    return " then ".join(dict.fromkeys(device_names(prov)))


def run_setting(rec: dict, models: dict | None = None, counted: dict | None = None) -> dict:
    """One run's setting as data (image size, state, model family and size, data share, epochs, device)."""
    config, metrics, models = as_dict(rec.get("config")), as_dict(rec.get("metrics")), models or {}
    params, head = metrics.get("params"), ""
    if not isinstance(params, (int, float)) and as_dict(config.get("model")).get("name"):
        params, counted_with = (counted or {}).get(_shape_key(config, models), (None, None))
        head = f"{counted_with}-class head" if params is not None and counted_with != classes(config) else ""
    size, trained = image_size(config), state(rec)
    data = as_dict(config.get("data"))
    name = next((str(data[k]) for k in ("name", "dataset") if data.get(k)), "")
    model = str(as_dict(config.get("model")).get("name") or "")
    return {"img_size": size, "state": trained, "family": family(model, _architecture(config, models)) if model else "",
            "label": model_label(rec, models, params, head), "params": int(params) if params is not None else None,
            "fraction": fraction(config) or 1.0, "dataset": DATASET_NAMES.get(name, name),
            "epochs": metrics.get("epochs") if trained == "trained" and isinstance(metrics.get("epochs"), int) else None,
            "device": device(as_dict(rec.get("provenance")))}


def joined(runs: list[dict]) -> dict:
    """Several runs' settings in one: each fact's distinct values, 'pooled' devices, ``text`` and ``short`` lines."""
    def values(key: str) -> list:
        return sorted({r[key] for r in runs if r.get(key) is not None}, key=str)
    sizes, states, devices = values("img_size"), values("state"), values("device")
    share = _joined(percent(f) if f < 1 else "all" for f in values("fraction"))
    data = "; ".join(values("dataset"))
    epochs = _joined(values("epochs"))
    paired = _paired(runs)
    if paired:  # fractions and epochs vary together (epochs x 1/f): never "10 %/all ... 10/100 epochs"
        share, epochs = "", paired
    out = {"img_size": sizes, "state": states, "models": values("label"), "families": values("family"),
           "params": values("params"), "fraction": values("fraction"), "epochs": epochs, "devices": devices,
           "pooled": len(devices) > 1,
           "data": f"{share} of {data}" if data and share else data}
    parts = ["/".join(f"{s} px" for s in sizes), " + ".join(states), *out["models"], out["data"],
             f"{epochs} epochs" if epochs else "",
             ("pooled: " + " + ".join(devices)) if out["pooled"] else "".join(devices)]
    out["text"] = " · ".join(p for p in parts if p)
    sizes_m = "/".join(dict.fromkeys(params_text(p) for p in out["params"]))  # 0.39M once for two such models
    brief = [" + ".join(states) + (f" {epochs} epochs" if epochs else ""), sizes_m,
             share if share != "all" else "", "pooled hardware" if out["pooled"] else ""]
    out["short"] = ", ".join(p for p in ["/".join(f"{s} px" for s in sizes), *brief] if p)
    return out


def _paired(runs: list[dict]) -> str:
    """'10 % at 100 / all at 10' where runs differ in both data fraction and epochs, else ''."""
    pairs = sorted({(r["fraction"], r["epochs"]) for r in runs
                    if r.get("fraction") is not None and r.get("epochs") is not None})
    if len({f for f, _ in pairs}) < 2 or len({e for _, e in pairs}) < 2 or len(pairs) != len({f for f, _ in pairs}):
        return ""
    return " / ".join(f"{percent(f) if f < 1 else 'all'} at {e}" for f, e in pairs)


def measured_row(table: Table, row: str, scale: str | None, index) -> str:
    """What a table row measured where the scale's models change it ("k = 5 of 5 GPSA" for the paper's "k = 10"),
    formatted from each record's metrics by the table's ``measured_label`` (empty without one)."""
    if not table.measured_label:
        return ""
    texts = set()
    for col in table.columns:
        for rec, _ in index.get((scale, table.id, row, col.key), []):
            try:
                texts.add(table.measured_label.format(**as_dict(rec.get("metrics"))))
            except (KeyError, IndexError, ValueError, AttributeError):  # a record without those metrics
                continue
    return " / ".join(sorted(texts))


def with_measured(label: str, measured: str) -> str:
    """'k = 10 (ours: k = 5 of 5 GPSA)'; the paper's label alone where ours says the same."""
    return f"{label} (ours: {measured})" if measured and measured != label else label
