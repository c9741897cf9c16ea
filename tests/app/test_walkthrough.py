"""The new-user walk-through's window fixes: the Runs tab follows a run live, the Playground
names the run it will use, Continue takes a changed learning rate, the weight-init combo."""

import json
from pathlib import Path

import pytest

from app.main_window import MainWindow
from engine import run as runapi
from engine.params import INITS
from engine.trainer import TrainConfig

from .helpers import RUN_TIMEOUT, close_window, small_window, train_until_idle

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"


def _step0_run(root: Path) -> str:
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=2))
    with runapi.start(spec, [SAMPLE], root=root) as run:
        return str(run.folder)


def test_playground_names_the_picked_run(qtbot, tmp_path):
    """It said "pick a run or a model folder" with a run picked (start-up, Open, a run ended)."""
    folder = _step0_run(tmp_path / "runs")
    w = small_window(qtbot, tmp_path / "runs")
    try:
        pg = w.playground
        assert pg.source.currentText() == folder and folder in pg.status.text()
        assert "pick a run" not in pg.status.text()
        pg.source.setEditText("")
        assert "pick a run" in pg.status.text()
        w.open_run_view(folder)
        assert folder in pg.status.text()
    finally:
        close_window(qtbot, w)


def test_runs_tab_row_follows_the_training_run(win, qtbot):
    win.train.epochs.setValue(50)
    win.start_training()
    qtbot.waitUntil(lambda: win.current_run is not None and len(win.plots.steps) >= 3,
                    timeout=RUN_TIMEOUT)
    folder = win.current_run
    row = next(i for i, r in enumerate(win.runs.runs) if str(r.path) == folder)

    def cells() -> tuple[int, str]:
        return int(win.runs.table.item(row, 3).text()), win.runs.table.item(row, 5).text()

    qtbot.waitUntil(lambda: cells()[0] >= 3, timeout=RUN_TIMEOUT)  # no snapshot saved yet
    assert cells()[1] == "running"
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 0
    win.pause()
    assert cells()[1] == "paused"
    win.runs.refresh()  # a re-read keeps the live step and state
    assert cells()[0] >= 3 and cells()[1] == "paused"
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert win.runs.table.item(row, 5).text() == "stopped"


def test_continue_takes_a_changed_learning_rate_and_says_so(win, qtbot):
    win.train.lr.setValue(0.002)
    folder = train_until_idle(qtbot, win, max_steps=2)
    win.train.lr.setValue(0.005)  # some other value in the panel
    win.choose_continue(folder)
    assert win.train.lr.value() == pytest.approx(0.002)  # the run's own value is shown
    assert not win.train.init_scheme.isEnabled()  # Continue keeps the run's weights
    assert win.continue_overrides() == {} and "with its own settings" in win.next_label.full
    win.train.lr.setValue(0.001)
    win.train.max_steps.setValue(4)
    assert win.continue_overrides() == {"lr": pytest.approx(0.001), "max_steps": 4}
    text = win.next_label.full
    assert "learning rate 0.001 (was 0.002)" in text and "max steps 4 (was 2)" in text, text
    train_until_idle(qtbot, win)
    assert not win.errors, win.errors
    spec = json.loads((Path(folder) / "run.json").read_text())["spec"]["train"]
    assert spec["lr"] == pytest.approx(0.001) and spec["max_steps"] == 4
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 4


def test_weight_init_combo_reads_the_engine_list(win, qtbot, tmp_path):
    combo = win.train.init_scheme
    assert [combo.itemText(i) for i in range(combo.count())] == list(INITS)
    assert combo.toolTip() and "reference" in combo.toolTip()
    combo.setCurrentText(INITS[-1])
    assert win.make_job().spec.init_scheme == INITS[-1]
    assert f"{INITS[-1]} init" in win.next_label.full
    folder = _step0_run(tmp_path / "other")
    win.open_model(folder)
    qtbot.waitUntil(lambda: win.init_dir == folder, timeout=RUN_TIMEOUT)
    assert not combo.isEnabled()
    assert win.make_job().spec.init_scheme == runapi.RunSpec.init_scheme  # opened weights


