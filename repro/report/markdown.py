"""REPORT.md: the same content as report.html, as GitHub-flavoured Markdown tables (tabulate)."""
from __future__ import annotations

import os
from pathlib import Path

from tabulate import tabulate

from repro.report.assess import Assessment
from repro.report.claims import verdict_label
from repro.report.cells import DETAIL_HEADERS, MEASURED, Cell, Comparison, TableView, cost_text, unique_scales
from repro.report.figures import RenderedFigure
from repro.report.glance import first_screen, row_models
from repro.report.provenance import describe
from repro.report.tally import KIND_LABELS, kind, tally
from repro.runs import is_smoke

_ESCAPES = str.maketrans({"|": r"\|", "<": r"\<", ">": r"\>", "&": r"\&", "\n": " "})


def esc(text: object) -> str:
    """Paper text as literal Markdown: table pipes and HTML-looking text cannot break the page."""
    return str(text).translate(_ESCAPES)


def _table(rows: list[list], headers: list[str]) -> str:
    return tabulate([[esc(c) for c in r] for r in rows], headers=[esc(h) for h in headers],
                    tablefmt="github", disable_numparse=True)


LEGEND = ("Verdicts: **holds** / **FAILS**: resolved, by one-sided tests across >= 3 seeds Holm-adjusted across the "
          "claim's comparisons (training) or on exact values (theory); a claim holds if every comparison holds and fails "
          "if any fails; each comparison is quoted as its effect with a 95 % interval, the one-sided p in the "
          "direction of its verdict (Holm; raw beside it), n seeds per side and the smallest effect the seeds "
          "resolve; *outside the paper's regime*: a precondition "
          "that defines the setting the paper claims it for is not met here, so the result is a finding about this "
          "setting, not a verdict on the paper; *not resolvable*: the paper's own effect is smaller than this scale "
          "resolves; *not testable*: both sides at chance; *inconclusive*: the evidence cannot tell; *smoke — not "
          "judged*: `tiny` only proves the pipeline runs; *not designed to resolve*: the scale's protocol was not "
          "built for the claim; *timing*: speed claims are judged only from timings alternated in rounds within one "
          "process. Only the paper's own training claims count in \"did it reproduce?\"; theory, timing, "
          "preconditions, stricter readings of ours and cited claims are counted apart. Rules: "
          "repro/report/README.md.")


def _anchor(section: str, paper) -> str:
    """GitHub's anchor for a '## <id>: <caption>' heading (tables) or a plain section."""
    table = paper.table(section)
    text = f"{table.id}: {table.caption}" if table else section
    return "".join(ch for ch in text.lower().replace(" ", "-") if ch.isalnum() or ch in "-_")


def wide_cell(cell: Cell) -> tuple[str, str]:
    """(paper, ours): two columns, so that no cell mixes the paper's dataset with ours."""
    if cell.status == MEASURED:
        mark = "" if cell.within_noise is None else (" ✓" if cell.within_noise else " ✗")
        return cell.paper_text(), f"{cell.measured_text()}{mark}" + (" (at chance)" if cell.at_chance else "")
    return cell.paper_text(), cell.status


def view_lines(cmp: Comparison, view: TableView) -> list[str]:
    t = view.table
    counts = view.counts()
    out = []
    if not t.reproduced:
        out += [f"*Listed, not reproduced:* {esc(t.reason)}", "",
                _table([[r.label] + [r.values[c.key].text if c.key in r.values else "-" for c in t.columns]
                        for r in t.rows], ["", *[c.label for c in t.columns]]), ""]
        return out
    scale = f"scale `{view.scale}`" if view.scale else "not run at any scale yet"
    out += [f"### {t.id} at {scale}: {counts['measured']}/{counts['cells']} cells measured", "",
            "Each column: the paper's value on its dataset, then ours (mean ± std over seeds) on ours; ✓ / ✗: like "
            "for like and the paper lies within / outside our noise; no mark: measured under a different protocol, "
            "shown beside the paper's only.", ""]
    if cost_text(view.cost):
        out += [f"Time to table: {esc(cost_text(view.cost))}.", ""]
    out += [f"{esc(line)}" + "  " for line in view.protocol_lines()] + ([""] if view.protocol_lines() else [])
    paper_data, our_data = view.datasets()
    headers = ["", *[x for c in t.columns for x in (f"{c.label}{f' ({c.unit})' if c.unit else ''}: paper, {paper_data}",
                                                     f"ours at {view.scale}, {our_data}" if view.scale else
                                                     "ours: not run")]]
    body = [[r.label + (f" (cited: {r.cited})" if r.cited else "")
             + (f" ({view.mixed_row(r.key)})" if view.mixed_row(r.key) else "")
             + (f" (ours: {row_models(view, r.key)})" if row_models(view, r.key) else "")] +
            [x for c in t.columns for x in wide_cell(view.cells[(r.key, c.key)])] for r in t.rows]
    out += [_table(body, headers), ""]
    details = view.detail_rows()
    if details:
        out += [_table(details, DETAIL_HEADERS), ""]
    elsewhere = view.unscheduled()
    if counts["not_run"] > elsewhere:
        out += [f"Not run: {counts['not_run'] - elsewhere} cell(s). Fill them with `{view.command}`.", ""]
    if elsewhere:
        out += [f"Not run at scale `{view.scale}`: {elsewhere} cell(s) that this scale's experiments do not "
                f"define (`python -m repro list paper={view.paper_id} scale=<scale>` shows where they run).", ""]
    return out


