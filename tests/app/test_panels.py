"""pytest-qt tests of the Playground, Gallery, run logs, corpus panel, layout, estimates,
settings files and exports."""

import json
import math
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication

from engine import run as runapi
from engine.defaults import SAMPLE_CORPUS
from engine.samples import read_samples
from engine.tblog import TB_DIR

from .helpers import RUN_TIMEOUT, close_window, fake_model, small_window, train_until_idle


class _Words:
    """A tokenizer whose count differs from the byte count (one token per word)."""

    kind = "words"

    def encode(self, text):  # noqa: ANN001, ANN202
        return text.split()


def _three_files(tmp_path: Path) -> Path:
    """tmp_path/corpus with a.txt, b.txt, c.txt: 500 bytes and 150 words each."""
    d = tmp_path / "corpus"
    d.mkdir()
    for name in "abc":
        (d / f"{name}.txt").write_text(f"text of {name}\n" * 50)
    return d


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A finished 3-step run made through engine.run (no window)."""
    import engine
    from engine.trainer import TrainConfig

    root = tmp_path_factory.mktemp("runs")
    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=3))
    with runapi.start(spec, [corpus], root=root) as run:
        run.train(control=engine.TrainControl())
    return str(run.folder)


def test_a_settings_file_opened_for_a_continue_leaves_what_the_run_keeps(win, tiny_run, tmp_path):
    """Continue, then Open settings: the greyed boxes took the file's batch 6, seq len 96 and
    seed, and the estimate counted the file's steps an epoch (7) where the run kept its own
    batch (11). The boxes keep the run's values and the file's others are named; what a
    Continue may change (epochs, learning rate) is taken."""
    win.choose_continue(tiny_run)
    before = (win.train.batch.value(), win.train.seq_len.value(), win.train.seed.value(),
              win.train.d_model.value(), win.train.preset.currentText())
    path = tmp_path / "s.toml"
    path.write_text('[run]\npreset = "tiny"\nautosave_minutes = 1.0\n[model]\nd_model = 48\n'
                    "[train]\nbatch_size = 6\n"
                    "seq_len = 96\nseed = 11\nepochs = 7\nlr = 0.001\nwarmup_steps = 50\n"
                    "beta2 = 0.95\n[early_stopping]\nmin_delta = 0.2\n")
    win.load_settings_file(str(path))
    assert (win.train.batch.value(), win.train.seq_len.value(), win.train.seed.value(),
            win.train.d_model.value(), win.train.preset.currentText()) == before
    assert (win.train.epochs.value(), win.train.lr.value()) == (7, pytest.approx(0.001))
    over = win.continue_overrides()
    assert (over["epochs"], over["warmup_steps"]) == (7, 50)  # as train --resume --config
    assert over["early_stopping"].min_delta == 0.2 and "beta2" not in over
    assert ("not d_model 48, batch_size 6, seq_len 96, seed 11, beta2 0.95: the continued run "
            "keeps its own (File > New model trains a new run with them)" in win.errors[-1]), \
        win.errors
    assert "autosave minutes 1 (was 5)" in win.next_label.full, win.next_label.full
    win.new_model()  # ... as it says: the file's other settings are the next new run's
    assert win.train.train_config().beta2 == 0.95 and win.continue_overrides() == {}
    win.choose_continue(tiny_run)  # chosen again: nothing of the file reaches this Continue
    assert win.continue_overrides() == {}, win.continue_overrides()


def test_a_model_that_cannot_be_reopened_at_launch_is_forgotten(qtbot, tiny_run, tmp_path):
    """A model opened last time and damaged since is said once, not retried at every launch."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_run, model)
    w = small_window(qtbot, tmp_path / "runs")
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.init_dir is not None, timeout=RUN_TIMEOUT)
    close_window(qtbot, w)
    for weights in model.rglob("model.safetensors"):
        weights.write_bytes(b"")
    w = small_window(qtbot, tmp_path / "runs")
    qtbot.waitUntil(lambda: "could not be opened again" in w.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert w.init_dir is None
    close_window(qtbot, w)
    w = small_window(qtbot, tmp_path / "runs")
    assert "reopening" not in w.log.toPlainText() and w._reopening is None
    close_window(qtbot, w)


def test_a_settings_file_opened_for_one_continue_never_reaches_another(win, tiny_run, tmp_path):
    """Continue of run A, Open settings (warmup, autosave, min_delta), then Continue of run B:
    B's resume must not take A's file's settings (they would be written into B's run.json)."""
    import shutil

    other = shutil.copytree(tiny_run, tmp_path / "other")
    win.choose_continue(tiny_run)
    path = tmp_path / "s.toml"
    path.write_text("[run]\nautosave_steps = 3\n[train]\nwarmup_steps = 7\n"
                    "[early_stopping]\nmin_delta = 0.2\n")
    win.load_settings_file(str(path))
    assert {"warmup_steps", "autosave_steps", "early_stopping"} <= set(win.continue_overrides())
    win.choose_continue(str(other))
    assert win.continue_overrides() == {}, win.continue_overrides()


def test_the_model_opened_when_the_app_closed_is_reopened_at_launch(qtbot, tiny_run, tmp_path):
    """A relaunch forgot the opened model but kept the panel's LoRA, rate and tokenizer: the
    next Start trained them on a new model of random weights, unsaid. The model is opened
    again (a gone one is said), and File > New model is remembered as such."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_run, model)

    def launch():  # noqa: ANN202
        return small_window(qtbot, tmp_path / "runs")

    w = launch()
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.init_dir == str(model), timeout=RUN_TIMEOUT)
    close_window(qtbot, w)
    w = launch()
    qtbot.waitUntil(lambda: w.init_dir == str(model), timeout=RUN_TIMEOUT)
    assert f"reopening {model}, the model opened last time" in w.log.toPlainText()
    assert w.train.model_override is not None
    close_window(qtbot, w)
    shutil.rmtree(model)
    w = launch()
    assert w.init_dir is None
    assert f"the model opened last time, {model}, is gone" in w.log.toPlainText()
    close_window(qtbot, w)
    w = launch()  # said once
    assert "is gone" not in w.log.toPlainText()
    shutil.copytree(tiny_run, model)
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.init_dir == str(model), timeout=RUN_TIMEOUT)
    w.new_model()
    close_window(qtbot, w)
    w = launch()
    assert w.init_dir is None and "reopening" not in w.log.toPlainText()
    close_window(qtbot, w)


def test_continue_of_a_run_its_early_stopping_ended_says_it_stops_again(win, qtbot, tmp_path):
    """Its Continue trained a few steps and stopped again, with no word before Start."""
    import engine
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=9,
                                                            eval_every=2),
                          early_stopping=engine.EarlyStopping(target_loss=900.0))
    with runapi.start(spec, [corpus], root=tmp_path / "own") as run:
        run.train()
    win.choose_continue(str(run.folder))
    assert (f"note: {run.folder.name} was ended by its early stopping: held-out loss"
            in win.log.toPlainText()), win.log.toPlainText()[-400:]
    assert "it stops again at its next held-out check unless Patience or Target loss "\
        "change" in win.log.toPlainText()
    train_until_idle(qtbot, win)  # its Start: the note is not said a second time
    log = win.log.toPlainText()
    assert log.count("was ended by its early stopping") == 1, log[-1500:]
    assert "stopped at step 4 (early stopping: held-out loss" in log, log[-1500:]


def test_a_playground_model_gone_from_disk_is_said_in_the_windows_terms(win, qtbot, tmp_path):
    """The Playground's model removed by rm -rf: "no such file or folder; pass a run folder
    (runs/...) or a model folder", the CLI's words; Continue of a removed run likewise."""
    gone = tmp_path / "gone"
    pg = win.playground
    pg.source.setCurrentText(str(gone))
    pg.generate()
    qtbot.waitUntil(lambda: "no such file or folder" in pg.status.text(), timeout=RUN_TIMEOUT)
    assert pg.status.text() == (f"{gone}: no such file or folder; choose a run in the Runs tab, "
                                "or a model folder"), pg.status.text()
    win.choose_continue(str(gone))
    assert "pass" not in win.errors[-1] and "choose a run in the Runs tab" in win.errors[-1], \
        win.errors


def test_a_choice_made_while_the_last_model_reopens_wins_and_start_waits(qtbot, tiny_run,
                                                                         tmp_path):
    """The reopen at launch loads in the background: a Start before it landed trained random
    weights, and a Continue chosen meanwhile was replaced by the opened model when it landed."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_run, model)
    w = small_window(qtbot, tmp_path / "runs")
    w.open_model(str(model))
    qtbot.waitUntil(lambda: w.init_dir == str(model), timeout=RUN_TIMEOUT)
    close_window(qtbot, w)
    w = small_window(qtbot, tmp_path / "runs")
    assert w._reopening == str(model)
    w.start_training()
    assert w.worker is None and "is still being opened; Start again when it is" in w.errors[-1]
    w.choose_continue(tiny_run)
    qtbot.wait(1500)  # the reopen lands meanwhile
    assert w.continue_dir == tiny_run and w.init_dir is None
    close_window(qtbot, w)


def test_playground_streams_tokens(win, qtbot, tiny_run, monkeypatch):
    from app import workers

    monkeypatch.setattr(workers, "PIECE_EVERY_S", 0.0)  # each token's text sent on its own
    pg = win.playground
    pg.set_source(tiny_run)
    pg.prompt.setPlainText("The ")
    pg.max_tokens.setValue(20)
    pg.temperature.setValue(0.0)
    pg.rep.setValue(1.3)
    pg.backend.setCurrentText("cpu")
    pieces: list[str] = []
    pg.generate()
    pg.worker.piece.connect(pieces.append)
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        pass
    assert "CPU step" in done.args[0]
    assert len(pieces) >= 5  # streamed piece by piece, not one block at the end
    assert pg.output.toPlainText() == "The " + "".join(pieces)
    first = pg.output.toPlainText()
    pg.generate()  # same seed and settings: the same text
    qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT).wait()
    assert pg.output.toPlainText() == first
    # another model picked (as a run's end does): the text kept below says whose it is
    pg.set_source(str(Path(tiny_run).with_name("another-run")))
    assert pg.status.text().endswith(f"the text below is from {Path(tiny_run).name}")
    assert pg.output.toPlainText() == first
    pg.set_source(tiny_run)
    assert "text below" not in pg.status.text()
    pg.set_source(str(Path(tiny_run).with_name("no-such-model")))
    pg.generate()  # fails: the output holds the prompt alone, which is no model's text
    qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT).wait()
    pg.set_source(tiny_run)
    assert "text below" not in pg.status.text()


def test_playground_reports_a_bad_folder_in_one_line(win, qtbot, tmp_path):
    win.playground.set_source(str(tmp_path / "nope"))
    win.playground.generate()
    qtbot.waitSignal(win.playground.finished, timeout=RUN_TIMEOUT).wait()
    text = win.playground.status.text()
    assert "nope" in text and "\n" not in text and "Traceback" not in text
    assert win.playground.output.toPlainText() == ""  # the prompt alone read as a start


def test_gallery_lists_saved_samples_after_relaunch(qtbot, tmp_path):
    w = small_window(qtbot, tmp_path / "runs")
    w.preview.prompts.setPlainText("The \nOnce")
    w.train.epochs.setValue(1)
    folder = train_until_idle(qtbot, w, max_steps=0)
    close_window(qtbot, w)
    rows = read_samples(folder)
    assert {r["epoch"] for r in rows} == {0, 1} and len(rows) == 4  # 2 prompts x (start, epoch 1)
    assert len({r["seed"] for r in rows if r["epoch"] == 0}) == 2  # each prompt its own seed
    w2 = small_window(qtbot, tmp_path / "runs")  # a relaunch
    assert w2.gallery.folder == folder and w2.gallery.table.rowCount() == 4  # the newest run's
    # (it said "no run selected" until a run was opened)
    w2.runs.select(folder)
    w2.runs.buttons["Open"].click()
    g = w2.gallery
    assert g.folder == folder and g.table.rowCount() == 4
    g.epoch.setCurrentText("1")
    assert g.table.rowCount() == 2 and all(s["epoch"] == 1 for s in g.shown)
    g.table.selectRow(0)
    assert "after epoch 1" in g.detail.toPlainText() and "seed" in g.detail.toPlainText()
    rep = w2.playground.rep.value()  # what the Playground offers is what the previews used
    assert rep > 1 and f"repetition {rep} " in g.detail.toPlainText()
    close_window(qtbot, w2)


def test_previews_and_playground_share_the_generation_defaults(win):
    """One set of defaults (engine.GENERATION_DEFAULTS) for the training previews the Gallery
    lists and the Playground: the Gallery once showed repetition 1.0 beside the Playground's 1.1."""
    pre, pg = win.preview.sampling(), win.playground.sampling()
    for k in ("temperature", "top_k", "top_p", "repetition_penalty", "repetition_window",
              "stop_at_eos"):
        assert getattr(pre, k) == getattr(pg, k), k


def test_run_logs_metrics_csv_and_tensorboard_events(win, qtbot):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    win.train.eval_every.setValue(2)
    folder = train_until_idle(qtbot, win, max_steps=4)
    rows = runapi.read_metrics(folder)
    steps = [r for r in rows if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [r["step"] for r in rows if r["kind"] == "eval"][:2] == [2, 4]
    acc = EventAccumulator(str(Path(folder) / TB_DIR))
    acc.Reload()
    tb = acc.Scalars("loss/train")
    assert [e.step for e in tb] == [1, 2, 3, 4]
    assert [e.value for e in tb] == pytest.approx([r["loss"] for r in steps], rel=1e-6)
    assert {e.step for e in acc.Scalars("loss/heldout")} >= {2, 4}
    from engine import runformat as rf

    data = rf.read_data(Path(folder))  # training text: the corpus's tokens per byte; held-out
    bpb = acc.Scalars("bpb/train")[0].value  # losses (and the plot's axis): the held-out text's
    assert bpb == pytest.approx(tb[0].value / math.log(2) * data.tokens_per_byte, rel=1e-6)
    held = acc.Scalars("bpb/heldout")[0].value
    assert held == pytest.approx(acc.Scalars("loss/heldout")[0].value / math.log(2)
                                 * data.heldout_tokens_per_byte, rel=1e-6)
    assert win.plots.tokens_per_byte == data.heldout_tokens_per_byte


def test_an_elided_line_follows_its_width_and_its_tooltip_holds_it_all(qtbot):
    """ElidedLabel: cut with "…" when narrow, whole again when widened (each resize elides
    anew), and its tooltip gives the whole text with what the line means under it."""
    from app.panels.elided_label import ElidedLabel

    text = "the backend chose the CPU because " + "no GPU was found " * 12
    label = ElidedLabel(text, tip="what this line means")
    qtbot.addWidget(label)
    label.show()
    label.resize(120, 20)
    qtbot.waitUntil(lambda: label.text().endswith("…"))
    assert len(label.text()) < len(text)
    assert label.toolTip() == f"{text}\n\nwhat this line means"
    label.resize(4000, 20)
    qtbot.waitUntil(lambda: label.text() == text)
    label.set_full("short")
    assert (label.text(), label.toolTip()) == ("short", "short\n\nwhat this line means")

def test_a_run_the_window_trains_draws_held_out_bits_on_the_held_out_texts_scale(win, qtbot,
                                                                                monkeypatch):
    """While the window trains a run, the plot's bits/byte axis takes the held-out text's tokens
    per byte (as the run shown later does): the corpus's put a BPE run's held-out curve 36 %
    off eval's. (A byte run's two ratios are alike: the held-out one is set apart here.)"""
    import engine.run as run_module

    monkeypatch.setattr(run_module, "_measure_heldout_per_byte", lambda *a: 0.25)
    scales: list[float] = []
    real = win.plots.set_tokens_per_byte
    monkeypatch.setattr(win.plots, "set_tokens_per_byte",
                        lambda tpb: (scales.append(tpb), real(tpb))[1])
    train_until_idle(qtbot, win, max_steps=2)
    assert scales and all(s == 0.25 for s in scales), scales

def test_an_unexpected_error_is_one_line_and_other_threads_keep_their_own(win, monkeypatch,
                                                                         capsys):
    """A message over several lines is said on one; an exception of another thread (a worker's,
    which reports its own) reaches the terminal only: the window is not touched from there."""
    import sys
    import threading

    from PySide6.QtWidgets import QMessageBox

    from app.__main__ import _say_unexpected_errors

    monkeypatch.setattr(sys, "excepthook", lambda *a: print("terminal:", a[1], file=sys.stderr))
    monkeypatch.setattr(QMessageBox, "open", lambda self: None)
    _say_unexpected_errors(win)
    sys.excepthook(OSError, OSError("cannot read\n   the file"), None)
    assert win.errors[-1].startswith("Unexpected error: OSError: cannot read the file. This")
    n = len(win.errors)
    told: list[object] = []
    monkeypatch.setattr(win, "unexpected_error", told.append)
    worker = threading.Thread(target=sys.excepthook, args=(
        RuntimeError, RuntimeError("in a worker"), None))
    worker.start()
    worker.join()
    assert told == [] and len(win.errors) == n
    assert "terminal: in a worker" in capsys.readouterr().err

def test_the_window_started_says_the_errors_that_escape_its_slots(tmp_path, monkeypatch):
    """``main`` installs the hook (without it the window said nothing of a bug in a slot)."""
    import sys

    from PySide6.QtWidgets import QApplication

    from app import __main__ as app_entry
    from app.main_window import MainWindow

    monkeypatch.setattr(sys, "excepthook", lambda *a: None)
    monkeypatch.setattr(QApplication, "exec", lambda self: 0)
    monkeypatch.setattr(app_entry, "_close_on_signals", lambda app, win: None)
    told: list[BaseException] = []
    monkeypatch.setattr(MainWindow, "unexpected_error", lambda self, exc: told.append(exc))
    made: list[MainWindow] = []
    monkeypatch.setattr(MainWindow, "show", lambda self: made.append(self))
    try:
        assert app_entry.main(["--runs-root", str(tmp_path / "runs"),
                               "--settings-dir", str(tmp_path / "settings")]) == 0
        error = RuntimeError("a bug")
        sys.excepthook(RuntimeError, error, None)
        assert told == [error]
    finally:
        for w in made:
            w.close()


def test_two_thousand_rejected_files_keep_the_window_on_screen(win, qtbot, tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    for i in range(2000):
        (junk / f"photo{i:04d}.jpg").write_bytes(b"\xff\xd8\xff")
    screen = QGuiApplication.primaryScreen().availableGeometry()
    win.resize(1280, 800)
    win.corpus.add_paths([str(junk)])
    qtbot.waitUntil(lambda: win.corpus.pending == 0, timeout=RUN_TIMEOUT)
    assert win.corpus.skipped_btn.text() == "2,000 files skipped"
    win.corpus.skipped_btn.setChecked(True)
    qtbot.wait(50)
    assert win.corpus.skipped_list.toPlainText().count("\n") == 1999
    for w in (win, win.corpus):
        assert w.height() <= screen.height() and w.minimumSizeHint().height() <= screen.height()
    assert win.start_btn.mapTo(win, win.start_btn.rect().bottomLeft()).y() <= win.height()


def test_the_held_out_column_names_the_files_the_run_holds_out(win, qtbot, tmp_path):
    """Files added in reverse order: the table's held-out files are the ones the run then
    holds out (the engine reads a corpus in path order; the column had followed the order
    of adding, which was also the engine's then)."""
    import numpy as np

    from engine import runformat as rf

    files = []
    for i in range(10):
        f = tmp_path / "data" / f"{i:02d}.txt"
        f.parent.mkdir(exist_ok=True)
        f.write_text(f"text number {i} " * (30 + 11 * i))
        files.append(f)
    c = win.corpus
    c.files.clear()
    c.add_paths([str(f) for f in reversed(files)], sync=True)
    win.train.seq_len.setValue(16)
    win._refresh_estimate()  # the split settings the table uses
    predicted = {p for p, whole in c.held_out().items() if whole}
    assert predicted
    folder = Path(train_until_idle(qtbot, win, max_steps=1))
    data = rf.read_data(folder)
    paths = [s["path"] for s in data.manifest["sources"]]
    starts = data.offsets[:-1]
    held = {paths[int(np.searchsorted(starts, s, side="right")) - 1] for s, _ in data.val_spans}
    assert held == predicted


def test_the_held_out_column_is_the_engines_split_for_every_seed(win, tmp_path):
    """The column predicts the engine's split of whole documents; it counted each file's
    tokens without the end-of-document token the engine adds, so for some seeds and sizes it
    named other files than the ones the run held out."""
    import engine

    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):  # small files a token apart: the end token decides which fit
        (data / f"{i:02d}.txt").write_text("x" * (10 + i) + "\n")
    c = win.corpus
    c.clear()
    c.add_paths([str(data)], sync=True)
    c.set_record_mode("file")
    corpus = engine.load_corpus([str(data)])
    docs = engine.encode_documents(corpus, engine.ByteTokenizer(), "file")
    starts = [int(s) for s in docs.offsets[:-1]]
    paths = [str(f.path) for f in corpus.files]
    for seed in range(30):
        for min_tokens in (0, 17, 65):
            c.set_split(0.1, seed, min_tokens)
            _, val = engine.split_documents(docs, 0.1, seed, min_tokens)
            held = {paths[starts.index(int(s))] for s, n in val if int(s) in starts
                    and int(s) + int(n) in [*starts[1:], int(docs.offsets[-1])]}
            predicted = {p for p, whole in c.held_out().items() if whole}
            assert predicted == held, (seed, min_tokens)


def test_a_new_sequence_length_alone_updates_the_held_out_column(win, tmp_path):
    """The engine holds out at least a sequence's worth of tokens (seq len + 1); changing only
    the sequence length left the column on the split of the old one."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):
        (data / f"{i:02d}.txt").write_text(f"text number {i} " * (30 + 11 * i))
    c = win.corpus
    c.clear()
    c.add_paths([str(data)], sync=True)
    c.set_record_mode("file")

    def column() -> list[str]:
        return [c.table.item(r, 3).text() for r in range(c.table.rowCount())]

    win.train.seq_len.setValue(16)
    win._refresh_estimate()  # the split settings the table uses
    assert c.min_tokens == 17
    short = column()
    win.train.seq_len.setValue(2048)  # a held-out set of at least 2,049 tokens (at most a fifth)
    win._refresh_estimate()
    assert c.min_tokens == 2049
    assert column().count("held-out") > short.count("held-out"), (short, column())


def test_the_estimate_follows_an_opened_models_token_counts(win, qtbot, tmp_path, monkeypatch):
    """File > Open model recounts the corpus with the model's tokenizer in a worker; when the
    counts came back nothing refreshed the estimate, so its memory and steps stayed on the old
    byte counts until some other setting was changed."""
    import engine

    d = _three_files(tmp_path)  # 500 bytes, 150 words each
    c = win.corpus
    qtbot.waitUntil(lambda: c.pending == 0, timeout=RUN_TIMEOUT)
    seen: list[int] = []
    real = engine.estimate_run

    def spy(cfg, tc, corpus_tokens, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(corpus_tokens)
        return real(cfg, tc, corpus_tokens, *a, **k)

    monkeypatch.setattr(engine, "estimate_run", spy)
    c.clear()
    c.add_paths([str(d)], sync=True)
    qtbot.waitUntil(lambda: 1500 in seen and win._counting is None,  # the estimate of the
                    timeout=RUN_TIMEOUT)  # bytes, its steps per epoch counted
    c.set_tokenizer(_Words(), "words")
    qtbot.waitUntil(lambda: c.pending == 0, timeout=RUN_TIMEOUT)
    assert win._corpus_tokens() == 450
    qtbot.waitUntil(lambda: 450 in seen, timeout=10_000)  # and then of the words

def test_split_column_follows_the_examples_choice(win, qtbot):
    """Whole files are held out only with 'each file is one document'; with lines or paragraphs
    the engine holds out examples of every file, and the table must not name a held-out file."""
    c = win.corpus
    c.load_sample()
    qtbot.waitUntil(lambda: c.pending == 0 and c.table.rowCount() > 1, timeout=RUN_TIMEOUT)

    def column() -> list[str]:
        return [c.table.item(r, 3).text() for r in range(c.table.rowCount())]

    c.set_record_mode("file")
    assert "held-out" in column() and "train" in column()
    assert c.summary.text().endswith("1\u00a0held\u2011out")  # never broken at its hyphen
    c.set_record_mode("line")
    assert set(column()) == {"by example"}
    assert c.summary.text().endswith("of the lines\u00a0held\u2011out")
    assert "lines chosen by the seed" in c.table.item(0, 3).toolTip()
    c.set_record_mode("blank-line")
    assert c.summary.text().endswith("of the paragraphs\u00a0held\u2011out")
    c.clear()  # one file, of which a window is held out: "1 held-out" read as all of it
    c.add_paths([str(next(p for p in sorted(SAMPLE_CORPUS.iterdir()) if p.is_file()))],
                sync=True)
    c.set_record_mode("file")
    assert column() == ["part held-out"]
    assert c.summary.text().endswith("; 1 partly\u00a0held\u2011out"), c.summary.text()


def test_a_file_held_out_only_in_part_says_so(win, qtbot, tmp_path):
    """When no whole file fits the held-out share, the engine holds out a window of the largest
    file: the table said "held-out" with a tooltip about whole files."""
    c = win.corpus
    qtbot.waitUntil(lambda: c.pending == 0, timeout=RUN_TIMEOUT)
    c.table.selectAll()
    c._remove_selected()  # the sample corpus a new window starts with
    big = tmp_path / "big.txt"
    big.write_text("the cat sat on the mat. " * 400)
    (tmp_path / "small.txt").write_text("a dog. " * 20)
    c.add_paths([str(big), str(tmp_path / "small.txt")], sync=True)
    qtbot.waitUntil(lambda: c.pending == 0 and c.table.rowCount() >= 2, timeout=RUN_TIMEOUT)
    c.set_record_mode("file")
    assert c.paths() == [str(big), str(tmp_path / "small.txt")]
    rows = {c.table.item(r, 0).text(): c.table.item(r, 3) for r in range(c.table.rowCount())}
    assert rows["big.txt"].text() == "part held-out" and rows["small.txt"].text() == "train"
    assert "window" in rows["big.txt"].toolTip() and "whole files" not in rows["big.txt"].toolTip()


def test_lora_panel_never_scrolls_sideways_at_1024x700(win, qtbot):
    win.resize(1024, 700)
    win.left_tabs.setCurrentIndex(1)
    win.init_dir = str(win.runs_root)  # as Open model does: LoRA adapts opened weights
    win._update_next()
    win.train.lora.setChecked(True)
    win.train.targets["out_proj"].setChecked(True)  # the long PEFT warning
    qtbot.wait(50)
    assert "PEFT cannot apply out_proj" in win.train.trainable.text()  # wording of main 3fd917b
    viewport = win.train_scroll.viewport().width()
    assert win.train.minimumSizeHint().width() <= viewport
    assert win.train.width() <= viewport


def test_the_loss_plot_keeps_room_in_the_default_window(win, qtbot):
    """In a 1280x760 window the loss plot's data area was 79 px (the preview's minimum height
    squeezed both plots, which split the rest equally): it is now the larger plot, >= 110 px."""
    win.resize(1280, 760)
    win.show()
    qtbot.wait(100)
    loss, norm = win.plots.loss_plot.vb.height(), win.plots.norm_plot.vb.height()
    assert loss >= 130 and loss >= 1.4 * norm and norm >= 60, (loss, norm)
    # one "step" label, under the lower plot (the x axes are linked)
    assert win.plots.loss_plot.getAxis("bottom").labelText == ""
    assert win.plots.norm_plot.getAxis("bottom").labelText == "step"


@pytest.mark.parametrize("size", [(900, 600), (1024, 700)])
def test_a_small_window_puts_the_plots_side_by_side(win, qtbot, size):
    """Stacked in a 900x600 window each plot had 20-29 px of data area and the y labels ran
    into each other: short and wide, the plots now sit side by side at full height."""
    win.resize(*size)
    win.show()
    qtbot.wait(150)
    plots = win.plots
    assert plots.side_by_side
    loss, norm = plots.loss_plot.vb, plots.norm_plot.vb
    assert loss.height() >= 60 and norm.height() >= 60, (loss.height(), norm.height())
    assert loss.width() >= 0.8 * norm.width() and norm.width() >= 120, (loss.width(), norm.width())
    assert plots.loss_plot.getAxis("bottom").labelText == "step"
    win.resize(1280, 800)
    qtbot.wait(150)
    assert not plots.side_by_side and plots.loss_plot.getAxis("bottom").labelText == ""


def test_corpus_file_names_are_not_cut_at_1280(win, qtbot):
    """The file column was as narrow as the number columns ("bread_bakin…")."""
    win.resize(1280, 760)
    win.show()
    win.left_tabs.setCurrentIndex(0)
    qtbot.wait(100)
    table = win.corpus.table
    names = [table.item(r, 0).text() for r in range(table.rowCount())]
    assert "notes_on_state_space_models.md" in names  # the sample corpus
    need = max(table.fontMetrics().horizontalAdvance(n) for n in names)
    assert table.columnWidth(0) >= need + 8


def test_estimate_changes_with_batch_size(win, qtbot, monkeypatch):
    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    win._schedule_estimate()
    qtbot.waitUntil(lambda: "ms/step ×" in win.estimate.full, timeout=RUN_TIMEOUT)
    before = win.estimate.full
    assert "82,368 parameters" in before and "memory" in before
    win.train.batch.setValue(16)
    qtbot.waitUntil(lambda: "ms/step ×" in win.estimate.full and win.estimate.full != before,
                    timeout=RUN_TIMEOUT)
    after = win.estimate.full
    steps = [int(t.split("× ")[1].rstrip(")").replace(",", "")) for t in (before, after)]
    rows = [v for v in win._rows.values() if isinstance(v, int)]  # the epoch's rows, counted
    assert len(rows) == 1 and rows[0] > 16, win._rows
    assert steps == [-(-rows[0] // 4), -(-rows[0] // 16)], (steps, rows)  # 4x batch, 1/4 steps


def test_the_estimate_of_a_bpe_still_to_be_trained_is_an_upper_bound(win):
    """A corpus whose BPE tokenizer is trained at Start: the estimate counted the 2,048 tokens
    asked for (196,544 parameters) where the tokenizer learned 369 (89,536 trained)."""
    win.train.tokenizer.setCurrentText("bpe")
    win._refresh_estimate()
    assert win.estimate.full.startswith("Estimate: up to ") and " parameters (" in \
        win.estimate.full, win.estimate.full
    win.train.tokenizer.setCurrentText("bytes")
    win._refresh_estimate()
    assert win.estimate.full.startswith("Estimate: ") and "up to" not in win.estimate.full


def test_estimate_counts_the_steps_of_the_examples_chosen(win, qtbot, monkeypatch):
    """Changing Examples (how the text splits into documents) left the estimate's steps an
    epoch at the old split (17 shown, 19 trained) until another box changed."""
    import engine

    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    win._schedule_estimate()
    qtbot.waitUntil(lambda: "ms/step ×" in win.estimate.full, timeout=RUN_TIMEOUT)
    before = win.estimate.full
    box = win.corpus.records
    box.setCurrentIndex(box.findData("line" if win.corpus.record_mode() != "line" else "file"))
    qtbot.waitUntil(lambda: "ms/step ×" in win.estimate.full and win.estimate.full != before,
                    timeout=RUN_TIMEOUT)
    shown = int(win.estimate.full.split("× ")[1].split(")")[0].replace(",", ""))
    job = win.make_job()
    assert job.spec.records == win.corpus.record_mode()
    assert shown == engine.plan_epoch(job.spec, job.paths).steps(job.spec.train)


def test_a_model_too_large_to_fit_is_never_built_for_the_estimate(win, qtbot, monkeypatch):
    """A walk-through chose d_model 2048 x 48 layers (67.5 GB) and the idle window's step
    timing grew to 20.8 GB before it was killed: it now says the run does not fit and builds
    nothing; a run that fits but costs minutes a step is not timed either."""
    import engine.estimate as est_mod

    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    built: list[object] = []
    monkeypatch.setattr(est_mod.MambaLM, "create", lambda *a, **k: built.append(a) or 1 / 0)
    monkeypatch.setenv("MAMBA_STUDIO_MEMORY", str(8 << 30))
    win.train.preset.setCurrentText("custom")
    win.train.d_model.setValue(2048)
    win.train.n_layer.setValue(48)
    win._refresh_estimate()
    text = win.estimate.full
    assert "step time: not measured" in text and "of memory is available" in text, text
    monkeypatch.setenv("MAMBA_STUDIO_MEMORY", str(1 << 50))  # fits, but ~31 TFLOP a step
    win.train.seq_len.setValue(1024)
    win._refresh_estimate()
    assert "step time not measured: one step is about" in win.estimate.full
    qtbot.wait(200)
    assert built == [] and win._measuring is None


def test_sizes_passed_while_typing_are_not_timed(win, qtbot, monkeypatch):
    """Typing d_model 1024 timed the sizes on the way (one took 2.3 GB for ~15 s): a step is
    timed only for settings left alone for a moment."""
    import engine.estimate as est_mod
    from app import main_window

    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    timed: list[int] = []
    real = est_mod.measure_step_seconds
    monkeypatch.setattr(main_window.engine, "measure_step_seconds",
                        lambda cfg, tc, **k: timed.append(cfg.d_model) or real(cfg, tc, **k))
    win.train.preset.setCurrentText("custom")
    win.train.n_layer.setValue(1)
    for d in (16, 96, 112, 128):  # keystrokes ~0.4 s apart, past the 300 ms text refresh
        win.train.d_model.setValue(d)
        qtbot.wait(400)
    qtbot.waitUntil(lambda: "ms/step" in win.estimate.full, timeout=RUN_TIMEOUT)
    assert timed == [128], timed


def test_a_step_timing_in_flight_stops_when_the_settings_change(win, qtbot, monkeypatch):
    """A timing of sequence length 65,536 ran on for 5.5 minutes (5-7 GB) after the box was set
    back to 256 and beside the run started then, at half its speed. The timing is asked before
    each step; it stops once the settings shown are others, and those get their own timing."""
    from app import main_window

    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    seen: list[tuple[int, str]] = []

    def timing(cfg, tc, should_stop=None, **_k):  # noqa: ANN001, ANN003, ANN202
        if tc.seq_len == 256:
            seen.append((tc.seq_len, "timed"))
            return 0.01
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:  # one step after another, asking before each
            if should_stop():
                seen.append((tc.seq_len, "stopped"))
                raise main_window.engine.Stopped("step timing stopped")
            time.sleep(0.01)
        seen.append((tc.seq_len, "ran out"))
        return 1.0

    monkeypatch.setattr(main_window.engine, "measure_step_seconds", timing)
    win.train.preset.setCurrentText("small")
    win.train.seq_len.setValue(512)
    win._settled = None
    qtbot.waitUntil(lambda: win._measuring is not None, timeout=RUN_TIMEOUT)
    win.train.seq_len.setValue(256)
    qtbot.waitUntil(lambda: (256, "timed") in seen, timeout=RUN_TIMEOUT)
    assert seen == [(512, "stopped"), (256, "timed")], seen
    qtbot.waitUntil(lambda: "ms/step" in win.estimate.full, timeout=RUN_TIMEOUT)
    assert "timing failed" not in win.estimate.full


def test_estimate_shows_the_steps_the_run_takes(win, qtbot, tmp_path, monkeypatch):
    """The estimate's steps per epoch are a started run's (packed rows): with the defaults on the
    sample corpus it once showed tokens / (batch x seq_len), 10, where the run took 11."""
    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")
    win.train.preset.setCurrentText("small")
    win.train.seq_len.setValue(256)
    win.train.batch.setValue(8)
    win._refresh_estimate()  # the text now follows these settings (measured and counted next)
    count = re.compile(r"ms/step × ([\d,]+)\)")
    qtbot.waitUntil(lambda: count.search(win.estimate.full) is not None, timeout=RUN_TIMEOUT)
    shown = int(count.search(win.estimate.full)[1].replace(",", ""))
    tc = win.train.train_config()
    spec = replace(win.train.run_spec(None, tc.eval_every), records=win.corpus.record_mode())
    with runapi.start(spec, win.corpus.paths(), out=tmp_path / "run") as run:
        assert shown == run.trainer.steps_per_epoch == 11


def test_trainable_count_follows_the_opened_model(win, qtbot, tiny_run):
    win.train.preset.setCurrentText("small")
    lora_knobs = (win.train.rank, win.train.alpha, win.train.lora_dropout)
    assert not any(w.isEnabled() for w in lora_knobs)  # a new model: no LoRA to shape
    win.open_model(tiny_run)
    qtbot.waitUntil(lambda: win.init_dir == tiny_run and win.corpus.pending == 0,
                    timeout=RUN_TIMEOUT)
    win.train.lora.setChecked(True)
    assert all(w.isEnabled() for w in lora_knobs)
    win.train.setEnabled(False)  # as while a run trains; a refresh then (e.g. Open settings)
    win.train.refresh()
    win.train.setEnabled(True)  # ... left them off after the run
    assert all(w.isEnabled() for w in lora_knobs) and win.train.targets["x_proj"].isEnabled()
    win.train.lora.setChecked(False)  # LoRA off: its rank, alpha and dropout go off with it
    assert not any(w.isEnabled() for w in lora_knobs)
    assert "of 82,368" in win.train.trainable.text()  # the tiny model, not the small preset
    assert "weights of" in win.next_label.full and "training all weights" in win.next_label.full
    win.train.lora.setChecked(True)  # the line did not say what the run would train
    assert "training a rank-8 LoRA adapter on" in win.next_label.full, win.next_label.full
    win.train.lora.setChecked(False)
    win.train.wsla.setChecked(True)
    assert "training only each layer's x_proj (WSLA)" in win.next_label.full
    win.train.wsla.setChecked(False)
    folder = train_until_idle(qtbot, win, max_steps=1)
    assert folder and folder != tiny_run and not win.errors, win.errors


def test_continue_forgets_an_opened_model(win, qtbot, tiny_run):
    """Continue after Open model: the opened model's shape and tokenizer stayed in the panels,
    so once the continued run ended, 'Next Start' announced a new preset run (tokenizer auto)
    while the estimate used the opened model and the corpus counted its tokenizer's tokens."""
    import engine

    win.train.tokenizer.setCurrentText("bpe")  # the new-run choice
    win.open_model(tiny_run)
    qtbot.waitUntil(lambda: win.init_dir == tiny_run and win.corpus.pending == 0,
                    timeout=RUN_TIMEOUT)
    assert win.train.model_override is not None and win.corpus.tokenizer is not None
    assert win.train.tokenizer.currentText() == "bytes"  # the opened weights' (it read "bpe")
    # the opened model trains with its own tokenizer: the box was left open to a choice
    assert not win.train.tokenizer.isEnabled() and not win.train.bpe_vocab.isEnabled()
    assert "opened model's own tokenizer" in win.train.tokenizer.toolTip()
    win.choose_continue(tiny_run)
    qtbot.waitUntil(lambda: win.corpus.pending == 0, timeout=RUN_TIMEOUT)
    assert win.init_dir is None and win.corpus.tokenizer is None
    assert win.train.model_override == engine.read_model_config(tiny_run)  # the run's own
    assert not win.train.tokenizer.isEnabled()  # a continued run keeps its tokenizer too
    assert "run's own tokenizer" in win.train.tokenizer.toolTip()
    win.new_model()
    assert win.train.model_override is None
    assert win.train.tokenizer.isEnabled() and "auto (default)" in win.train.tokenizer.toolTip()
    assert win.train.tokenizer.currentText() == "bpe"  # the choice, back
    win.train.tokenizer.setCurrentText("bytes")
    win.train.tokenizer.setCurrentText("bpe")  # the combo drives the summary again
    assert "tokenizer bpe: trained at Start" in win.corpus.summary.text()


def test_continue_shows_the_runs_own_tokenizer_and_steps_per_epoch(win, qtbot, tiny_run,
                                                                    tmp_path):
    """Continue of a bytes run after the panel was set to BPE: the greyed box still said bpe and
    the estimate said "steps per epoch: after Start (the BPE tokenizer is trained...)" for a run
    that trains no tokenizer and whose epoch is its saved ids, not the corpus shown."""
    import engine

    other = tmp_path / "other.txt"  # the corpus shown is not the run's: 3x its rows
    other.write_text("".join(f"line {i} of another corpus\n" for i in range(2_000)))
    win.corpus.files.clear()
    win.corpus.add_paths([str(other)], sync=True)
    win.train.tokenizer.setCurrentText("bpe")
    win.train.init_scheme.setCurrentText("reference")
    win.choose_continue(tiny_run)
    assert win.train.tokenizer.currentText() == "bytes" and not win.train.tokenizer.isEnabled()
    assert win.train.init_scheme.currentText() == "default"
    assert not win.train.init_scheme.isEnabled()  # a continued run is not initialised again
    with runapi.resume(tiny_run) as run:
        steps = run.trainer.steps_per_epoch
    assert engine.read_epoch_rows(tiny_run) == len(run.trainer.rows)
    qtbot.waitUntil(lambda: f"{steps:,} step" in win.estimate.full, timeout=RUN_TIMEOUT)
    assert "after Start" not in win.estimate.full
    win.new_model()  # the new-run choices come back
    assert win.train.tokenizer.currentText() == "bpe" and win.train.tokenizer.isEnabled()
    assert win.train.init_scheme.currentText() == "reference" and win.train.init_scheme.isEnabled()


def test_continue_to_max_steps_past_the_epochs_says_the_epochs_end_it_first(win, qtbot, tiny_run):
    """A Continue to max steps 60 of a run whose 3 epochs end at step 33 ended at 33 with no
    word (the CLI said to raise --epochs): the estimate says it before Start, and the Log's
    note when the run opens says which box to raise."""
    from app.words import in_window_terms

    win.choose_continue(tiny_run)
    with runapi.resume(tiny_run) as run:
        steps, notes = run.trainer.steps_per_epoch, run.notices
    epochs = win.train.epochs.value()
    win.train.max_steps.setValue(steps * epochs + 2 * steps)
    qtbot.waitUntil(lambda: "before max steps" in win.estimate.full, timeout=RUN_TIMEOUT)
    assert (f"end at step {steps * epochs:,}, before max steps {steps * (epochs + 2):,} "
            f"({epochs + 2} epochs reach it)") in win.estimate.full, win.estimate.full
    win.train.max_steps.setValue(steps * epochs)
    qtbot.waitUntil(lambda: "before max steps" not in win.estimate.full, timeout=RUN_TIMEOUT)
    with runapi.resume(tiny_run, max_steps=steps * (epochs + 2)) as run:
        note = [n for n in run.notices if "before max steps" in n]
    assert not [n for n in notes if "before max steps" in n]  # (its own max steps: none)
    assert note and in_window_terms(note[0]).endswith(f"; set Epochs to {epochs + 2} to reach it")


def test_continue_of_a_run_from_opened_weights_counts_their_model(win, qtbot, tiny_run,
                                                                   tmp_path):
    """A run started from a tiny model's weights records preset "small" (the default) in its
    settings: Continue showed the small model's parameter count."""
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(init=tiny_run, train=TrainConfig(batch_size=4, seq_len=64, max_steps=1))
    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    with runapi.start(spec, [corpus], root=tmp_path / "runs") as run:
        run.train()
        folder = str(run.folder)
    assert runapi.read_run_spec(folder).preset == "small"
    win.train.preset.setCurrentText("small")
    win.choose_continue(folder)
    assert "of 82,368" in win.train.trainable.text()  # the tiny model it trains
    assert not win.train.init_scheme.isEnabled()
    win.new_model()
    assert "of 82,368" not in win.train.trainable.text() and win.train.init_scheme.isEnabled()


def test_custom_preset_with_continue_and_open_model(win, qtbot, tiny_run, tmp_path):
    """Preset "custom" shown, then Continue of a custom-sized run: "unknown preset 'custom'"
    raised inside the panel's refresh, leaving it half-set, and a second Continue (or Open
    model) did nothing while Next Start still named the first run."""
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(model={"d_model": 32, "n_layer": 1},
                          train=TrainConfig(batch_size=4, seq_len=64, max_steps=1))
    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    with runapi.start(spec, [corpus], root=tmp_path / "runs") as run:
        run.train()
        custom = str(run.folder)
    win.train.preset.setCurrentText("custom")
    win.choose_continue(custom)
    assert win.continue_dir == custom and win.train.d_model.value() == 32
    assert not win.train.tokenizer.isEnabled() and not win.train.init_scheme.isEnabled()
    win.choose_continue(tiny_run)
    assert win.continue_dir == tiny_run and Path(tiny_run).name in win.next_label.full
    win.new_model()
    win.train.preset.setCurrentText("custom")
    win.train.d_model.setValue(96)
    win.open_model(custom)
    qtbot.waitUntil(lambda: win.init_dir == custom, timeout=RUN_TIMEOUT)
    assert "weights of" in win.next_label.full and not win.errors, win.errors
    # the opened model's dims, not the custom 96 beside it; no preset to pick for it
    assert win.train.d_model.value() == 32 and not win.train.preset.isEnabled()
    from app import settings

    win.train.remember()  # as the window closes: the own sizes are remembered, not the model's
    assert settings.load("train/d_model", 0) == 96
    win.new_model()  # the own choices come back
    assert win.train.d_model.value() == 96 and win.train.preset.isEnabled()


def test_settings_file_round_trip_and_one_line_error(win, qtbot, tmp_path):
    path = tmp_path / "run.toml"
    win.train.lr.setValue(0.0042)
    win.train.patience.setValue(3)
    win.save_settings_file(str(path))
    assert "[train]" in path.read_text() and "patience = 3" in path.read_text()
    win.train.lr.setValue(0.01)
    win.train.patience.setValue(0)
    win.load_settings_file(str(path))
    assert win.train.lr.value() == pytest.approx(0.0042) and win.train.patience.value() == 3
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlr = -1\n")
    win.load_settings_file(str(bad))
    assert str(bad) in win.errors[-1] and "\n" not in win.errors[-1]


def test_lora_run_exports_adapter_and_merged_after_it_ended(win, qtbot, tmp_path, tiny_run):
    win.open_model(tiny_run)  # LoRA adapts a trained model
    qtbot.waitUntil(lambda: win.init_dir == tiny_run and win.corpus.pending == 0,
                    timeout=RUN_TIMEOUT)
    win.train.lora.setChecked(True)
    folder = train_until_idle(qtbot, win, max_steps=2)
    win.export("adapter", str(tmp_path / "adapter"), folder)
    win.export("merged", str(tmp_path / "merged"), folder)
    qtbot.waitUntil(lambda: bool(win.errors) or ((tmp_path / "adapter" / "adapter_config.json").exists()
                    and (tmp_path / "merged" / "model.safetensors").exists()), timeout=RUN_TIMEOUT)
    qtbot.waitUntil(lambda: "merged written" in win.log.toPlainText(), timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    # the PEFT export goes through engine.export: an unmerged base beside the adapter, named in it
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert Path(cfg["base_model_name_or_path"]) == (tmp_path / "adapter" / "base").resolve()
    assert (tmp_path / "adapter" / "base" / "model.safetensors").exists()


def test_runs_root_on_a_file_is_one_line_not_a_traceback(tmp_path, capsys):
    from app.__main__ import main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["--runs-root", str(blocker)]) == 2  # was: FileExistsError from MainWindow
    err = capsys.readouterr().err
    assert err.startswith("error: --runs-root") and "Traceback" not in err and err.count("\n") == 1


def test_a_default_runs_folder_that_cannot_be_made_is_one_line(tmp_path, capsys, monkeypatch):
    """~/.local/share/mamba-studio a file (or a read-only home): a NotADirectoryError
    traceback; only --runs-root was checked."""
    from app.__main__ import main

    share = tmp_path / "home" / ".local" / "share"
    share.mkdir(parents=True)
    (share / "mamba-studio").write_text("x")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: the runs folder {share / 'mamba-studio' / 'runs'}: ")
    assert "choose a folder you can write with --runs-root" in err and err.count("\n") == 1


def test_preset_tooltips_say_what_each_preset_learns(win):
    from PySide6.QtCore import Qt

    import engine

    for i in range(win.train.preset.count()):
        name = win.train.preset.itemText(i)
        tip = win.train.preset.itemData(i, Qt.ItemDataRole.ToolTipRole)
        if name in engine.PRESET_DEFAULTS:
            assert tip == engine.PRESET_DEFAULTS[name].learns and "weights" in tip
        else:
            assert name == "custom" and not tip


def test_playground_stops_at_end_of_text_unless_unticked(win):
    pg = win.playground
    assert pg.stop_at_end.isChecked() and pg.sampling().stop_at_eos
    pg.stop_at_end.setChecked(False)
    assert not pg.sampling().stop_at_eos
    assert win.preview.sampling().stop_at_eos  # training previews end at end-of-text too


def test_playground_summary_says_why_generation_ended(qtbot, monkeypatch):
    """The status said "N streamed pieces" whether or not end-of-text ended it."""
    import engine
    from app.workers import GenerateWorker
    from engine.tokenizer import ByteTokenizer

    def generate_ids(ids, sampling):  # noqa: ANN001, ANN202
        n = 2 if sampling.stop_at_eos else sampling.max_new_tokens  # "end of text" after 2
        eos = ByteTokenizer().eos_id
        yield from [104, 105, eos, 33, 33, 33][:0 if ids.size > 1 else n]  # (ids: eos + prompt)

    fake_model(monkeypatch, generate_ids)
    for stop, why, text in ((True, "2 tokens", "ended at end of text"),
                            (False, "6 tokens", "reached the length")):
        w = GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=6, stop_at_eos=stop), "cpu")
        pieces, done = [], []
        w.piece.connect(pieces.append)
        w.done.connect(done.append)
        w.run()
        assert done[0].startswith(f"{why} in ") and text in done[0] and "CPU step" in done[0]
        assert "".join(pieces) == ("hi" if stop else "hi\n!!!")  # end of text shown, not lost
    w = GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=6), "cpu")
    w.prompt, done = "x", []  # (the fake ends at once on this prompt: a bare "0 tokens" before)
    w.done.connect(done.append)
    w.run()
    assert "0 tokens in" in done[0] and 'untick "stop at end of text"' in done[0], done


