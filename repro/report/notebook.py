"""An executed notebook per paper whose ReportView rebuilds the report's comparison, so a reader can rerun cells."""
from __future__ import annotations

import ast
import base64
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import traceback
from pathlib import Path

import markupsafe
import nbformat
from nbformat import v4

from repro.records import load_records
from repro.report import figures, html
from repro.report.assess import assess, read_plans
from repro.report.datafiles import cell_rows, cells_csv
from repro.report.provenance import describe
from repro.report.tally import tally
from repro.paper import load_paper

_CODE_DIR = Path(__file__).resolve().parent
_LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
_MIMES = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"), ("_repr_png_", "image/png"))
# The repro modules outside this package that the report imports (tests/test_import_rules.py checks the list).
SHARED_CODE = ("__init__.py", "errors.py", "functions.py", "paper.py", "paths.py", "records.py", "runs.py",
               "plan/__init__.py", "plan/store.py")


class _Shown:
    """What a notebook cell displays: HTML or a PNG, plain text as the fallback (a None repr is not shown)."""

    def __init__(self, html_text: str | None, text: str, png: bytes | None = None):
        self._html, self._text, self._png = html_text, text, png

    def _repr_html_(self) -> str | None:
        return self._html

    def _repr_png_(self) -> bytes | None:
        return self._png

    def __repr__(self) -> str:
        return self._text


def find_root(paper_id: str, start: Path | None = None) -> Path:
    """The checkout holding papers/<paper_id>/paper.yaml: the working directory, a parent, or this package's."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents, _CODE_DIR.parents[1]):
        if (folder / "papers" / paper_id / "paper.yaml").is_file():
            return folder
    raise FileNotFoundError(f"no papers/{paper_id}/paper.yaml in {here} or its parents: open the notebook "
                            "inside a vitrepro checkout, or pass papers_dir= and results_dir=")


class ReportView:
    """A paper's comparison and verdicts rebuilt from its records; the folders are found from the checkout."""

    def __init__(self, paper_id: str, papers_dir: str | Path | None = None, results_dir: str | Path | None = None):
        root = find_root(paper_id) if papers_dir is None or results_dir is None else None
        papers_dir = Path(papers_dir) if papers_dir is not None else root / "papers"
        self.results_dir = Path(results_dir) if results_dir is not None else root / "results"
        self.paper = load_paper(papers_dir / paper_id / "paper.yaml")
        records, bad = load_records(paper_id, root=self.results_dir)
        plans = read_plans(paper_id, records, self.results_dir)
        self.assessment = assess(self.paper, records, bad, plans)  # the report's own code path
        self.cmp, self.verdicts = self.assessment.cmp, self.assessment.verdicts

    @property
    def cells_csv(self):
        """results/<id>/cells.csv, or the same rows rebuilt from the records: input for ``pandas.read_csv``."""
        path = self.results_dir / self.paper.id / "cells.csv"
        return path if path.is_file() else io.StringIO(cells_csv(cell_rows(self.cmp)))

    def _repr_html_(self) -> str:
        problems = "".join(f"<li>{markupsafe.escape(p)}</li>" for p in self.cmp.problems)
        runs = describe(self.cmp.records, self.cmp.scales)
        return (html.component_style() + html.fragment("runs_table", runs, self.paper)
                + (f"<p><b>Problems</b></p><ul>{problems}</ul>" if problems else ""))

    def __repr__(self) -> str:
        return f"ReportView({self.paper.id!r}: {len(self.cmp.records)} records, scales {self.cmp.scales})"

    def _verdicts(self, verdicts: list, counts: dict, table_class: str) -> _Shown:
        text = "\n".join(f"{v.claim.id} [{v.scale}]: {v.verdict} ({v.statistic})" for v in verdicts)
        settings = self.assessment.settings
        return _Shown(html.fragment("claims_table", verdicts, counts, table_class, settings, False), text)

    def claims(self) -> _Shown:
        return self._verdicts(self.verdicts, tally(self.verdicts + self.assessment.preconditions), "claims-table")

    def preconditions(self) -> _Shown:
        """The paper's regime, measured: a claim that requires a precondition is judged only where it holds."""
        return self._verdicts(self.assessment.preconditions, {}, "preconditions-table")

    def table(self, table_id: str, scale: str | None = None) -> _Shown:
        view = self.cmp.view(table_id, scale)
        if view is None:
            raise KeyError(f"no view of {table_id!r} at scale {scale!r}; have "
                           f"{[(v.table.id, v.scale) for v in self.cmp.views]}")
        return _Shown(html.fragment("table_view", view), f"{table_id} at {scale}: {view.counts()}")

    def figure(self, figure_id: str, scale: str | None = None):
        fig = next(f for f in self.paper.figures if f.id == figure_id)
        mpl = figures.draw(self.cmp, fig, scale)
        if mpl is None:
            return _Shown(f"<p>No records feed {figure_id} at scale {scale}.</p>", f"{figure_id}: no data")
        return _Shown(None, f"{figure_id} at {scale}", figures.png_bytes(mpl))

    def records(self, table_id: str | None = None) -> _Shown:
        """The raw records (scalar metrics only), one row per run."""
        recs = [r for r in self.cmp.records if table_id is None or r["table"] == table_id]
        keys = sorted({k for r in recs for k, v in r["metrics"].items() if isinstance(v, (int, float))})
        head = ["run_id", "scale", "table", "row", "seed", "status", *keys]
        rows = [[r["run_id"], r["scale"], r["table"], r["cell"].get("row"), r.get("seed"), r["status"],
                 *[r["metrics"].get(k, "") for k in keys]] for r in recs]
        esc = markupsafe.escape
        body = "".join("<tr>" + "".join(f"<td>{esc(x)}</td>" for x in row) + "</tr>" for row in rows)
        table = "<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>" + body + "</table>"
        return _Shown(table, f"{len(rows)} records")


