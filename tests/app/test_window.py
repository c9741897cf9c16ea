"""Drive the real MainWindow offscreen with pytest-qt."""

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow


@pytest.fixture
def win(qtbot, tmp_path):
    w = MainWindow(run_dir=str(tmp_path / "run"))
    qtbot.addWidget(w)
    w.show()
    w.train.preset.setCurrentText("tiny")
    w.train.seq_len.setValue(64)
    w.train.batch.setValue(4)
    w.preview.length.setValue(12)
    yield w
    if w.worker is not None:
        w.stop()
        qtbot.waitUntil(lambda: w.state == "idle", timeout=60000)


def _drop(widget, paths):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    center = widget.rect().center()
    enter = QDragEnterEvent(center, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(center), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)


def test_opens_fast_with_the_sample_corpus_loaded(qtbot, tmp_path):
    t0 = time.perf_counter()
    w = MainWindow(run_dir=str(tmp_path / "r"))
    qtbot.addWidget(w)
    w.show()
    assert time.perf_counter() - t0 < 3.0
    assert len(w.corpus.paths()) >= 3 and w.start_btn.isEnabled()
    assert w.corpus.table.rowCount() == len(w.corpus.paths())


def test_drop_good_and_bad_files(win, qtbot, tmp_path):
    good = tmp_path / "notes.md"
    good.write_text("some *markdown* text\n" * 20)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "latin.txt").write_bytes("d\xe9j\xe0".encode("latin-1"))
    before = len(win.corpus.paths())
    _drop(win.corpus.drop, [good, tmp_path / "empty.txt", tmp_path / "blob.txt",
                            tmp_path / "latin.txt"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(win.corpus.paths()) == before + 1)
    assert str(good) in win.corpus.paths()
    msg = win.corpus.status.text()
    assert "empty.txt" in msg and "blob.txt" in msg and "latin.txt" in msg
    assert "UTF-8" in msg and "binary" in msg


def test_drop_anywhere_on_the_window(win, qtbot, tmp_path):
    f = tmp_path / "code.py"
    f.write_text("def f(x):\n    return x + 1\n" * 10)
    _drop(win, [f])
    qtbot.waitUntil(lambda: str(f) in win.corpus.paths())


def test_text_only_drag_is_rejected(win):
    mime = QMimeData()
    mime.setText("just text")
    enter = QDragEnterEvent(win.corpus.drop.rect().center(), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(win.corpus.drop, enter)
    assert not enter.isAccepted()


def test_lora_and_wsla_toggles_reach_the_trainer_config(win):
    win.train.lora.setChecked(True)
    for t, cb in win.train.targets.items():
        cb.setChecked(t in ("x_proj", "dt_proj", "embeddings"))
    win.train.rank.setValue(4)
    win.train.lora_dropout.setValue(0.1)
    cfg = win.make_job().train
    assert cfg.lora.targets == ("x_proj", "dt_proj", "embeddings") and cfg.lora.rank == 4
    assert cfg.lora.dropout == pytest.approx(0.1)
    assert "trainable parameters:" in win.train.trainable.text()
    n_lora = win.train.trainable.text()
    win.train.wsla.setChecked(True)
    cfg = win.make_job().train
    assert cfg.wsla and cfg.lora.targets == ("x_proj",)
    assert cfg.adamw().max_delta == 0.05
    assert win.train.trainable.text() != n_lora
    win.train.lora.setChecked(False)
    assert win.make_job().train.lora is None
    win.train.wsla.setChecked(False)
    full_bytes = win.train.trainable.text()
    win.train.tokenizer.setCurrentText("bpe")
    win.train.bpe_vocab.setValue(4096)
    assert win.train.trainable.text() != full_bytes  # the embedding grows with the vocabulary


def test_train_pause_resume_stop_preview_and_checkpoint(win, qtbot, tmp_path):
    win.train.epochs.setValue(30)
    win.train.eval_every.setValue(2)
    win.start_training()
    qtbot.waitUntil(lambda: "step 0" in win.preview.tag.text(), timeout=120000)
    assert win.preview.output.toPlainText().startswith("The")
    win.preview.prompts.setPlainText("Once")  # edits reach the running worker
    win.preview.temperature.setValue(0.0)
    assert win.worker.prompts == ["Once"] and win.worker.sampling.temperature == 0.0
    assert "backend:" in win.preview.backend.text()
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 3, timeout=60000)
    win.pause()
    assert win.state == "paused"
    time.sleep(0.3)
    qtbot.wait(200)
    n = len(win.plots.steps)
    qtbot.wait(600)
    assert len(win.plots.steps) <= n + 1  # at most the step in flight
    win.resume()
    qtbot.waitUntil(lambda: len(win.plots.steps) > n + 1, timeout=60000)
    assert win.plots.losses and win.plots.norms and win.plots.val_step_losses
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=60000)
    run = Path(win.run_dir)
    assert (run / "trainer_state.json").exists() and (run / "model.safetensors").exists()
    assert not win.errors, win.errors
    # save elsewhere and resume from it
    target = tmp_path / "saved"
    win.save_checkpoint(str(target))
    qtbot.waitUntil(lambda: (target / "trainer_state.json").exists(), timeout=30000)
    steps_done = len(win.plots.steps)
    win.resume_run(str(target))
    win.train.max_steps.setValue(steps_done + 2)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle" and bool(win.plots.steps), timeout=120000)
    assert win.plots.steps[0] == steps_done + 1  # continued, not restarted
    assert not win.errors, win.errors


