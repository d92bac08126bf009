"""Build a paper's report (REPORT.md, report.html, figures, summary.json, notebook) and results/index.html.

Reads only papers/<id>/paper.yaml and results/<id>/<scale>/records/*.json: a report can always be
rebuilt from committed records, and never trains.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

from repro.records import atomic_write_bytes, load_records
from repro.report import figures, html, markdown, notebook
from repro.report.assess import Assessment, assess
from repro.report.compare import CITED, Comparison, index_records
from repro.report.featured import featured
from repro.report.provenance import commits
from repro.report.summary import claim_entry
from repro.report.tally import headline, headline_text, tally
from repro.spec import SpecError, load_paper, paper_ids


class UnknownPaper(KeyError):
    """A paper id with no papers/<id>/paper.yaml."""

    def __init__(self, paper_id: str, known: list[str]):
        super().__init__(paper_id)
        self.paper_id, self.known = paper_id, known

    def __str__(self) -> str:
        return f"unknown paper {self.paper_id!r}; known papers: {', '.join(self.known) or 'none'}"


def summarize(a: Assessment) -> dict:
    """summary.json: cells per table and scale, every claim's verdict with its numbers, and what the report
    was built from."""
    cmp, verdicts = a.cmp, a.verdicts
    tables = {}
    for t in cmp.paper.tables:
        views = [v for v in cmp.views if v.table is t]
        tables[t.id] = {"attempted": t.reproduced, "cells": views[0].counts()["cells"] if views else 0,
                        "by_scale": {v.scale or "none": {**{k: n for k, n in v.counts().items() if k != "cells"},
                                                         **({"cost": v.cost} if v.cost.get("runs") else {})}
                                     for v in views if t.reproduced}}
    return {
        "paper": cmp.paper.id,
        "title": cmp.paper.title,
        "scales": cmp.scales,
        "commits": commits(cmp.records),
        "records": len(cmp.records),
        "problems": cmp.problems,
        "tables": tables,
        "verdicts": tally(verdicts + a.preconditions),
        "headline": [{**h, "text": headline_text(h)} for h in headline(cmp, verdicts, a.preconditions, a.settings)],
        "settings": a.settings,
        "claims": [claim_entry(v, a.settings) for v in verdicts],
        "preconditions": [claim_entry(v, a.settings) for v in a.preconditions],
        "cells": cell_rows(cmp),
    }


CELL_FIELDS = ["table", "row", "column", "unit", "scale", "paper", "paper_value", "paper_dataset", "mean", "sd", "n",
               "dataset", "model", "epochs", "params", "protocol", "like_for_like", "status", "delta", "agrees",
               "at_chance", "claims"]


def _claims_by_cell(cmp: Comparison) -> dict[tuple, list[str]]:
    """(table, row, column) -> the ids of the claims (and preconditions) that compare that cell."""
    out: dict = {}
    for claim in [*cmp.paper.claims, *cmp.paper.preconditions]:
        for ref in {r for pair in claim.pairs for r in pair if r.const is None}:
            out.setdefault((ref.table, ref.row, ref.column), []).append(claim.id)
    return {k: sorted(set(v)) for k, v in out.items()}


def _joined(parts: list[dict], key: str) -> str:
    return "; ".join(sorted({str(p[key]) for p in parts if p.get(key) not in (None, "")}))


def cell_rows(cmp: Comparison) -> list[dict]:
    """One row per measured-or-scheduled cell and scale: the paper's value beside ours (cells.csv)."""
    rows, claims = [], _claims_by_cell(cmp)
    for view in cmp.views:
        if not view.table.reproduced or view.scale is None:
            continue
        for row in view.table.rows:
            for col in view.table.columns:
                c = view.cells[(row.key, col.key)]
                if c.status == CITED:
                    continue
                runs = c.runs_protocol
                rows.append({"table": view.table.id, "row": row.key, "column": col.key, "unit": col.unit,
                             "scale": view.scale, "paper": c.paper_text(),
                             "paper_value": c.paper.value if c.paper else None, "paper_dataset": view.paper_protocol,
                             "mean": c.mean, "sd": c.std, "n": c.n, "dataset": _joined(runs, "data"),
                             "model": "; ".join(sorted({f"{p['model']} ({p['shape']})" if p.get("shape") else p["model"]
                                                        for p in runs if p.get("model")})),
                             "epochs": _joined(runs, "epochs"), "params": _joined(runs, "params"),
                             "protocol": c.protocol, "like_for_like": c.like_for_like, "status": c.status,
                             "delta": c.delta, "agrees": c.within_noise, "at_chance": c.at_chance,
                             "claims": " ".join(claims.get((view.table.id, row.key, col.key), []))})
    return rows


