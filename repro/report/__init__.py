"""Reports: paper.yaml + records -> comparisons, verdicts, pages, figures (README.md; ``python -m repro.report``)."""
from repro.report.build import UnknownPaper, build_all, build_index, build_report

__all__ = ["UnknownPaper", "build_all", "build_index", "build_report"]
