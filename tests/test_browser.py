"""report.html in a real browser: headless Chromium loads it from file://, we read back the DOM and a screenshot.

Skips when Chromium is missing, except under CI=true (.ci/run installs it), where that is a failure.
"""
import html
import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from repro.records import write_record
from repro.report import build_index, build_report

REPO = Path(__file__).resolve().parents[1]

PAPER = """\
id: demo
title: "Demo & <i>friends</i>"
tables:
  - id: tab
    caption: "Accuracy <script>document.title='pwned'</script> & friends"
    source: Table 1
    columns:
      - {key: base, label: Base}
      - {key: ours, label: Ours}
      - {key: gap, label: Gap, unit: "%", derived: {op: rel_gap, a: ours, b: base}}
    rows:
      - {key: a, label: A, x: 1, values: {base: "50.0", ours: "55.0", gap: "10%"}}
      - {key: b, label: B, x: 2, values: {base: "60.0", ours: "62.0"}}
figures:
  - {id: acc, caption: "ours vs base", kind: vs_rows, table: tab,
     series: [{label: Base, column: base}, {label: Ours, column: ours}]}
claims:
  - {id: ahead, text: "Ours > Base <always>", table: tab, check: greater, columns: [ours, base]}
"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed but CI=true: .ci/run must install it (apt-get install chromium)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    return exe


def _run(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


class _Tables(HTMLParser):
    """Collects the tables (their attributes and cell texts) and any script element of a DOM dump."""

    def __init__(self):
        super().__init__()
        self.tables, self.scripts, self.title, self.ours, self._in, self.svg = [], 0, "", [], None, 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"attrs": dict(attrs), "cells": []})
        elif tag in ("td", "th") and self.tables:
            self.tables[-1]["cells"].append("")
        elif tag == "script":
            self.scripts += 1
        elif tag == "svg":  # an inline plot's <title> is its tooltip, not the page's
            self.svg += 1
        elif tag == "span" and dict(attrs).get("class") == "ours":
            self.ours.append("")
            tag = "ours"
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None
        self.svg -= tag == "svg"

    def handle_data(self, data):
        if self._in == "title" and not self.svg:
            self.title += data
        if self._in == "ours":
            self.ours[-1] += data
        if self.tables and self.tables[-1]["cells"]:
            self.tables[-1]["cells"][-1] += data


@pytest.mark.slow
def test_report_opens_in_chromium(tmp_path):
    exe = _chromium()
    papers, results = tmp_path / "papers", tmp_path / "results"
    (papers / "demo").mkdir(parents=True)
    (papers / "demo" / "paper.yaml").write_text(PAPER)
    for seed in range(3):
        for row, base, ours in (("a", 50.0, 56.0), ("b", 60.0, 61.0)):
            for col, v in (("base", base + seed), ("ours", ours + seed)):
                write_record(dict(run_id=f"{col}-{row}-{seed}", paper="demo", table="tab",
                                  cell={"row": row, "columns": {col: "top1"}}, scale="full", seed=seed,
                                  status="finished", metrics={"top1": v}, config={"data": "cifar10"},
                                  provenance={"git_sha": "feedface", "device": "cpu"}), root=results)
    build_report("demo", papers, results, notebook_execute=None)
    build_index(papers, results)
    page = (results / "demo" / "report.html").resolve()

    dom = _run(exe, tmp_path / "profile1", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln], dom.stderr[-2000:]
    parsed = _Tables()
    parsed.feed(dom.stdout)
    assert parsed.scripts == 0  # the caption's <script> stayed text
    assert parsed.title == "Demo & <i>friends</i> — reproduction report"
    compare = [t for t in parsed.tables if t["attrs"].get("class") == "compare-table"]
    assert [t["attrs"]["data-table"] for t in compare] == ["tab"]
    assert parsed.ours[:3] == ["51.00 ± 1.00", "57.00 ± 1.00", "11.8 ± 0.2"]  # row A: base, ours, gap
    claims = next(t for t in parsed.tables if t["attrs"].get("id") == "claims-table")
    assert any("Ours > Base <always>" in c for c in claims["cells"])
    assert '<span class="verdict v-holds" data-scale="full">holds · full</span>' in dom.stdout
    assert "Accuracy <script>document.title='pwned'</script> & friends" in dom.stdout.replace("&lt;", "<").replace(
        "&gt;", ">").replace("&amp;", "&")

    shot = tmp_path / "report.png"
    res = _run(exe, tmp_path / "profile2", "--hide-scrollbars", "--window-size=1200,1600", f"--screenshot={shot}",
               page.as_uri())
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1200, 1600)
    assert len(data) > 20_000  # a rendered page, not a blank one
    index = _run(exe, tmp_path / "profile3", "--dump-dom", (results / "index.html").resolve().as_uri())
    assert 'href="demo/report.html"' in index.stdout and "ahead" in index.stdout


HARNESS = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="f" src="{src}" style="width:{width}px;height:900px;border:0"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {{
  const doc = document.getElementById("f").contentDocument;
  const root = doc.documentElement;
  const found = id => doc.getElementById(id) || doc.getElementById(decodeURIComponent(id));
  const missing = [...doc.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute("href").slice(1))
    .filter(id => !found(id));
  const images = [...doc.images];
  const broken = images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt);
  const verdicts = [...doc.querySelectorAll('table.claims .verdict, p.tally .verdict, #papers-table .verdict')];
  const unscaled = verdicts.filter(v => !v.dataset.scale || !v.textContent.includes(v.dataset.scale.split("-")[0])
    && !v.textContent.includes("smoke") && !/^\\d/.test(v.textContent)).map(v => v.textContent);
  const rows = [...doc.querySelectorAll('table.glance tr.glance-row')];
  const first = rows.length ? rows[0].getBoundingClientRect().top + doc.defaultView.scrollY : null;
  const lead = doc.querySelector('#lead tr:nth-child(2)');
  const leadTop = lead ? lead.getBoundingClientRect().top + doc.defaultView.scrollY : null;
  const wide = [...doc.querySelectorAll('table')].filter(t => t.closest('.scroll, details:not([open])') === null
    && t.getBoundingClientRect().width > root.clientWidth).length;
  const win = doc.defaultView;  // phone width: each card's numbers keep their column's name (::before)
  const unlabelled = win.innerWidth < 700 ? [...doc.querySelectorAll('table.glance tr.glance-row td, #lead td.num')]
    .filter(td => !/^".+"$/.test(win.getComputedStyle(td, "::before").content)).length : 0;
  const leadBox = doc.getElementById("lead");  // the line per paper, verdict included, without scrolling its box
  const leadOver = leadBox ? leadBox.getBoundingClientRect().width - leadBox.parentElement.clientWidth : 0;
  const out = document.createElement("pre");
  out.id = "result";
  out.textContent = JSON.stringify({{lead_over: leadOver, unlabelled: unlabelled, overflow: root.scrollWidth - root.clientWidth, links: doc.querySelectorAll(
    'a[href^="#"]').length, missing: missing, images: images.length, broken: broken, verdicts: verdicts.length,
    unscaled: unscaled, height: root.scrollHeight, glance_rows: rows.length, first_row_top: first, wide: wide,
    lead_top: leadTop, lead_rows: doc.querySelectorAll('#lead tr').length - 1}});
  document.body.appendChild(out);
}});
</script></body></html>"""