def _rel(path: Path) -> str:
    """A path as the notebook should spell it: relative to the working directory when inside it."""
    path, cwd = Path(path).resolve(), Path.cwd().resolve()
    return str(path.relative_to(cwd) if path.is_relative_to(cwd) else path)


def _view_call(paper_id: str, papers_dir: Path, results_dir: Path) -> str:
    """The notebook's first code: ReportView(paper), or with the folders spelled out when outside the checkout."""
    root = _CODE_DIR.parents[1].resolve()
    if Path(papers_dir).resolve() == root / "papers" and Path(results_dir).resolve() == root / "results":
        return f"report = ReportView({paper_id!r})  # finds papers/ and results/ from here up\nreport"
    return (f"report = ReportView({paper_id!r}, papers_dir={str(Path(papers_dir).resolve())!r}, "
            f"results_dir={str(Path(results_dir).resolve())!r})\nreport")


def md_text(text: object) -> str:
    """Paper text for a Markdown cell: escaped, links kept only for http(s) (no live javascript: link)."""
    def link(m: re.Match) -> str:
        if re.match(r"https?://", m.group(2).strip(), re.I):
            return m.group(0)
        return f"\\[{m.group(1)}\\]\\({m.group(2)}\\)"
    return _LINK.sub(link, str(markupsafe.escape(text)))