def test_playground_says_why_only_blank_lines_followed_the_prompt(qtbot, monkeypatch):
    """Unticked as that advice says, a model making only end-of-text tokens filled the output
    with 8,329 blank lines (each a line break), and the summary said only "stopped"."""
    import engine
    from app.workers import GenerateWorker
    from engine.tokenizer import ByteTokenizer

    eos = ByteTokenizer().eos_id
    fake_model(monkeypatch, lambda ids, sampling: iter([eos] * sampling.max_new_tokens))
    w = GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=5, stop_at_eos=False), "cpu")
    pieces, done = [], []
    w.piece.connect(pieces.append)
    w.done.connect(done.append)
    w.run()
    assert "".join(pieces) == "\n" * 5
    assert done[0].startswith("5 tokens in ") and "reached the length: only end-of-text tokens " \
        "(each shown as a line break) or blank space; train it longer, or give a prompt it can " \
        "go on from" in done[0], done
    fake_model(monkeypatch, lambda ids, sampling: iter([104, eos, eos]))  # text: no such words
    w = GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=3, stop_at_eos=False), "cpu")
    w.done.connect(done.append)
    w.run()
    assert "only end-of-text" not in done[-1], done


def test_playground_text_goes_to_the_window_in_batches(qtbot, monkeypatch):
    """One signal (and one insert into the output box) a token held generation to 583 tokens/s
    on one long line of spaces, against 1,800/s with line breaks: the text goes in batches at
    most every PIECE_EVERY_S, all of it, in order."""
    import engine
    from app import workers

    def generate_ids(ids, sampling):  # noqa: ANN001, ANN202
        for i in range(sampling.max_new_tokens):
            if i % 500 == 0:
                time.sleep(0.06)  # a batch boundary every 500 tokens or so
            yield 32 if i % 7 else 97

    fake_model(monkeypatch, generate_ids)
    w = workers.GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=3000), "cpu")
    pieces: list[str] = []
    w.piece.connect(pieces.append)
    t0 = time.perf_counter()
    w.run()
    took = time.perf_counter() - t0
    assert "".join(pieces) == "".join(" " if i % 7 else "a" for i in range(3000))
    assert 2 <= len(pieces) <= took / workers.PIECE_EVERY_S + 2, (len(pieces), took)
    assert len(pieces) < 300  # (one a token: 3,000)


