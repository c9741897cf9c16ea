"""Stop pressed while a run is still being prepared (corpus, tokenizer, model, kernels)."""

from __future__ import annotations

from .helpers import RUN_TIMEOUT, close_window, small_window


def test_stop_while_preparing_says_how_the_run_ended(qtbot, tmp_path):
    """A walk-through pressed Stop during a long preparation and the window went back to plain
    "idle": the status line, the status bar and the log say the run stopped, and at which
    step."""
    win = small_window(qtbot, tmp_path / "runs")
    try:
        win.train.max_steps.setValue(50)
        win.progress.setMaximum(110)  # a previous run's
        win.progress.setValue(45)
        win.start_training()
        assert win.state == "running" and win.status.text().startswith("preparing")
        win.stop()  # before the run has even opened
        qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
        said = win.statusBar().currentMessage() + "\n" + win.log.toPlainText()
        assert "stopped at step" in said, said
        # the status line, which outlives the status bar's message, says it too
        assert win.status.text().startswith("idle · last run: "), win.status.text()
        assert win.status.text().endswith("stopped at step 0"), win.status.text()
        assert win.progress.text() == ""  # not the previous run's 45 / 110 steps
    finally:
        close_window(qtbot, win)
