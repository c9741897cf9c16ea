"""Drive the real MainWindow offscreen with pytest-qt: runs, pause/stop, Continue, close."""

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QSplitter, QWidget

import engine
from app.main_window import MainWindow
from engine import run as runapi

from .helpers import RUN_TIMEOUT, close_window, drop, small_window, train_until_idle


def test_opens_fast_with_the_sample_corpus_loaded(qtbot, tmp_path):
    t0 = time.perf_counter()
    w = MainWindow(runs_root=str(tmp_path / "r"))
    qtbot.addWidget(w)
    w.show()
    assert time.perf_counter() - t0 < 3.0
    assert len(w.corpus.paths()) >= 3 and w.start_btn.isEnabled()
    assert w.corpus.table.rowCount() == len(w.corpus.paths())
    assert w.next_label.full.startswith("Next Start: a new run")
    assert w.progress.text() == "no run training"  # (an empty white box read as a text field)


def test_the_corpus_of_the_last_session_comes_back(qtbot, tmp_path):
    """Each launch showed the bundled sample again (a Continue of a run on code showed sample
    texts beside it); the corpus now comes back as it was left, a folder as the folder (with
    a file added since), and the sample only when none of it is left, saying so."""
    import shutil

    data = tmp_path / "code"
    data.mkdir()
    for name in ("a.py", "b.py"):
        (data / name).write_text(f"def {name[0]}():\n    return 1\n" * 20)
    w = small_window(qtbot, tmp_path / "runs")
    qtbot.waitUntil(lambda: w.corpus.pending == 0)
    w.corpus.files.clear()
    w.corpus.add_paths([str(data)], sync=True)
    w.corpus.records.setCurrentIndex(w.corpus.records.findData("blank-line"))
    close_window(qtbot, w)
    (data / "c.py").write_text("x = 1\n" * 30)
    (data / "photo.jpg").write_bytes(b"\xff\xd8\xff")  # skipped: listed, not announced again
    w = small_window(qtbot, tmp_path / "runs")
    qtbot.waitUntil(lambda: w.corpus.pending == 0 and len(w.corpus.files) == 3, timeout=10000)
    assert sorted(Path(p).name for p in w.corpus.paths()) == ["a.py", "b.py", "c.py"]
    assert [Path(p).name for p, _ in w.corpus.skipped] == ["photo.jpg"]
    assert not w.corpus.notice.isVisible() and w.statusBar().currentMessage() == ""
    assert w.corpus.record_mode() == "blank-line"  # its Examples choice too (it fell back)
    close_window(qtbot, w)
    shutil.rmtree(data)
    w = small_window(qtbot, tmp_path / "runs")
    qtbot.waitUntil(lambda: w.corpus.pending == 0)
    assert len(w.corpus.paths()) >= 3 and all("sample" in p for p in w.corpus.paths())
    msg = w.statusBar().currentMessage()
    assert "1 path of the last session's corpus no longer exists (code)" in msg, msg
    assert "the sample corpus is loaded" in msg
    close_window(qtbot, w)


def test_files_removed_from_the_corpus_stay_out_at_the_next_launch(qtbot, tmp_path):
    """Remove took a file out of the table, but the corpus remembered for the next launch still
    held it: after a restart the removed file was back and the next run trained on it."""
    keep, removed = tmp_path / "keep.txt", tmp_path / "removed.txt"
    keep.write_text("kept text\n" * 40)
    removed.write_text("removed text\n" * 40)
    w = small_window(qtbot, tmp_path / "runs")
    qtbot.waitUntil(lambda: w.corpus.pending == 0)
    w.corpus.clear()
    w.corpus.add_paths([str(keep), str(removed)], sync=True)
    w.corpus.table.selectRow(list(w.corpus.files).index(str(removed)))
    w.corpus._remove_selected()  # the Remove button
    assert w.corpus.paths() == [str(keep)]
    close_window(qtbot, w)
    w = small_window(qtbot, tmp_path / "runs")
    try:
        qtbot.waitUntil(lambda: w.corpus.pending == 0 and len(w.corpus.files) > 0, timeout=10000)
        assert w.corpus.paths() == [str(keep)]
    finally:
        close_window(qtbot, w)


def test_start_while_the_corpus_is_still_being_read_is_refused(win, qtbot, tmp_path):
    """A Start pressed right after a drop trained on the corpus without the files still being
    read, and nothing said so: the run's data was not what the table showed a moment later."""
    more = tmp_path / "more.txt"
    more.write_text("more text to read\n" * 40)
    win.train.max_steps.setValue(1)  # (if it did start: one step)
    win.corpus.add_paths([str(more)])  # read in a worker: its result waits in the event loop
    assert win.corpus.pending == 1
    win.start_training()
    assert win.worker is None and win.state == "idle"
    assert win.errors[-1] == "The corpus is still being read; Start again when it is done."
    qtbot.waitUntil(lambda: win.corpus.pending == 0, timeout=RUN_TIMEOUT)
    assert str(more) in win.corpus.files

def test_drop_good_and_bad_files(win, qtbot, tmp_path):
    good = tmp_path / "notes.md"
    good.write_text("some *markdown* text\n" * 20)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "latin.txt").write_bytes("d\xe9j\xe0".encode("latin-1"))
    before = len(win.corpus.paths())
    drop(win.corpus.drop, [good, tmp_path / "empty.txt", tmp_path / "blob.txt",
                           tmp_path / "latin.txt"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(win.corpus.paths()) == before + 1)
    assert str(good) in win.corpus.paths()
    assert win.corpus.skipped_btn.text() == "3 files skipped"
    assert win.corpus.notice_box.isVisibleTo(win.corpus)
    win.corpus.skipped_btn.setChecked(True)
    msg = win.corpus.skipped_list.toPlainText()
    assert "empty.txt" in msg and "blob.txt" in msg and "latin.txt" in msg
    assert "UTF-8" in msg and "binary" in msg
    # the list says what the note said: the note goes (with both, a 900x600 window showed
    # 1.5 rows of the file table)
    assert not win.corpus.notice_box.isVisibleTo(win.corpus)


def _record_boxes(monkeypatch) -> list:
    """Message boxes the window opens, recorded instead of shown (nothing waits for a click)."""
    from PySide6.QtWidgets import QMessageBox

    shown: list = []
    monkeypatch.setattr(QMessageBox, "open", lambda box: shown.append(box))
    return shown


def test_a_drop_that_skips_files_names_them_and_why(win, qtbot, tmp_path, monkeypatch):
    """Some files added, some not: no dialog, but the window says which were not added and why,
    one line a file, where the user dropped them and in the status bar."""
    shown = _record_boxes(monkeypatch)
    good = tmp_path / "notes.md"
    good.write_text("some text\n" * 20)
    (tmp_path / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "latin.txt").write_bytes("d\xe9j\xe0".encode("latin-1"))
    before = len(win.corpus.paths())
    from PySide6.QtWidgets import QPushButton

    win.show()
    qtbot.waitExposed(win)
    add = next(b for b in win.corpus.findChildren(QPushButton) if b.text() == "Add files…")
    where = add.mapTo(win, add.rect().topLeft())
    drop(win, [good, tmp_path / "blob.txt", tmp_path / "latin.txt"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(win.corpus.paths()) == before + 1)
    assert win.corpus.notice.isVisible()
    qtbot.wait(50)  # (the layout settles)
    assert add.mapTo(win, add.rect().topLeft()) == where  # the buttons stay under the mouse
    lines = win.corpus.notice.text().splitlines()
    assert lines[0] == "Added 1 file; not added:"
    assert lines[1].startswith("• blob.txt: looks binary") and "text or code files" in lines[1]
    assert lines[2].startswith("• latin.txt: not valid UTF-8") and "save it as UTF-8" in lines[2]
    assert len(lines) == 3
    status = win.statusBar().currentMessage()
    assert "blob.txt: looks binary" in status and "1 more" in status
    assert shown == []
    drop(win, [good])  # the next add that skips nothing clears the notice
    qtbot.waitUntil(lambda: win.corpus.pending == 0)
    assert not win.corpus.notice.isVisible()
    drop(win, [tmp_path / "blob.txt"])  # and its × hides it (it had no close control and
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and win.corpus.notice.isVisible())
    from PySide6.QtWidgets import QToolButton  # took rows from the table for good)

    win.corpus.notice_box.findChild(QToolButton).click()
    assert not win.corpus.notice.isVisible()
    drop(win, [tmp_path / "blob.txt", tmp_path / "latin.txt"])  # removing every file takes it
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and win.corpus.notice.isVisible())
    win.corpus.table.selectAll()  # away ("Added ...; not added: ..." stayed over no corpus)
    win.corpus._remove_selected()
    assert not win.corpus.files and not win.corpus.notice.isVisible()