def test_token_count_skips_a_corpus_file_that_vanished(win, qtbot, tmp_path):
    """Counting tokens for an opened model's tokenizer goes on past a file deleted since it was
    added: the others are counted and the gone one is listed as skipped (it failed as a whole)."""
    d = _three_files(tmp_path)  # 500 bytes, 150 words each
    win.corpus.files.clear()
    win.corpus.tokens.clear()
    win.corpus.add_paths([str(d)], sync=True)
    (d / "b.txt").unlink()
    notes: list[str] = []
    win.corpus.rejected.connect(notes.append)
    win.corpus.set_tokenizer(_Words(), "words")
    qtbot.waitUntil(lambda: win.corpus.pending == 0, timeout=RUN_TIMEOUT)
    assert win.corpus.tokens == {str(d / "a.txt"): 150, str(d / "c.txt"): 150}
    assert str(d / "b.txt") not in win.corpus.files
    assert [p for p, _ in win.corpus.skipped] == [str(d / "b.txt")]
    assert "1 file skipped while counting tokens" in notes[-1] and "other 2" in notes[-1]
    assert "300 tokens (words)" in win.corpus.summary.text()
    assert win.corpus.skipped_btn.text() == "1 file skipped"
    win.corpus.table.selectRow(0)
    win.corpus._remove_selected()
    assert win.corpus.summary.text().startswith("1 file, 500 bytes, 150 tokens (words)")


