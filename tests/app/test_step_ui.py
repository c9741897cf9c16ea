"""The status line, step bar and Runs row follow a fast run's steps at most every STEP_UI_S (a
line rewritten 25 times a second cannot be read), always end on its latest step, and never hide
a skipped step or overwrite a state change's line with a late step."""

from app import main_window
from engine import StepReport


def _report(step: int, nonfinite: bool = False) -> StepReport:
    return StepReport(step=step, epoch=0, total_steps=100, loss=3.0 - step / 100, grad_norm=1.0,
                      lr=1e-3, tokens_per_s=1000.0, eta_s=10.0, elapsed_s=step / 25,
                      nonfinite=nonfinite)


def test_fast_steps_update_the_step_widgets_at_most_every_step_ui_s(win, qtbot, monkeypatch):
    monkeypatch.setattr(main_window, "STEP_UI_S", 1.0)  # (20 calls take far less on any CI)
    win.state = "running"
    win.current_run = "some-run"
    lived: list[int] = []
    states: list[str] = []
    monkeypatch.setattr(win.runs, "update_live",
                        lambda folder, step, state: lived.append(step) or states.append(state))
    for step in range(1, 21):  # 20 steps at once: far within one STEP_UI_S
        win._on_step(_report(step))
    assert win.progress.value() == 1 and lived == [1]  # the first at once, the rest waits
    assert len(win.plots.steps) == 20  # every point reaches the curves
    qtbot.waitUntil(lambda: win.progress.value() == 20, timeout=5000)
    assert lived == [1, 20] and win.status.full.startswith("step 20/100")

    win._on_step(_report(21))
    win._on_step(_report(22, nonfinite=True))  # said at once, not overwritten unseen
    assert "non-finite loss" in win.status.full and win.progress.value() == 22

    win._on_step(_report(23))  # waits ...
    assert win.progress.value() == 22
    win._set_state("paused")  # ... and a state change shows it first, under its own line
    assert win.progress.value() == 23 and win.status.full.startswith("paused at step 23/100")
    qtbot.wait(int(1.5 * 1000 * main_window.STEP_UI_S))
    assert win.status.full.startswith("paused at step 23/100")  # no late step overwrote it
    win._set_state("stopping")
    qtbot.wait(int(1.1 * 1000 * main_window.STEP_UI_S))
    win._on_step(_report(24))  # the step in flight at a Stop: its row says stopping, not running
    assert win.progress.value() == 24 and states[-1] == "stopping"
    win._set_state("idle")