def test_a_drop_of_only_unusable_files_warns_with_name_reason_and_fix(win, qtbot, tmp_path,
                                                                      monkeypatch):
    shown = _record_boxes(monkeypatch)
    (tmp_path / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    before = win.corpus.paths()
    drop(win.corpus.drop, [tmp_path / "photo.png"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(shown) == 1)
    box = shown[0]
    assert box.icon() == box.Icon.Warning and win.corpus.paths() == before
    lines = box.text().splitlines()
    assert lines[0] == "Nothing was added to the corpus:"
    assert lines[1].startswith("• photo.png: a PNG image, not text") and "text or code files" in lines[1]
    assert len(lines) == 2 and "Traceback" not in box.text()
    assert win.errors == []  # a warning about the user's files, not an error of the app
    many = tmp_path / "many"
    many.mkdir()
    for i in range(12):
        (many / f"empty{i:02d}.txt").write_text("")
    drop(win, [many])  # a folder of twelve unusable files: ten named, then a count
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(shown) == 2)
    lines = shown[1].text().splitlines()
    assert len(lines) == 12 and lines[1].startswith("• empty00.txt: file is empty — add a file")
    assert lines[-1].startswith("… and 2 more")


def test_a_second_drop_of_only_unusable_files_replaces_the_first_warning(win, qtbot, tmp_path,
                                                                         monkeypatch):
    """Two drops in a row of files that could not be added left two warnings stacked on
    screen, the older one naming the files of the earlier drop."""
    from PySide6.QtWidgets import QMessageBox

    shown: list[QMessageBox] = []
    texts: list[str] = []  # read as each is shown (a closed box may be deleted by then)
    monkeypatch.setattr(QMessageBox, "open", lambda box: (shown.append(box),
                                                          texts.append(box.text())))
    closed: list[QMessageBox] = []
    real_close = QMessageBox.close
    monkeypatch.setattr(QMessageBox, "close", lambda box: closed.append(box) or real_close(box))
    (tmp_path / "one.bin").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "two.bin").write_bytes(b"\x00\x03\x04binary")
    drop(win, [tmp_path / "one.bin"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(shown) == 1, timeout=RUN_TIMEOUT)
    drop(win, [tmp_path / "two.bin"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and len(shown) == 2, timeout=RUN_TIMEOUT)
    assert "one.bin" in texts[0] and "two.bin" in texts[1]
    assert len(closed) == 1 and closed[0] is shown[0]  # the first went when the second came
    assert win.skip_box is shown[1]


def test_drop_anywhere_on_the_window(win, qtbot, tmp_path):
    f = tmp_path / "code.py"
    f.write_text("def f(x):\n    return x + 1\n" * 10)
    drop(win, [f])
    qtbot.waitUntil(lambda: str(f) in win.corpus.paths())


def test_lora_and_wsla_toggles_reach_the_run_spec(win, tmp_path):
    win.init_dir = str(tmp_path)  # as Open model does: LoRA adapts opened weights
    win._update_next()
    win.train.lora.setChecked(True)
    assert win.make_job().spec.train.lora.targets == ("in_proj", "x_proj")  # exact in PEFT
    assert "trainable parameters" in win.train.trainable.text()
    assert "PEFT" not in win.train.trainable.text()  # (every transformers line applies them)
    win.train.targets["dt_proj"].setChecked(True)
    assert "transformers 5.x skips dt_proj" in win.train.trainable.text()  # (its adapter was
    win.train.targets["dt_proj"].setChecked(False)  # off by up to 0.9 in logits un-merged)
    for t, cb in win.train.targets.items():
        cb.setChecked(t in ("x_proj", "dt_proj", "embeddings"))
    win.train.rank.setValue(4)
    win.train.lora_dropout.setValue(0.1)
    cfg = win.make_job().spec.train
    assert cfg.lora.targets == ("x_proj", "dt_proj", "embeddings") and cfg.lora.rank == 4
    assert cfg.lora.dropout == pytest.approx(0.1)
    n_lora = win.train.trainable.text()
    win.train.wsla.setChecked(True)
    cfg = win.make_job().spec.train
    assert cfg.wsla and cfg.lora.targets == ("x_proj",)
    box = win.train.targets["dt_proj"]  # ticked, greyed: its tooltip says why it is not trained
    assert box.isChecked() and not box.isEnabled()
    assert box.toolTip().endswith("not with WSLA: WSLA + LoRA trains x_proj only")
    assert "WSLA" not in win.train.targets["x_proj"].toolTip()
    assert win.train.trainable.text() != n_lora
    win.train.lora.setChecked(False)
    assert win.make_job().spec.train.lora is None


def test_examples_choice_reaches_the_run_spec_and_settings_file(win, tmp_path):
    from app.panels.corpus_panel import RECORD_CHOICES
    from engine import RECORDS

    assert tuple(RECORD_CHOICES) == RECORDS  # every engine mode offered, in the engine's order
    assert win.make_job().spec.records == "file"  # the default: a file is one document
    win.corpus.set_record_mode("line")
    assert win.make_job().spec.records == "line"
    win.save_settings_file(str(tmp_path / "s.toml"))
    win.corpus.set_record_mode("file")
    win.load_settings_file(str(tmp_path / "s.toml"))
    assert win.corpus.record_mode() == "line"


def test_continue_a_finished_run_says_how_to_train_it_further(win, qtbot):
    folder = train_until_idle(qtbot, win, max_steps=2)
    win.choose_continue(folder)
    train_until_idle(qtbot, win)  # same panel settings: nothing left to train
    assert not win.errors, win.errors
    msg = win.statusBar().currentMessage()
    assert "already at step 2 of 2" in msg and "raise Epochs or Max steps" in msg, msg
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 2
    # the Continue stays chosen: raising Max steps and Start trains on (it made a new run)
    assert win.continue_dir == folder and "continues run" in win.next_label.full
    win.tabs.setCurrentIndex(1)
    win.choose_continue(folder)
    assert win.tabs.currentIndex() == 0  # Continue shows the Train tab
    assert train_until_idle(qtbot, win, max_steps=4) == folder
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 4
    assert win.continue_dir is None and not win.errors, win.errors


def test_start_of_a_continue_clears_its_line_and_its_end_keeps_the_playground_s(win, qtbot):
    """After Continue, Start left "next Start continues RUN" on the status bar while the run
    trained (the Next Start line said a new run); the end of a run wiped the Playground's line
    of a generation from that run ("200 tokens in 0.08 s ..." became "model: RUN")."""
    folder = train_until_idle(qtbot, win, max_steps=2)
    pg = win.playground
    assert pg.source.currentText() == folder
    said = "12 tokens in 0.10 s (120/s), reached the length — CPU step"
    pg.status.setText(said)
    win.choose_continue(folder)
    assert win.statusBar().currentMessage() == f"next Start continues {folder}"
    win.train.max_steps.setValue(3)
    win.start_training()
    assert "next Start continues" not in win.statusBar().currentMessage()
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 3
    assert pg.status.text() == said
    pg.set_source(str(Path(folder).parent))  # another model: the line says what Generate uses
    assert pg.status.text().startswith("model: ")


def test_continue_scores_a_run_stopped_during_its_final_evaluation(win, qtbot):
    """A run stopped while its last held-out evaluation ran, then Continue: it said "already at
    step 3 of 3: raise Epochs or Max steps", and the run stayed without its held-out loss."""
    from tests.helpers import train_stopped_while_scoring

    folder = train_until_idle(qtbot, win, max_steps=2)
    with runapi.resume(folder, max_steps=3) as run:
        assert train_stopped_while_scoring(run).unscored
    win.choose_continue(folder)
    train_until_idle(qtbot, win, max_steps=3)
    assert not win.errors, win.errors
    latest = json.loads((Path(folder) / "latest.json").read_text())
    assert latest["step"] == 3 and latest["val_loss"] is not None
    assert json.loads((Path(folder) / "status.json").read_text())["state"] == "finished"
    msg = win.statusBar().currentMessage()
    assert "already at step" not in msg and f"held-out loss {latest['val_loss']:.4f}" in msg, msg
    assert (f"{Path(folder).name} stopped before its held-out loss at step 3 was measured: "
            "measuring it") in win.log.toPlainText()  # (the Log said nothing of it)


def test_continuing_a_finished_run_adds_no_second_sample_of_its_last_step(win, qtbot):
    """The epoch-end sample of a finished run's last step was sampled again at Continue: two
    identical rows in the Gallery."""
    import engine

    win.train.epochs.setValue(1)
    folder = train_until_idle(qtbot, win)
    last = json.loads((Path(folder) / "latest.json").read_text())["step"]
    assert any(r["step"] == last for r in engine.read_samples(folder))  # the epoch's sample
    win.choose_continue(folder)
    win.train.epochs.setValue(2)
    assert train_until_idle(qtbot, win, max_steps=last + 2) == folder
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == last + 2
    seen = [(r["step"], r["prompt"]) for r in engine.read_samples(folder)]
    assert len(seen) == len(set(seen)), seen


def test_a_run_ending_inside_an_epoch_shows_a_sample_of_its_last_step(win, qtbot):
    """Max steps inside the first epoch: the Preview kept the untrained step-0 sample and the
    Gallery had no sample of the trained model at all."""
    import engine

    win.train.epochs.setValue(3)
    folder = train_until_idle(qtbot, win, max_steps=2)
    steps = [r["step"] for r in engine.read_samples(folder)]
    assert steps.count(0) == len(win.preview.prompt_list()) and 2 in steps, steps
    assert win.preview.tag.full == "sample — step 2", win.preview.tag.full


def test_previews_come_every_n_steps_inside_an_epoch(win, qtbot):
    """A long epoch showed no preview between step 0 and its end (741 steps on a 1.7 MB
    corpus): "every" N steps one more, never queued behind one still being made (so the steps
    between are N or more), kept in the Gallery; 0 keeps to step 0, epoch ends and the end."""
    import engine

    win.train.epochs.setValue(3)
    win.preview.every.setValue(2)
    folder = train_until_idle(qtbot, win, max_steps=7)
    steps = sorted({r["step"] for r in engine.read_samples(folder)})
    assert steps[0] == 0 and steps[-1] == 7 and len(steps) >= 3, steps
    assert {r["tag"] for r in engine.read_samples(folder) if r["step"] == 0} == {
        "step 0, untrained"}  # (its blank or repeated text looked like a broken preview)
    assert all(b - a >= 2 for a, b in zip(steps[:-2], steps[1:-1], strict=True)), steps
    assert win.preview.every.text() == "2 steps"
    least = win.preview.minimumSizeHint()
    win.preview.every.hide()
    win.preview.every_label.hide()
    assert win.preview.minimumSizeHint() == least  # the box widens no window, nor takes the
    # plots' height
    win.preview.every.show()
    win.preview.every_label.show()
    win.preview.every.setValue(0)
    assert win.preview.every.text() == "epoch ends"
    folder = train_until_idle(qtbot, win, max_steps=5)
    assert sorted({r["step"] for r in engine.read_samples(folder)}) == [0, 5]


def test_the_preview_interval_changed_during_a_run_applies_and_continue_counts_from_its_step(
        win, qtbot):
    """"a sample every" changed while a run trains must apply from the next step (its tooltip
    says so); a Continue counts from the step it resumes at, not from 0."""
    import engine

    win.train.epochs.setValue(3)
    win.preview.every.setValue(0)
    win.train.max_steps.setValue(30)
    win.start_training()
    qtbot.waitUntil(lambda: win.last_report is not None, timeout=RUN_TIMEOUT)
    win.preview.every.setValue(2)  # pushed to the running worker
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    folder = win.last_folder
    steps = sorted({r["step"] for r in engine.read_samples(folder)})
    assert [t for t in steps if t not in (0, 30)], steps
    win.preview.every.setValue(3)
    win.choose_continue(folder)
    train_until_idle(qtbot, win, max_steps=36)
    new = sorted({r["step"] for r in engine.read_samples(folder)} - set(steps))
    assert 31 not in new and 32 not in new and 36 in new, new


def test_the_preview_interval_is_kept_across_launches(qtbot):
    from app.panels.preview_panel import PreviewPanel

    panel = PreviewPanel()
    qtbot.addWidget(panel)
    panel.every.setValue(350)
    panel.remember()
    again = PreviewPanel()
    qtbot.addWidget(again)
    assert again.every.value() == 350


def test_a_slow_preview_is_not_queued_behind(win, qtbot, monkeypatch):
    """Previews are made beside training; one every step while the last is still being made
    (the software-Vulkan preview takes ~20 s on medium) would queue without end, and Stop
    waited for the queue."""
    import time

    from app.workers import TrainWorker

    made: list[int] = []

    def slow(self, tag, snapshot, step, epoch):  # noqa: ANN001, ARG001
        made.append(step)
        time.sleep(2.0)

    monkeypatch.setattr(TrainWorker, "_render", slow)
    win.train.epochs.setValue(3)
    win.preview.every.setValue(1)
    train_until_idle(qtbot, win, max_steps=6)
    assert made[0] == 0 and made[-1] == 6 and len(made) <= 3, made


def test_a_runs_own_step_times_replace_the_estimates_timing(win, qtbot):
    """The estimate timed three steps once, while the kernels compiled at the first launch
    (388 ms/step for ~100 ms steps), and kept that until the settings changed; the run's own
    median is kept across launches (each launch timed three steps again), a three-step timing
    is not."""
    from app import settings
    from app.step_times import KEY, StepTimes, estimate_key

    key = estimate_key(win.train.model_config(), win.train.train_config())
    win._step_times.timed(key, 9.99)  # a timing far off
    other = estimate_key(win.train.model_config(),
                         replace(win.train.train_config(), batch_size=1))
    win._step_times.timed(other, 7.77)
    win.train.epochs.setValue(3)
    train_until_idle(qtbot, win, max_steps=8)
    run_s = win._step_times.get(key)
    assert run_s is not None and run_s < 9.0  # the run's median step time now
    win._refresh_estimate()
    assert "9.99" not in win.estimate.full and "9,990" not in win.estimate.full
    relaunch = StepTimes()  # what the next launch's window reads
    assert relaunch.get(key) == run_s  # kept
    assert relaunch.get(other) is None  # a three-step timing was not
    settings.save(KEY, "{not json")  # a damaged settings file: no timings, no error
    assert StepTimes().get(key) is None
    settings.save(KEY, json.dumps({repr(key): 0.0, repr(other): -1.0}))  # nor a time of 0 or
    assert StepTimes().get(key) is None and StepTimes().get(other) is None  # less


def test_a_bpe_runs_step_time_is_kept_for_the_vocabulary_it_learned(win, qtbot, tmp_path):
    """A BPE run on a small text learned 273 of the 2,048 tokens asked: its step time was kept
    under the 2,048-token model, whose estimate then showed the smaller model's time."""
    import engine
    from app.step_times import estimate_key

    corpus = tmp_path / "small.txt"
    corpus.write_text("ab ba abba " * 400)
    win.corpus.files.clear()
    win.corpus.add_paths([str(corpus)], sync=True)
    win.train.tokenizer.setCurrentText("bpe")
    win.train.bpe_vocab.setValue(2048)
    asked = estimate_key(win.train.model_config(), win.train.train_config())
    folder = train_until_idle(qtbot, win, max_steps=8)
    learned = engine.read_model_config(folder)
    assert learned.vocab_size < 2048  # (the text has few pairs to merge)
    tc = engine.read_run_spec(folder).train
    assert win._step_times.get(estimate_key(learned, tc)) is not None
    assert win._step_times.get(asked) is None


def test_train_pause_resume_stop_then_continue_shows_full_history(win, qtbot):
    """Deterministic: every wait is on a condition or a signal, and the pause check reads the
    run's own step counter (not the queue of step signals the GUI may not have drained yet)."""
    win.train.epochs.setValue(30)
    win.train.eval_every.setValue(2)
    win.start_training()
    qtbot.waitUntil(lambda: "step 0" in win.preview.tag.full, timeout=RUN_TIMEOUT)
    assert win.preview.output.toPlainText().startswith("The")
    win.preview.prompts.setPlainText("Once")  # edits reach the running worker
    win.preview.temperature.setValue(0.0)
    prompts, sampling = win.worker.preview_settings
    assert prompts == ("Once",) and sampling.temperature == 0.0
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 3, timeout=RUN_TIMEOUT)
    run = win.worker.run_obj
    win.pause()
    assert win.state == "paused"
    at_pause = run.step
    qtbot.wait(800)
    paused_at = run.step
    assert paused_at <= at_pause + 1  # at most the step in flight
    qtbot.wait(800)
    assert run.step == paused_at  # and then nothing
    win.resume()
    qtbot.waitUntil(lambda: run.step > paused_at + 1, timeout=RUN_TIMEOUT)
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    folder = Path(win.last_folder)
    latest = json.loads((folder / "latest.json").read_text())
    done = latest["step"]
    assert done >= paused_at + 2 and (folder / "snapshots").is_dir()
    assert win.plots.val_step_losses  # eval every 2 steps reached the plots
    # Continue: same folder, the plot starts at step 1 (history from metrics.csv)
    win.runs.refresh()
    win.choose_continue(str(folder))
    assert "continues run" in win.next_label.full and f"step {done}" in win.next_label.full
    win.train.max_steps.setValue(done + 2)
    win.start_training()  # while it runs, the line no longer says "continues ... from step N"
    assert win.next_label.full.startswith("Next Start: a new run, once this continued run of")
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert win.last_folder == str(folder) and len([p for p in folder.parent.iterdir() if p.is_dir()]) == 1
    assert win.plots.steps[0] == 1 and win.plots.steps[-1] == done + 2
    assert json.loads((folder / "latest.json").read_text())["step"] == done + 2
    assert win.next_label.full.startswith("Next Start: a new run")  # Continue was one-shot


def test_a_refused_continue_stays_chosen(win, qtbot):
    """Continue with max steps below the run's step: refused, and the window fell back to a new
    run of random weights with empty plots; a second Start then trained from scratch."""
    win.train.epochs.setValue(20)
    folder = train_until_idle(qtbot, win, max_steps=4)
    win.runs.refresh()
    win.choose_continue(folder)
    win.train.max_steps.setValue(2)
    from PySide6.QtCore import QThread

    threads = []  # the run's error reaches the window on its own thread (a lambda slot ran it
    real = win._error  # on the training thread, where the dialog crashed Qt: a segfault)
    win._error = lambda m: (threads.append(QThread.currentThread()), real(m))[1]
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert threads and all(t is QApplication.instance().thread() for t in threads), threads
    assert win.errors and "is already at step 4, and max steps 2 would end it at step 2" \
        in win.errors[-1], win.errors
    assert "give max steps above 4 (or no limit) to train on" in win.errors[-1]
    assert win.continue_dir == folder and "continues run" in win.next_label.full
    assert win.plots.steps and win.plots.steps[-1] == 4  # its history is shown again
    win.train.max_steps.setValue(6)
    assert train_until_idle(qtbot, win) == folder  # the same run goes on
    assert json.loads((Path(folder) / "latest.json").read_text())["step"] == 6


def test_second_start_makes_a_second_run(win, qtbot):
    first = train_until_idle(qtbot, win, max_steps=2)
    second = train_until_idle(qtbot, win)
    assert not win.errors, win.errors
    assert first and second and first != second
    names = [r.name for r in win.runs.runs]
    assert Path(first).name in names and Path(second).name in names
    assert win.runs.table.rowCount() == 2


def test_runs_panel_lists_compares_and_deletes(win, qtbot):
    a = train_until_idle(qtbot, win, max_steps=3)
    b = train_until_idle(qtbot, win, max_steps=2)
    t = win.runs.table
    headers = [t.horizontalHeaderItem(i).text() for i in range(t.columnCount())]
    assert headers == ["name", "date", "model", "steps", "best held-out", "status"]
    rows = {t.item(r, 0).text(): [t.item(r, c).text() for c in range(6)] for r in range(2)}
    assert rows[Path(a).name][2:4] == ["tiny", "3"] and rows[Path(a).name][5] == "finished"
    assert float(rows[Path(b).name][4].split()[0]) > 0  # best held-out loss (bits/byte beside)
    win.compare_run(a)
    assert len(win.plots.cmp_loss.getData()[0]) == 3 and Path(a).name in win.plots.compare_label.full
    xs, ys = win.plots.cmp_norm.getData()  # its gradient norm too (only the loss was drawn)
    assert list(xs) == [1, 2, 3] and all(y > 0 for y in ys)
    win.open_run_view(a)
    assert win.plots.steps == [1, 2, 3] and win.gallery.folder == a
    assert win.runs.delete_run(a)
    assert not Path(a).exists() and win.runs.table.rowCount() == 1
    # the shown run's views went with it (its curves, samples and model stayed on screen)
    assert win.plots.steps == [] and win.gallery.folder is None and win.shown_run is None
    assert win.playground.source.currentText() != a and "was deleted" in win.preview.tag.full
    assert not win.export_actions["merged"].isEnabled()
    assert f"last run: {Path(b).name} finished at step 2" in win.status.full
    assert win.runs.delete_run(b)  # the status line named it as finished after it was deleted
    assert win.status.full == f"idle · last run: {Path(b).name} (deleted)"


def test_start_takes_a_compared_runs_grey_curves_off_the_plots(win, qtbot, tmp_path):
    """A new run starts on empty plots: the grey curves of a run overlaid with Compare stayed
    under the new run's live ones, and Compare still named the old run."""
    from engine.trainer import TrainConfig

    sample = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=2))
    with runapi.start(spec, [sample], root=tmp_path / "other") as run:
        run.train(control=engine.TrainControl())
    other = str(run.folder)
    win.compare_run(other)
    assert win.compared_run == other and len(win.plots.cmp_loss.getData()[0]) == 2
    train_until_idle(qtbot, win, max_steps=1)
    assert win.compared_run is None and win.plots.compare_label.full == ""
    xs, _ = win.plots.cmp_loss.getData()
    assert xs is None or len(xs) == 0

