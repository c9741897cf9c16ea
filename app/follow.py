"""Following a run another process trains (a command-line run opened in the window): its
curves and samples were drawn once, as they were when it was opened, while it went on."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

import engine

FOLLOW_MS = 2000  # how often the shown run's files are looked at (two stat calls)
REDRAW_SHARE = 0.1  # at most this share of the GUI thread's time goes to redrawing the run


class RunFollower(QObject):
    """While ``folder`` is held by another process, ``grew`` when its metrics or samples file
    changes size (``engine.progress_mark``; ``changed`` says which of the two), then ``ended``
    once no process holds it (after a last ``grew`` when its files changed meanwhile).
    ``follow`` a run not held elsewhere, or ``stop``: nothing more is said."""

    grew = Signal(str)
    ended = Signal(str)

    def __init__(self, parent: QObject | None = None, interval_ms: int = FOLLOW_MS) -> None:
        super().__init__(parent)
        self.interval_ms = interval_ms
        self.folder: str | None = None
        self._mark: tuple[int, int] = (-1, -1)
        self.changed = (True, True)  # (metrics.csv, samples.jsonl) changed at the last ``grew``
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._poll)

    def follow(self, folder: str | None) -> bool:
        """Follow ``folder`` if another process trains it now (True), else stop (False)."""
        self.stop()
        if folder is None or not engine.RunLock(Path(folder)).held_elsewhere():
            return False
        self.folder = folder
        self._mark = engine.progress_mark(folder)
        self.timer.start(self.interval_ms)
        return True

    def redrawn_in(self, seconds: float) -> None:
        """A redraw after ``grew`` took ``seconds``: look again no sooner than that many over
        ``REDRAW_SHARE`` (a run of 100,000 steps takes ~1 s to read and draw; every 2 s it
        would have held the window half the time)."""
        self.timer.setInterval(max(self.interval_ms, int(seconds * 1000 / REDRAW_SHARE)))

    def stop(self) -> None:
        self.folder = None
        self.timer.stop()

    def _poll(self) -> None:
        folder = self.folder
        if folder is None:
            return
        training = engine.RunLock(Path(folder)).held_elsewhere()  # (before the files: its last
        mark = engine.progress_mark(folder)  # rows are written before the lock goes)
        if mark != self._mark:
            self.changed = (mark[0] != self._mark[0], mark[1] != self._mark[1])
            self._mark = mark
            self.grew.emit(folder)
        if not training and self.folder == folder:
            self.stop()
            self.ended.emit(folder)
