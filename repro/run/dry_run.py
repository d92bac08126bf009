"""``dry_run=true``: the paper's models at the paper's resolution on synthetic data, two optimizer steps
each, no record: what can rot at paper scale shows in minutes on any machine."""
from __future__ import annotations

from ..runs import RunSpec
from ..train import ddp
from ..train.engine import train
from ..train.execute import make_record
from .progress import describe
from .runtime import runtime
from .specs import select, validate


def distinct_shapes(specs: list[RunSpec]) -> list[RunSpec]:
    """One spec per distinct model, data shape, objective and init: recipe and probes change nothing that can rot."""
    first: dict[str, RunSpec] = {}
    for s in specs:
        c, data = s.config, s.config.get("data", {})
        hooks = [(c.get(k) or {}).get("fn") for k in ("objective", "init")]  # both build or load modules
        key = repr((s.kind, c.get("model"), c.get("probe"), hooks, data.get("img_size"), data.get("num_classes")))
        first.setdefault(key, s)
    return list(first.values())


def dry_run(c: dict, doc: dict) -> int:
    """Two optimizer steps of each distinct run config of the plan ``doc`` (built, never written); 1 if one fails."""
    specs = select(c, doc)
    rt = runtime(c, ddp.setup(c["runtime"]["device"]))
    rt.persist, rt.progress = False, False
    todo = distinct_shapes(specs)
    print(f"dry run: {len(todo)} distinct run config(s) of {len(specs)} at scale {c['scale']}")
    for s in todo:
        validate(s)
        if s.kind == "probe":
            print(f"  ok probe {s.run_id} ({s.config['probe']} importable)")
            continue
        res = train(s, rt)
        rec = make_record(s, rt, res.status, res.metrics, res.provenance)
        print(f"  ok {s.run_id}: {s.config['model']['name']} at {s.config['data']['img_size']} px, "
              f"{res.metrics['params'] / 1e6:.1f}M params, {res.metrics['steps']} steps, {describe(rec)}")
        if res.status != "finished":
            return 1
    return 0