def test_close_during_training_waits_and_saves(win, qtbot):
    win.train.epochs.setValue(200)
    win.start_training()
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 2, timeout=RUN_TIMEOUT)
    thread = win.train_thread
    folder = Path(win.current_run)
    win.close()
    assert win.isVisible() and "saving" in win.status.full  # not closed yet, not aborted
    qtbot.waitUntil(lambda: not win.isVisible(), timeout=RUN_TIMEOUT)
    assert thread.isFinished()
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "stopped" and status["step"] >= 2
    assert json.loads((folder / "latest.json").read_text())["step"] == status["step"]
    runapi.open_run(folder)  # opens, checksums verified


def test_ui_stays_responsive_while_training(win, qtbot):
    from PySide6.QtCore import QTimer

    win.train.epochs.setValue(200)
    win.start_training()
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 2, timeout=RUN_TIMEOUT)
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start(10)
    qtbot.waitUntil(lambda: len(ticks) >= 20, timeout=10000)
    timer.stop()
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 1.0


def test_early_stopping_stops_and_keeps_the_best_snapshot(win, qtbot):
    win.train.eval_every.setValue(1)
    win.train.target_loss.setValue(900.0)  # reached at the first evaluation
    folder = Path(train_until_idle(qtbot, win, max_steps=40))
    assert "early stopping" in win.log.toPlainText()
    best = json.loads((folder / "best.json").read_text())
    assert best["step"] == 1 and best["val_loss"] < 900
    assert (folder / "snapshots" / Path(best["snapshot"]).name).is_dir() if "snapshot" in best \
        else any(p.name.endswith("1") for p in (folder / "snapshots").iterdir())
    stopped_at = json.loads((folder / "status.json").read_text())["step"]
    assert stopped_at < 40
    import engine  # the run's last weights get a sample (early stopping ends it mid-epoch)

    assert stopped_at in [r["step"] for r in engine.read_samples(folder)]