def test_start_with_a_corpus_file_deleted_since_it_was_added_is_refused(win, qtbot, tmp_path):
    """A file deleted after it was added was skipped at Start (one Log line) and the run trained
    on the others, while the Corpus list still showed it: Start is refused, naming the file and
    how to mend the list, and no run folder is made."""
    d = _three_files(tmp_path)
    win.corpus.files.clear()
    win.corpus.tokens.clear()
    win.corpus.add_paths([str(d / "a.txt"), str(d / "b.txt")], sync=True)
    (d / "b.txt").unlink()
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert win.errors and win.errors[-1] == (
        f"{d / 'b.txt'}: no such file or folder (moved or deleted since it was added); select it "
        "in the Corpus list and Remove it, or add it from where it is now"), win.errors
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_refused_start_keeps_the_run_shown_before_it(win, qtbot, tmp_path):
    """A Start refused before its run opened (a file named by itself deleted since it was
    added) left the plots empty: the run shown before it is drawn again, samples and all."""
    d = _three_files(tmp_path)
    win.corpus.clear()
    win.corpus.add_paths([str(d / "a.txt"), str(d / "b.txt")], sync=True)
    folder = train_until_idle(qtbot, win, max_steps=3)
    assert win.shown_run == folder and win.plots.steps[-1] == 3
    (d / "b.txt").unlink()
    win.start_training()
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)
    assert win.errors and "b.txt: no such file or folder" in win.errors[-1], win.errors
    assert win.shown_run == folder
    assert win.plots.steps and win.plots.steps[-1] == 3
    assert Path(folder).name in win.preview.tag.full and win.preview.output.toPlainText()


def test_a_file_deleted_from_a_folder_added_whole_is_left_out_at_start(win, qtbot, tmp_path):
    """A file deleted from a folder added whole refused Start, and removing it by hand, as the
    error advised, saved the folder as its files of the day (files added to it later were then
    not read at the next launch). Now Start leaves it out with a note, as a new read of the
    folder would, trains on the rest, and the folder stays whole."""
    d = _three_files(tmp_path)
    win.corpus.clear()
    win.corpus.add_paths([str(d)], sync=True)
    (d / "b.txt").unlink()
    folder = train_until_idle(qtbot, win, max_steps=1)
    assert not win.errors, win.errors
    assert "Left out of the corpus: 1 file deleted or moved from its folder since it was added " \
           "(b.txt)" in win.log.toPlainText()
    assert list(win.corpus.files) == [str(d / "a.txt"), str(d / "c.txt")]
    assert win.corpus.settings_paths() == [str(d)]
    read = json.loads((Path(folder) / "data" / "manifest.json").read_text())
    assert sorted(Path(f["path"]).name for f in read["sources"]) == ["a.txt", "c.txt"], read
    (d / "a.txt").unlink()  # removed by hand once gone: the folder still whole
    win.corpus.table.selectRow(0)
    win.corpus._remove_selected()
    assert list(win.corpus.files) == [str(d / "c.txt")]
    assert win.corpus.settings_paths() == [str(d)]


def test_a_token_count_that_fails_leaves_the_corpus_ready(win, qtbot):
    """An error other than a corpus error while counting an opened model's tokens (a bug in its
    tokenizer) left the busy bar spinning, and every Start was refused with "The corpus is still
    being read" until the app was restarted."""
    class Broken:  # a tokenizer that fails on every text
        kind = "words"

        def encode(self, text):  # noqa: ANN001, ANN202
            raise RuntimeError("the tokenizer broke")

    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    notes: list[str] = []
    corpus.rejected.connect(notes.append)
    corpus.set_tokenizer(Broken(), "words")
    assert corpus.pending == 1 and corpus.progress.isVisibleTo(corpus)
    qtbot.waitUntil(lambda: len(notes) > 0, timeout=RUN_TIMEOUT)
    assert "the tokenizer broke" in notes[-1]
    assert corpus.pending == 0
    assert not corpus.progress.isVisibleTo(corpus)


def test_a_corpus_read_that_fails_leaves_the_corpus_ready(win, qtbot, tmp_path, monkeypatch):
    """An error other than a corpus error while reading an add (a PermissionError out of the
    engine) left the busy bar spinning, and every Start was refused with "The corpus is still
    being read" until the app was restarted."""
    from app.panels import corpus_panel

    def broken(paths, tokenizer):  # noqa: ANN001, ANN202
        raise RuntimeError("the read broke")

    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    monkeypatch.setattr(corpus_panel, "_inspect", broken)
    more = tmp_path / "more.txt"
    more.write_text("more text\n" * 40)
    notes: list[str] = []
    corpus.rejected.connect(notes.append)
    corpus.add_paths([str(more)])
    assert corpus.pending == 1 and corpus.progress.isVisibleTo(corpus)
    qtbot.waitUntil(lambda: len(notes) > 0, timeout=RUN_TIMEOUT)
    assert "the read broke" in notes[-1]
    assert corpus.pending == 0
    assert not corpus.progress.isVisibleTo(corpus)

def test_a_file_removed_while_tokens_are_counted_stays_out_of_the_total(win, qtbot, tmp_path):
    """A file removed while an opened model's tokenizer counted the corpus got its count back
    when the count came in: the summary added up more tokens than the corpus had."""
    d = _three_files(tmp_path)  # 500 bytes, 150 words each
    c = win.corpus
    qtbot.waitUntil(lambda: c.pending == 0, timeout=RUN_TIMEOUT)
    c.clear()
    c.add_paths([str(d)], sync=True)
    c.set_tokenizer(_Words(), "words")  # counted in a worker: its result waits in the event loop
    c.table.selectRow(list(c.files).index(str(d / "b.txt")))
    c._remove_selected()
    qtbot.waitUntil(lambda: c.pending == 0, timeout=RUN_TIMEOUT)
    assert set(c.tokens) == set(c.files) == {str(d / "a.txt"), str(d / "c.txt")}
    assert c.summary.text().startswith("2 files, 1,000 bytes, 300 tokens (words)")

def test_tokenizer_auto_says_what_a_new_run_gets(win, qtbot, monkeypatch):
    """Tokenizer auto (the default): the corpus summary names the tokenizer a new run gets, BPE
    once the corpus reaches engine.BPE_MIN_BYTES, and the estimate then waits for Start."""
    import engine.defaults

    c = win.corpus
    c.load_sample()
    qtbot.waitUntil(lambda: c.pending == 0 and c.table.rowCount() > 1, timeout=RUN_TIMEOUT)
    assert win.train.tokenizer.currentText() == "auto"
    assert c.summary.text().split(";")[0].endswith("tokens (bytes (auto))")
    monkeypatch.setattr(engine.defaults, "BPE_MIN_BYTES", 1_000)  # the sample now counts as large
    win.train.tokenizer.setCurrentText("bytes")
    win.train.tokenizer.setCurrentText("auto")
    assert "tokenizer bpe (auto): trained at Start" in c.summary.text()
    assert c.table.item(0, 2).text() == "after Start"
    assert "bpe tokenizer (auto), lr 0.006" in win.next_label.full  # the rate the run will use
    assert win.train.model_config().vocab_size >= 2048  # the estimate counts the BPE embedding
    spec = win.train.run_spec(None, 0)
    assert "after Start" in str(win._epoch_rows(spec))
    win.train.tokenizer.setCurrentText("bytes")
    assert c.summary.text().split(";")[0].endswith("tokens (bytes)")
    assert "bytes tokenizer, lr 0.003" in win.next_label.full


def test_continue_does_not_leave_the_runs_rate_for_new_runs(win, tiny_run):
    """Continue shows the run's own epochs / lr / max steps; once Continue is over (New model, or
    the continued run ended) the panel's new-run values come back, and Start while continuing
    does not remember the run's values as the next launch's (a BPE run's 2x rate was kept and
    then used by byte runs, where 6e-3 stayed at chance on copying)."""
    from app import settings

    run_lr = runapi.read_run_spec(tiny_run).train.lr
    mine = 0.0011 if abs(run_lr - 0.0011) > 1e-9 else 0.0013
    win.train.lr.setValue(mine)
    win.train.max_steps.setValue(77)
    win.choose_continue(tiny_run)
    assert win.train.lr.value() == pytest.approx(run_lr)
    win.train.remember()
    assert float(settings.load("train/lr", 0.0)) == pytest.approx(mine)
    win.new_model()
    assert win.train.lr.value() == pytest.approx(mine) and win.train.max_steps.value() == 77


def test_an_old_saved_tokenizer_does_not_hide_the_auto_default(qtbot, tmp_path):
    """Versions before tokenizer "auto" saved "train/tokenizer" = bytes on every Start; a
    window opened after the update starts on auto, and a choice made now is remembered."""
    from app import settings

    settings.save("train/tokenizer", "bytes")  # what an earlier version left behind
    w = small_window(qtbot, tmp_path / "runs")
    try:
        assert w.train.tokenizer.currentText() == "auto"
        w.train.tokenizer.setCurrentText("bytes")
        w.train.remember()
    finally:
        close_window(qtbot, w)
    w = small_window(qtbot, tmp_path / "runs")
    try:
        assert w.train.tokenizer.currentText() == "bytes"
    finally:
        close_window(qtbot, w)


def test_plot_legends_are_compact_boxes_in_the_top_right_corner(qtbot):
    """Each legend sits inside its plot, top-aligned at the top-right, each swatch on the row of
    its name and left of it, rows packed tight, on a translucent box (the curves show through);
    in a short plot (the window's own size) it takes more columns instead of covering it all."""
    from app.panels.plots_panel import PlotsPanel

    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.show()
    rows = [{"kind": "step", "step": i, "loss": 5 * math.exp(-i / 30) + 1, "grad_norm": 2 - i / 100}
            for i in range(1, 120)]
    rows += [{"kind": "eval", "step": i, "val_loss": 3 - i / 100} for i in range(10, 120, 20)]
    panel.load_history(rows)
    panel._redraw()
    for width, height in ((850, 520), (820, 300)):
        panel.resize(width, height)
        qtbot.wait(50)
        for plot, legend in ((panel.loss_plot, panel.loss_legend),
                             (panel.norm_plot, panel.norm_legend)):
            data = plot.vb.sceneBoundingRect()
            box = legend.sceneBoundingRect()
            assert legend.isVisible()
            assert data.contains(box), (data, box)  # inside the plot, not in a column beside it
            assert 0 <= box.top() - data.top() <= 12 and 0 <= data.right() - box.right() <= 12
            assert box.height() <= 0.6 * data.height(), (width, height, box)
            assert len(legend.items) >= 2
            for sample, label in legend.items:
                s, t = sample.sceneBoundingRect(), label.sceneBoundingRect()
                assert abs(s.center().y() - t.center().y()) <= 2, label.text  # one row
                assert s.right() <= t.left() + 1 and t.left() - s.right() <= 12, label.text
            n_rows = len({round(s.sceneBoundingRect().top()) for s, _ in legend.items})
            assert box.height() <= 18 * n_rows + 12  # no blank band, no loose rows
            assert 0 < legend.opts["brush"].color().alpha() < 255


def test_lora_and_wsla_adapt_opened_weights_only(win, qtbot, tiny_run):
    """A walk-through ticked LoRA with a model opened, then chose New model: the new run trained
    adapters on random weights (loss ~10.5). Continue of a full run with the box ticked estimated
    the adapters' parameters while the run trains all of them."""
    win.open_model(tiny_run)
    qtbot.waitUntil(lambda: win.init_dir == tiny_run and win.corpus.pending == 0,
                    timeout=RUN_TIMEOUT)
    assert win.train.lora.isEnabled() and win.train.wsla.isEnabled()
    win.train.lora.setChecked(True)
    assert win.make_job().spec.train.lora is not None
    win.new_model()
    for cb in (win.train.lora, win.train.wsla):
        assert not cb.isChecked() and not cb.isEnabled()
        assert "adapts a trained model" in cb.toolTip()
    assert win.make_job().spec.train.lora is None
    win.open_model(tiny_run)  # opened weights again: LoRA as last ticked on them
    qtbot.waitUntil(lambda: win.init_dir == tiny_run and win.train.lora.isChecked(),
                    timeout=RUN_TIMEOUT)
    win.choose_continue(tiny_run)  # a full run: all its weights train
    assert not win.train.lora.isChecked() and not win.train.lora.isEnabled()
    assert "Continue trains what the run trained" in win.train.lora.toolTip()
    win._refresh_estimate()
    assert "(82,368 trained)" in win.estimate.full, win.estimate.full
    assert "82,368 of 82,368" in win.train.trainable.text()


