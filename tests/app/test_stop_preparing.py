"""Stop pressed while a run is still being prepared (corpus, tokenizer, model, kernels)."""

from __future__ import annotations

from .helpers import RUN_TIMEOUT, close_window, small_window


def test_stop_while_preparing_says_how_the_run_ended(qtbot, tmp_path):
    """A walk-through pressed Stop during a long preparation: it waited for all of it, went back
    to plain "idle" and left a step-0 run. Preparing now ends at the next corpus piece, nothing
    is kept, and the status line, the status bar and the log say so."""
    win = small_window(qtbot, tmp_path / "runs")
    try:
        win.train.max_steps.setValue(50)
        win.progress.setMaximum(110)  # a previous run's
        win.progress.setValue(45)
        win.preview.show_preview("epoch 3", "a previous run's text", "CPU step")  # ... its sample
        p = win.plots  # ... and its curves and axes
        p.steps, p.losses, p.norms = list(range(1, 24)), [10.0] * 23, [5.0] * 23
        p._dirty = True
        p._redraw()
        qtbot.wait(200)  # painted: the auto-range follows steps 1-23
        win.start_training()
        assert win.state == "running" and win.status.full.startswith("preparing")
        win.stop()  # before the run has even opened
        # no step to finish, nothing to save (it said "after the current step, then saving")
        assert win.status.full == "stopping the preparation…", win.status.full
        qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
        said = win.statusBar().currentMessage() + "\n" + win.log.toPlainText()
        assert "stopped while preparing the run; nothing was trained or kept" in said, said
        # the status line, which outlives the status bar's message, says it too
        assert win.status.full == "idle · last run: stopped while preparing; nothing was kept"
        # no step-0 run is left to clutter the Runs tab (a walk-through found one)
        assert not any((tmp_path / "runs").iterdir()), list((tmp_path / "runs").iterdir())
        assert win.errors == []
        assert win.progress.text() == "no run training"  # not the previous run's 45 / 110 steps
        assert win.preview.output.toPlainText() == "" and "epoch 3" not in win.preview.tag.full
        assert win.preview.tag.full == ("sample — the new run's first sample, of its untrained "
                                          "weights, is made while it trains")
        qtbot.wait(300)  # repainted after the clear
        assert win.plots.loss_plot.viewRange()[0][1] <= 1  # not steps 1-23
    finally:
        close_window(qtbot, win)
