"""The pipeline's one-way rules (README, "Layout") over the import graph: plan -> run -> report, each
reading only what the stage before wrote. Checked on the source (every import statement of every module, lazy ones included), and
the report once more in a process where torch, timm and paper code cannot be imported at all."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORBIDDEN = {  # importer package -> packages it must never import, directly or through another module
    "repro.report": ("repro.models", "repro.train", "repro.data", "repro.probes", "repro.cli", "repro.run",
                     "repro.plan.build", "repro.plan.experiments", "papers", "torch", "timm"),
    "repro.plan": ("repro.train", "repro.run", "repro.report", "repro.cli"),
    "repro.train": ("repro.run", "repro.cli"),  # the scheduler (run/) drives the loop, never the reverse
    "repro.models": ("repro.probes",),  # probes measure models; a model never needs a probe
    "repro.run": ("repro.report", "repro.cli", "repro.plan.build", "repro.plan.experiments"),  # reads plan.json only
    # a probe gets what it reads of another run from the run stage (run/sources.py), never loads it itself
    "repro.probes": ("repro.run",),
    "papers": ("repro.run.sources",),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from x import y`` counts x and x.y)."""
    name, out = _module_name(path), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    files = [*REPO.glob("repro/**/*.py"), *REPO.glob("papers/**/*.py")]
    return {_module_name(f): _imports(f) for f in files}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, list[str]]:
    """Every module reachable from ``start`` (importing a module runs its packages' __init__ too), with the
    chain of imports that reaches it."""
    chains, todo = {start: [start]}, [start]
    while todo:
        here = todo.pop()
        found = set(graph.get(here, ()))
        found.update(".".join(here.split(".")[:i]) for i in range(1, here.count(".") + 1))  # parent packages
        for target in found:
            if target not in chains:
                chains[target] = chains[here] + [target]
                if target in graph:
                    todo.append(target)
    return chains


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_stage_never_imports_what_it_must_not(importer):
    graph = _graph()
    bad = []
    for module in (m for m in graph if _within(m, importer)):
        for target, chain in _reach(graph, module).items():
            if any(_within(target, f) for f in FORBIDDEN[importer]):
                if not (importer == "repro.plan" and any(_within(m, "papers") for m in chain)):
                    bad.append(" -> ".join(chain))
    assert not bad, "\n".join(sorted(bad)[:10])


def test_only_the_plan_stage_imports_paper_experiments():
    graph = _graph()
    bad = [f"{m} -> {t}" for m, targets in graph.items() if not _within(m, "repro.plan")
           for t in targets if t.startswith("papers.") and t.endswith(".experiments") and t != m]
    assert not bad, bad


def test_papers_never_import_each_other():
    graph = _graph()
    bad = [f"{m} -> {t}" for m, targets in graph.items() if _within(m, "papers") and m.count(".") >= 1
           for t in targets if _within(t, "papers") and t.count(".") >= 1 and t.split(".")[1] != m.split(".")[1]]
    assert not bad, bad


def _cycles(graph: dict[str, set[str]], package: str) -> list[list[str]]:
    """Import cycles among the modules of ``package`` (its __init__ left out: ``from pkg import mod`` runs it
    first in any case)."""
    edges = {m: {t for t in graph[m] if t in graph and t != package and _within(t, package)}
             for m in graph if _within(m, package) and m != package}
    found, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for t in sorted(edges[m]):
            if state.get(t) == "open":
                found.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return found


@pytest.mark.parametrize("package", ["repro.report", "repro.plan", "repro.run", "repro.train", "repro.models"])
def test_no_import_cycles(package):
    """A module that needs another's code lazily (an import inside a function, to dodge a cycle) counts too."""
    assert not _cycles(_graph(), package)


def test_the_rules_catch_a_forbidden_import(tmp_path, monkeypatch):
    """The check fails on a report module that imports a model (so it can fail at all)."""
    graph = _graph()
    graph["repro.report.tally"] = graph["repro.report.tally"] | {"repro.models.vit"}
    chains = _reach(graph, "repro.report.build")
    assert "repro.models.vit" in chains and chains["repro.models.vit"][-2] == "repro.report.tally"
    graph["repro.report.notebook"] = graph["repro.report.notebook"] | {"repro.report.build"}  # the old circle
    assert _cycles(graph, "repro.report")


BLOCKED_RUN = r"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "timm", "papers"):
            raise ImportError(f"{name} is blocked: the report must not import it")
sys.meta_path.insert(0, Block())
from pathlib import Path
from repro.report.build import build_report
import json
from repro.report import notebook
written = build_report(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), notebook_execute=None)
code = sorted(str(Path(m.__file__).resolve()) for n, m in list(sys.modules.items())
              if n.split(".")[0] == "repro" and getattr(m, "__file__", None))
print(json.dumps({"blocked": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "timm", "papers")),
                  "code": code, "digested": sorted(str(p.resolve()) for p in notebook.code_files())}))
"""


def test_report_builds_with_torch_timm_and_paper_code_blocked(tmp_path):
    """A committed report rebuilt in a process that cannot import torch, timm or papers/ is byte-identical,
    and every repro module it ran is hashed into the notebook's staleness digest."""
    paper = "crosspaper"
    out = tmp_path / "results"
    shutil.copytree(REPO / "results" / paper, out / paper)
    proc = subprocess.run([sys.executable, "-c", BLOCKED_RUN, paper, str(REPO / "papers"), str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.splitlines()[-1])
    assert loaded["blocked"] == []
    assert set(loaded["code"]) <= set(loaded["digested"]), "the notebook's staleness hash misses code it runs"
    for name in ("REPORT.md", "summary.json", "cells.csv", "claims.csv", "report.html"):
        assert (out / paper / name).read_bytes() == (REPO / "results" / paper / name).read_bytes(), name
    records = len(list((REPO / "results" / paper).glob("*/records/*.json")))  # grows as a campaign lands
    assert records and json.loads((out / paper / "summary.json").read_text())["records"] == records