def test_the_wheel_scrolls_the_training_panel_not_its_settings(win, qtbot):
    """Scrolling over the Model & training form changed Batch from 8 to 1."""
    from PySide6.QtCore import QPoint
    from PySide6.QtTest import QTest

    def wheel(widget) -> None:  # as a mouse's, through the window (Qt passes those on)
        win.train_scroll.ensureWidgetVisible(widget, 0, 0)
        at = widget.mapTo(win, widget.rect().center())
        QTest.wheelEvent(win.windowHandle(), at, QPoint(0, -120))
        qtbot.wait(10)

    win.resize(1024, 500)
    win.left_tabs.setCurrentIndex(1)
    qtbot.wait(50)
    bar = win.train_scroll.verticalScrollBar()
    assert bar.maximum() > 0
    for w, shown in ((win.train.preset, win.train.preset.currentText),
                     (win.train.batch, win.train.batch.value), (win.train.lr, win.train.lr.value)):
        before, top = shown(), bar.value()
        wheel(w)
        assert shown() == before and bar.value() > top  # the panel scrolled instead
    batch = win.train.batch.value()
    win.activateWindow()
    win.train.batch.setFocus()
    qtbot.waitUntil(win.train.batch.hasFocus)
    wheel(win.train.batch)  # a focused box still takes the wheel
    assert win.train.batch.value() == batch - 1


def test_the_step_bar_is_not_the_previous_runs_over_an_opened_run(win, tiny_run):
    """After run 2 stopped at step 138, opening run 1 (191 steps) left '138 / 440 steps'."""
    for show in (win.open_run_view, win.choose_continue):
        win.progress.setMaximum(440)
        win.progress.setValue(138)
        show(tiny_run)
        assert win.progress.text() == "no run training", win.progress.text()


def test_removing_the_previewed_corpus_file_clears_its_preview(win, qtbot):
    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.table.rowCount() > 0 and corpus.pending == 0,
                    timeout=RUN_TIMEOUT)
    corpus.table.selectRow(0)
    assert corpus.preview.toPlainText()
    corpus._remove_selected()
    assert corpus.preview.toPlainText() == ""  # not the removed file's text


def test_remove_clears_the_selection_and_its_skipped_files(win, qtbot, tmp_path):
    """Remove kept the same row numbers selected, so a second Remove took other files; a
    folder added twice listed its skipped files twice, and they stayed listed after its files
    were removed; "Added 68 files" counted the files already in the corpus."""
    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    corpus.files.clear()
    corpus.skipped.clear()
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"{i}.txt").write_text(f"file {i} " * 40)
    (data / "blob.bin").write_bytes(b"\x00\x01binary" * 10)
    corpus.add_paths([str(data)], sync=True)
    assert corpus.notice.text().splitlines()[0] == "Added 4 files; not added:"
    (data / "4.txt").write_text("new " * 40)
    corpus.add_paths([str(data)], sync=True)  # the same folder again, one file new
    assert corpus.notice.text().splitlines()[0] == \
        "Added 1 file (4 already in the corpus); not added:"
    assert [p for p, _ in corpus.skipped] == [str(data / "blob.bin")]  # listed once
    corpus.table.selectRow(0)
    corpus._remove_selected()
    assert corpus.table.selectedIndexes() == [] and len(corpus.files) == 4
    corpus._remove_selected()  # a second click: nothing selected, nothing removed
    assert len(corpus.files) == 4 and corpus.skipped
    corpus.table.selectAll()
    corpus._remove_selected()
    assert corpus.files == {} and corpus.skipped == []  # no file of the folder left: nor skipped
    assert not corpus.skipped_btn.isVisibleTo(corpus)


def test_open_says_why_a_run_with_a_corrupt_run_json_cannot_be_shown(win, tiny_run, tmp_path):
    import shutil

    folder = tmp_path / "broken"
    shutil.copytree(tiny_run, folder)
    (folder / "run.json").write_text("{not json")
    win.open_run_view(str(folder))
    assert win.errors and f"cannot open {folder}" in win.errors[-1], win.errors
    assert f"{folder / 'run.json'}: corrupt JSON at line 1 column 2" in win.errors[-1]  # why,
    assert (f"open {folder / 'snapshots' / 'step-3'} with File > Open model…"  # and the way on
            in win.errors[-1]), win.errors[-1]
    assert win.shown_run is None  # not "showing …" over empty plots


def test_the_estimate_of_a_continue_is_the_runs_own_model(win, qtbot, tiny_run):
    """Continue trains the run's own model: the estimate counted the panel's preset instead."""
    win.train.preset.setCurrentText("small")
    win._refresh_estimate()
    assert "82,368 parameters" not in win.estimate.full
    win.choose_continue(str(tiny_run))
    win._refresh_estimate()
    assert "82,368 parameters (82,368 trained)" in win.estimate.full, win.estimate.full


def test_a_sample_of_mostly_spaces_says_how_many(win):
    """An early model's "The" and 160 spaces looked like an empty sample box."""
    win.preview.show_preview("step 0", "The" + " " * 160 + "\n\nOnce upon", "CPU step")
    shown = win.preview.output.toPlainText()
    assert shown.startswith("The" + " " * 160 + "[160 spaces]") and shown.endswith("Once upon")
    win.preview.show_preview("step 1", "def f():\n        return 1", "CPU step")
    assert win.preview.output.toPlainText() == "def f():\n        return 1"  # indentation as is


def test_a_plot_too_small_for_its_legend_names_its_curves_above(win, qtbot):
    """At 900x600 the loss legend did not fit its plot and was hidden: the curves had no
    names. A hidden legend's key is now a small line above the plots; a visible one has none.
    The preview's backend line stays one line (its reason wrapped over the sample box)."""
    win.resize(900, 600)
    win.show()
    qtbot.wait(150)
    p = win.plots
    assert not p.loss_legend.isVisible()
    assert p.key_label.isVisible() and "loss:" in p.key_label.text()
    assert "held\u2011out&nbsp;epoch" in p.key_label.text()  # broken only between names
    win.preview.show_preview("epoch 1", "x", "CPU step — GPU preview unavailable (software-only):"
                             " only a software adapter, slower than the CPU step" * 3)
    qtbot.wait(50)
    line = win.preview.backend
    assert line.text().endswith("…") and line.height() <= 2 * line.fontMetrics().height()
    win.resize(1280, 800)
    qtbot.wait(150)
    assert p.loss_legend.isVisible() and p.norm_legend.isVisible()
    assert not p.key_label.isVisible()


def test_continue_shows_and_locks_what_the_run_keeps(win, tiny_run):
    """With Continue chosen, Batch and Preset could still be edited: the estimate followed the
    panel (Batch 8 -> 4: "x 21" steps per epoch) while the run went on at its own batch 8."""
    t = win.train
    t.preset.setCurrentText("small")
    t.batch.setValue(16)
    t.seq_len.setValue(128)
    win.choose_continue(tiny_run)
    assert t.preset.currentText() == "tiny" and t.d_model.value() == 64  # the run's own
    assert (t.batch.value(), t.seq_len.value()) == (4, 64)
    for k in t.CONTINUE_FIXED:
        assert not getattr(t, k).isEnabled(), k
        assert "continued run keeps its own" in getattr(t, k).toolTip()
    assert t.epochs.isEnabled() and t.lr.isEnabled() and t.max_steps.isEnabled()
    assert win.make_job().spec.train.batch_size == 4
    win.new_model()  # Continue is over: the new-run values come back, editable
    assert (t.preset.currentText(), t.batch.value(), t.seq_len.value()) == ("small", 16, 128)
    assert all(getattr(t, k).isEnabled() for k in ("preset", "batch", "seq_len", "seed"))
    assert not t.d_model.isEnabled()  # a preset's dims stay off


def test_an_add_still_being_read_does_not_land_in_the_corpus_that_replaced_it(win, qtbot,
                                                                            tmp_path, monkeypatch):
    """A file added just before Sample corpus (its add still being read) came back after the
    sample replaced the corpus."""
    import threading

    from app.panels import corpus_panel

    own = tmp_path / "mine.txt"
    own.write_text("my own text " * 50)
    release = threading.Event()
    real = corpus_panel._inspect

    def slow(paths, tok):  # noqa: ANN001, ANN202
        if str(own) in paths:
            release.wait(10)
        return real(paths, tok)

    monkeypatch.setattr(corpus_panel, "_inspect", slow)
    win.corpus.add_paths([str(own)])  # read in a worker, held there ...
    win.corpus.load_sample()  # ... while the sample replaces the corpus
    release.set()
    qtbot.waitUntil(lambda: not win.corpus.pending)
    qtbot.wait(50)
    assert str(own) not in win.corpus.files and len(win.corpus.files) == 6
    assert not win.corpus.progress.isVisible() and "reading" not in win.corpus.summary.text()


def test_small_window_chores(win, qtbot, tmp_path, tiny_run, monkeypatch):
    """From a walk-through: Sample corpus replaced 3,007 files without asking; Add files and
    Open settings always opened in the home / runs folder; a compared run opened stayed drawn
    in grey over itself; a sample of only blanks was an empty Gallery cell."""
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    own = tmp_path / "mine" / "a.txt"
    own.parent.mkdir()
    own.write_text("my own text " * 50)
    seen: list[str] = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        lambda parent, cap, folder, *a: seen.append(folder) or ([str(own)], ""))
    win.corpus._pick_files()
    win.corpus._pick_files()
    assert seen[1] == str(own.parent)  # where the last file came from
    qtbot.waitUntil(lambda: str(own) in win.corpus.files)
    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: answers.pop(0))
    win.corpus._ask_sample()
    assert str(own) in win.corpus.files  # No: kept
    win.corpus._ask_sample()
    assert str(own) not in win.corpus.files and len(win.corpus.files) == 6
    qtbot.waitUntil(lambda: win.statusBar().currentMessage().startswith("Added")
                    and not win.corpus.pending)  # (the second pick's add in flight: dropped)
    assert str(own) not in win.corpus.files
    before = list(win.corpus.files.values())
    win.corpus._ask_sample()  # loaded already: said so, not cleared and "Added 6 files" again
    assert all(a is b for a, b in zip(before, win.corpus.files.values(), strict=True))
    assert win.statusBar().currentMessage() == "The sample corpus is already loaded (6 files)"
    win.compare_run(tiny_run)
    assert win.compared_run == tiny_run
    win.open_run_view(tiny_run)
    assert win.compared_run is None and win.plots.compare_label.full == ""
    win.compare_run(tiny_run)  # the run shown: not overlaid on itself
    assert win.compared_run is None and "is the run shown" in win.statusBar().currentMessage()
    g = win.gallery
    g.samples = [{"step": 0, "epoch": 0, "prompt": "The", "text": "The" + " " * 161},
                 {"step": 0, "epoch": 0, "prompt": "The", "text": "The"},
                 {"step": 0, "epoch": 0, "prompt": "The", "text": "The \t\n"}]
    g._fill()
    assert g.table.item(0, 3).text() == "[161 spaces]"  # in the Preview's words ("[161 blank
    assert g.table.item(1, 3).text() == "[nothing generated]"  # characters]" there)
    assert g.table.item(2, 3).text() == "[3 blanks]"


def test_add_folder_starts_where_the_last_folder_was_picked(win, tmp_path, monkeypatch):
    """Add folder… always opened in the home folder (or where the last file pick was), never
    where the user had just picked a folder."""
    from PySide6.QtWidgets import QFileDialog

    data = tmp_path / "data" / "sub"
    data.mkdir(parents=True)
    (data / "a.txt").write_text("folder text " * 40)
    starts: list[str] = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        lambda parent, cap, folder, *a, **k: starts.append(folder) or str(data))
    win.corpus._pick_dir()
    win.corpus._pick_dir()
    assert starts[0] != str(tmp_path / "data")
    assert starts[1] == str(tmp_path / "data")  # the picked folder's parent

def test_the_generation_rate_leaves_out_the_prompts_reading():
    """A 300 KB prompt: "200 tokens in 30.11 s (7/s)", the prompt's 30 s counted as generation."""
    from app.workers import generation_summary

    line = generation_summary(200, 30.0, 0.11, 100_000, "reached the length", "cpu")
    assert line == ("200 tokens in 30.11 s (1,809/s); the prompt (100,000 tokens) read in "
                    "30.00 s, reached the length — cpu")
    short = generation_summary(40, 0.01, 0.39, 3, "ended at end of text", "cpu")
    assert short == "40 tokens in 0.400 s (100/s), ended at end of text — cpu"
    quick = generation_summary(200, 0.009, 0.0714, 3, "reached the length", "cpu")
    assert quick == "200 tokens in 0.080 s (2,488/s), reached the length — cpu"  # (it said
    # 2,787/s: the tokens after the first, over a time it did not say)


def test_the_playground_says_it_reads_the_prompt(tiny_run):
    """The status said "loading the model…" for the ~30 s a long prompt took to read."""
    from dataclasses import replace as _replace

    import engine
    from app.workers import GenerateWorker

    cfg = _replace(engine.GENERATION_DEFAULTS, max_new_tokens=3, seed=1)
    w = GenerateWorker(tiny_run, "hello world " * 20, cfg, "cpu")
    said: list[str] = []
    done: list[str] = []
    w.progress.connect(said.append)
    w.done.connect(done.append)
    w.run()
    assert said == ["reading the prompt (240 tokens)…"], said  # a bytes model: one a byte
    assert done and done[0].startswith("3 tokens in "), done
    assert done[0].endswith(f" · {Path(tiny_run).name}")  # whose text it is


def test_a_link_to_a_corpus_file_is_not_a_second_document(win, tmp_path):
    """Add folder with link.txt -> doc1.txt: the table showed doc1 "train" and link.txt
    "held-out", and the run measured its held-out loss on training text."""
    d = tmp_path / "corp"
    d.mkdir()
    for i in range(1, 4):
        (d / f"doc{i}.txt").write_text(f"document {i} " * 40)
    (d / "link.txt").symlink_to(d / "doc1.txt")
    c = win.corpus
    c.clear()
    c.add_paths([str(d / "doc1.txt")], sync=True)
    c.add_paths([str(d)], sync=True)  # the link comes in a later add
    assert sorted(Path(p).name for p in c.files) == ["doc1.txt", "doc2.txt", "doc3.txt"]
    assert [(Path(p).name, why.split(", ")[0]) for p, why in c.skipped] == [
        ("link.txt", f"the same file as {d / 'doc1.txt'}")]
    c.clear()
    c.add_paths([str(d / "link.txt")], sync=True)  # the link first, its target in another add
    c.add_paths([str(d / "doc1.txt"), str(d / "doc2.txt")], sync=True)
    assert sorted(Path(p).name for p in c.files) == ["doc2.txt", "link.txt"]
    assert c.skipped[0][0] == str(d / "doc1.txt") and "the same file as" in c.skipped[0][1]


def test_delete_removes_and_the_skipped_list_closes_when_empty(win, qtbot, tmp_path):
    """Delete on the table did nothing; after the last skipped file went, the open list stayed,
    empty, with no button to close it; a link's entry outlived its removed target."""
    from PySide6.QtCore import Qt

    d = tmp_path / "d"
    d.mkdir()
    (d / "a.txt").write_text("text a " * 30)
    (d / "b.txt").write_text("text b " * 30)
    (d / "link.txt").symlink_to(d / "a.txt")
    c = win.corpus
    c.clear()
    c.add_paths([str(d)], sync=True)
    assert [Path(p).name for p, _ in c.skipped] == ["link.txt"]
    c.skipped_btn.setChecked(True)
    c.table.selectRow(list(c.files).index(str(d / "a.txt")))
    c.table.setFocus()
    qtbot.keyClick(c.table, Qt.Key.Key_Delete)
    assert sorted(Path(p).name for p in c.files) == ["b.txt"]
    assert c.skipped == []  # link.txt's reason named the removed a.txt
    assert not c.skipped_btn.isChecked() and not c.skipped_list.isVisibleTo(c)