def make_notebook(view: ReportView, papers_dir: Path, results_dir: Path) -> nbformat.NotebookNode:
    """The cells: load, claims, every table view, every figure with data, raw records."""
    p, esc = view.paper, md_text  # paper text is text, also in Markdown cells
    md, code = v4.new_markdown_cell, v4.new_code_cell
    cells = [md(f"# {esc(p.title)}\n\nExplore the reproduction: every cell rebuilds the comparison from the records "
                f"in `{_rel(results_dir)}/{p.id}/`. Edit and rerun freely; the report itself is rebuilt with "
                f"`python -m repro.report --paper {p.id}`."),
             code("from repro.report.notebook import ReportView\n\n" + _view_call(p.id, papers_dir, results_dir)),
             md("## Claims"), code("report.claims()"),
             *([md("## Preconditions: the paper's regime, measured"), code("report.preconditions()")]
               if p.preconditions else []),
             md("## Every cell as a DataFrame\n\n`cells.csv` holds one row per table cell and scale: the paper's "
                "value, our mean, sd and seed count, whether the protocols match (`like_for_like`) and the delta "
                "where they do."),
             code("import pandas as pd\n\n"
                  "cells = pd.read_csv(report.cells_csv)\n"
                  "cells.head()"),
             code("# how many cells each scale measured, and how\n"
                  "counts = cells.groupby([\"scale\", \"status\"]).size().unstack(fill_value=0)\n"
                  "if counts.empty:\n"
                  "    print(\"no cells measured or scheduled yet\")\n"
                  "else:\n"
                  "    ax = counts.plot.barh(stacked=True, figsize=(7, 0.5 * len(counts) + 1.5))\n"
                  "    ax.set_xlabel(\"table cells\"); ax.set_ylabel(\"scale\")\n"
                  "    ax.set_title(f\"{report.paper.id}: cells per scale and status\")")]
    for t in p.tables:
        cells.append(md(f"## {esc(t.id)}: {esc(t.caption)}\n\nSource: {esc(t.source)}"))
        cells += [code(f"report.table({t.id!r}, scale={v.scale!r})") for v in view.cmp.views if v.table is t]
    drawable = [(f, s) for f in p.figures for s in view.cmp.scales if figures.draw(view.cmp, f, s) is not None]
    if drawable:
        cells.append(md("## Figures"))
        cells += [code(f"report.figure({f.id!r}, scale={s!r})") for f, s in drawable]
    cells += [md("## Raw records\n\nScalar metrics of every run; `report.cmp.records` holds the full records "
                 "(per-layer arrays, configs, provenance)."), code("report.records()")]
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def _outputs(value, stdout: str) -> list:
    out = [v4.new_output("stream", name="stdout", text=stdout)] if stdout else []
    if value is None:
        return out
    shown = {mime: getattr(value, meth)() for meth, mime in _MIMES if hasattr(value, meth)}
    data = {"text/plain": repr(value), **{mime: v for mime, v in shown.items() if v is not None}}
    if "image/png" in data:
        data["image/png"] = base64.b64encode(data["image/png"]).decode("ascii")
    return out + [v4.new_output("execute_result", data=data)]


def run_inline(nb: nbformat.NotebookNode) -> None:
    """Execute the code cells in this process, storing outputs as a kernel would (last expression shown)."""
    namespace: dict = {"__name__": "__main__"}
    for n, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        tree = ast.parse(cell.source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        buf, value = io.StringIO(), None
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(tree, f"<cell {n}>", "exec"), namespace)  # noqa: S102 - our own cells
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), f"<cell {n}>", "eval"), namespace)  # noqa: S307
            cell.outputs = _outputs(value, buf.getvalue())
        except Exception as e:  # shown in the notebook like a kernel error; the other cells still run
            cell.outputs = [v4.new_output("error", ename=type(e).__name__, evalue=str(e),
                                          traceback=traceback.format_exc().splitlines())]
    _renumber(nb)


def _renumber(nb: nbformat.NotebookNode) -> None:
    """Execution counts 1, 2, ... per notebook, also when the kernel was shared with other notebooks."""
    for n, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
        cell.execution_count = n
        for o in cell.outputs:
            if o.output_type == "execute_result":
                o.execution_count = n


def run_kernel(nb: nbformat.NotebookNode, km=None, timeout: int = 300) -> None:
    """Execute with a Jupyter kernel (nbconvert); ``km`` a kernel to reuse, None starts one for ``nb``."""
    from nbconvert.preprocessors import ExecutePreprocessor

    if km is None:
        with kernel_session() as own:
            return run_kernel(nb, own, timeout)
    ExecutePreprocessor(timeout=timeout, kernel_name="python3").preprocess(
        nb, {"metadata": {"path": os.getcwd()}}, km=km)