def test_early_stopping_does_not_claim_a_runs_own_end(win, qtbot):
    """A run ending on max steps is evaluated at its last step; a target met there said
    "finished at step 2 (early stopping: ...)"."""
    win.train.eval_every.setValue(0)
    win.train.target_loss.setValue(900.0)
    folder = Path(train_until_idle(qtbot, win, max_steps=2))
    assert "early stopping" not in win.log.toPlainText()
    val = json.loads((folder / "latest.json").read_text())["val_loss"]
    assert val < 900  # it was measured, and the Log says it (it was in no line of the window)
    assert f"finished at step 2 (held-out loss {val:.4f})" in win.log.toPlainText()


def test_continue_keeps_a_run_without_tensorboard_without_it(win, qtbot, tmp_path):
    """A run started with --no-tensorboard got tb/ from the window's Continue; one with tb/
    keeps logging."""
    from engine import run as runapi
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=1))
    sample = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    with runapi.start(spec, [sample], root=tmp_path / "runs") as run:  # no TensorBoard logger
        run.train()
        folder = str(run.folder)
    assert not (Path(folder) / "tb").exists()
    win.choose_continue(folder)
    assert train_until_idle(qtbot, win, max_steps=2) == folder
    assert not (Path(folder) / "tb").exists()
    made = train_until_idle(qtbot, win, max_steps=1)  # a window run: tb/ from its start
    win.choose_continue(made)
    train_until_idle(qtbot, win, max_steps=2)
    assert len(list((Path(made) / "tb").iterdir())) >= 1


