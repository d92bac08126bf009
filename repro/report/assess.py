"""Records -> comparisons -> verdicts: one code path, so the notebook's verdict is the report's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from repro.errors import ConfigError
from repro.plan.store import plan_path, read_plan
from repro.records import RecordError
from repro.report.claims import Verdict, judge_all, judge_preconditions
from repro.report.cells import Comparison, compare
from repro.report.provenance import setting
from repro.paper import Paper


@dataclass
class Assessment:
    cmp: Comparison
    verdicts: list[Verdict]       # every claim at every scale it applies to
    preconditions: list[Verdict]  # every precondition at every scale with records
    settings: dict[str, str]      # scale -> what was trained there, in words (provenance.setting)
    table_settings: dict[tuple[str, str], str]  # (table, scale) -> the same, for one table's runs


def read_plans(paper_id: str, records: list[dict], results_dir: Path, required: bool = False) -> dict[str, dict]:
    """scale -> plan.json, for each scale that has records and a plan; ``required``: a scale with records and no
    plan is a ConfigError (the report cannot tell which records are runs of what was meant to run)."""
    scales = sorted({str(r.get("scale")) for r in records})
    plans = {s: read_plan(paper_id, s, results_dir) for s in scales}
    missing = [s for s, plan in plans.items() if plan is None]
    if required and missing:
        raise ConfigError(f"{plan_path(paper_id, missing[0], results_dir)} is missing, so no record of "
                          f"{paper_id}/{missing[0]} can be checked against what was planned; write it with python -m "
                          f"repro.plan --paper {paper_id} --scale {missing[0]}")
    return {s: plan for s, plan in plans.items() if plan is not None}


def placed(records: list[dict], plans: dict[str, dict]) -> tuple[list[dict], list[dict], list[RecordError]]:
    """Records where their plan puts them, never where they say: (own, fills, problems); no cell pools two settings."""
    runs = {s: {r["run_id"]: r for r in plan["runs"]} for s, plan in plans.items()}
    own, out = [], []
    for rec in records:
        scale = str(rec.get("scale"))
        if scale in runs and rec.get("run_id") not in runs[scale]:
            out.append(RecordError(f"{rec.get('run_id')} ({scale}): not a run of results/{rec.get('paper')}/{scale}/"
                                   f"plan.json (overrides {plans[scale].get('overrides') or 'none'}); left out"))
        else:
            own.append(_at(rec, runs[scale][rec["run_id"]]) if scale in runs else rec)
    by_id = {(str(r.get("scale")), r.get("run_id")): r for r in own}
    return own, [_at(rec, f) for scale, plan in plans.items() for f in plan.get("fills", [])
                 if (rec := by_id.get((scale, f["run_id"])))], out


def _at(rec: dict, entry: dict) -> dict:
    return {**rec, "table": entry["table"], "cell": entry["cell"]}


def defined_cells(plans: dict[str, dict]) -> dict[str, set]:
    """Per scale, the (table, row, column) cells its plan runs: commands are offered only for cells they fill."""
    return {s: {tuple(cell) for cell in plan["cells"]} for s, plan in plans.items()}


def resolves(plans: dict[str, dict]) -> dict[str, set]:
    """Per scale, the training claims the paper's experiments say that scale is designed to resolve."""
    out: dict[str, set] = {}
    for plan in plans.values():
        for scale, claims in (plan.get("resolves_by_scale") or {}).items():
            out.setdefault(scale, set()).update(claims)
    return out


def models(plans: dict[str, dict]) -> dict[str, dict]:
    """Registered model name -> its constructor arguments, from every plan."""
    return {name: arch for plan in plans.values() for name, arch in (plan.get("models") or {}).items()}


def assess(paper: Paper, records: list[dict], bad: list | None = None,
           plans: dict[str, dict] | None = None) -> Assessment:
    """Compare a paper's records with its printed numbers and judge every claim and precondition."""
    plans = plans or {}
    arch = models(plans)
    records, fills, unplanned = placed(records, plans)
    cmp = compare(paper, records, [*(bad or []), *unplanned], defined_cells(plans), resolves(plans), arch, fills)
    settings = {s: setting([r for r in records if str(r.get("scale")) == s], arch) for s in cmp.scales}
    by_table = {}
    for r in [*records, *fills]:
        by_table.setdefault((str(r.get("table")), str(r.get("scale"))), []).append(r)
    table_settings = {key: setting(recs, arch) for key, recs in by_table.items()}
    return Assessment(cmp, judge_all(cmp), judge_preconditions(cmp), settings, table_settings)