@contextlib.contextmanager
def kernel_session():
    """One kernel for every notebook built inside the block; its stderr (TCP chatter) goes nowhere."""
    if not kernel_available():
        yield None
        return
    import subprocess

    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    km = AsyncKernelManager(kernel_name="python3")
    try:
        run_sync(km.start_kernel)(stderr=subprocess.DEVNULL, cwd=os.getcwd())
        yield km
    finally:
        if km.has_kernel:
            run_sync(km.shutdown_kernel)(now=True)


def kernel_available() -> bool:
    """ipykernel installed and a python3 kernel spec found."""
    try:
        if importlib.util.find_spec("ipykernel") is None:  # find, not import: importing it costs a second
            return False
        from jupyter_client.kernelspec import KernelSpecManager
        KernelSpecManager().get_kernel_spec("python3")
        return True
    except Exception:  # any import or lookup failure means: no usable kernel
        return False


def code_files() -> list[Path]:
    """The code behind the notebook's outputs: this package (modules and templates) and ``SHARED_CODE``."""
    return [*sorted(_CODE_DIR.rglob("*.py")), *sorted(_CODE_DIR.rglob("*.j2")),
            *(_CODE_DIR.parent / name for name in SHARED_CODE)]


def inputs_digest(paper_yaml: Path, results_dir: Path, paper_id: str) -> str:
    """Hash of everything the notebook's outputs depend on: paper.yaml, the plans, the records, the code."""
    h = hashlib.sha256()
    folder = Path(results_dir) / paper_id
    files = [paper_yaml, *sorted(folder.glob("*/plan.json")), *sorted(folder.glob("*/records/*.json")), *code_files()]
    for f in files:
        h.update(str(f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def build(paper_id: str, papers_dir: Path, results_dir: Path, execute: str = "auto", km=None) -> list[Path]:
    """Write results/<id>/report.ipynb (executed) and notebook.html; ``km``: a running kernel to reuse."""
    out = Path(results_dir) / paper_id
    ipynb, page = out / "report.ipynb", out / "notebook.html"
    digest = inputs_digest(Path(papers_dir) / paper_id / "paper.yaml", results_dir, paper_id)
    if ipynb.exists() and page.exists() and execute == "auto":
        try:  # plain JSON: reading it through nbformat would validate the whole notebook
            if json.loads(ipynb.read_text())["metadata"]["vitrepro"]["inputs"] == digest:
                return [ipynb, page]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    nb = make_notebook(ReportView(paper_id, papers_dir, results_dir), papers_dir, results_dir)
    how, why = "inline", "no Jupyter kernel (ipykernel) is installed"
    if execute == "kernel" or (execute == "auto" and kernel_available()):
        try:
            run_kernel(nb, km)
            how = "kernel"
            _renumber(nb)
        except Exception as e:  # a broken kernel must not lose the notebook: fall back and say why
            if execute == "kernel":
                raise
            why = f"the Jupyter kernel failed: {type(e).__name__}: {e}"
    elif execute == "inline":
        why = "in-process execution was requested"
    if how == "inline":
        run_inline(nb)
        note = (f"Outputs computed in-process by repro.report.notebook.run_inline ({why}); rerun the cells "
                "in Jupyter to recompute them.")
    else:
        note = "Outputs computed by a Jupyter kernel (nbconvert ExecutePreprocessor)."
    nb.cells[0].source += f"\n\n*{note}*"
    nb.metadata["vitrepro"] = {"inputs": digest, "executed_with": how}
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, ipynb)
    from nbconvert import HTMLExporter

    offline = _CODE_DIR / "templates" / "notebook_offline.html.j2"  # no CDN scripts (template's note)
    body, _ = HTMLExporter(template_file=str(offline)).from_notebook_node(nb)
    page.write_text(body, encoding="utf-8")
    return [ipynb, page]