def test_the_gallery_clears_its_detail_and_a_long_run_name_does_not_widen_the_window(qtbot,
                                                                                   tmp_path):
    """The detail pane kept a sample of another epoch or run; a 200-character run name in the
    title (and the compare label, the preview tag) made the window 2,062 px wide."""
    from app.panels.gallery_panel import GalleryPanel
    from app.panels.plots_panel import PlotsPanel
    from app.panels.preview_panel import PreviewPanel
    from engine.samples import append_sample

    run = tmp_path / ("L" * 200)
    run.mkdir()
    for step, epoch in ((0, 0), (11, 1)):
        append_sample(run, {"step": step, "epoch": epoch, "prompt": "The", "text": f"The {step}"})
    g = GalleryPanel()
    qtbot.addWidget(g)
    g.show_run(str(run))
    g.table.selectRow(0)
    assert g.detail.toPlainText()
    g.epoch.setCurrentText("1")
    assert g.detail.toPlainText() == ""
    g.table.selectRow(0)
    g.show_run(None)
    assert g.detail.toPlainText() == ""
    g.show_run(str(run))
    plots, preview = PlotsPanel(), PreviewPanel()
    for w in (plots, preview):
        qtbot.addWidget(w)
    plots.compare_label.set_full(f"grey: {run.name} (dotted train, dashed held-out)")
    preview.show_preview(f"none saved for {run.name}", "", "—")
    for w in (g, plots, preview):
        assert w.minimumSizeHint().width() < 1000, (type(w).__name__, w.minimumSizeHint())


def test_the_gallery_says_when_older_samples_are_left_out(qtbot, tmp_path, monkeypatch):
    """A 105 MB samples.jsonl showed its newest 64 MB as if that were all."""
    import engine.samples as samples_mod
    from app.panels.gallery_panel import GalleryPanel
    from engine.samples import append_sample

    for step in range(20):
        append_sample(tmp_path, {"step": step, "epoch": 0, "prompt": "The", "text": "The x" * 20})
    g = GalleryPanel()
    qtbot.addWidget(g)
    g.show_run(str(tmp_path))
    assert "older ones are not shown" not in g.title.text()
    monkeypatch.setattr(samples_mod, "MAX_BYTES", 1000)  # the file is now over the bound
    g.reload()
    assert g.table.rowCount() < 20 and "older ones are not shown" in g.title.text()


def test_continue_shows_and_changes_the_runs_own_early_stopping(win, tmp_path):
    """Early stopping is kept by a run: Continue shows the run's (the panel's new-run choice
    stayed shown and was applied to the continued run), passes a change as an override that
    the Next Start line names, and New model puts the choice back."""
    import engine
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=2),
                          early_stopping=engine.EarlyStopping(patience=4, target_loss=1.25))
    with runapi.start(spec, [corpus], root=tmp_path / "own") as run:
        run.train()
    folder = str(run.folder)
    win.train.patience.setValue(9)
    win.train.target_loss.setValue(0.0)
    win.choose_continue(folder)
    assert (win.train.patience.value(), win.train.target_loss.value()) == (4, 1.25)
    assert "early_stopping" not in win.continue_overrides()
    assert win.make_job().overrides == {}
    win.train.target_loss.setValue(0.0)  # the Next Start line follows (it stayed as it was)
    assert win.continue_overrides()["early_stopping"] == engine.EarlyStopping(patience=4)
    assert ("early stopping patience 4 (was patience 4, target loss 1.25)"
            in win.next_label.full)
    win.new_model()
    assert (win.train.patience.value(), win.train.target_loss.value()) == (9, 0.0)
    assert win.make_job().spec.early_stopping == engine.EarlyStopping(patience=9)


def test_the_runs_list_sorts_by_a_clicked_column(qtbot, tmp_path):
    """A header click sorts the runs by that column (again: the other way), runs without a
    held-out loss stay last, the selected run stays selected and Continue / Delete act on the
    run in the clicked row; the choice comes back at the next launch."""
    import engine
    from app.panels.runs_panel import RunsPanel

    def info(name, created, steps, best, status):
        return engine.RunInfo(tmp_path / name, name, created, "tiny", steps, best, status)

    runs = [info("b-run", "2026-12-03T10:00:00", 40, 1.5, "finished"),
            info("A-run", "2026-12-01T10:00:00", 300, None, "stopped"),
            info("c-run", "2026-12-02T10:00:00", 7, 0.9, "interrupted")]
    panel = RunsPanel(str(tmp_path / "none"))
    qtbot.addWidget(panel)
    panel.show()
    panel._show(runs)

    def names():
        return [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]

    def click(col):
        header = panel.table.horizontalHeader()
        x = header.sectionViewportPosition(col) + header.sectionSize(col) // 2
        qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton,
                         pos=QPoint(x, header.height() // 2))

    assert names() == ["b-run", "c-run", "A-run"]  # newest first
    assert [panel.table.item(r, 4).text() for r in range(3)] == ["1.5000", "0.9000", "—"]
    panel.select(str(tmp_path / "c-run"))
    click(3)
    assert names() == ["c-run", "b-run", "A-run"]  # steps, fewest first
    assert panel.selected() == str(tmp_path / "c-run")
    click(3)
    assert names() == ["A-run", "b-run", "c-run"]
    click(4)
    assert names() == ["c-run", "b-run", "A-run"]  # best held-out, lowest first
    click(4)
    assert names() == ["b-run", "c-run", "A-run"]  # ... and no loss last either way
    click(0)
    assert names() == ["A-run", "b-run", "c-run"]  # by name, case aside
    seen = []
    panel.continue_requested.connect(seen.append)
    panel.table.selectRow(1)
    panel.buttons["Continue"].click()
    assert seen == [str(tmp_path / "b-run")]
    again = RunsPanel(str(tmp_path / "none"))
    qtbot.addWidget(again)
    again._show(runs)
    assert [again.table.item(r, 0).text() for r in range(3)] == ["A-run", "b-run", "c-run"]
    assert again.table.horizontalHeader().sortIndicatorSection() == 0


def test_a_slow_background_read_of_the_runs_does_not_bring_back_a_deleted_run(qtbot, tmp_path,
                                                                               monkeypatch):
    """The Runs tab's timer read of the runs folder, started before a Delete and landing after
    it, showed the deleted run's row again; acting on that row hit a folder that was gone."""
    import threading

    import engine
    from app.panels import runs_panel
    from app.panels.runs_panel import RunsPanel

    root = tmp_path / "runs"
    keep = root / "keep"
    gone = root / "gone"
    old = [engine.RunInfo(p, p.name, "2026-12-01T10:00:00", "tiny", 1, None, "finished")
           for p in (keep, gone)]
    release = threading.Event()

    def listing(where):  # noqa: ANN001, ANN202
        if threading.current_thread() is threading.main_thread():
            return [r for r in old if r.path != gone]  # the read after the Delete
        release.wait(60)
        return old  # read before the Delete, landing after it

    monkeypatch.setattr(runs_panel.engine, "list_runs", listing)
    panel = RunsPanel(str(root))
    qtbot.addWidget(panel)
    panel.refresh_soon()  # the timer's read, on the thread pool
    assert panel._reading
    panel.refresh()  # as after a Delete
    release.set()
    qtbot.waitUntil(lambda: not panel._reading, timeout=RUN_TIMEOUT)
    assert [r.name for r in panel.runs] == ["keep"]

def test_bidirectional_controls_in_a_sample_are_shown_not_obeyed(qtbot, tmp_path):
    """A prompt holding U+202E (right-to-left override) was drawn reversed in the Gallery: the
    Gallery's cells and detail, the live sample and the Playground show such controls as
    "[U+202E]", the text around them in its own order."""
    from app.panels.gallery_panel import GalleryPanel
    from app.panels.preview_panel import PreviewPanel, visible_controls
    from engine.samples import append_sample

    rlo, pdi = "\u202e", "\u2069"
    append_sample(tmp_path, {"step": 3, "epoch": 0, "prompt": f"abc{rlo}def",
                             "text": f"abc{rlo}def and{pdi} more"})
    g = GalleryPanel()
    qtbot.addWidget(g)
    g.show_run(str(tmp_path))
    g.table.selectRow(0)
    cells = [g.table.item(0, c).text() for c in (2, 3)] + [g.detail.toPlainText()]
    assert cells[0] == "abc[U+202E]def" and cells[1] == " and[U+2069] more"
    assert "abc[U+202E]def and[U+2069] more" in cells[2]
    assert not any(ch in "".join(cells) for ch in (rlo, pdi))
    preview = PreviewPanel()
    qtbot.addWidget(preview)
    preview.show_preview("step 3", f"x{rlo}y", "cpu")
    assert preview.output.toPlainText() == "x[U+202E]y"
    assert visible_controls("\u05e9\u200f") == "\u05e9\u200f"  # a right-to-left mark (Arabic,
    # Hebrew text) is kept as it is


def test_the_playground_shows_bidirectional_controls(win):
    pg = win.playground
    pg.output.setPlainText("The ")
    pg._piece("\u202ereversed")
    assert pg.output.toPlainText() == "The [U+202E]reversed"


@pytest.mark.parametrize("preset", ["tiny", "medium", "small", "custom"])
def test_the_panels_training_settings_follow_the_preset_as_the_clis_do(win, preset):
    """The panel held small's 3e-3 for every preset: a medium run from the window trained at
    1.5x the CLI's 2e-3 with bytes, and (no longer at the preset's default) was not doubled for
    BPE (0.003 against the CLI's 0.004). Each box at the old preset's default follows the new
    preset; one set by hand stays."""
    from dataclasses import replace

    from engine.cli import build_parser
    from engine.cli_train import _spec

    win.train.preset.setCurrentText(preset)
    panel = win.train.run_spec(None, 0)
    cli = _spec(build_parser().parse_args(
        ["train", "--preset", preset if preset != "custom" else "small"]))
    assert replace(panel.train, epochs=cli.train.epochs, batch_size=cli.train.batch_size,
                   seq_len=cli.train.seq_len) == cli.train  # (the test window's are small)
    assert panel.for_corpus(10**8).train.lr == cli.for_corpus(10**8).train.lr  # BPE's rate
    win.train.lr.setValue(0.0042)  # by hand
    win.train.preset.setCurrentText("medium" if preset != "medium" else "tiny")
    assert win.train.lr.value() == pytest.approx(0.0042)


def test_previewing_a_corpus_file_since_made_a_fifo_does_not_hang(win, tmp_path):
    """The Corpus tab's preview opened the selected file on the GUI thread with a plain open():
    a file replaced by a FIFO since it was added froze the window."""
    import os

    f = tmp_path / "notes.txt"
    f.write_text("hello there\n" * 50)
    win.corpus.files.clear()
    win.corpus.add_paths([str(f)], sync=True)
    f.unlink()
    os.mkfifo(f)
    win.corpus.table.selectRow(0)  # would block here
    assert "FIFO" in win.corpus.preview.toPlainText()


def test_controls_do_not_move_when_the_first_message_comes(win, qtbot):
    """The status bar was made by the first message, and everything above it moved up by its
    height: a click on the Runs tab's Continue landed between two buttons and the next Start
    made a new run."""
    win.tabs.setCurrentIndex(1)
    qtbot.wait(50)
    button = win.runs.buttons["Continue"]
    before = button.mapTo(win, button.rect().topLeft())
    win._say("a message")
    qtbot.wait(50)
    assert button.mapTo(win, button.rect().topLeft()) == before
    win.statusBar().clearMessage()
    qtbot.wait(50)
    assert button.mapTo(win, button.rect().topLeft()) == before


def test_a_run_folder_from_anywhere_can_be_shown(win, qtbot, tmp_path):
    """A CLI run (./runs, not the window's runs folder) could only be opened as starting
    weights: its curves and Gallery were out of reach. File > Show a run folder… shows it."""
    from engine.cli import main
    from engine.samples import read_samples

    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    out = tmp_path / "cli-runs" / "mine"
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "2", "--sample-tokens", "4", "--out", str(out)]) == 0
    items = win.menuBar().actions()[0].menu().actions()
    assert any("Show a run folder" in a.text().replace("&", "") for a in items)  # (mnemonics)
    win.open_run_view(str(out))
    assert win.shown_run == str(out)
    assert win.gallery.table.rowCount() == len(read_samples(out)) > 0
    assert win.plots.steps  # its curves
    win.open_run_view(str(out / "snapshots" / "step-2"))  # a snapshot: says what it is
    assert any("a snapshot of the run" in e for e in win.errors)


def test_a_settings_files_holdout_and_settings_without_a_box_are_used(win, qtbot, tmp_path):
    """A file's holdout 0.3 loaded into the window trained with 0.1 (and the Corpus tab marked
    0.1 of the files); its warmup_steps and autosave_steps were dropped without a word. The
    held-out fraction has a box now; the others are kept for the next runs and saved again."""
    import engine

    f = tmp_path / "s.toml"
    f.write_text("[run]\nholdout = 0.3\nautosave_steps = 7\n[train]\nwarmup_steps = 50\n")
    win.load_settings_file(str(f))
    assert win.train.holdout.value() == pytest.approx(0.3)
    spec = win.make_job().spec
    assert (spec.holdout, spec.autosave_steps, spec.train.warmup_steps) == (0.3, 7, 50)
    qtbot.waitUntil(lambda: win.corpus.holdout == pytest.approx(0.3))  # (the estimate's timer)
    assert "warmup_steps 50" in win.log.toPlainText()
    back = tmp_path / "back.toml"
    win.save_settings_file(str(back))
    s = engine.load_settings(back)
    assert (s.spec.holdout, s.spec.autosave_steps, s.spec.train.warmup_steps) == (0.3, 7, 50)
    f.write_text("[train]\nwarmup_steps = 100\n")  # back to the default: nothing kept
    win.load_settings_file(str(f))
    assert "warmup_steps" not in win.train.extras and win.train.extras == {"autosave_steps": 7}


def test_continue_shows_the_runs_eval_cadence_and_custom_keeps_its_presets_rates(win, tmp_path):
    """Continue left the new-run panel's "Held-out eval every" shown (the run went on at its
    own); medium -> custom raised the rate from medium's 2e-3 to small's 3e-3 for a model of
    medium's shape."""
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=2,
                                                          eval_every=3))
    with runapi.start(spec, [corpus], root=tmp_path / "own") as run:
        run.train()
    win.train.eval_every.setValue(0)
    win.choose_continue(str(run.folder))
    assert win.train.eval_every.value() == 3
    win.new_model()
    assert win.train.eval_every.value() == 0
    win.train.preset.setCurrentText("medium")
    assert win.train.lr.value() == pytest.approx(0.002)
    win.train.preset.setCurrentText("custom")
    s = win.train.run_spec(None, 0)
    assert s.train.lr == pytest.approx(0.002) and s.preset == "medium" and s.model
    assert s.for_corpus(10**8).train.lr == pytest.approx(0.004)  # BPE's, as for medium


