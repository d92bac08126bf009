"""Build a paper's report and results/index.html from records alone, so any report can be rebuilt from git."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from repro.records import atomic_write_bytes, load_records
from repro.report import figures, html, markdown, notebook
from repro.report.assess import Assessment, assess, placed, read_plans
from repro.report.cells import index_records
from repro.report.datafiles import cell_rows, cells_csv, claims_csv, comparisons_csv, values_csv
from repro.report.featured import featured
from repro.report.glance import first_screen, lead, tallies
from repro.report.provenance import commits
from repro.report.summary import claim_entry
from repro.report.tally import headline, headline_text, tally
from repro.paper import SpecError, load_paper, paper_ids


class UnknownPaper(KeyError):
    """A paper id with no papers/<id>/paper.yaml."""

    def __init__(self, paper_id: str, known: list[str]):
        super().__init__(paper_id)
        self.paper_id, self.known = paper_id, known

    def __str__(self) -> str:
        return f"unknown paper {self.paper_id!r}; known papers: {', '.join(self.known) or 'none'}"


def summarize(a: Assessment, drawn: set | frozenset = frozenset()) -> dict:
    """summary.json: cells per table and scale, every verdict with its numbers, what the report was built from."""
    cmp, verdicts = a.cmp, a.verdicts
    tables = {}
    for t in cmp.paper.tables:
        views = [v for v in cmp.views if v.table is t]
        tables[t.id] = {"attempted": t.reproduced, "cells": views[0].counts()["cells"] if views else 0,
                        "by_scale": {v.scale or "none": {**{k: n for k, n in v.counts().items() if k != "cells"},
                                                         **({"cost": v.cost} if v.cost.get("runs") else {}),
                                                         **_setting(a.table_settings, t.id, v.scale)}
                                     for v in views if t.reproduced}}
    return {"paper": cmp.paper.id, "title": cmp.paper.title, "scales": cmp.scales, "commits": commits(cmp.records),
            "records": len(cmp.records), "problems": cmp.problems, "tables": tables,
            "verdicts": tally(verdicts + a.preconditions),
            "headline": [{**h, "text": headline_text(h)} for h in headline(cmp, verdicts, a.preconditions, a.settings)],
            "first_screen": (screen := first_screen(a, drawn)), "tallies": tallies(a, screen), "settings": a.settings,
            "claims": [claim_entry(v, a.settings) for v in verdicts],
            "preconditions": [claim_entry(v, a.settings) for v in a.preconditions], "cells": cell_rows(cmp)}


def _setting(table_settings: dict, table: str, scale: str | None) -> dict:
    """One table's own setting in words: its epochs and seeds may differ from its scale's other tables'."""
    text = table_settings.get((table, str(scale)))
    return {"setting": text} if text else {}


def _write(path: Path, text: str) -> Path:
    atomic_write_bytes(path, text.encode("utf-8"))  # mode as an open() under the umask would give
    return path


def build_report(paper_id: str, papers_dir: Path = Path("papers"), results_dir: Path = Path("results"),
                 notebook_execute: str | None = "auto", kernel=None) -> list[Path]:
    """Rebuild one paper's report from its records and return the paths written (UnknownPaper, SpecError)."""
    papers_dir, results_dir = Path(papers_dir), Path(results_dir)
    spec = papers_dir / paper_id / "paper.yaml"
    if not spec.is_file():
        raise UnknownPaper(paper_id, paper_ids(papers_dir))
    paper = load_paper(spec)
    records, bad = load_records(paper_id, root=results_dir)
    a = assess(paper, records, bad, read_plans(paper_id, records, results_dir))
    cmp = a.cmp
    out = results_dir / paper_id
    fig_dir = out / "figures"
    rendered = figures.render_all(cmp, fig_dir)
    written = [f.path for f in rendered if f.path]
    for stale in [*fig_dir.glob("*.png"), *fig_dir.glob("*.svg")] if fig_dir.is_dir() else []:
        if stale not in written:  # a scale without records, or an .svg from when figures were written twice
            stale.unlink()
    summary = summarize(a, {(f.spec.id, f.scale) for f in rendered if f.path})
    written += [
        _write(out / "REPORT.md", markdown.render(a)),
        _write(out / "report.html", html.render(a, rendered)),
        _write(out / "summary.json", json.dumps(summary, indent=1) + "\n"),
        _write(out / "cells.csv", cells_csv(summary["cells"])),
        _write(out / "claims.csv", claims_csv(a)),
        _write(out / "comparisons.csv", comparisons_csv(summary)),
        _write(out / "values.csv", values_csv(cmp)),
    ]
    if notebook_execute:
        written += notebook.build(paper_id, papers_dir, results_dir, execute=notebook_execute, km=kernel)
    return written