def cells_csv(rows: list[dict]) -> str:
    return _csv(rows, CELL_FIELDS)


CLAIM_FIELDS = ["claim", "scale", "setting", "kind", "reading", "verdict", "comparison", "comparison_verdict",
                "method", "effect", "ci95_low", "ci95_high", "p_holds", "p_fails", "p_holds_holm", "p_fails_holm",
                "n_lhs", "n_rhs", "resolvable_effect", "paper_effect", "below_resolvable"]


def claims_csv(summary: dict) -> str:
    """claims.csv: one row per comparison of every claim and precondition at every scale, in numbers (the
    fields of summary.json), for a reader who collects verdicts across papers."""
    rows = []
    for entry in summary["claims"] + summary["preconditions"]:
        head = {"claim": entry["id"], "scale": entry["scale"], "setting": entry["setting"], "kind": entry["kind"],
                "reading": entry["reading"], "verdict": entry["verdict"]}
        for c in entry["comparisons"] or [{}]:
            ci, n = c.get("ci95") or [None, None], c.get("n") or [None, None]
            rows.append({**head, "comparison": f"{c['lhs']} {c['relation']} {c['rhs']}" if c else "",
                         "comparison_verdict": c.get("verdict"), "method": c.get("method"), "effect": c.get("effect"),
                         "ci95_low": ci[0], "ci95_high": ci[1], **{k: c.get(k) for k in (
                             "p_holds", "p_fails", "p_holds_holm", "p_fails_holm", "resolvable_effect", "paper_effect",
                             "below_resolvable")}, "n_lhs": n[0], "n_rhs": n[1]})
    return _csv(rows, CLAIM_FIELDS)


def _csv(rows: list[dict], fields: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r[k]) for k in fields} for r in rows)
    return out.getvalue()


def _write(path: Path, text: str) -> Path:
    atomic_write_bytes(path, text.encode("utf-8"))
    path.chmod(0o644)  # the temp file behind the atomic write is private; a report is for reading
    return path


def build_report(paper_id: str, papers_dir: Path = Path("papers"), results_dir: Path = Path("results"),
                 notebook_execute: str | None = "auto", kernel=None) -> list[Path]:
    """Rebuild one paper's report from its records; returns the paths written.

    Raises UnknownPaper (no paper.yaml) or SpecError (paper.yaml unreadable). Narrower problems
    (corrupt records, unknown cells) are shown in the report instead. ``notebook_execute`` None skips
    the notebook; else auto | kernel | inline (see repro.report.notebook); ``kernel`` a running kernel
    manager to reuse (``notebook.kernel_session``).
    """
    papers_dir, results_dir = Path(papers_dir), Path(results_dir)
    spec = papers_dir / paper_id / "paper.yaml"
    if not spec.is_file():
        raise UnknownPaper(paper_id, paper_ids(papers_dir))
    paper = load_paper(spec)
    records, bad = load_records(paper_id, root=results_dir)
    a = assess(paper, records, bad)
    cmp = a.cmp
    out = results_dir / paper_id
    fig_dir = out / "figures"
    rendered = figures.render_all(cmp, fig_dir)
    written = [f.path for f in rendered if f.path]
    for stale in [*fig_dir.glob("*.png"), *fig_dir.glob("*.svg")] if fig_dir.is_dir() else []:
        if stale.with_suffix(".png") not in written:  # each figure is a .png with its .svg beside it
            stale.unlink()
    summary = summarize(a)
    written += [
        _write(out / "REPORT.md", markdown.render(a, rendered, out)),
        _write(out / "report.html", html.render(a, rendered)),
        _write(out / "summary.json", json.dumps(summary, indent=1) + "\n"),
        _write(out / "cells.csv", cells_csv(summary["cells"])),
        _write(out / "claims.csv", claims_csv(summary)),
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
                entry.update(title=s["title"], summary=s, measured=measured, cells=cells,
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
    """One line per record a report would skip: unreadable, or naming no cell of its paper.yaml. A paper
    whose paper.yaml cannot be read is left to build_all, which reports it."""
    lines = []
    for pid in _papers(papers_dir, only):
        try:
            paper = load_paper(Path(papers_dir) / pid / "paper.yaml")
        except SpecError:
            continue
        records, bad = load_records(pid, root=results_dir)
        lines += [str(e) for e in bad] + [p.removesuffix("; ignored") for p in index_records(paper, records)[1]]
    return [" ".join(line.split()) for line in lines]


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