def test_export_into_a_non_empty_folder_asks_before_replacing(win, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    folder = _step0_run(tmp_path / "other")
    out = tmp_path / "merged"
    win.export("merged", str(out), folder)
    qtbot.waitUntil(lambda: "merged written" in win.log.toPlainText(), timeout=RUN_TIMEOUT)
    first = (out / "model.safetensors").stat().st_mtime_ns
    win.export("merged", str(out), folder)  # no force: one line naming the folder
    qtbot.waitUntil(lambda: bool(win.errors), timeout=RUN_TIMEOUT)
    assert "folder is not empty" in win.errors[-1] and str(out) in win.errors[-1]
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    answers = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda *a, **k: answers.pop(0))
    answers.append(QMessageBox.StandardButton.No)
    win._export_dialog(folder, "merged")
    assert (out / "model.safetensors").stat().st_mtime_ns == first  # declined: untouched
    answers.append(QMessageBox.StandardButton.Yes)
    n = win.log.toPlainText().count("merged written")
    win._export_dialog(folder, "merged")
    qtbot.waitUntil(lambda: win.log.toPlainText().count("merged written") == n + 1,
                    timeout=RUN_TIMEOUT)
    assert (out / "model.safetensors").stat().st_mtime_ns != first


def test_continue_shows_and_keeps_the_runs_preview_prompts(win, qtbot):
    win.preview.prompts.setPlainText("Alpha \nBeta ")
    folder = train_until_idle(qtbot, win, max_steps=2)
    assert runapi.read_run_spec(folder).prompts == ("Alpha ", "Beta ")
    win.preview.prompts.setPlainText("Other ")
    win.choose_continue(folder)
    assert win.preview.prompt_list() == ["Alpha ", "Beta "]  # the run's own prompts are shown
    assert "prompts" not in win.make_job().overrides
    win.preview.prompts.setPlainText("Gamma ")
    assert win.make_job().overrides["prompts"] == ("Gamma ",)


def test_continue_can_set_max_steps_back_to_no_limit(win, qtbot):
    folder = train_until_idle(qtbot, win, max_steps=2)
    win.choose_continue(folder)
    assert win.train.max_steps.value() == 2
    win.train.max_steps.setValue(0)  # "no limit"
    assert win.continue_overrides() == {"max_steps": 0}
    assert "max steps no limit (was 2)" in win.next_label.full


def test_prompts_edited_while_training_are_kept_for_continue(win, qtbot):
    win.preview.prompts.setPlainText("First ")
    win.train.max_steps.setValue(2)
    win.start_training()
    win.preview.prompts.setPlainText("Second ")  # pushed to the running worker at once
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert runapi.read_run_spec(win.last_folder).prompts == ("Second ",)


def test_a_run_shorter_than_the_warmup_says_so(win, qtbot):
    """A run shorter than the 100-step warmup (the app's old default, 3 epochs on the sample
    corpus, was 33 steps): the CLI said so, the window did not (the samples just stayed noise)."""
    train_until_idle(qtbot, win, max_steps=2)
    assert "the 100-step warmup is cut to 0 steps, a fifth of this 2-step run" in win.log.toPlainText()
    assert "raise Max steps" in win.log.toPlainText()  # max steps, not the epochs, ended it


def test_a_first_start_on_the_bundled_corpus_trains_past_the_warmup(qtbot, tmp_path):
    """A new user's first Start (fresh settings, the bundled corpus, every field at its default)
    must run long enough to learn: the default epochs times the run's own steps per epoch reach
    past the 100-step warmup (3 epochs were 33 steps, all inside it: noise samples)."""
    w = MainWindow(runs_root=str(tmp_path / "runs"))
    try:
        spec = w.train.run_spec(None, 0)
        steps = runapi.plan_epoch(spec, w.corpus.paths()).steps(spec.train)
        assert spec.train.epochs * steps >= 100, (spec.train.epochs, steps)
    finally:
        close_window(qtbot, w)
