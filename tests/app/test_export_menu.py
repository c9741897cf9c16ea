"""File > Export acts on the run the window shows (opened, training, or last finished; a run
overlaid with Compare is not it), names that run and its step in the save dialog."""

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from engine import run as runapi
from engine.trainer import TrainConfig

from .helpers import RUN_TIMEOUT, close_window, small_window, train_until_idle

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"


@pytest.fixture
def win(qtbot, tmp_path):
    w = small_window(qtbot, tmp_path / "runs")
    yield w
    close_window(qtbot, w)


def _run(root: Path, steps: int) -> str:
    """A closed run trained for ``steps`` optimizer steps (0: a snapshot of the initial weights)."""
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64,
                                                           max_steps=max(steps, 1)))
    with runapi.start(spec, [SAMPLE], root=root) as run:
        if steps:
            run.train()
        return str(run.folder)


def _action(w, text: str):
    file_menu = w.menuBar().actions()[0].menu()
    found = [a for a in file_menu.actions() if a.text() == text]
    assert found, [a.text() for a in file_menu.actions()]
    return found[0]


def _fake_save(monkeypatch, path: Path) -> list[tuple]:
    """QFileDialog.getSaveFileName answers ``path``; returns the calls' (caption, default)."""
    calls: list[tuple] = []

    def fake(parent, caption="", directory="", *a, **k):
        calls.append((caption, directory))
        return str(path), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", fake)
    return calls


def test_export_menu_exports_the_opened_run_not_the_last_trained_or_compared(
        win, qtbot, tmp_path, monkeypatch):
    """The walk-through: a run trained (then stopped) in the window, another opened, a third
    compared; File > Export model (merged) wrote the stopped run and never named its source."""
    last = train_until_idle(qtbot, win, max_steps=1)  # the window's last run: step 1
    opened = _run(tmp_path / "other", 3)
    compared = _run(tmp_path / "other", 2)
    win.open_run_view(opened)
    win.compare_run(compared)
    calls = _fake_save(monkeypatch, tmp_path / "merged")
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "3 optimizer steps" in card and Path(last).name not in card
    caption = calls[0][0]
    assert f"run {Path(opened).name} (step 3)" in caption, caption
    assert Path(calls[0][1]).name == f"{Path(opened).name}-merged"
    assert Path(opened).name in win.log.toPlainText().splitlines()[-1]

    calls = _fake_save(monkeypatch, tmp_path / "adapter")  # the adapter item asks about it too
    monkeypatch.setattr(win, "export", lambda *a, **k: None)
    _action(win, "Export LoRA adapter (PEFT)…").trigger()
    assert f"run {Path(opened).name} (step 3)" in calls[0][0]


def test_export_items_are_off_until_a_run_is_shown(qtbot, tmp_path):
    w = small_window(qtbot, tmp_path / "runs")
    try:
        items = ["Export model (merged)…", "Export LoRA adapter (PEFT)…"]
        assert not any(_action(w, t).isEnabled() for t in items)
        folder = _run(tmp_path / "runs", 0)
        w.open_run_view(folder)
        assert all(_action(w, t).isEnabled() for t in items)
    finally:
        close_window(qtbot, w)