def tally_line(verdicts: list, scale: str | None) -> str:
    """A scale's verdict counts, kept apart by kind of evidence."""
    kinds = tally(verdicts).get(scale or "none", {})
    return "; ".join(f"{KIND_LABELS[k]}: " + ", ".join(f"{n} {verdict_label(v, scale)}" for v, n in counts.items())
                     for k, counts in kinds.items())


def claims_rows(verdicts: list) -> list[list]:
    return [[v.claim.id, v.claim.text + (f" (table {v.claim.table})" if v.claim.table else ""), kind(v),
             (v.label.upper() if v.verdict == "fails" else v.label) + f" · {v.scale or 'none'}",
             v.statistic, v.on_paper or "-"] for v in verdicts]


def scale_sections(verdicts: list, counted: list, settings: dict, level: str = "###") -> list[str]:
    """One section per scale, most informative first: its setting, its counts, its claims; tiny folded."""
    out = []
    for scale in unique_scales([v.scale for v in verdicts]):
        at = [v for v in verdicts if v.scale == scale]
        where = f"At `{scale}`" + (f": {esc(settings[scale])}" if settings.get(scale) else "") if scale else \
            "Judged at no scale yet (their scales have no records)"
        body = [tally_line(counted, scale), "", _table(claims_rows(at), CLAIM_HEADERS), ""]
        if is_smoke(scale):
            out += [f"<details><summary>At <code>{scale}</code> (smoke: proves the pipeline runs, judges nothing): "
                    f"{esc(settings.get(scale, ''))}</summary>", "", *body, "</details>", ""]
        else:
            note = ["Training verdicts here are statements about this setting, not about the paper's own protocol.",
                    ""] if scale and scale != "full" else []
            out += [f"{level} {where}", "", *note, *body]
    return out


CLAIM_HEADERS = ["claim", "text", "kind", "verdict", "statistic", "on the paper's numbers"]


def render(a: Assessment, figures: list[RenderedFigure], out_dir: Path) -> str:
    """The whole REPORT.md as a string (figure paths relative to out_dir)."""
    cmp = a.cmp
    views = {(v.table.id, v.scale) for v in cmp.views}
    loose = [f for f in figures if (f.spec.table, f.scale) not in views]
    lines = [*_header(a, loose), *_runs_section(cmp), *_claims_section(a),
             *[x for t in cmp.paper.tables for x in _table_section(cmp, t, figures, out_dir)]]
    if loose:
        lines += ["## Figures", "", *[x for f in loose for x in figure_lines(f, out_dir)]]
    return "\n".join(lines).rstrip() + "\n"


def _header(a: Assessment, loose: list[RenderedFigure]) -> list[str]:
    """Title, citation, how the report was built, the headline answer and the contents."""
    p = a.cmp.paper
    bib = " · ".join(x for x in [", ".join(p.authors), p.venue, f"arXiv {p.arxiv}" if p.arxiv else "",
                                  p.code] if x)
    lines = [f"# {esc(p.title)}", "", esc(bib), "",
             f"Reproduction report built from records only (`python -m repro.report --paper {p.id}`). "
             "A number gets a delta and an agreement mark only where our protocol is the paper's (scale `full`, or "
             "the paper's own models at any scale); a claim gets holds/fails only where its scale is designed for "
             "it and the seeds can resolve it.", ""]
    lines += glance_lines(first_screen(a))
    toc = ["runs", *(["problems"] if a.cmp.problems else []), "claims", *[t.id for t in p.tables],
           *(["figures"] if loose else [])]
    return lines + ["Contents: " + " · ".join(f"[{x}](#{_anchor(x, p)})" for x in toc), ""]


def _signed(x) -> str:
    return "-" if x is None else f"{x:+.3g}"


def _ours(r: dict) -> str:
    """Ours in the claim's direction with its interval, margin, means and p (one-sided, Holm; across the family)."""
    d, fam = r["toward"], r.get("family")
    p = f"; p {fam['p']:.2g} that it {fam['side']}, Holm across the {fam['size']} rows compared with " \
        f"{fam['baseline']}: {fam['p_holm']:.2g}" if fam else (f"; p {r['p']:.2g} that it {r['p_side']}"
                                                                 if r.get("p") is not None else "")
    return (_signed(d["effect"]) + (f" [{d['ci'][0]:+.3g}, {d['ci'][1]:+.3g}]" if d["ci"] else "")
            + (f" {r['unit']}" if r["unit"] else "")
            + (f" (gap {d['effect'] + r['margin']:+.3g}, margin {r['margin']:g})" if r["margin"] else "")
            + (f"; {r['means'][0]:.4g} vs {r['means'][1]:.4g}" if r["means"] else "") + p)


