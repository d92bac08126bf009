"""The committed pages a reader opens: one full page per paper (report.html), REPORT.md its short summary."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAPERS = ["convit", "cmhsa", "oversmoothing", "augvit", "respostln", "crosspaper"]


@pytest.mark.parametrize("paper", PAPERS)
def test_report_md_is_a_summary_linked_into_the_one_full_page(paper):
    """REPORT.md quotes the first screen's rows and links into report.html, whose anchors exist; neither file
    embeds a figure a second time (the PNGs are committed beside them)."""
    out = REPO / "results" / paper
    md, page = (out / "REPORT.md").read_text(), (out / "report.html").read_text()
    assert len(md) < 40_000 and "## Runs" not in md
    anchors = re.findall(r"\(report\.html#([^)]+)\)", md)
    ids = set(re.findall(r'id="([^"]+)"', page))
    assert anchors and set(anchors) <= ids, set(anchors) - ids
    assert "data:image" not in page
    for src in re.findall(r'<img src="([^"]+)"', page):
        assert (out / src).is_file(), src


def test_committed_pages_are_a_fraction_of_their_embedded_size():
    """Every report page, REPORT.md and the index together: under 2.5 MB (8.96 MB when each page embedded its
    figures and REPORT.md rendered the whole report again)."""
    pages = [*REPO.glob("results/*/report.html"), *REPO.glob("results/*/REPORT.md"), REPO / "results" / "index.html"]
    assert len(pages) == 2 * len(PAPERS) + 1
    assert sum(p.stat().st_size for p in pages) < 2_500_000