def test_the_log_shows_its_newest_line(win, qtbot):
    """After a layout change the Log stayed on old lines while new ones arrived below."""
    for i in range(300):
        win._say(f"line {i}")
    bar = win.log.verticalScrollBar()
    bar.setValue(0)  # where a resize can leave it
    win._say("the newest")
    assert bar.value() == bar.maximum() > 0


def test_corpus_shorter_than_a_sequence_returns_to_idle_without_a_traceback(win, qtbot, tmp_path):
    """The engine packs short documents into padded rows now, so this trains; whatever the
    engine decides, the window ends idle and any error is one line."""
    short = tmp_path / "short.txt"
    short.write_text("only a few words")
    win.corpus.files.clear()
    win.corpus.add_paths([str(short)], sync=True)
    train_until_idle(qtbot, win, max_steps=1)
    assert win.state == "idle"
    assert all("\n" not in e.strip() and "Traceback" not in e for e in win.errors), win.errors


def test_preview_backend_auto_and_cpu(win, qtbot, monkeypatch):
    monkeypatch.setenv("MAMBA_STUDIO_GPU", "off")  # as if no adapter could be used
    assert win.backend.currentText() == "auto"
    train_until_idle(qtbot, win, max_steps=1)
    full = win.preview.backend.toolTip()  # the whole reason; the line itself may end in "…"
    assert "CPU step" in full and "disabled" in full, full
    win.backend.setCurrentText("cpu")
    train_until_idle(qtbot, win, max_steps=1)
    assert "CPU step (chosen)" in win.preview.backend.toolTip()


def test_settings_are_remembered(qtbot, tmp_path):
    w = MainWindow(runs_root=str(tmp_path / "a"))
    qtbot.addWidget(w)
    w.train.lr.setValue(0.0123)
    w.init_dir = str(tmp_path)  # as Open model does: LoRA adapts opened weights
    w._update_next()
    w.train.lora.setChecked(True)
    w.preview.prompts.setPlainText("Once upon")
    w.show()
    center = w.splitters["window/center_split"]
    center.setSizes([300, 400])  # dragged for a taller sample box
    dragged = center.sizes()
    w.close()
    w2 = MainWindow(runs_root=str(tmp_path / "b"))
    qtbot.addWidget(w2)
    w2.show()
    assert w2.splitters["window/center_split"].sizes() == dragged  # it came back at 520:220
    assert w2.train.lr.value() == pytest.approx(0.0123)
    assert not w2.train.lora.isChecked()  # the next Start is a new model from random weights
    w2.init_dir = str(tmp_path)
    w2._update_next()
    assert w2.train.lora.isChecked()  # ... and with weights opened, LoRA as ticked before
    assert w2.preview.prompt_list() == ["Once upon"]


