"""REPORT.md: the first screen's rows, linked into report.html, the one full page (a second would drift)."""
from __future__ import annotations

from tabulate import tabulate

from repro.report.assess import Assessment
from repro.report.glance import first_screen
from repro.report.readme import effect, signed

_ESCAPES = str.maketrans({"|": r"\|", "<": r"\<", ">": r"\>", "&": r"\&", "\n": " "})
PAGE = "report.html"


def esc(text: object) -> str:
    """Paper text as literal Markdown: table pipes and HTML-looking text cannot break the page."""
    return str(text).translate(_ESCAPES)


def render(a: Assessment) -> str:
    """The whole REPORT.md as a string: title, the first screen's rows, and links into report.html."""
    p = a.cmp.paper
    bib = " · ".join(x for x in [", ".join(p.authors), p.venue, f"arXiv {p.arxiv}" if p.arxiv else "",
                                  p.code] if x)
    sections = [("runs", "runs"), *([("problems", "problems")] if a.cmp.problems else []), ("claims", "every claim"),
                *[(t.id, t.id) for t in p.tables]]
    lines = [f"# {esc(p.title)}", "", esc(bib), "",
             f"A summary of [{PAGE}]({PAGE}), the full report (every table, claim, comparison and figure; open it in "
             f"a browser), built from records only (`python -m repro.report --paper {p.id}`). Data: "
             "[summary.json](summary.json), [claims.csv](claims.csv), [comparisons.csv](comparisons.csv), "
             "[cells.csv](cells.csv), [values.csv](values.csv).", "",
             *glance_lines(first_screen(a)),
             f"In {PAGE}: " + " · ".join(f"[{label}]({PAGE}#{anchor})" for anchor, label in sections), ""]
    return "\n".join(lines).rstrip() + "\n"


def _ours(r: dict) -> str:
    """Ours in the claim's direction with its interval, margin, means and p (one-sided, Holm; across the family)."""
    d, fam = r["toward"], r.get("family")
    p = f"; p {fam['p']:.2g} that it {fam['side']}, Holm across the {fam['size']} rows compared with " \
        f"{fam['baseline']}: {fam['p_holm']:.2g}" if fam else (f"; p {r['p']:.2g} that it {r['p_side']}"
                                                                 if r.get("p") is not None else "")
    return (effect(r) + (f" (gap {d['effect'] + r['margin']:+.3g}, margin {r['margin']:g})" if r["margin"] else "")
            + (f"; {r['means'][0]:.4g} vs {r['means'][1]:.4g}" if r["means"] else "") + p)


def glance_lines(blocks: list[dict]) -> list[str]:
    """The first screen: per scale, each central claim's row, then every verdict counted."""
    out = ["## Did it reproduce? The central claims at a glance", ""] if blocks else []
    for b in blocks:
        out += [f"**At `{b['scale']}`**" + (f", {esc(b['budget'])}" if b["budget"] else "") + ".", ""]
        rows = [[f"[**{r['id']}**]({PAGE}#claim-{r['id']}-{b['scale']})"
                 + (f" ({r['kind']})" if r["kind"] != "training" else "") + f": {r['text']}"
                 + (f" ({r['scope']})" if r.get("scope") else ""),
                 r["setting"]["text"], signed(r["toward"]["paper"]), _ours(r),
                 f"{r['symbol']} {r['label']}" + (f" (why: {r['why']})" if r.get("why") else "")
                 + (f"; {r['qualifier']}" if r["qualifier"] else "") + "".join(
                     f"; {p['symbol']} {p['id']} {p['label']}" + (f" ({p['measured']})" if p["measured"] else "")
                     for p in r["preconditions"])] for r in b["rows"]]
        if rows:
            head = ["claim", "setting of its deciding comparison's runs", "paper",
                    "ours, 95 % CI (+ = the claim's direction); p (one-sided, Holm)", "verdict"]
            out += [tabulate([[esc(c) for c in r] for r in rows], headers=[esc(h) for h in head], tablefmt="github",
                             disable_numparse=True), ""]
        out += [f"All verdicts: {esc(b['counts'])}", ""] if b["counts"] else []
    return out


