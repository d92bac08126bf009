"""Reports: paper.yaml + records -> comparisons, claim verdicts, REPORT.md, report.html, figures, notebook.

Entry points: ``build_report(paper_id, papers_dir, results_dir)`` and ``build_index(papers_dir,
results_dir)``; from the shell ``python -m repro.report [--paper ID]`` (= ``make report``).
"""
from repro.report.build import UnknownPaper, build_all, build_index, build_report

__all__ = ["UnknownPaper", "build_all", "build_index", "build_report"]