def test_many_qt_calls_do_not_crash(qtbot, win):
    """PySide6 6.12.0 on Python 3.11 aborts after ~5,000 void-returning calls (hence the pin in
    pyproject.toml)."""
    for i in range(6000):
        win.progress.setValue(i % 100)
        win.status.set_full(str(i))
    assert win.status.full == "5999"
    assert QApplication.instance() is not None


def test_progress_lines_show_in_the_status_until_training_starts(win):
    """Before step 1 the engine's progress lines (BPE training, tokenizing hundreds of MB) were
    only in the Log tab while the status line said "preparing…" for minutes."""
    from app.main_window import PREPARING

    win.status.set_full(f"{PREPARING} (corpus, tokenizer, model, kernels)…")
    win._notice("tokenizing 200.00 MB of text...")
    assert win.status.full == f"{PREPARING}: tokenizing 200.00 MB of text..."
    win.status.set_full("step 3 / 110")  # once training runs, notices stay in the log
    win._notice("note: something")
    assert win.status.full == "step 3 / 110"
    assert "tokenizing 200.00 MB" in win.log.toPlainText()


def test_while_a_run_trains_open_and_continue_say_why_not_and_a_deleted_compare_goes(win, qtbot):
    """Open of another run while one trained drew the live steps over the opened run's curves
    (and Export then named the wrong run); Continue did nothing, silently; a compared run's grey
    curves stayed on the plot after it was deleted."""
    a = train_until_idle(qtbot, win, max_steps=3)
    win.train.max_steps.setValue(0)
    win.train.epochs.setValue(200)
    win.start_training()
    qtbot.waitUntil(lambda: win.current_run is not None and len(win.plots.steps) >= 2,
                    timeout=RUN_TIMEOUT)
    live = win.current_run
    win.compare_run(a)
    assert len(win.plots.cmp_loss.getData()[0]) == 3
    win.open_run_view(a)
    msg = win.statusBar().currentMessage()
    assert f"{Path(live).name} is training: open {Path(a).name} after it ends" in msg, msg
    assert win.shown_run == live and win.plots.steps[0] == 1  # still the live run's curves
    win.choose_continue(a)
    msg = win.statusBar().currentMessage()
    assert f"is running: Continue {Path(a).name} after it ends or is stopped" in msg, msg
    assert win.continue_dir is None
    assert win.runs.delete_run(a)
    assert win.plots.cmp_loss.getData()[0] is None or len(win.plots.cmp_loss.getData()[0]) == 0
    assert win.plots.compare_label.full == ""
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors


def test_space_presses_the_focused_button_when_idle_and_tab_leaves_the_prompts(win, qtbot):
    """The window-wide Space (pause) took every Space, so no button or checkbox could be used
    from the keyboard; Tab in the prompt boxes typed tabs into the saved prompts."""
    from PySide6.QtCore import Qt

    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    box = win.train.checkpointing
    win.tabs.setCurrentIndex(0)
    box.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is box)
    before = box.isChecked()
    qtbot.keyClick(box, Qt.Key.Key_Space)
    assert box.isChecked() is not before
    win.start_btn.setFocus()  # where the focus goes when a run ends: a Space meant to pause a
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.start_btn)  # run that had just
    qtbot.keyClick(win.start_btn, Qt.Key.Key_Space)  # ended started a new one
    assert win.state == "idle" and win.worker is None
    for edit in (win.preview.prompts, win.playground.prompt):
        edit.setPlainText("The ")
        assert edit.tabChangesFocus()
        qtbot.keyClick(edit, Qt.Key.Key_Tab)
        assert edit.toPlainText() == "The "


def test_start_leaves_the_keyboard_on_pause_and_a_pause_says_where_it_stopped(win, qtbot):
    """After Start the focus went on to the Preview's backend box (End then set it to gpu); the
    paused status line dropped the step and loss."""
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.start_btn.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is win.start_btn)
    win.train.epochs.setValue(200)
    win.start_training()
    assert QApplication.focusWidget() is win.pause_btn
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 2, timeout=RUN_TIMEOUT)
    win.pause()
    assert QApplication.focusWidget() is win.resume_btn
    run = win.worker.run_obj
    qtbot.waitUntil(lambda: win.last_report.step == run.step, timeout=RUN_TIMEOUT)
    qtbot.wait(300)  # the step in flight at the pause ended: the line says it (it lagged 1-2)
    r = win.last_report
    assert r.step == run.step
    assert win.status.full == (f"paused at step {r.step:,}/{r.total_steps:,} · loss {r.loss:.4f} "
                                 "nats (Ctrl+P resumes; Space too, outside a text box)")
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert QApplication.focusWidget() is win.start_btn  # it went to the Preview backend box
    assert not win.errors, win.errors


def test_a_pause_while_preparing_shows_the_prepared_run_at_step_0(win, qtbot):
    """Pause during "preparing…": the run was made and waited before step 1, and the bar kept
    saying "preparing…" under a "paused" status line."""
    win.train.epochs.setValue(200)
    win.start_training()
    win.pause()
    qtbot.waitUntil(lambda: win.current_run is not None, timeout=RUN_TIMEOUT)
    run = win.worker.run_obj
    assert win.progress.text() == f"0 / {run.trainer.total_steps} steps", win.progress.text()
    assert win.status.full == "paused (Ctrl+P resumes; Space too, outside a text box)"
    assert run.step == 0
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors


def test_an_ended_run_gives_its_memory_back(win, qtbot, monkeypatch):
    """The window kept ~690 MB after a run until it was closed (the allocator keeps freed
    memory for the next step): a second after a run ends it is handed back."""
    import engine

    calls: list[int] = []
    monkeypatch.setattr(engine, "release_freed_memory", lambda: calls.append(1) or True)
    train_until_idle(qtbot, win, max_steps=2)
    qtbot.waitUntil(lambda: calls == [1], timeout=5000)
    assert engine.runtime.release_freed_memory() is True  # the real one runs (glibc)


