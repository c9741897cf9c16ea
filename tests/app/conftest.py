import pytest
from PySide6.QtCore import QSettings

from .helpers import close_window, small_window


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, monkeypatch):
    """Each GUI test gets its own QSettings store and HOME (nothing leaks between tests); the
    estimate's 2-step timing is off unless a test turns it on (it competes for the CPU)."""
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "cfg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MAMBA_STUDIO_NO_MEASURE", "1")
    yield
    from app import gc_thread

    gc_thread.release_all()  # a window a test left open must not keep the engine tests that
    # follow without automatic garbage collection


@pytest.fixture
def win(qtbot, tmp_path):
    """The real main window (small, its runs under tmp_path/runs), closed after the test."""
    w = small_window(qtbot, tmp_path / "runs")
    yield w
    close_window(qtbot, w)