def test_skipped_files_of_one_name_are_told_apart_by_their_folder(win, tmp_path):
    """Three "__init__.py: file is empty" lines of a stdlib folder could not be told apart."""
    for pkg in ("email", "http"):
        (tmp_path / "src" / pkg).mkdir(parents=True)
        (tmp_path / "src" / pkg / "__init__.py").write_text("")
        (tmp_path / "src" / pkg / "core.py").write_text(f"x = '{pkg}'\n" * 30)  # (no copy)
    (tmp_path / "src" / "lone.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    win.corpus.files.clear()
    win.corpus.add_paths([str(tmp_path / "src")], sync=True)
    text = win.corpus.notice.text()
    for pkg in ("email", "http"):
        assert f"• {pkg}/__init__.py: file is empty" in text, text
    assert "• lone.png: " in text  # a name shown once stays short
    rows = sorted(win.corpus.table.item(r, 0).text() for r in range(win.corpus.table.rowCount()))
    assert rows == ["email/core.py", "http/core.py"], rows  # (two identical "core.py" rows)
    from app.panels.corpus_panel import told_apart

    assert told_apart(["/a/x/core.py", "/b/x/core.py", "/c/lone.py", "/c/lone.py"]) == [
        "a/x/core.py", "b/x/core.py", "c/lone.py", "c/lone.py"]  # (both were "x/core.py")



def test_three_files_of_one_name_are_all_told_apart():
    """Three core.py files in a/x, b/x and c/x each get the folders that tell them apart. The
    tests had at most two files of one name, so growing only the first two of the colliding
    names (the third left "core.py") passed."""
    from app.panels.corpus_panel import told_apart

    assert told_apart(["/a/x/core.py", "/b/x/core.py", "/c/x/core.py"]) == [
        "a/x/core.py", "b/x/core.py", "c/x/core.py"]
    assert told_apart(["/a/x/core.py", "/b/y/core.py", "/c/z/core.py", "/d/util.py"]) == [
        "x/core.py", "y/core.py", "z/core.py", "util.py"]


def test_the_next_start_line_stays_one_line_on_a_continue(win, qtbot, tiny_run):
    """Continue's Next Start line wrapped to two or three lines and moved the tab bar under the
    mouse (a click landed on the wrong tab); it is one line now, all of it in its tooltip."""
    bar = win.tabs.tabBar()
    before = bar.mapTo(win, bar.rect().topLeft())
    win.choose_continue(tiny_run)
    win.train.max_steps.setValue(999)
    qtbot.wait(50)
    assert "continues run" in win.next_label.full and "max steps 999" in win.next_label.full
    assert win.next_label.toolTip() == win.next_label.full
    assert bar.mapTo(win, bar.rect().topLeft()) == before
    assert win.next_label.height() < 2 * win.next_label.fontMetrics().lineSpacing()


def test_review_gaps_in_the_window(win, qtbot, tmp_path):
    """Gaps a mutation audit found: a settings file's min_delta (no box) was dropped; a Continue
    changing patience must keep the run's min_delta and show the run's held-out fraction; a
    saved sort column out of range falls back to the default; the step bar shows steps (not
    "preparing…") once a run steps."""
    import engine
    from app import settings
    from app.panels.runs_panel import DEFAULT_SORT, RunsPanel
    from engine.trainer import TrainConfig

    f = tmp_path / "s.toml"
    f.write_text("[early_stopping]\npatience = 2\nmin_delta = 0.01\n")
    win.load_settings_file(str(f))
    assert win.make_job().spec.early_stopping == engine.EarlyStopping(patience=2, min_delta=0.01)
    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", holdout=0.3,
                          train=TrainConfig(batch_size=4, seq_len=64, max_steps=2),
                          early_stopping=engine.EarlyStopping(patience=4, min_delta=0.5))
    with runapi.start(spec, [corpus], root=tmp_path / "own") as run:
        run.train()
    win.choose_continue(str(run.folder))
    assert win.train.holdout.value() == pytest.approx(0.3) and not win.train.holdout.isEnabled()
    win.train.patience.setValue(6)
    assert win.continue_overrides()["early_stopping"] == engine.EarlyStopping(patience=6,
                                                                              min_delta=0.5)
    win.new_model()
    settings.save("runs/sort", "9,0")
    panel = RunsPanel(str(tmp_path / "none"))
    qtbot.addWidget(panel)
    assert panel.sort == DEFAULT_SORT
    win.train.max_steps.setValue(3)
    win.start_training()
    qtbot.waitUntil(lambda: win.progress.value() >= 1, timeout=RUN_TIMEOUT)
    assert win.progress.text().endswith("steps") and "/" in win.progress.text()
    qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=RUN_TIMEOUT)


def test_runs_of_other_tokenizers_rank_and_compare_per_byte(qtbot, tmp_path):
    """A byte run (1.44 nats/token) was listed and drawn below a BPE run (1.96 nats/token at
    5.8 bytes a token) that was 4x better per byte, and Compare read the grey run off the shown
    run's bits/byte axis. The Runs list shows and sorts by bits per byte; Compare draws another
    tokenizer's losses at equal bits per byte on the shown run's scale, and says so."""
    import engine
    from app.panels.plots_panel import PlotsPanel
    from app.panels.runs_panel import RunsPanel

    def info(name, best, bpb):
        return engine.RunInfo(tmp_path / name, name, "2026-12-01T10:00:00", "small", 9, best,
                              "finished", bits_per_byte=bpb)

    panel = RunsPanel(str(tmp_path / "none"))
    qtbot.addWidget(panel)
    panel._show([info("bytes", 1.44, 2.077), info("bpe", 1.96, 0.485),
                 info("unread", 1.0, None), info("unread2", 0.5, None), info("none", None, None)])
    panel.sort_by(4)
    rows = [(panel.table.item(r, 0).text(), panel.table.item(r, 4).text()) for r in range(5)]
    assert rows == [("bpe", "1.9600 (0.485 bits/byte)"), ("bytes", "1.4400 (2.077 bits/byte)"),
                    ("unread2", "0.5000"), ("unread", "1.0000"), ("none", "—")], rows  # (no
    panel.sort_by(4)  # descending: the unreadable still after the others (they came first)
    assert [panel.table.item(r, 0).text() for r in range(5)] == [  # bits/byte: last)
        "bytes", "bpe", "unread", "unread2", "none"]
    plots = PlotsPanel()
    qtbot.addWidget(plots)
    plots.set_tokens_per_byte(1 / 5.8)  # the shown run: BPE
    rows_b = [{"kind": "step", "step": 1, "loss": 1.44, "grad_norm": 1.0},
              {"kind": "eval", "step": 1, "val_loss": 1.5}]
    plots.set_compare("bytes", rows_b, 1.0)
    assert plots.cmp_loss.getData()[1][0] == pytest.approx(1.44 * 5.8)
    assert plots.cmp_val.getData()[1][0] == pytest.approx(1.5 * 5.8)
    assert "another tokenizer (1.0 bytes a token, this run's 5.8)" in plots.compare_label.full
    assert plots.compare_label.toolTip() == plots.compare_label.full  # (cut without a "…")
    plots.set_tokens_per_byte(1.0)  # a byte run shown: the grey one on its own scale again
    assert plots.cmp_loss.getData()[1][0] == pytest.approx(1.44)
    assert "another tokenizer" not in plots.compare_label.full
    plots.set_compare("bytes", rows_b, 1.005)  # within 1 %: drawn as it is
    assert plots.cmp_loss.getData()[1][0] == 1.44
    plots.set_compare("bytes", rows_b, 1.05)  # 5 % apart: rescaled, and said
    assert plots.cmp_loss.getData()[1][0] == pytest.approx(1.44 * 1.05)
    assert "another tokenizer" in plots.compare_label.full
    plots.set_compare("bpe", rows_b, 1 / 5.8)  # fewer tokens a byte than the shown run's
    assert plots.cmp_loss.getData()[1][0] == pytest.approx(1.44 / 5.8)
    assert "another tokenizer" in plots.compare_label.full


def test_a_window_opens_on_the_newest_run(qtbot, tiny_run, monkeypatch):
    """Reopened after a close during training, the window showed empty plots and "idle", with
    no word of the run it had stopped (the Gallery of the same launch showed that run). It
    opens on the newest run as Open does: its curves, and what became of it."""
    from tests.app.helpers import close_window, small_window

    w = small_window(qtbot, Path(tiny_run).parent)
    try:
        assert w.shown_run == tiny_run and w.plots.steps and w.plots.steps[-1] == 3
        assert w.status.full == f"idle · last run: {Path(tiny_run).name} finished at step 3"
        assert w.playground.source.currentText() == tiny_run
        assert w.gallery.folder == tiny_run
    finally:
        close_window(qtbot, w)
    from dataclasses import replace as _replace

    import engine

    listed = engine.list_runs(Path(tiny_run).parent)
    monkeypatch.setattr(engine, "list_runs", lambda root: [  # another process trains it
        _replace(r, status="running") for r in listed])
    w = small_window(qtbot, Path(tiny_run).parent)
    try:  # (it said "finished at step 3", or "running at step N", of a run in training)
        assert w.status.full == f"idle · last run: {Path(tiny_run).name} trains in another process"
    finally:
        close_window(qtbot, w)


def test_compare_and_sort_gaps(win, tmp_path, qtbot):
    """Compare drew the rows a crash lost (after the latest snapshot) as the other run's
    history; a header click on a new column after a descending one starts ascending; a folder
    named snapshots outside a run is not a run's snapshot."""
    import engine
    from engine import runformat as rf
    from engine.trainer import TrainConfig

    corpus = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=2))
    with runapi.start(spec, [corpus], root=tmp_path / "own") as run:
        run.train()
    for step in (3, 4, 5):  # logged by a process killed before its save
        rf.append_metric(run.folder, {"kind": "step", "step": step, "epoch": 0, "loss": 1.0})
    win.compare_run(str(run.folder))
    xs, _ = win.plots.cmp_loss.getData()
    assert max(xs) == 2
    panel = win.runs
    panel.sort_by(3)
    panel.sort_by(3)  # steps, descending
    panel.sort_by(0)
    assert panel.sort == (0, Qt.SortOrder.AscendingOrder)
    fake = tmp_path / "x" / "snapshots" / "step-1"
    fake.mkdir(parents=True)
    assert engine.snapshot_run(fake) is None
    assert engine.snapshot_run(run.folder / "snapshots" / "step-2") == run.folder


def test_compare_with_a_run_deleted_meanwhile_says_so_and_draws_nothing_grey(win, tiny_run,
                                                                            tmp_path):
    """A run deleted from disk after it was listed: Compare put its grey label over no curve
    and said nothing (the label stayed across Opens)."""
    import shutil

    gone = tmp_path / "gone-run"
    shutil.copytree(tiny_run, gone)
    shutil.rmtree(gone)
    win.compare_run(str(gone))
    assert win.errors[-1] == "cannot compare gone-run: it is gone", win.errors
    assert win.compared_run is None and "gone-run" not in win.plots.compare_label.full


def test_a_skipped_file_is_explained_in_the_windows_terms(tmp_path):
    """A folder's .zip said "if it is text, name the file itself to read it" in the window:
    the CLI's way; the window's is Add files."""
    import engine
    from app.panels.corpus_panel import skip_line

    (tmp_path / "a.zip").write_bytes(b"PK\x03\x04")
    (tmp_path / "b.txt").write_text("some text to train on\n")
    (path, why), = engine.load_corpus([tmp_path]).rejected  # the engine's own reason
    assert "name the file itself" in why
    line = skip_line(str(path), why)
    assert line.endswith("if it is text, add the file itself with Add files…"), line


def test_a_refused_add_is_not_listed_as_skipped_after_the_next_add(win, qtbot, tmp_path):
    """An empty folder and a folder of binaries (refused whole), a folder's files removed, then
    a good file added: "4 files skipped" stayed, of folders the corpus never held."""
    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    empty, binonly, kept = tmp_path / "empty", tmp_path / "bin", tmp_path / "kept"
    for d in (empty, binonly, kept):
        d.mkdir()
    (binonly / "a.zip").write_bytes(b"PK\x03\x04")
    (kept / "notes.txt").write_text("notes " * 40)
    (kept / "blob.bin").write_bytes(b"\x00\x01binary" * 10)
    corpus.add_paths([str(empty)], sync=True)
    assert [p for p, _ in corpus.skipped] == [str(empty)]  # shown after its own add
    assert corpus.skipped_btn.text() == "1 folder skipped"  # (it was "1 file")
    corpus.add_paths([str(binonly)], sync=True)
    assert [Path(p).name for p, _ in corpus.skipped] == ["a.zip"]  # until the next
    corpus.add_paths([str(kept)], sync=True)
    assert [Path(p).name for p, _ in corpus.skipped] == ["blob.bin"]  # the corpus's own only
    good = tmp_path / "good.txt"
    good.write_text("good text " * 40)
    win.statusBar().showMessage("Nothing added: bin/a.zip …", 15000)  # the add before
    corpus.add_paths([str(good)])  # as a drop does: counted in a worker
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    assert [Path(p).name for p, _ in corpus.skipped] == ["blob.bin"]
    assert corpus.skipped_btn.text() == "1 file skipped"
    qtbot.waitUntil(lambda: win.statusBar().currentMessage() == "Added 1 file", timeout=5000)


def test_the_runs_lines_in_the_log_are_in_the_windows_terms(win, qtbot, tmp_path):
    """A run's preparation lines (skipped files, advice) went to the Log in the CLI's words."""
    (tmp_path / "a.zip").write_bytes(b"PK\x03\x04")
    (tmp_path / "b.txt").write_text("some text to train on\n" * 50)
    win.corpus.files.clear()
    win.corpus.add_paths([str(tmp_path)], sync=True)
    from tests.app.helpers import train_until_idle

    train_until_idle(qtbot, win, max_steps=1)
    log = win.log.toPlainText()
    assert "a.zip" in log and "add the file itself with Add files…" in log, log
    assert "name the file itself" not in log


def test_skipped_counts_name_files_and_folders(tmp_path):
    from app.panels.corpus_panel import skipped_count

    (tmp_path / "empty").mkdir()
    f = tmp_path / "a.zip"
    f.write_bytes(b"PK")
    assert skipped_count([(str(f), "x"), (str(f), "y"), (str(tmp_path / "empty"), "z")]) == \
        "2 files and 1 folder"
    assert skipped_count([(str(tmp_path / "empty"), "z")]) == "1 folder"
    assert skipped_count([(str(tmp_path / "gone.txt"), "vanished")]) == "1 file"


def test_an_add_of_an_empty_folder_says_folder_in_its_message(win, qtbot, tmp_path):
    corpus = win.corpus
    qtbot.waitUntil(lambda: corpus.pending == 0, timeout=RUN_TIMEOUT)
    (tmp_path / "empty").mkdir()
    said: list[str] = []
    corpus.rejected.connect(said.append)
    corpus.add_paths([str(tmp_path / "empty")], sync=True)
    assert said[-1].startswith("1 folder skipped: empty"), said


def test_the_estimates_step_timing_gives_its_memory_back(win, qtbot, monkeypatch):
    """Timing three medium steps for the estimate kept ~280 MB while the window sat idle."""
    import engine

    calls: list[int] = []
    monkeypatch.delenv("MAMBA_STUDIO_NO_MEASURE")  # (the tests' default: no timing)
    monkeypatch.setattr(engine, "release_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setattr(engine, "measure_step_seconds", lambda *_a, **_k: 0.01)
    win._step_times = type(win._step_times)()  # nothing kept: the estimate times a step
    win.train.preset.setCurrentText("medium")
    qtbot.waitUntil(lambda: bool(calls), timeout=10_000)


def test_playground_says_an_older_snapshot_and_locks_its_model_while_generating(win, qtbot,
                                                                                tiny_run,
                                                                                tmp_path):
    """A run whose latest snapshot was deleted generated from an older one, unsaid (the CLI
    warns); the Model box took another model mid-generation as if it were in use."""
    import shutil

    from engine import runformat as rf

    run = tmp_path / "copy"
    shutil.copytree(tiny_run, run)
    snaps = rf.snapshots(run)
    assert len(snaps) >= 2
    shutil.rmtree(snaps[-1][1])
    pg = win.playground
    pg.set_source(str(run))
    pg.max_tokens.setValue(5)
    pg.backend.setCurrentText("cpu")
    pg.generate()
    assert not pg.source.isEnabled() and not pg.browse.isEnabled()
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        pass
    assert pg.source.isEnabled() and pg.browse.isEnabled()
    assert (f"· copy · {snaps[-2][1].name}, not the snapshot latest.json names "
            f"(snapshots/{snaps[-1][1].name}/manifest.json: no such snapshot manifest; using "
            f"{snaps[-2][1].name} instead)") in done.args[0]


def test_playground_knobs_are_kept_across_launches(qtbot, tmp_path):
    """Only the prompt came back; the Preview's knobs did."""
    from app.main_window import MainWindow

    w = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w)
    pg = w.playground
    pg.temperature.setValue(1.3)
    pg.top_k.setValue(7)
    pg.top_p.setValue(0.5)
    pg.rep.setValue(1.4)
    pg.max_tokens.setValue(12345)
    pg.seed.setValue(99)
    pg.stop_at_end.setChecked(False)
    pg.backend.setCurrentText("cpu")
    w.close()
    w2 = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w2)
    p2 = w2.playground
    assert (p2.temperature.value(), p2.top_k.value(), p2.top_p.value(), p2.rep.value(),
            p2.max_tokens.value(), p2.seed.value(), p2.stop_at_end.isChecked(),
            p2.backend.currentText()) == (pytest.approx(1.3), 7, pytest.approx(0.5),
                                          pytest.approx(1.4), 12345, 99, False, "cpu")
    w2.close()


def test_a_relaunch_shows_the_tabs_shown_at_close(qtbot, tmp_path):
    """A relaunch opened on Train, its Corpus pane and the Preview, whatever was shown at close."""
    from app.main_window import MainWindow

    w = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w)
    w.tabs.setCurrentWidget(w.playground)
    w.left_tabs.setCurrentIndex(1)  # Model & training
    w.bottom_tabs.setCurrentWidget(w.log)
    w.close()
    w2 = MainWindow(runs_root=str(tmp_path / "runs"))
    qtbot.addWidget(w2)
    assert w2.tabs.currentWidget() is w2.playground
    assert (w2.left_tabs.currentIndex(), w2.bottom_tabs.currentWidget()) == (1, w2.log)
    w2.close()


