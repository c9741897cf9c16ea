"""Writing many cells of a table whose columns fit their contents."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from PySide6.QtWidgets import QHeaderView, QTableWidget

FIT = QHeaderView.ResizeMode.ResizeToContents


@contextmanager
def bulk_fill(table: QTableWidget) -> Iterator[None]:
    """While the block writes ``table``'s cells, its columns fitted to their contents are fixed,
    then measured once at the end: each cell written measured its whole column again, a cost
    that grew with rows x rows (2,193 corpus files held the window ~2 min after a run; 200 runs
    took 5.5 s at each of the Runs tab's refreshes, every 3 s)."""
    header = table.horizontalHeader()
    fitted = [c for c in range(header.count()) if header.sectionResizeMode(c) == FIT]
    for c in fitted:
        header.setSectionResizeMode(c, QHeaderView.ResizeMode.Fixed)
    table.setUpdatesEnabled(False)
    try:
        yield
    finally:
        for c in fitted:
            header.setSectionResizeMode(c, FIT)
        table.setUpdatesEnabled(True)
