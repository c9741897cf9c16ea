"""Tables whose columns fit their contents, filled with many rows: each cell written measured its
whole column again (a corpus of 2,193 files held the window ~2 min after a run; 200 runs took
5.5 s at each of the Runs tab's refreshes, every 3 s; 0.12 s and 0.013 s filled in one go)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QHeaderView, QTableWidget

import engine
from app.panels.table_fill import bulk_fill

FIT, FIXED = QHeaderView.ResizeMode.ResizeToContents, QHeaderView.ResizeMode.Fixed


def _modes(table: QTableWidget) -> list:
    h = table.horizontalHeader()
    return [h.sectionResizeMode(c) for c in range(h.count())]


def _fills_seen(monkeypatch, panel) -> list:
    """The table's column modes and updates flag each time ``panel._fill_table`` runs."""
    seen: list = []
    fill = panel._fill_table

    def recording(*a, **k):
        seen.append((_modes(panel.table), panel.table.updatesEnabled()))
        return fill(*a, **k)

    monkeypatch.setattr(panel, "_fill_table", recording)
    return seen


def test_bulk_fill_fixes_the_fitted_columns_and_puts_them_back(qtbot):
    t = QTableWidget(0, 2)
    qtbot.addWidget(t)
    h = t.horizontalHeader()
    h.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    h.setSectionResizeMode(1, FIT)
    with pytest.raises(RuntimeError), bulk_fill(t):
        assert _modes(t) == [QHeaderView.ResizeMode.Stretch, FIXED] and not t.updatesEnabled()
        raise RuntimeError("a fill that fails")
    assert _modes(t) == [QHeaderView.ResizeMode.Stretch, FIT] and t.updatesEnabled()


def test_the_corpus_table_is_filled_with_its_fitted_columns_fixed(win, qtbot, tmp_path,
                                                                  monkeypatch):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(50):
        (d / f"f{i:04d}.txt").write_text(f"line {i}\n" * (i + 1))
    c = win.corpus
    qtbot.waitUntil(lambda: c.pending == 0)
    before = _modes(c.table)
    assert before[1:] == [FIT, FIT, FIT]
    seen = _fills_seen(monkeypatch, c)
    c.clear()
    c.add_paths([str(d)], sync=True)
    assert seen and all(modes[1:] == [FIXED] * 3 and not on for modes, on in seen), seen
    assert _modes(c.table) == before and c.table.rowCount() == 50
    widest = max(c.table.fontMetrics().horizontalAdvance(c.table.item(r, 1).text())
                 for r in range(50))
    assert c.table.columnWidth(1) >= widest  # measured once at the end: as wide as its contents


def test_the_runs_table_is_filled_with_its_fitted_columns_fixed(win, tmp_path, monkeypatch):
    from engine import run as runapi
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [Path(engine.__file__).parents[1] / "assets" / "sample_corpus"],
                      root=tmp_path / "runs") as run:
        run.train()
    base = engine.list_runs(tmp_path / "runs")[0]
    runs = [replace(base, name=f"run-{i:04d}", path=tmp_path / f"r{i}") for i in range(50)]
    before = _modes(win.runs.table)
    assert FIT in before
    seen = _fills_seen(monkeypatch, win.runs)
    win.runs._show(runs)
    assert seen == [([m if m != FIT else FIXED for m in before], False)]
    assert _modes(win.runs.table) == before and win.runs.table.rowCount() == 50