def test_a_playground_prompt_is_kept_across_launches_unless_huge(qtbot, tmp_path):
    """A pasted 854 KB prompt went into the settings file and slowed every launch by ~2 s."""
    import engine
    from app.main_window import MainWindow
    from app.panels.playground_panel import KEPT_PROMPT_CHARS

    for prompt, back in (("x" * KEPT_PROMPT_CHARS, "x" * KEPT_PROMPT_CHARS),
                         ("y" * (KEPT_PROMPT_CHARS + 1), engine.DEFAULT_PROMPT)):
        w = MainWindow(runs_root=str(tmp_path / "runs"))
        qtbot.addWidget(w)
        w.playground.prompt.setPlainText(prompt)
        w.close()
        w2 = MainWindow(runs_root=str(tmp_path / "runs"))
        qtbot.addWidget(w2)
        assert w2.playground.prompt.toPlainText() == back
        w2.close()


def test_playground_counts_tokens_while_generating_and_says_the_gpu_note_once(monkeypatch):
    import engine
    from app.workers import GenerateWorker

    def generate_ids(ids, sampling):  # noqa: ANN001, ANN202
        for i in range(sampling.max_new_tokens):
            if i == 64:
                clock[0] += 2.0  # two seconds into the generation
            yield 104

    clock = [100.0]
    monkeypatch.setattr("time.perf_counter", lambda: clock[0])
    note = "CPU step — GPU preview unavailable (software-only): slower than the CPU step"
    fake_model(monkeypatch, generate_ids, note)
    monkeypatch.setattr(GenerateWorker, "_said", set())
    summaries = []
    for _ in range(2):
        w = GenerateWorker("m", "", engine.SamplingConfig(max_new_tokens=200), "auto")
        progress: list[str] = []
        w.progress.connect(progress.append)
        w.done.connect(summaries.append)
        w.run()
    assert "generating… 128 of 200 tokens" in progress
    assert note in summaries[0] and "GPU preview" not in summaries[1]
    assert summaries[1].endswith("— CPU step · m")


def test_continue_and_export_name_the_snapshot_a_missing_latest_leaves(win, qtbot, tiny_run,
                                                                        tmp_path, monkeypatch):
    """latest.json names a deleted snapshot: Continue said "from step 3" and its estimate failed
    with "step-3: no such file or folder" for the whole run; the export question offered
    "Latest (step 3)" and wrote the older one."""
    import shutil

    from PySide6.QtWidgets import QMessageBox

    from engine import runformat as rf

    run = tmp_path / "runs" / "copy"
    shutil.copytree(tiny_run, run)
    (last, gone), (kept, _) = rf.snapshots(run)[-1], rf.snapshots(run)[-2]
    shutil.rmtree(gone)
    win.choose_continue(str(run))
    assert f"from step {kept} (step-{last} is missing)" in win.next_label.full
    win._refresh_estimate()
    assert "settings:" not in win.estimate.full and "no such file" not in win.estimate.full
    asked = []
    monkeypatch.setattr(QMessageBox, "exec", lambda box: asked.append(box.text()) or 0)
    win._which_snapshot(str(run), {"step": kept, "val_loss": 5.0})
    assert f"its latest weights are from step {kept} (step-{last} is missing)" in asked[0]
    win.statusBar().showMessage("writing the merged export to x…", 10000)
    win._error("cannot write x")  # the status bar said "writing" 10 s after the error
    assert win.statusBar().currentMessage() == ""


def test_deleting_the_run_the_playground_generates_from_leaves_its_model_box(win, qtbot,
                                                                            tiny_run, tmp_path):
    """Delete mid-generation swapped the locked Model box to another run (the deleted one's text
    streamed on; the next Generate used the other run); after the generation the box is empty."""
    import shutil

    run = tmp_path / "runs" / "doomed"
    shutil.copytree(tiny_run, run)
    pg = win.playground
    pg.set_source(str(run))
    pg.max_tokens.setValue(100000)
    pg.stop_at_end.setChecked(False)
    pg.backend.setCurrentText("cpu")
    pg.generate()
    qtbot.waitUntil(lambda: pg._made_with == str(run), timeout=RUN_TIMEOUT)
    shutil.rmtree(run)
    win._run_deleted(str(run))
    assert pg.source.currentText() == str(run)
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        pg.stop()
    assert "doomed" in done.args[0] and pg.source.currentText() == ""
    assert pg.status.text() == done.args[0]
    assert str(run) not in [pg.source.itemText(i) for i in range(pg.source.count())]
    other = tmp_path / "runs" / "other"
    shutil.copytree(tiny_run, other)
    pg.set_source(tiny_run)
    pg.generate()  # ... and a run opened while generating is taken after it, not before
    pg.set_source(str(other))
    assert pg.source.currentText() == tiny_run
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT):
        pg.stop()
    assert pg.source.currentText() == str(other)


def test_playground_stop_while_the_prompt_is_read_says_so(win, qtbot, monkeypatch):
    """A 200,000-token prompt was read in one call (7-12 s): Stop then changed nothing on screen
    until it ended. It says it is stopping, and the generation then stops at once (the prompt
    is read in pieces, so a real one stops at the next piece: the test below)."""
    import threading

    release = threading.Event()

    def generate_ids(ids, sampling):  # noqa: ANN001, ANN202
        release.wait(30)  # the prompt's reading
        yield from [104] * sampling.max_new_tokens

    fake_model(monkeypatch, generate_ids)
    pg = win.playground
    pg.set_source("m")
    pg.prompt.setPlainText("a long prompt")
    pg.generate()
    qtbot.waitUntil(lambda: pg.status.text().startswith("reading the prompt"), timeout=10_000)
    pg.stop()
    assert pg.status.text() == "stopping…"
    assert not pg.stop_btn.isEnabled()  # (pressed: it stayed on)
    qtbot.wait(600)  # a prompt read for 0.5 s or more is said
    with qtbot.waitSignal(pg.finished, timeout=10_000):
        release.set()
    said = pg.status.text()
    assert said.startswith("1 token; the prompt (13 tokens) read in ") and "stopped" in said, said
    assert "/s)" not in said  # (a rate of one token: "1 token in 11.00 s (0/s)")


def test_the_playground_writes_what_generate_writes(tiny_run, monkeypatch):
    """The Playground read the prompt alone where ``generate`` (the CLI, the previews, the model
    card's samples) reads it after an end-of-text id, as every training document starts: the
    same model, prompt and seed gave other text in the window ("The state space models used..."
    against "The Lighthouse Keeper's Notebook..."). Both read the same ids now, so they write
    the same text."""
    from dataclasses import replace as _replace

    import engine
    from app.workers import GenerateWorker
    from engine.lm import MambaLM

    read: list[list[int]] = []
    real = MambaLM.generate_ids

    def generate_ids(self, ids, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        read.append([int(i) for i in ids])
        return real(self, ids, *a, **k)

    monkeypatch.setattr(MambaLM, "generate_ids", generate_ids)
    lm = engine.load_model(tiny_run)
    for temperature in (0.0, 0.9):
        cfg = _replace(engine.GENERATION_DEFAULTS, max_new_tokens=24, seed=3,
                       temperature=temperature, stop_at_eos=False)
        w = GenerateWorker(tiny_run, "The ", cfg, "cpu")
        pieces: list[str] = []
        w.piece.connect(pieces.append)
        w.run()
        assert "".join(pieces) == "".join(lm.generate("The ", cfg)), temperature
        window, cli = read[-2:]
        assert window == cli == [lm.tokenizer.eos_id, *lm.tokenizer.encode("The ")]


def test_playground_stop_while_a_long_prompt_is_read_stops_at_the_next_piece(tiny_run,
                                                                            monkeypatch):
    """The prompt is read PROMPT_PIECE tokens at a time (8 here): a Stop during its reading
    ends it at the next piece, with nothing generated, and says how much was read."""
    from dataclasses import replace as _replace

    import engine
    import engine.lm
    from app.workers import GenerateWorker
    from engine.inference import CpuStepper

    monkeypatch.setattr(engine.lm, "PROMPT_PIECE", 8)
    cfg = _replace(engine.GENERATION_DEFAULTS, max_new_tokens=3, seed=1)
    w = GenerateWorker(tiny_run, "hello world " * 20, cfg, "cpu")
    feed = CpuStepper.feed

    def feed_then_stop(self, ids):  # noqa: ANN001, ANN202
        w.stop()  # (pressed while the second piece is read)
        return feed(self, ids)

    monkeypatch.setattr(CpuStepper, "feed", feed_then_stop)
    done: list[str] = []
    pieces: list[str] = []
    w.done.connect(done.append)
    w.piece.connect(pieces.append)
    w.run()
    assert done == ["stopped while reading the prompt (15 of 240 tokens read)"], done  # (16
    # ids read: the end-of-text id the prompt is read after, and 15 of its own)
    assert pieces == []


def test_the_playground_lists_runs_made_elsewhere_when_shown(win, qtbot, tiny_run):
    """Runs another process made under the runs folder were missing from the Playground's Model
    list (7 listed of 14) until a window run ended: it is read again as the tab is shown."""
    import shutil

    win.tabs.setCurrentIndex(0)
    made = Path(win.playground.runs_root) / "made-by-the-cli"
    shutil.copytree(tiny_run, made)
    items = lambda: [win.playground.source.itemText(i)  # noqa: E731
                     for i in range(win.playground.source.count())]
    assert str(made) not in items()
    win.playground.set_source(tiny_run)  # the model of the last generation, still chosen
    win.playground.status.setText("12 tokens in 0.10 s (120/s), reached the length — CPU step")
    win.tabs.setCurrentWidget(win.playground)
    assert str(made) in items()
    assert win.playground.status.text().startswith("12 tokens")  # the last generation's line


def test_playground_stop_while_the_model_loads_reads_no_prompt(monkeypatch):
    """Stop during "loading the model…" then read the whole prompt (7-12 s for 200,000
    tokens) before it stopped."""
    import engine
    from app.workers import GenerateWorker

    read: list[int] = []

    def generate_ids(ids, sampling):  # noqa: ANN001, ANN202
        read.append(len(ids))
        yield 104

    fake_model(monkeypatch, generate_ids)
    w = GenerateWorker("m", "a long prompt", engine.SamplingConfig(max_new_tokens=5), "cpu")
    done: list[str] = []
    w.done.connect(done.append)
    w.stop()  # (pressed while the model loaded)
    w.run()
    assert done == ["stopped before generating"] and read == []


def test_lora_target_tooltips(win, tmp_path):
    """dt_proj's box says PEFT on transformers 5.x skips it un-merged; "not with WSLA" goes
    once WSLA is unticked."""
    win.init_dir = str(tmp_path)
    win._update_next()
    win.train.lora.setChecked(True)
    box = win.train.targets["dt_proj"]
    assert "PEFT on transformers 5.x skips this one un-merged" in box.toolTip()
    assert "skips" not in win.train.targets["x_proj"].toolTip()
    win.train.wsla.setChecked(True)
    assert box.toolTip().endswith("not with WSLA: WSLA + LoRA trains x_proj only")
    win.train.wsla.setChecked(False)
    assert "WSLA" not in box.toolTip() and box.isEnabled()


def test_an_exception_that_escapes_a_slot_is_said_in_the_window(win, monkeypatch, capsys):
    """A bug that raised in a slot (File > Open settings on a path through a link loop) went to
    the terminal only: the window did nothing and said nothing."""
    import sys

    from PySide6.QtWidgets import QMessageBox

    from app.__main__ import _say_unexpected_errors

    monkeypatch.setattr(sys, "excepthook", lambda *a: print("terminal:", a[1], file=sys.stderr))
    monkeypatch.setattr(QMessageBox, "open", lambda self: None)
    _say_unexpected_errors(win)
    sys.excepthook(RuntimeError, RuntimeError("Symlink loop from '/x/loop'"), None)
    assert win.errors[-1] == ("Unexpected error: RuntimeError: Symlink loop from '/x/loop'. This "
                              "is a bug: the details were printed in the terminal that started "
                              "Mamba Studio; please report them.")
    assert "terminal: Symlink loop" in capsys.readouterr().err
    n = len(win.errors)
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)  # Ctrl-C has its own handling
    assert len(win.errors) == n


def _runs_listing(win, qtbot, root: Path):  # noqa: ANN202
    """The Runs tab showing ``root``'s runs, and the folders its Open is asked for."""
    runs = win.runs
    runs.root = str(root)
    runs.refresh()
    qtbot.waitUntil(lambda: runs.table.rowCount() >= 1, timeout=RUN_TIMEOUT)
    opened: list[str] = []
    runs.open_requested.connect(opened.append)
    return runs, opened


def test_return_on_a_run_in_the_runs_list_opens_it(win, qtbot, tiny_run):
    """Return on a selected row did nothing (only a double click opened it): a keyboard user had
    to Tab to Open."""
    from PySide6.QtCore import Qt

    runs, opened = _runs_listing(win, qtbot, Path(tiny_run).parent)
    runs.table.selectRow(0)
    runs.table.setCurrentCell(0, 0)
    qtbot.keyClick(runs.table, Qt.Key.Key_Return)
    assert opened == [runs.selected()], opened
    qtbot.keyClick(runs.table, Qt.Key.Key_Enter)  # the keypad's Enter opens it too
    assert opened == [runs.selected()] * 2, opened
    opened.clear()
    cell = runs.table.visualRect(runs.table.model().index(0, 0)).center()
    qtbot.mouseClick(runs.table.viewport(), Qt.MouseButton.LeftButton, pos=cell)
    assert opened == []  # one click selects, never opens (whatever the desktop's setting)


def test_return_on_the_focused_unselected_run_opens_it(win, qtbot, tiny_run):
    """Tabbed to, the Runs list's row had the focus frame but no selection: Return said "Select
    a run first." (only Space, then Return, opened it)."""
    from PySide6.QtCore import QItemSelectionModel, Qt

    runs, opened = _runs_listing(win, qtbot, Path(tiny_run).parent)
    runs.table.clearSelection()
    runs.table.selectionModel().setCurrentIndex(runs.table.model().index(0, 0),
                                                QItemSelectionModel.SelectionFlag.NoUpdate)
    assert runs.selected() is None
    qtbot.keyClick(runs.table, Qt.Key.Key_Return)
    assert opened == [str(runs.runs[0].path)], opened


def test_a_broken_runs_row_offers_open_and_delete_only(win, qtbot, tmp_path):
    """A run killed while it was prepared (a lock, no run.json) is listed as broken; its row
    offered Continue, Compare and the exports, each of which could only fail."""
    root = tmp_path / "own"
    (root / "half").mkdir(parents=True)
    (root / "half" / "lock").write_text("")
    runs = win.runs
    runs.root = str(root)
    runs.refresh()
    qtbot.waitUntil(lambda: runs.table.rowCount() == 1, timeout=RUN_TIMEOUT)
    runs.table.selectRow(0)
    assert runs.runs[0].status == "broken"
    on = {name for name, b in runs.buttons.items() if b.isEnabled()}
    assert on == {"Open", "Delete…", "Refresh"}, on
    tip = runs.buttons["Continue"].toolTip()
    assert tip.startswith("half is broken: killed while it was being prepared"), tip
    win.choose_continue(str(root / "half"))  # (from File > Continue the same): said once,
    assert win.errors[-1] == (  # in the window's words
        f"cannot continue {root / 'half'}: a run ended while it was being prepared, before its "
        "first save; nothing of it can be resumed: delete it in the Runs tab and Start the run "
        "again"), win.errors[-1]
    runs.table.clearSelection()  # no row: each row button off, with its own tooltip back
    assert not runs.buttons["Delete…"].isEnabled()
    assert runs.buttons["Continue"].toolTip().startswith("The next Start continues this run")


def test_ctrl_g_shows_the_playground_it_generates_in(win, qtbot, monkeypatch):
    """From the Train tab, Generate in the Playground (Ctrl+G) generated in the hidden tab."""
    calls: list[int] = []
    monkeypatch.setattr(win.playground, "generate", lambda: calls.append(1))
    win.tabs.setCurrentIndex(0)
    menus = [a.menu() for a in win.menuBar().actions() if a.menu() is not None]
    act = next(a for m in menus for a in m.actions()
               if a.text().replace("&", "") == "Generate in the Playground")
    act.trigger()
    assert win.tabs.currentWidget() is win.playground and calls == [1]
