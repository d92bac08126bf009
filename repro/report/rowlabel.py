"""What a table row measured at a scale whose models change it ("k = 5 of 5" for "k = 10"), from record metrics."""
from __future__ import annotations

from repro.paper import Table


def measured_row(table: Table, row: str, scale: str | None, index) -> str:
    """The distinct labels the records of one row at one scale give (empty without a ``measured_label``)."""
    if not table.measured_label:
        return ""
    texts = set()
    for col in table.columns:
        for rec, _ in index.get((scale, table.id, row, col.key), []):
            metrics = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
            try:
                texts.add(table.measured_label.format(**metrics))
            except (KeyError, IndexError, ValueError, AttributeError):  # a record without those metrics
                continue
    return " / ".join(sorted(texts))


def with_measured(label: str, measured: str) -> str:
    """'k = 10 (ours: k = 5 of 5 GPSA)'; the paper's label alone where ours says the same."""
    return f"{label} (ours: {measured})" if measured and measured != label else label
