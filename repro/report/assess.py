"""Records -> comparisons -> verdicts: the one code path behind the report, the index and the notebook.

Why one module: a verdict shown in the notebook must be the verdict in the report; both call ``assess``
with the same experiment design (which cells each scale runs, which claims it is designed to resolve).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from repro.report.claims import Verdict, judge_all, judge_preconditions
from repro.report.compare import Comparison, compare
from repro.report.provenance import setting
from repro.runs import SCALES, ConfigError, paper_runs
from repro.spec import Paper


@dataclass
class Assessment:
    cmp: Comparison
    verdicts: list[Verdict]       # every claim at every scale it applies to
    preconditions: list[Verdict]  # every precondition at every scale with records
    settings: dict[str, str]      # scale -> what was trained there, in words (provenance.setting)


def defined_cells(paper_id: str, scales: list[str]) -> dict[str, set] | None:
    """Per scale, the (table, row, column) cells papers/<id>/experiments.py runs there: the report then
    offers a command only for cells that command would fill. None for a paper without experiments."""
    try:
        return {s: {(r.table, r.cell["row"], col) for r in paper_runs(paper_id, s) for col in r.cell["columns"]}
                for s in scales if s in SCALES}
    except (ConfigError, ImportError):
        return None


def resolves(paper_id: str) -> dict[str, set]:
    """Per scale, the training claims papers/<id>/experiments.py says that scale is designed to resolve."""
    try:
        mod = importlib.import_module(f"papers.{paper_id}.experiments")
    except ImportError:
        return {}
    return {str(k): set(v) for k, v in (getattr(mod, "RESOLVES", None) or {}).items()}


def assess(paper: Paper, records: list[dict], bad: list | None = None) -> Assessment:
    """Compare a paper's records with its printed numbers and judge every claim and precondition."""
    scales = sorted({str(r.get("scale")) for r in records})
    cmp = compare(paper, records, bad, defined_cells(paper.id, scales), resolves(paper.id))
    settings = {s: setting([r for r in records if str(r.get("scale")) == s]) for s in cmp.scales}
    return Assessment(cmp, judge_all(cmp), judge_preconditions(cmp), settings)