def test_tab_leaves_every_table(win, qtbot):
    """Tab in the corpus file table cycled its cells and never left it: by keyboard alone the
    preview prompts and Reset view could not be reached."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    for table in (win.corpus.table, win.runs.table, win.gallery.table):
        assert not table.tabKeyNavigation()
    table = win.corpus.table
    table.setFocus()
    qtbot.waitUntil(table.hasFocus)
    QTest.keyClick(table, Qt.Key.Key_Tab)
    assert not table.hasFocus()


def test_the_garbage_collector_runs_on_the_gui_thread_only_while_a_window_is_open(qtbot, tmp_path):
    """Automatic collections in the training thread or a pool job finalised Qt objects off the
    GUI thread and hung the window (2 of 6 runs of these tests): while a window is open the
    collector runs from a GUI-thread timer instead."""
    import gc
    import threading

    w = MainWindow(runs_root=str(tmp_path / "runs"))
    assert not gc.isenabled()
    ran: list[bool] = []
    real = gc.collect

    def spy(*a):  # noqa: ANN002
        ran.append(threading.current_thread() is threading.main_thread())
        return real(*a)

    try:
        gc.collect = spy
        junk = [[i] for i in range(100_000)]
        for x in junk:
            x.append(x)  # cycles for it to find
        del junk
        qtbot.waitUntil(lambda: bool(ran), timeout=5000)
    finally:
        gc.collect = real
    assert all(ran)
    w.close()
    from app import gc_thread

    assert not w._gc.timer.isActive() and w._gc not in gc_thread._holders
    assert gc.isenabled() == (not gc_thread._holders)  # on again once no window collects


def test_the_estimate_key_is_the_models_sizes_not_its_token_ids():
    """A Continue's model config (eos 256) never matched the preset's (eos 0): its run's step
    time was not used for the next new run of the same sizes."""
    from dataclasses import replace

    import engine
    from app.step_times import estimate_key as _estimate_key

    cfg, tc = engine.preset("small", 257), engine.TrainConfig()
    assert _estimate_key(replace(cfg, eos_token_id=256, bos_token_id=256), tc) == \
        _estimate_key(cfg, tc)
    assert _estimate_key(replace(cfg, n_layer=3), tc) != _estimate_key(cfg, tc)


def test_prompts_edited_past_the_limit_while_training_do_not_fail_the_run(win, qtbot):
    """17 preview prompts typed while training: the run was trained and saved, then reported
    "failed" because keeping the prompts in run.json raised. It ends as it ended; the prompts
    are not kept, and the log says why."""
    win.train.epochs.setValue(30)
    win.train.max_steps.setValue(4)
    win.start_training()
    qtbot.waitUntil(lambda: win.worker is not None and win.worker.run_obj is not None,
                    timeout=RUN_TIMEOUT)
    win.preview.prompts.setPlainText("\n".join(f"p{i}" for i in range(17)))
    folder = str(win.worker.run_obj.folder)
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert "failed" not in win.status.full and "at step 4" in win.status.full, \
        win.status.full
    assert runapi.read_run_spec(folder).prompts == (engine.DEFAULT_PROMPT,)
    assert "preview prompts are not kept with the run" in win.log.toPlainText()


def test_long_status_and_estimate_lines_do_not_move_the_tabs(win, qtbot):
    """The status line (a step line at 900 px wrapped at some steps and not at others) and the
    estimate line wrapped and moved the tabs under the mouse while training; both are one line,
    their whole text in the tooltip."""
    win.resize(900, 600)
    win.show()
    qtbot.waitExposed(win)
    win.status.set_full("idle")
    win.estimate.set_full("Estimate: 1 parameter")
    qtbot.wait(50)
    where = win.tabs.mapTo(win, win.tabs.rect().topLeft())
    long = "step 12/120 · epoch 2 · loss 2.1234 nats · " * 8
    win.status.set_full(long)
    win.estimate.set_full("Estimate: " + long)
    qtbot.wait(50)
    assert win.tabs.mapTo(win, win.tabs.rect().topLeft()) == where
    assert win.status.full == long and long in win.status.toolTip()
    assert win.status.text().endswith("…") and len(win.status.text()) < len(long)
    assert "median of three real steps" in win.estimate.toolTip()  # what the line means, kept


def test_a_chosen_continue_names_the_step_its_run_is_at_now(win, qtbot):
    """Continue of a run another process was training said "continues run X from step 88"
    while X went on past step 300: the line follows the Runs list's reads."""
    folder = train_until_idle(qtbot, win, max_steps=2)
    win.choose_continue(folder)
    assert "from step 2 " in win.next_label.full
    with runapi.resume(folder, max_steps=4) as run:  # as a CLI process would, meanwhile
        run.train()
    win.runs.refresh()
    assert "from step 4 " in win.next_label.full, win.next_label.full


def test_a_samples_file_that_cannot_be_written_still_shows_the_preview(win, qtbot):
    """samples.jsonl replaced by a FIFO: each preview put a Python traceback in the Log and
    showed nothing; the preview is shown and the Log says once why the Gallery misses it."""
    import os

    from engine.samples import SAMPLES

    win.train.epochs.setValue(3)
    folder = train_until_idle(qtbot, win, max_steps=2)
    os.unlink(Path(folder) / SAMPLES)
    os.mkfifo(Path(folder) / SAMPLES)
    win.choose_continue(folder)
    win.preview.output.setPlainText("")
    assert train_until_idle(qtbot, win, max_steps=4) == folder
    qtbot.waitUntil(lambda: win.preview.output.toPlainText() != "", timeout=RUN_TIMEOUT)
    log = win.log.toPlainText()
    assert "Traceback" not in log and log.count("not kept in the Gallery") == 1, log


def test_a_damaged_settings_file_keeps_the_defaults_and_says_so(qtbot, tmp_path):
    """Values a box cannot hold fall back to its default and are named in the Log (a preset
    "gigantic" became "tiny", lr -5 became 1e-08, a temperature "nan" became 5.0, unsaid); a
    file Qt reports it cannot parse is set aside as .damaged and said."""
    from app import settings

    s = settings.settings()
    for key, value in (("train/preset", "gigantic"), ("train/tokenizer_choice", "words"),
                       ("train/lr", -5), ("train/seq_len", "many"), ("preview/temperature", "nan"),
                       ("train/epochs", 3), ("playground/top_k", 7), ("train/lora", "maybe"),
                       ("train/batch", "2.5")):  # (taken as 2, unsaid)
        s.setValue(key, value)
    s.sync()
    w = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w)
    assert w.train.preset.currentText() == "small" and w.train.tokenizer.currentText() == "auto"
    assert w.train.lr.value() == pytest.approx(engine.PRESET_DEFAULTS["small"].lr)
    assert w.preview.temperature.value() == pytest.approx(engine.GENERATION_DEFAULTS.temperature)
    assert w.train.epochs.value() == 3 and w.playground.top_k.value() == 7  # good ones are taken
    log = w.log.toPlainText()
    for key in ("train/preset = 'gigantic' (not one of its choices)", "train/lr = '-5' (outside",
                "train/seq_len = 'many' (not a whole number)",
                "preview/temperature = 'nan' (not a number)", "train/lora = 'maybe'",
                "train/batch = '2.5' (not a whole number)"):
        assert key in log, key
    assert w.train.batch.value() == engine.PRESET_DEFAULTS["small"].batch_size
    assert "train/epochs" not in log and settings.take_ignored() == []
    w.close()

    path = Path(settings.settings().fileName())
    path.write_text("[train]\nepochs=4\nnot a setting\n[train\nlr=0.1\n")
    w2 = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w2)
    assert w2.train.epochs.value() == 4  # what came before the damage is read
    assert "the settings file was damaged (kept as " in w2.log.toPlainText()
    assert path.with_name(path.name + ".damaged").exists()
    assert "epochs=4" in path.read_text()  # what was read, saved again at once (a kill lost it)
    w2.close()
    assert settings.settings().status() == settings.QSettings.Status.NoError
    path.write_text("[train]\nepochs=5\n[train\n")  # damaged again: the first kept too
    w3 = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w3)
    assert path.with_name(path.name + ".damaged-2").exists()
    assert "epochs=4" in path.with_name(path.name + ".damaged").read_text()
    w3.close()


