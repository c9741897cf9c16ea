"""``python -m app``: open Mamba Studio on the bundled sample corpus.

Scripted use: ``--train-steps N --shots DIR`` starts training at once, waits for N steps, then
saves screenshots of each tab into DIR (screenshot.png, screenshot-corpus.png, -runs, -gallery,
-playground) and quits. ``--settings-dir`` keeps remembered settings out of the user's own.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from pathlib import Path

import engine

from . import default_runs_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app")
    parser.add_argument("--runs-root", help="folder that holds the runs (default: ~/.local/share/"
                        "mamba-studio/runs)")
    parser.add_argument("--settings-dir", help="store remembered settings here instead")
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--shots", help="with --train-steps: save screenshots of the tabs here")
    parser.add_argument("--preset", choices=list(engine.PRESET_DEFAULTS))
    args = parser.parse_args(argv)
    root = args.runs_root or default_runs_root()  # a file there, no permission, a read-only
    try:  # home: one line, not a traceback from the window (the default root gave one)
        Path(root).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "--runs-root " if args.runs_root else "the runs folder "
        print(f"error: {what}{root}: {exc.strerror or exc}; choose a folder you can write "  # noqa: T201
              "with --runs-root", file=sys.stderr)
        return 2
    try:
        engine.configure(tune_allocator=True)  # before NumPy, Numba and Qt load (see engine.runtime)
    except engine.MambaStudioError as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201  (the CLI's one-line error)
        return 2

    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    if args.settings_dir:
        QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, args.settings_dir)
    from .main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Mamba Studio")
    app.setOrganizationName("MambaStudio")
    win = MainWindow(runs_root=args.runs_root)
    if args.preset:
        win.train.preset.setCurrentText(args.preset)
    win.show()
    _close_on_signals(app, win)
    _say_unexpected_errors(win)
    if args.train_steps:
        win.train.max_steps.setValue(args.train_steps)
        win.train.epochs.setValue(max(win.train.epochs.value(), 50))
        shots = _Shots(app, win, Path(args.shots)) if args.shots else None

        def maybe_finish() -> None:
            if win.state == "idle" and win.plots.steps:
                if shots is not None:
                    shots.take()
                else:
                    app.quit()

        win.state_changed.connect(lambda _s: QTimer.singleShot(500, maybe_finish))
        QTimer.singleShot(200, win.start_training)
    return app.exec()


def _say_unexpected_errors(win) -> None:  # noqa: ANN001
    """An exception that escapes one of the window's slots (a bug) went to the terminal only: the
    window did nothing and said nothing (File > Open settings on a path through a link loop).
    The window says it now in one line; the traceback still goes to the terminal, for a report.
    Exceptions of other threads keep Python's own handling (the workers report theirs)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: object) -> None:
        previous(kind, exc, tb)  # type: ignore[arg-type]
        if issubclass(kind, KeyboardInterrupt) or threading.current_thread() is not \
                threading.main_thread():
            return
        with contextlib.suppress(Exception):
            win.unexpected_error(exc)

    sys.excepthook = hook


def _close_on_signals(app, win) -> None:  # noqa: ANN001
    """Ctrl-C in the terminal (SIGINT), SIGTERM and SIGHUP (the terminal closed) close the window
    as its close button does: a training run finishes its step and saves first (they printed a
    traceback, or ended the process with the work since the last autosave lost). A second
    signal ends the process at once; the last snapshot stays loadable."""
    import os
    import signal

    from PySide6.QtCore import QTimer

    seen: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        if seen:
            os._exit(128 + signum)
        seen.append(signum)
        QTimer.singleShot(0, win.close)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    engine.watch_continues()  # a stop (kill -STOP / -CONT) is left out of the ETA
    tick = QTimer(app)  # Python runs signal handlers only between its own bytecodes: wake it
    tick.timeout.connect(lambda: None)
    tick.start(200)


class _Shots:
    """Screenshots of each tab after a scripted run (the Playground one after a generation)."""

    def __init__(self, app, win, folder: Path) -> None:
        self.app, self.win, self.folder = app, win, folder
        folder.mkdir(parents=True, exist_ok=True)

    def grab(self, name: str) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        loop = QEventLoop()
        QTimer.singleShot(600, loop.quit)  # let plots and tables repaint
        loop.exec()
        self.win.grab().save(str(self.folder / name))

    def take(self) -> None:
        w = self.win
        w.tabs.setCurrentIndex(0)
        w.left_tabs.setCurrentIndex(1)
        self.grab("screenshot.png")
        w.left_tabs.setCurrentIndex(0)
        junk = Path(w.runs_root) / "not-text"
        junk.mkdir(exist_ok=True)
        for i in range(40):
            (junk / f"photo{i:02d}.jpg").write_bytes(b"\xff\xd8\xff")
        w.corpus.add_paths([str(junk)], sync=True)
        w.corpus.table.selectRow(0)
        w.corpus.skipped_btn.setChecked(True)
        self.grab("screenshot-corpus.png")
        w.tabs.setCurrentWidget(w.runs)
        w.runs.refresh()
        if w.last_folder:
            w.runs.select(w.last_folder)
        self.grab("screenshot-runs.png")
        w.tabs.setCurrentWidget(w.gallery)
        w.gallery.table.selectRow(w.gallery.table.rowCount() - 1)
        self.grab("screenshot-gallery.png")
        w.tabs.setCurrentWidget(w.playground)
        pg = w.playground
        pg.prompt.setPlainText(engine.DEFAULT_PROMPT)
        pg.max_tokens.setValue(160)
        def last_shot(_s: object) -> None:
            self.grab("screenshot-playground.png")
            self.app.quit()

        pg.finished.connect(last_shot)
        pg.generate()


def run(argv: list[str] | None = None) -> int:
    """``main`` with a Python that lacks the dependencies said in one line, as the CLI says it
    (the window printed a traceback ending in "No module named 'numba'")."""
    try:
        return main(argv)
    except ModuleNotFoundError as exc:
        if (line := engine.missing_dependency(exc, "app")) is None:
            raise
        print(line, file=sys.stderr)  # noqa: T201
        return 2


if __name__ == "__main__":
    raise SystemExit(run())
