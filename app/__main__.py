"""``python -m app``: open Mamba Studio on the bundled sample corpus.

Options for scripted runs: ``--train-steps N --screenshot out.png`` starts training at once,
waits for N steps and a preview, saves a screenshot of the window and quits.
"""

from __future__ import annotations

import argparse
import sys

import engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app")
    parser.add_argument("--run-dir")
    parser.add_argument("--train-steps", type=int, default=0)
    parser.add_argument("--screenshot")
    parser.add_argument("--preset", choices=["tiny", "small", "medium"])
    args = parser.parse_args(argv)
    engine.configure(tune_allocator=True)  # before NumPy, Numba and Qt load (see engine.runtime)

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from .main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Mamba Studio")
    app.setOrganizationName("MambaStudio")
    win = MainWindow(run_dir=args.run_dir)
    if args.preset:
        win.train.preset.setCurrentText(args.preset)
    win.show()
    if args.train_steps:
        win.train.max_steps.setValue(args.train_steps)
        win.train.epochs.setValue(max(win.train.epochs.value(), 50))

        def maybe_finish() -> None:
            if win.state == "idle" and win.plots.steps:
                if args.screenshot:
                    app.processEvents()
                    win.grab().save(args.screenshot)
                app.quit()

        win.state_changed.connect(lambda _s: QTimer.singleShot(300, maybe_finish))
        QTimer.singleShot(200, win.start_training)
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(main())