def glance_lines(blocks: list[dict]) -> list[str]:
    """The first screen: per scale, each central claim with its setting, the paper's effect, ours with its 95 %
    interval (and margin), the verdict and its preconditions' measured values; then every verdict counted."""
    out = ["## Did it reproduce? The central claims at a glance", ""] if blocks else []
    for b in blocks:
        out += [f"**At `{b['scale']}`**" + (f", {esc(b['budget'])}" if b["budget"] else "") + ".", ""]
        rows = [[f"**{r['id']}**" + (f" ({r['kind']})" if r["kind"] != "training" else "") + f": {r['text']}"
                 + (f" ({r['scope']})" if r.get("scope") else ""),
                 r["setting"]["text"], _signed(r["toward"]["paper"]), _ours(r),
                 f"{r['symbol']} {r['label']}" + (f" (why: {r['why']})" if r.get("why") else "")
                 + (f"; {r['qualifier']}" if r["qualifier"] else "") + "".join(
                     f"; {p['symbol']} {p['id']} {p['label']}" + (f" ({p['measured']})" if p["measured"] else "")
                     for p in r["preconditions"])] for r in b["rows"]]
        if rows:
            out += [_table(rows, ["claim", "setting of its deciding comparison's runs", "paper",
                                  "ours, 95 % CI (+ = the claim's direction); p (one-sided, Holm)", "verdict"]),
                    ""]
        out += [f"All verdicts: {esc(b['counts'])}", ""] if b["counts"] else []
    return out


def _runs_section(cmp: Comparison) -> list[str]:
    """Where, when, on what and at what cost the records were made; then any invalid records."""
    lines = ["## Runs", ""]
    runs = describe(cmp.records, cmp.scales)
    if runs:
        lines += [_table([[r["scale"], r["runs"], ", ".join(f"{k} {v}" for k, v in r["status"].items()),
                           "; ".join(r["data"]), "; ".join(r["hardware"]), "; ".join(r["commits"]),
                           "; ".join(r["versions"]), r["period"],
                           "-" if r["compute_hours"] is None else f"{r['compute_hours']} h"] for r in runs],
                         ["scale", "runs", "status", "data", "hardware", "commit", "versions", "started", "compute"]),
                  ""]
    else:
        lines += [f"No records yet. Run `make reproduce PAPER={cmp.paper.id}` to fill the tables.", ""]
    if cmp.problems:
        lines += ["## Problems", "", *[f"- **invalid:** {esc(x)}" for x in cmp.problems], ""]
    return lines


def _claims_section(a: Assessment) -> list[str]:
    """Verdicts per scale, then the preconditions that decide which of them speak for the paper."""
    if not a.verdicts:
        return ["## Claims", "", "No claims listed in paper.yaml.", ""]
    lines = ["## Claims", "", LEGEND, "", *scale_sections(a.verdicts, a.verdicts + a.preconditions, a.settings)]
    if a.preconditions:
        lines += ["### Preconditions: the paper's regime, measured", "",
                  "A claim that requires a precondition is judged only where it is met (holds); elsewhere it is "
                  "outside the paper's regime.", "",
                  *scale_sections(a.preconditions, a.preconditions, a.settings, "####")]
    return lines


def _table_section(cmp: Comparison, t, figures: list[RenderedFigure], out_dir: Path) -> list[str]:
    """One paper table: its source, then each scale's view with that scale's figures; smoke views folded."""
    lines = [f"## {esc(t.id)}: {esc(t.caption)}", "", f"Source: {esc(t.source)}", ""]
    if t.note:
        lines += [f"Note: {esc(t.note)}", ""]
    for view in (v for v in cmp.views if v.table is t):
        body = view_lines(cmp, view) + [x for f in figures if (f.spec.table, f.scale) == (t.id, view.scale)
                                        for x in figure_lines(f, out_dir)]
        if is_smoke(view.scale):
            body = [f"<details><summary>{t.id} at scale {view.scale} (smoke)</summary>", "", *body, "</details>", ""]
        lines += body
    return lines


def figure_lines(f: RenderedFigure, out_dir: Path) -> list[str]:
    head = f"**{esc(f.spec.id)}** ({f.scale or 'no scale'}): {esc(f.spec.caption)} {esc(f.explains)}"
    if f.path is None:
        return [head + f" — {esc(f.note)}", ""]
    return [head, "", f"![{esc(f.spec.id)}]({os.path.relpath(f.path, out_dir)})", ""]
