"""The plots of a run shown from its folder (Open, Continue) are the plots its live run drew: every
epoch's train and grad-norm mean, its held-out points per step and per epoch, and a bits/byte axis
from that run's own tokens per byte (it was kept from the run shown before)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from app.panels import plots_panel
from app.panels.plots_panel import PlotsPanel
from engine.reports import StepReport
from engine.run import RunSpec, read_metrics, resume, start
from engine.trainer import TrainConfig
from tests.helpers import two_file_corpus


def _corpus(tmp_path: Path) -> Path:
    return two_file_corpus(tmp_path, 40)


def _spec(tokenizer: str, **train) -> RunSpec:
    kw = {"batch_size": 4, "seq_len": 32, "epochs": 2, "eval_every": 3, **train}
    return RunSpec(preset="tiny", tokenizer=tokenizer, train=TrainConfig(**kw), autosave_minutes=0)


def _feed(panel: PlotsPanel, run) -> None:
    """Train ``run`` to its end, feeding ``panel`` the way the window does (MainWindow._on_step,
    _on_epoch: an epoch's point sits at the last step drawn)."""
    def on_epoch(e) -> None:
        panel.add_epoch(e, int(panel.steps[-1]) if panel.steps else 0)

    run.train(on_step=panel.add_step, on_epoch=on_epoch)


def _picture(p: PlotsPanel) -> dict[str, list[float]]:
    return {k: [round(float(v), 6) for v in getattr(p, k)] for k in (
        "steps", "losses", "norms", "epoch_x", "epoch_losses", "epoch_norms", "val_x",
        "val_losses", "val_step_x", "val_step_losses")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    corpus = _corpus(tmp)
    out = {}
    for tok in ("bpe", "bytes"):
        live = PlotsPanel()
        with start(_spec(tok), [corpus], out=tmp / tok) as run:
            _feed(live, run)
        out[tok] = (tmp / tok, _picture(live))
    return out


def test_an_opened_run_redraws_what_its_live_run_drew(qtbot, runs):
    for folder, live in runs.values():
        assert len(live["epoch_x"]) == 2 and len(live["val_x"]) == 2 and live["val_step_x"]
        shown = PlotsPanel()
        qtbot.addWidget(shown)
        shown.load_history(read_metrics(folder))  # what Open and Continue hand the panel
        assert _picture(shown) == live
        opened = PlotsPanel()
        qtbot.addWidget(opened)
        opened.show_run(folder)
        assert _picture(opened) == live


def test_the_bits_per_byte_axis_follows_the_run_shown(qtbot, runs):
    bpe, byt = runs["bpe"][0], runs["bytes"][0]
    tpb_bpe, tpb_bytes = plots_panel.run_tokens_per_byte(bpe), plots_panel.run_tokens_per_byte(byt)
    assert tpb_bpe is not None and tpb_bytes is not None
    assert tpb_bpe < 0.5 and tpb_bytes == pytest.approx(1.0, abs=0.01)  # + document separators
    p = PlotsPanel()
    qtbot.addWidget(p)
    p.show_run(bpe)
    axis = p.loss_plot.getAxis("right")
    assert axis.scale == pytest.approx(tpb_bpe / math.log(2))
    p.show_run(byt)  # after a BPE run: the bytes run's own scale, not the BPE run's
    assert p.tokens_per_byte == pytest.approx(tpb_bytes)
    assert 2.3 * axis.scale == pytest.approx(2.3 / math.log(2), rel=0.01)  # 2.3 nats ≈ 3.3 bits/byte
    assert plots_panel.run_tokens_per_byte(byt.parent / "not-a-run") is None


def test_a_continued_run_keeps_its_earlier_epochs(qtbot, tmp_path):
    corpus = _corpus(tmp_path)
    full = PlotsPanel()
    qtbot.addWidget(full)
    with start(_spec("bytes", epochs=3), [corpus], out=tmp_path / "full") as run:
        _feed(full, run)
    with start(_spec("bytes", epochs=2), [corpus], out=tmp_path / "part") as run:
        run.train()
    p = PlotsPanel()
    qtbot.addWidget(p)
    p.show_run(tmp_path / "part")  # Continue chosen: the run's history
    assert len(p.epoch_x) == 2 and len(p.val_x) == 2
    before = _picture(p)
    with resume(tmp_path / "part", epochs=3) as run:
        p.clear()  # Start (MainWindow.start_training), then the worker's `opened` signal:
        p.load_history(read_metrics(run.folder))
        _feed(p, run)
    after, whole = _picture(p), _picture(full)  # the same points (the rate schedules differ)
    for key in ("steps", "epoch_x", "val_x", "val_step_x"):
        assert after[key] == whole[key]
    assert len(p.epoch_x) == 3 and len(p.val_x) == 3
    for key in ("epoch_losses", "epoch_norms", "val_losses"):  # the first two: as shown before
        assert after[key][:2] == before[key]


def test_live_reports_already_read_from_metrics_are_not_drawn_twice(qtbot, tmp_path):
    """The worker trains on while the window reads metrics.csv at `opened`: steps and epochs it
    read there arrive again as queued signals."""
    corpus = _corpus(tmp_path)
    steps, epochs = [], []
    live = PlotsPanel()
    qtbot.addWidget(live)
    with start(_spec("bytes"), [corpus], out=tmp_path / "r") as run:
        run.train(on_step=lambda r: (steps.append(r), live.add_step(r)),
                  on_epoch=lambda e: (epochs.append(e), live.add_epoch(e, int(live.steps[-1]))))
    p = PlotsPanel()
    qtbot.addWidget(p)
    p.load_history(read_metrics(tmp_path / "r"))
    for r in steps:
        p.add_step(r)
    for e in epochs:
        p.add_epoch(e, int(p.steps[-1]))
    assert _picture(p) == _picture(live)


def test_the_window_opening_runs_shows_each_runs_own_history_and_scale(qtbot, tmp_path, runs):
    """Runs > Open of a BPE run, then a bytes run: the walk-through's window kept the BPE scale
    (2.3 nats read 0.5 bits/byte) and drew no epoch or held-out points."""
    from .helpers import close_window, small_window

    win = small_window(qtbot, tmp_path / "runs")
    try:
        for tok in ("bpe", "bytes"):
            folder, live = runs[tok]
            win.open_run_view(str(folder))
            assert _picture(win.plots) == live
            assert win.plots.tokens_per_byte == pytest.approx(
                plots_panel.run_tokens_per_byte(folder))
    finally:
        close_window(qtbot, win)


def test_opening_a_run_shows_its_own_last_samples(qtbot, tmp_path, runs):
    """The Preview pane kept the previous run's live sample after Open."""
    import engine

    from .helpers import close_window, small_window

    folder = runs["bytes"][0]
    for i, prompt in enumerate(("The ", "A ")):
        engine.append_sample(folder, {"tag": "epoch 2", "step": 9, "epoch": 1, "prompt": prompt,
                                      "text": f"{prompt}sample {i}", "backend": "CPU step"})
    win = small_window(qtbot, tmp_path / "runs")
    try:
        win.preview.show_preview("epoch 7", "another run's text", "CPU step")
        win.open_run_view(str(folder))
        assert win.preview.output.toPlainText() == "The sample 0\n\nA sample 1"
        assert folder.name in win.preview.tag.full and "epoch 2" in win.preview.tag.full
        win.open_run_view(str(runs["bpe"][0]))  # no samples saved there
        assert win.preview.output.toPlainText() == ""
        assert "none saved" in win.preview.tag.full
    finally:
        close_window(qtbot, win)


def test_a_run_ending_on_max_steps_shows_its_last_held_out_loss(qtbot, tmp_path):
    """A run ending inside an epoch (max steps, no eval cadence) measured a held-out loss for its
    last save that no plot showed; a single held-out (step) point drew nothing (a dashed line
    without markers needs two points)."""
    live = PlotsPanel()
    qtbot.addWidget(live)
    with start(_spec("bytes", eval_every=0, max_steps=3), [_corpus(tmp_path)],
               out=tmp_path / "r") as run:
        assert run.trainer.steps_per_epoch > 3
        _feed(live, run)
    pic = _picture(live)
    assert pic["val_step_x"] == [3.0] and pic["val_x"] == []
    opened = PlotsPanel()
    qtbot.addWidget(opened)
    opened.show_run(tmp_path / "r")
    assert _picture(opened) == pic
    opened._redraw()
    assert len(opened.val_step.scatter.points()) == 1  # one marker: the point is visible


def test_an_empty_plot_names_its_axes_without_a_scale_factor(qtbot):
    """The x axis of empty plots read "step (x0.001)" (pyqtgraph's automatic SI prefix)."""
    p = PlotsPanel()
    qtbot.addWidget(p)
    p.resize(800, 500)
    p.show()
    p.loss_plot.setXRange(0, 0.001)  # a range that made pyqtgraph scale by 1000
    p.norm_plot.setYRange(0, 0.002)
    qtbot.wait(50)
    for plot, side in ((p.norm_plot, "bottom"), (p.loss_plot, "left"), (p.norm_plot, "left")):
        text = plot.getAxis(side).labelString()
        assert "x0.001" not in text and "(x" not in text and "m" not in text.split("(")[-1], text


def test_steps_a_rollback_undid_are_taken_off_the_plot(qtbot):
    """The guard can roll back past steps already drawn (a step's loss tells of the weights the
    step before it left): the retrained steps were drawn after them, a line back over them."""
    from engine.trainer import StepReport

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    for step, val in ((1, None), (2, 3.0), (3, None), (4, None)):
        panel.add_step(StepReport(step, 0, 9, 5.0 - step / 10, 1.0, 1e-3, 0, 0, 0,
                                  val_loss=val))
    panel.add_step(StepReport(3, 0, 9, 4.5, 1.0, 5e-4, 0, 0, 0))  # rolled back to step 2
    assert panel.steps == [1, 2, 3] and panel.losses[-1] == 4.5 and len(panel.norms) == 3
    assert panel.val_step_x == [2]
    panel.add_step(StepReport(2, 0, 9, 4.0, 1.0, 5e-4, 0, 0, 0, val_loss=2.5))
    assert panel.steps == [1, 2] and panel.val_step_x == [2] and panel.val_step_losses == [2.5]


def test_slow_drawing_makes_the_live_curves_redraw_less_often(qtbot):
    """A redraw of the live curves took ~55 ms on a 2-core VM under Xvfb: at 10 a second the
    window trained a small model at 277 ms a step against the command line's 85 (the GUI thread
    held the GIL the training thread needs). The next redraw waits the last one's time (the new
    data and the view's paint) over DRAW_SHARE, from REDRAW_MS to MAX_REDRAW_MS."""
    from app.panels.plots_panel import DRAW_SHARE, MAX_REDRAW_MS, REDRAW_MS, PlotsPanel

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.canvas.paint_s = 0.0
    panel.canvas.viewport().update()  # the view times its own paints
    qtbot.waitUntil(lambda: panel.canvas.paint_s > 0)
    assert panel._timer.isActive() and panel._timer.interval() == REDRAW_MS
    panel.canvas.paint_s = 0.055  # a slow paint: the next redraw of new data waits for it
    panel.add_step(StepReport(step=1, epoch=0, total_steps=9, loss=2.0, grad_norm=1.0, lr=1e-3,
                              tokens_per_s=1.0, eta_s=1.0, elapsed_s=1.0))
    panel._tick()
    assert len(panel.step_loss.getData()[0]) == 1
    assert panel.redraw_wait_s >= 0.055 / DRAW_SHARE
    panel.add_step(StepReport(step=2, epoch=0, total_steps=9, loss=1.9, grad_norm=1.0, lr=1e-3,
                              tokens_per_s=1.0, eta_s=1.0, elapsed_s=2.0))
    panel._tick()  # too soon: not drawn
    assert len(panel.step_loss.getData()[0]) == 1
    panel._drawn_at -= panel.redraw_wait_s
    panel._tick()  # its time: drawn
    assert len(panel.step_loss.getData()[0]) == 2
    assert panel._timer.interval() == REDRAW_MS  # (a new interval restarts the timer)
    panel.redrawn_in(60.0)
    assert panel.redraw_wait_s == MAX_REDRAW_MS / 1000
    panel.redrawn_in(0.0)  # fast again: as often as before
    assert panel.redraw_wait_s == REDRAW_MS / 1000


def test_the_two_plots_share_their_step_axis(qtbot):
    """Both plots draw against steps, yet a 21-step run showed 1...21 on the loss and 0...22 on
    the gradient norm (each ranged its own x to its data, and the link between them followed
    whichever ranged last): a step did not line up between the two."""
    from engine.reports import EpochReport

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    for step in range(1, 22):
        panel.add_step(StepReport(step, 0, 21, 5.0 - step / 10, 2.0 + (step % 3), 1e-3, 100.0,
                                  0.0, 0.0, val_loss=3.0 if step == 21 else None))
    panel.add_epoch(EpochReport(0, 4.0, 2.5, None, 21, 0), 21)
    panel._redraw()
    qtbot.wait(300)
    loss_x = panel.loss_plot.viewRange()[0]
    norm_x = panel.norm_plot.viewRange()[0]
    assert loss_x == pytest.approx(norm_x, abs=1e-9), (loss_x, norm_x)
    assert loss_x[0] <= 1 and loss_x[1] >= 21


def test_a_legend_moves_off_a_curve_that_runs_under_it(qtbot):
    """A fine-tune's held-out loss stayed near the top of the plot, and its last quarter ran
    under the top-right legend. The legend goes to the corner of the plot that covers the
    fewest points, and stays where it is when none covers fewer."""
    from app.panels.plots_panel import CORNERS, covered

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    vb, legend = panel.loss_plot.vb, panel.loss_legend

    def feed(losses):  # noqa: ANN001, ANN202
        panel.clear()
        for step, loss in enumerate(losses, 1):
            panel.add_step(StepReport(step, 0, len(losses), loss, 1.0, 1e-3, 100.0, 0.0, 0.0))
        panel._redraw()
        qtbot.wait(150)  # a tick ranges the views, the next places the legends
        panel._tick()
        qtbot.wait(50)
        xs, ys = np.asarray(panel.steps, float), np.asarray(panel.losses, float)
        return {c: covered(legend, vb, c, xs, ys) for c, _ in CORNERS}

    falling = feed([10.0 - 8.0 * s / 200 for s in range(200)])  # top left to bottom right
    assert getattr(legend, "corner", (1, 0)) == (1, 0) and falling[(1, 0)] == 0, falling
    flat_high = feed([3.0] * 150 + [3.0 + 0.01 * s for s in range(50)] + [1.0])  # a rise at
    corner = legend.corner  # the right end, the top right covered; the bottom left is clear
    assert flat_high[(1, 0)] > 0 and flat_high[corner] == min(flat_high.values()) < \
        flat_high[(1, 0)], (corner, flat_high)
    top_right = legend.mapRectToItem(vb, legend.boundingRect()).center()
    assert (top_right.x() < vb.width() / 2) == (corner[0] == 0), corner  # drawn there


def test_legends_are_placed_while_a_fast_run_keeps_the_curves_dirty(qtbot, monkeypatch):
    """A small run reports ~25 steps a second: every 100 ms tick found new data, and the
    legends, placed only on a tick without new data, moved only after the run ended. Ticks
    driven by hand on a fake clock, each after new steps: placed about once a second."""
    clock = [100.0]
    monkeypatch.setattr(plots_panel.time, "perf_counter", lambda: clock[0])
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel._timer.stop()  # the ticks below are the only ones
    placed: list[int] = []
    real = panel._place_legends
    panel._place_legends = lambda: (placed.append(len(panel.steps)), real())[1]  # type: ignore[method-assign]
    for step in range(1, 101):  # 25 steps a second, a tick every 4 (100 ms): 4 s
        panel.add_step(StepReport(step, 0, 100, 5.0, 1.0, 1e-3, 100.0, 0.0, 0.0))
        clock[0] += 0.04
        if step % 4 == 0 or step == 1:
            panel._tick()
    assert 3 <= len(placed) <= 6 and placed[0] < 30, placed  # during the run, about 1 a second