def build_index(papers_dir: Path = Path("papers"), results_dir: Path = Path("results"),
                errors: dict[str, str] | None = None) -> Path:
    """results/index.html: every paper with a paper.yaml, its cells measured and its claim verdicts."""
    papers_dir, results_dir = Path(papers_dir), Path(results_dir)
    entries = []
    for pid in paper_ids(papers_dir):
        entry = {"id": pid, "title": pid, "error": (errors or {}).get(pid, ""), "featured": None}
        summary_path = results_dir / pid / "summary.json"
        if not entry["error"]:
            try:
                s = json.loads(summary_path.read_text())
                measured = sum(v.get("measured", 0) for t in s["tables"].values() for v in t["by_scale"].values())
                cells = sum(t["cells"] * max(1, len(t["by_scale"])) for t in s["tables"].values() if t["attempted"])
                entry.update(title=s["title"], summary=s, measured=measured, cells=cells, lead=lead(s),
                             featured=featured(load_paper(papers_dir / pid / "paper.yaml"), s, results_dir))
            except FileNotFoundError:
                entry["error"] = f"no report built yet: python -m repro.report --paper {pid}"
            except (OSError, ValueError, KeyError, TypeError, SpecError) as e:
                entry["error"] = f"{summary_path}: unreadable summary ({e}); rebuild the report"
        entries.append(entry)
    return _write(results_dir / "index.html", html.render_index(entries))


def _papers(papers_dir: Path, only: list[str] | None) -> list[str]:
    """The given paper ids (all with a paper.yaml by default); UnknownPaper for one without."""
    known = paper_ids(papers_dir)
    for pid in only or []:
        if pid not in known:
            raise UnknownPaper(pid, known)
    return only or known


def invalid_records(papers_dir: Path = Path("papers"), results_dir: Path = Path("results"),
                    only: list[str] | None = None) -> list[str]:
    """One line per record a report would skip (unreadable, out of place, unplanned, naming no cell)."""
    lines = []
    for pid in _papers(papers_dir, only):
        try:
            paper = load_paper(Path(papers_dir) / pid / "paper.yaml")
        except SpecError:
            continue
        records, bad = load_records(pid, root=results_dir)
        records, _, unplanned = placed(records, read_plans(pid, records, results_dir, required=True))
        lines += [str(e) for e in [*bad, *unplanned]]
        lines += [p.removesuffix("; ignored") for p in index_records(paper, records)[1]]
    return [" ".join(line.split()).removesuffix("; left out") for line in lines]


def build_all(papers_dir: Path = Path("papers"), results_dir: Path = Path("results"),
              only: list[str] | None = None, notebook_execute: str | None = "auto") -> tuple[list[Path], dict]:
    """Build the given papers (all with a paper.yaml by default) and the index; errors per paper."""
    written, errors = [], {}
    session = notebook.kernel_session() if notebook_execute in ("auto", "kernel") else contextlib.nullcontext()
    with session as km:
        for pid in _papers(papers_dir, only):
            try:
                written += build_report(pid, papers_dir, results_dir, notebook_execute, kernel=km)
            except SpecError as e:
                errors[pid] = str(e)
    written.append(build_index(papers_dir, results_dir, errors))
    return written, errors