def _open(page: Path, width: int, tmp_path: Path) -> dict:
    """Load a page in an iframe of ``width`` px and read back overflow, anchors, images and verdict labels."""
    exe = _chromium()
    tmp_path.mkdir(parents=True, exist_ok=True)
    harness = tmp_path / f"harness-{width}.html"
    harness.write_text(HARNESS.format(src=page.resolve().as_uri(), width=width))
    dom = _run(exe, tmp_path / f"profile-{width}", "--allow-file-access-from-files", "--virtual-time-budget=15000",
               "--dump-dom", harness.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


MAX_HEIGHT = 6000  # px at 1440: a report's verdicts fit its first screens, the rest is collapsed
FIRST_SCREEN = 844  # px: the first verdict row starts within a phone's screen (and a laptop's)


def _files_resolve(page: Path) -> list[str]:
    """Every link and image of a page that is neither in-page nor remote nor inline, and names no file or folder
    of a fresh clone (relative to the page; the fragment left out)."""
    refs = re.findall(r'(?:href|src)="([^"#]+)(?:#[^"]*)?"', page.read_text())
    local = [r for r in refs if not r.startswith(("http://", "https://", "data:", "mailto:"))]
    return [r for r in local if not (page.parent / html.unescape(r)).exists()]


def _first_screen_ok(result: dict, width: int) -> None:
    assert result["glance_rows"] > 0 and result["first_row_top"] < FIRST_SCREEN, result
    if width == 1440:
        assert result["height"] <= MAX_HEIGHT, result


@pytest.mark.slow
@pytest.mark.parametrize("width", [1440, 390])
@pytest.mark.parametrize("paper", ["convit", "cmhsa", "oversmoothing", "augvit", "respostln", "crosspaper"])
def test_committed_report_reads_in_chromium(paper, width, tmp_path):
    """The committed report at desktop and phone width: no sideways scroll of the page, its first screen holds
    the verdict rows, at most 6,000 px tall at 1440, every in-page link (table of contents, claim -> table) lands
    on an element and every other link or image names a file of the clone, every figure decodes, every verdict
    badge names its scale; the index's claim links exist."""
    page = REPO / "results" / paper / "report.html"
    result = _open(page, width, tmp_path)
    assert result["overflow"] <= 0 and result["unlabelled"] == 0, result
    if result["glance_rows"] or "No training claim is judged at this scale." not in page.read_text():
        _first_screen_ok(result, width)  # else a campaign not yet judged: the page says so where the rows go
    assert _files_resolve(page) == []
    assert result["links"] > 5 and result["missing"] == [], result
    assert result["images"] == page.read_text().count("<img ") > 0
    assert result["broken"] == [], result
    assert result["verdicts"] > 10 and result["unscaled"] == [], result
    ids = set(re.findall(r'id="([^"]+)"', page.read_text()))
    index = (REPO / "results" / "index.html").read_text()
    targets = re.findall(rf'href="{paper}/report\.html#([^"]+)"', index)
    assert targets and set(targets) <= ids


@pytest.mark.slow
@pytest.mark.parametrize("width", [1440, 390])
def test_committed_index_opens_on_every_papers_verdict_rows(width, tmp_path):
    """The index at desktop and phone width: no sideways scroll, a line per paper starting within the first screen
    (then each paper's first-screen block), at most 6,000 px tall at 1440, every link and image resolves."""
    page = REPO / "results" / "index.html"
    result = _open(page, width, tmp_path)
    assert result["overflow"] <= 0 and result["missing"] == [] and result["broken"] == [], result
    assert result["unlabelled"] == 0, result  # at 390 every first-screen cell and the lead's numbers named
    assert result["lead_rows"] == 6 and result["lead_top"] < FIRST_SCREEN and result["glance_rows"] > 0, result
    if width == 1440:
        assert result["height"] <= MAX_HEIGHT and result["lead_over"] <= 0, result
    text = page.read_text()
    assert all(f'id="glance-{p}"' in text for p in ("convit", "cmhsa", "oversmoothing", "augvit", "respostln",
                                                     "crosspaper"))
    assert _files_resolve(page) == []


@pytest.mark.slow
@pytest.mark.parametrize("width", [1440, 390])
def test_committed_index_and_notebooks_read_in_chromium(width, tmp_path, built_notebooks):
    """The index and every notebook at desktop and phone width: no sideways page scroll, every in-page
    anchor resolves, every verdict badge names its scale."""
    pages = [REPO / "results" / "index.html", *(REPO / "results" / p / "notebook.html" for p in
                                                ("convit", "cmhsa", "oversmoothing", "augvit", "respostln"))]
    for page in pages:
        result = _open(page, width, tmp_path / page.parent.name)
        assert result["overflow"] <= 0 and result["missing"] == [], (page, result)
        assert result["verdicts"] > 10 and result["unscaled"] == [], (page, result)


NETWORK_HARNESS = """<!DOCTYPE html><html><body>
<iframe id="f" src="{src}" style="width:1200px;height:900px;border:0"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {{
  const win = document.getElementById("f").contentWindow;
  const out = document.createElement("pre");
  out.id = "result";
  out.textContent = JSON.stringify(win.performance.getEntriesByType("resource").map(e => e.name));
  document.body.appendChild(out);
}});
</script></body></html>"""


def _requested(page: Path, tmp_path: Path) -> list[str]:
    """The URLs Chromium requested while showing ``page`` in an iframe, every host name unresolvable."""
    harness = tmp_path / "harness.html"
    harness.write_text(NETWORK_HARNESS.format(src=page.resolve().as_uri()))
    dom = _run(_chromium(), tmp_path / "profile", "--allow-file-access-from-files", "--virtual-time-budget=15000",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", harness.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="result">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.slow
def test_the_offline_harness_sees_a_request_that_fails(tmp_path):
    """The control for the test below: a page asking for a stylesheet and an image from the network shows both
    in the list although neither resolves, so an empty list there means no such request. A failed fetch() is
    not listed (Chromium keeps no resource entry for it): the test below reads scripted requests off the text."""
    page = tmp_path / "online.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="stylesheet" href="https://cdn.invalid/s.css"></head>'
                    '<body><img src="https://img.invalid/a.png"></body></html>')
    assert {"https://cdn.invalid/s.css", "https://img.invalid/a.png"} <= set(_requested(page, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("paper", ["convit", "cmhsa", "oversmoothing", "augvit", "respostln"])
def test_committed_notebook_html_needs_no_network(paper, tmp_path, built_notebooks):
    """notebook.html opens offline: no script or stylesheet from a CDN in the page, and Chromium, with every
    host name made unresolvable, requests nothing but the file itself and inline data."""
    page = REPO / "results" / paper / "notebook.html"
    text = page.read_text()
    assert not re.search(r'<(script|link)[^>]+(src|href)="https?://', text)
    scripted = r'(fetch|import|\.open\s*\(\s*[\'"][A-Z]+[\'"]\s*,)\s*\(?\s*[\'"`]https?://'  # fetch, import, XHR open
    assert not re.search(scripted, text)  # a failed scripted request is not in the harness's list
    requested = _requested(page, tmp_path)
    assert [u for u in requested if not u.startswith(("file:", "data:", "blob:"))] == []