def test_epoch_points_and_open_model(win, qtbot, tmp_path):
    win.train.max_steps.setValue(0)
    win.train.epochs.setValue(1)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=180000)
    assert len(win.plots.epoch_losses) == 1 and len(win.plots.val_losses) == 1
    assert "epoch 1" in win.preview.tag.text()
    win.open_model(win.run_dir)
    qtbot.waitUntil(lambda: win.init_dir == win.run_dir, timeout=30000)
    assert "params" in win.train.model_source.text()
    win.open_model(str(tmp_path / "nope"))
    qtbot.waitUntil(lambda: bool(win.errors), timeout=30000)
    assert "no config.json" in win.errors[-1]


def test_settings_are_remembered(qtbot, tmp_path):
    w = MainWindow(run_dir=str(tmp_path / "a"))
    qtbot.addWidget(w)
    w.train.lr.setValue(0.0123)
    w.train.lora.setChecked(True)
    w.preview.prompts.setPlainText("Once upon")
    w.close()
    w2 = MainWindow(run_dir=str(tmp_path / "b"))
    qtbot.addWidget(w2)
    assert w2.train.lr.value() == pytest.approx(0.0123)
    assert w2.train.lora.isChecked()
    assert w2.preview.prompt_list() == ["Once upon"]


def test_many_qt_calls_do_not_crash(qtbot, win):
    """PySide6 6.12.0 on Python 3.11 aborts after ~5,000 void-returning calls (hence the pin in
    pyproject.toml)."""
    for i in range(6000):
        win.progress.setValue(i % 100)
        win.status.setText(str(i))
    assert win.status.text() == "5999"


def test_lora_run_exports_peft_adapter_and_merged_model(win, qtbot, tmp_path):
    win.train.lora.setChecked(True)
    win.train.max_steps.setValue(3)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=120000)
    assert any("modules adapted" in line for line in win.log.toPlainText().splitlines())
    win.export("adapter", str(tmp_path / "adapter"))
    win.export("merged", str(tmp_path / "merged"))
    qtbot.waitUntil(lambda: (tmp_path / "adapter" / "adapter_config.json").exists()
                    and (tmp_path / "merged" / "model.safetensors").exists(), timeout=30000)
    assert not win.errors, win.errors


def test_ui_stays_responsive_while_training_and_close_saves(win, qtbot):
    from PySide6.QtCore import QTimer

    win.train.epochs.setValue(200)
    win.start_training()
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 2, timeout=120000)
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    qtbot.wait(1000)
    timer.stop()
    assert len(ticks) >= 10, f"the GUI thread ran only {len(ticks)} timer ticks in 1 s"
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 1.0
    win.close()  # stops the run cooperatively and waits for its checkpoint
    assert not win.thread.isRunning()
    assert (Path(win.run_dir) / "trainer_state.json").exists()


def test_corpus_shorter_than_a_sequence_shows_an_error_and_returns_to_idle(win, qtbot, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("only a few words")
    win.corpus.files.clear()
    win.corpus.add_paths([str(short)], sync=True)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=60000)
    assert win.errors and "shorter than one sequence" in win.errors[-1]


def test_preview_falls_back_to_cpu_and_says_why(win, qtbot, monkeypatch):
    monkeypatch.setenv("MAMBA_STUDIO_GPU", "off")  # as if no adapter could be used
    win.train.max_steps.setValue(1)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=120000)
    assert "CPU step" in win.preview.backend.text() and "disabled" in win.preview.backend.text()
    win.use_gpu.setChecked(False)
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=120000)
    assert "switched off" in win.preview.backend.text()