def test_a_run_stops_from_the_keyboard(win, qtbot):
    """Space on a focused Stop paused the run, Return did nothing and no key stopped it: Space
    and Return press the focused Stop, and Ctrl+. stops from anywhere."""
    from PySide6.QtCore import Qt

    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.train.epochs.setValue(30)
    for key, mod in ((Qt.Key.Key_Space, None), (Qt.Key.Key_Return, None),
                     (Qt.Key.Key_Period, Qt.KeyboardModifier.ControlModifier)):
        win.start_training()
        qtbot.waitUntil(lambda: len(win.plots.steps) >= 1, timeout=RUN_TIMEOUT)
        assert win.state == "running"
        target = win.stop_btn if mod is None else win.preview.output
        target.setFocus()
        qtbot.waitUntil(lambda t=target: QApplication.focusWidget() is t)
        if mod is None:
            qtbot.keyClick(target, key)
        else:
            qtbot.keyClick(target, key, mod)
        assert win.state == "stopping", (key, win.state)
        qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
        win.plots.clear()
    assert not win.errors, win.errors


def test_ctrl_return_on_a_focused_pause_or_stop_neither_pauses_nor_stops_the_run(win, qtbot):
    """Ctrl+Return is Start's key; while a run trains Start is off, and the key reached the
    focused Pause (the run paused) or Stop (the run stopped): a user pressing Start out of habit
    ended the run. It now does neither and says why; plain Return still presses the button."""
    from PySide6.QtCore import Qt

    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.train.epochs.setValue(200)
    win.start_training()
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 1, timeout=RUN_TIMEOUT)
    for button in (win.pause_btn, win.stop_btn):
        button.setFocus()
        qtbot.waitUntil(lambda b=button: QApplication.focusWidget() is b)
        for key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            qtbot.keyClick(button, key, Qt.KeyboardModifier.ControlModifier)
            assert win.state == "running", (button.text(), key, win.state)
    assert win.statusBar().currentMessage().startswith("a run is training: Ctrl+Return starts")
    qtbot.keyClick(win.stop_btn, Qt.Key.Key_Return)
    assert win.state == "stopping"
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors


def test_ctrl_p_pauses_and_resumes_from_a_text_box_and_the_run_menu_names_the_keys(win, qtbot):
    """Space, the pause key, typed a space into the focused Prompts box (where the focus stays
    after Ctrl+Enter there): the run went on and its next previews used the changed prompt.
    Ctrl+P pauses and resumes from any box; the Run menu lists the run's keys."""
    from PySide6.QtCore import Qt

    assert {k: a.shortcut().toString() for k, a in win.run_actions.items()} == {
        "Start": "Ctrl+Return", "Pause / resume": "Ctrl+P", "Stop (saves)": "Ctrl+.",
        "Generate in the Playground": "Ctrl+G"}
    def offered() -> dict[str, bool]:
        return {k: a.isEnabled() for k, a in win.run_actions.items()}

    assert offered() == {"Start": True, "Pause / resume": False, "Stop (saves)": False,
                         "Generate in the Playground": True}  # as the buttons are
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)
    win.train.epochs.setValue(200)
    box = win.preview.prompts
    box.setPlainText("The ")
    box.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is box)
    qtbot.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(win.plots.steps) >= 1, timeout=RUN_TIMEOUT)
    box.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is box)
    qtbot.keyClick(box, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)
    assert win.state == "paused" and box.toPlainText() == "The "
    qtbot.keyClick(box, Qt.Key.Key_P, Qt.KeyboardModifier.ControlModifier)
    assert win.state == "running"
    assert offered() == {"Start": False, "Pause / resume": True, "Stop (saves)": True,
                         "Generate in the Playground": True}
    win.stop()
    qtbot.waitUntil(lambda: win.state == "idle", timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors


def test_every_tab_stop_of_the_train_page_shows_where_the_keys_go(win):
    """Tab stopped on the plots and on the settings panel's scroll area, which show no focus:
    a keyboard user lost track of the focus there."""
    from PySide6.QtCore import Qt

    assert win.plots.canvas.focusPolicy() == Qt.FocusPolicy.NoFocus
    assert win.train_scroll.focusPolicy() == Qt.FocusPolicy.NoFocus


def test_no_pane_can_be_dragged_to_nothing_and_the_curves_keep_room(win, qtbot):
    """The Preview / Log pane dragged down to nothing stayed so at every launch, behind a 6-px
    handle; at 700x500 the plots got 60 px (axes, no curve)."""
    center = win.splitters["window/center_split"]
    side = win.splitters["window/side_split"]
    center.setSizes([900, 0])
    side.setSizes([0, 1200])
    qtbot.wait(20)
    assert center.sizes()[1] > 0 and side.sizes()[0] > 0, (center.sizes(), side.sizes())
    win.resize(700, 500)
    qtbot.wait(50)
    assert win.plots.height() >= 150


def test_a_splitter_state_saved_by_an_earlier_version_cannot_collapse_a_pane(qtbot, tmp_path):
    """A saved splitter state carries its own "collapsible" flag: restored after the window set
    it off, the Preview / Log could again be dragged to nothing, for every existing user."""
    from app import settings
    from app.main_window import MainWindow

    old = QSplitter()
    old.addWidget(QWidget())
    old.addWidget(QWidget())
    old.setChildrenCollapsible(True)
    settings.save("window/center_split", old.saveState())
    w = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w)
    assert not any(s.childrenCollapsible() for s in w.splitters.values())
    w.close()


def test_a_dropped_web_address_is_named_not_dropped_unsaid(win, qtbot, tmp_path, monkeypatch):
    """A link dragged from a browser (http://…) was ignored without a word; beside a file, the
    file is added and the address listed as skipped, with why and the fix."""
    from PySide6.QtCore import QUrl

    shown = _record_boxes(monkeypatch)
    good = tmp_path / "notes.txt"
    good.write_text("some text to learn from\n" * 20)
    drop(win.corpus.drop, [QUrl("https://example.com/corpus.txt"), good])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and str(good) in win.corpus.paths())
    assert win.corpus.skipped_btn.text() == "1 file skipped"
    assert "corpus.txt: not a file on this computer (a web address); download it, then add " \
           "the file" in win.corpus.notice.text(), win.corpus.notice.text()
    assert shown == []  # a file was added: a note, not a dialog


def test_a_file_refused_twice_in_one_drop_is_listed_once(win, qtbot, tmp_path):
    """A FIFO dropped both by name and inside its dropped folder was listed (and counted) twice,
    with two wordings: '7 files skipped' of six."""
    import os

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "a.txt").write_text("some text to learn from\n" * 20)
    os.mkfifo(folder / "pipe")
    drop(win.corpus.drop, [folder, folder / "pipe"])
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and str(folder / "a.txt") in win.corpus.paths())
    assert win.corpus.skipped_btn.text() == "1 file skipped"
    assert win.corpus.notice.text().count("pipe") == 1, win.corpus.notice.text()


def test_the_idle_line_is_matched_to_a_run_by_its_whole_name():
    """A prefix match took 'a b stopped at step 5' for the run 'a' (names hold spaces)."""
    from app.main_window import _names_run

    assert _names_run("a b stopped at step 5", "a b")
    assert not _names_run("a b stopped at step 5", "a")
    assert _names_run("x early-stopped at step 1,000", "x")
    assert _names_run("x trains in another process", "x")
    assert _names_run("x (deleted)", "x") and not _names_run("x (deleted)", "x (deleted)")
    assert _names_run("x finished at step 2 (held-out loss 7.5921)", "x")  # the worker's
    assert _names_run("x failed (see the Log tab)", "x")
    assert not _names_run("a b finished at step 2 (held-out loss 7.5921)", "a")
