"""File > Export acts on the run the window shows (opened, training, or last finished; a run
overlaid with Compare is not it), names that run and its step in the save dialog, and offers GGUF
beside the merged model and the PEFT adapter."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtWidgets import QFileDialog, QMessageBox

import engine
from engine import LoRAConfig
from engine import run as runapi
from engine.trainer import TrainConfig

from .helpers import RUN_TIMEOUT, close_window, small_window, train_until_idle

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
GGUF_ITEM = "Export model (GGUF, for llama.cpp/Ollama/LM Studio)…"


def _run(root: Path, steps: int, lora: bool = False, targets: tuple[str, ...] = ("x_proj",)
         ) -> str:
    """A closed run trained for ``steps`` optimizer steps (0: a snapshot of the initial weights),
    with a LoRA adapter on ``targets`` if ``lora``."""
    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(
        batch_size=4, seq_len=64, max_steps=max(steps, 1),
        lora=LoRAConfig(targets) if lora else None))
    with runapi.start(spec, [SAMPLE], root=root) as run:
        if steps:
            run.train()
        return str(run.folder)


def _action(w, text: str):
    file_menu = w.menuBar().actions()[0].menu()
    found = [a for a in file_menu.actions() if a.text().replace("&", "") == text]  # (mnemonics)
    assert found, [a.text() for a in file_menu.actions()]
    return found[0]


def _fake_save(monkeypatch, path: Path) -> list[tuple]:
    """QFileDialog.getSaveFileName answers ``path``; returns the calls' (caption, default)."""
    calls: list[tuple] = []

    def fake(parent, caption="", directory="", *a, **k):
        calls.append((caption, directory))
        return str(path), ""

    monkeypatch.setattr(QFileDialog, "getSaveFileName", fake)
    return calls


def test_export_menu_exports_the_opened_run_not_the_last_trained_or_compared(
        win, qtbot, tmp_path, monkeypatch):
    """The walk-through: a run trained (then stopped) in the window, another opened, a third
    compared; File > Export model (merged) wrote the stopped run and never named its source."""
    last = train_until_idle(qtbot, win, max_steps=1)  # the window's last run: step 1
    opened = _run(tmp_path / "other", 3)
    compared = _run(tmp_path / "other", 2)
    win.open_run_view(opened)
    win.compare_run(compared)
    calls = _fake_save(monkeypatch, tmp_path / "merged")
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "3 optimizer steps" in card and Path(last).name not in card
    caption = calls[0][0]
    assert f"run {Path(opened).name} (step 3)" in caption, caption
    assert Path(calls[0][1]).name == f"{Path(opened).name}-merged"
    # a first export is offered in the user's folders, not in the hidden runs folder (an export
    # left there could not be found from the window)
    assert Path(calls[0][1]).parent in (Path.home(), Path.home() / "Documents")
    assert Path(opened).name in win.log.toPlainText().splitlines()[-1]

    assert not _action(win, "Export LoRA adapter (PEFT)…").isEnabled()  # a run without LoRA


def test_export_items_are_off_until_a_run_is_shown(qtbot, tmp_path):
    w = small_window(qtbot, tmp_path / "runs")
    try:
        items = ["Export model (merged)…", "Export LoRA adapter (PEFT)…", GGUF_ITEM]
        assert not any(_action(w, t).isEnabled() for t in items)
        folder = _run(tmp_path / "runs", 0, lora=True)
        w.open_run_view(folder)
        assert all(_action(w, t).isEnabled() for t in items)
    finally:
        close_window(qtbot, w)


def test_gguf_export_from_the_menu_writes_the_shown_run_and_asks_before_replacing(
        win, qtbot, tmp_path, monkeypatch):
    import gguf

    import engine

    other = _run(tmp_path / "other", 1)
    opened = _run(tmp_path / "other", 2)
    win.open_run_view(other)
    win.open_run_view(opened)  # the last one opened is the one shown
    out = tmp_path / "out" / "model"  # no suffix typed: .gguf is added
    calls = _fake_save(monkeypatch, out)
    _action(win, GGUF_ITEM).trigger()
    target = out.with_suffix(".gguf")
    qtbot.waitUntil(lambda: bool(win.errors) or "gguf written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    caption, default = calls[0]
    assert f"run {Path(opened).name} (step 2)" in caption and "GGUF" in caption, caption
    assert Path(default).name == f"{Path(opened).name}.gguf"
    emb = {t.name: t for t in gguf.GGUFReader(str(target)).tensors}["token_embd.weight"]
    want = engine.load_model(opened).params["backbone.embeddings.weight"]
    assert np.allclose(np.asarray(emb.data).reshape(want.shape), want)
    first = target.stat().st_mtime_ns

    answers = [QMessageBox.StandardButton.No]
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _p, _t, text, *a, **k: (asked.append(text), answers.pop(0))[1])
    _action(win, GGUF_ITEM).trigger()
    assert asked and str(target) in asked[-1]
    assert target.stat().st_mtime_ns == first  # declined: untouched
    answers.append(QMessageBox.StandardButton.Yes)
    n = win.log.toPlainText().count("gguf written")
    _action(win, GGUF_ITEM).trigger()
    qtbot.waitUntil(lambda: win.log.toPlainText().count("gguf written") == n + 1,
                    timeout=RUN_TIMEOUT)
    assert target.stat().st_mtime_ns != first and not win.errors

    bad = tmp_path / "out"  # a folder, not a file: one line, from the same path as the others
    win.export("gguf", str(bad), opened)
    qtbot.waitUntil(lambda: bool(win.errors), timeout=RUN_TIMEOUT)
    assert str(bad) in win.errors[-1] and "\n" not in win.errors[-1]


def test_export_adapter_is_off_for_a_run_without_lora(win, tmp_path):
    """Export adapter… was on for a full run and complained only after the destination was
    picked."""
    full, lora = _run(tmp_path / "runs", 0), _run(tmp_path / "runs", 0, lora=True)
    win.runs.refresh()
    button = win.runs.buttons["Export adapter…"]
    win.runs.select(full)
    assert not button.isEnabled() and "no LoRA adapter" in button.toolTip()
    win.open_run_view(full)
    item = _action(win, "Export LoRA adapter (PEFT)…")
    assert not item.isEnabled() and "no LoRA adapter" in item.toolTip()
    assert _action(win, "Export model (merged)…").isEnabled()
    win.runs.select(lora)
    assert button.isEnabled()


def test_the_runs_tab_exports_the_selected_run_as_a_folder_or_a_gguf_file(win, tmp_path,
                                                                         monkeypatch):
    """The Runs tab's Export model… wrote only the merged folder: a GGUF file came only from the
    File menu, for the run shown, not the one selected. Its menu offers both."""
    titles = _fake_save(monkeypatch, "")  # each save dialog cancelled
    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    win.runs.select(folder)
    asked: list[tuple[str, str]] = []
    win.runs.export_requested.connect(lambda f, k: asked.append((f, k)))
    menu = win.runs.buttons["Export model…"].menu()
    assert menu is not None
    acts = menu.actions()
    assert [a.text() for a in acts] == ["Model folder (transformers; any LoRA merged)…",
                                        "GGUF file (llama.cpp, Ollama, LM Studio)…"]
    for a in acts:
        a.trigger()
    assert asked == [(folder, "merged"), (folder, "gguf")]
    name = Path(folder).name
    assert [t[0] for t in titles] == [f"Export run {name} (step 0) as a merged model into a new "
                                      f"folder", f"Export run {name} (step 0) as a GGUF file "
                                      "(llama.cpp)"], titles


def test_export_adapter_of_a_run_whose_run_json_cannot_be_read_says_what_is_wrong(win, tmp_path):
    """A run whose run.json is damaged: Export adapter… was off, saying the run "trained all
    its weights". The run is listed broken: the button says what is wrong with it, and its
    way on (its snapshots still load)."""
    from app.panels.runs_panel import adapter_problem

    folder = _run(tmp_path / "runs", 0, lora=True)
    (Path(folder) / "run.json").write_text("{ not json")
    win.runs.refresh()
    win.runs.select(folder)
    assert adapter_problem(folder) is None
    button = win.runs.buttons["Export adapter…"]
    assert not button.isEnabled() and "no LoRA adapter" not in button.toolTip()
    assert "run.json: corrupt JSON" in button.toolTip() and "its snapshots still load" in \
        button.toolTip(), button.toolTip()


def test_export_adapter_is_off_and_says_why_before_a_folder_is_asked(win, tmp_path):
    """A LoRA run on targets PEFT cannot apply un-merged: File > Export LoRA adapter and the
    Runs tab's Export adapter… were on, and failed only after the folder was chosen, naming a
    command-line export; with no run selected the button was on and said "Select a run
    first." when pressed."""
    folder = _run(tmp_path / "runs", 0, lora=True, targets=("in_proj", "conv1d", "out_proj"))
    win.runs.refresh()
    button = win.runs.buttons["Export adapter…"]
    win.runs.table.clearSelection()
    assert not button.isEnabled() and button.toolTip() == "Select a run first."
    assert not any(win.runs.buttons[b].isEnabled() for b in ("Open", "Continue", "Compare",
                                                              "Export model…", "Delete…"))
    assert win.runs.buttons["Refresh"].isEnabled()
    win.runs.select(folder)
    assert not button.isEnabled()
    assert "on conv1d, out_proj un-merged" in button.toolTip()
    assert "Export model… (merged)" in button.toolTip() and "python -m" not in button.toolTip()
    win.open_run_view(folder)
    act = _action(win, "Export LoRA adapter (PEFT)…")
    assert not act.isEnabled() and act.toolTip() == button.toolTip()
    merged = _action(win, "Export model (merged)…")  # (no "&" of the item's Alt letter)
    assert merged.toolTip() == f"Export model (merged) of run {Path(folder).name}", merged.toolTip()

def test_delete_of_a_training_run_is_refused_before_asking(win, tmp_path, monkeypatch):
    """Delete… on the running run asked to confirm, then refused."""
    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: asked.append(a[2]))
    said: list[str] = []
    win.runs.message.connect(said.append)
    win.runs.busy_folder = folder  # as while it trains in this window
    win.runs.select(folder)
    win.runs._delete_selected()
    assert asked == [] and "is training" in said[-1] and Path(folder).exists()


def test_enter_in_the_delete_question_keeps_the_run(win, qtbot, tmp_path):
    """The real question box: Enter (its default button) deleted the run and all its snapshots;
    only an explicit Yes does."""
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    win.runs.select(folder)
    seen: list[str] = []

    def answer(key: Qt.Key) -> None:
        box = QApplication.activeModalWidget()
        if box is None:  # not shown yet
            QTimer.singleShot(20, lambda: answer(key))
            return
        seen.append(box.text())
        if key == Qt.Key.Key_Y:
            box.button(QMessageBox.StandardButton.Yes).click()
        else:
            QTest.keyClick(box, key)

    QTimer.singleShot(0, lambda: answer(Qt.Key.Key_Return))
    win.runs._delete_selected()
    assert seen and "all its snapshots" in seen[0]
    assert Path(folder).exists()
    QTimer.singleShot(0, lambda: answer(Qt.Key.Key_Y))
    win.runs._delete_selected()
    assert len(seen) == 2 and not Path(folder).exists()


def test_delete_of_a_paused_run_says_paused_not_training(win, tmp_path):
    """Delete… on a run paused in this window said it "is training"."""
    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    said: list[str] = []
    win.runs.message.connect(said.append)
    win.runs.busy_folder = folder
    win.runs.update_live(folder, 0, "paused")  # as the window does on Pause
    assert not win.runs.delete_run(folder)
    assert "is paused" in said[-1] and "is training" not in said[-1] and Path(folder).exists()


def test_a_delete_that_fails_says_so_and_keeps_the_row(win, tmp_path, monkeypatch):
    """A run folder that could not be removed was reported as "deleted" (errors were ignored)."""
    import shutil

    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    said: list[str] = []
    gone: list[str] = []
    win.runs.message.connect(said.append)
    win.runs.deleted.connect(gone.append)

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(Path(path) / "run.json"))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    assert not win.runs.delete_run(folder)
    assert said[-1].startswith("could not delete") and "Permission denied" in said[-1]
    assert gone == [] and any(str(r.path) == folder for r in win.runs.runs)


def test_a_delete_that_fails_half_way_lists_what_is_left(win, tmp_path, monkeypatch):
    """The message says "what is left is listed again", but a run whose run.json was already
    removed when the delete failed kept its old row (its status and steps, as before)."""
    folder = _run(tmp_path / "runs", 1)
    win.runs.refresh()
    row = next(r for r in win.runs.runs if str(r.path) == folder)
    assert row.status != "broken"

    def half(path, keep_others=False):  # noqa: ANN001, ANN202
        run_json = Path(path) / "run.json"
        run_json.unlink()
        raise PermissionError(13, "Permission denied", str(Path(path) / "snapshots"))

    monkeypatch.setattr(engine, "delete_run", half)
    assert not win.runs.delete_run(folder)
    left = sorted((str(r.path), r.status) for r in engine.list_runs(tmp_path / "runs"))
    assert (folder, row.status) not in left  # what is left is not the run it was
    assert sorted((str(r.path), r.status) for r in win.runs.runs) == left

def test_export_offers_the_best_snapshot_when_the_latest_weights_are_worse(
        win, qtbot, tmp_path, monkeypatch):
    """The walk-through exported the latest weights (held-out 4.75 at step 440) with no word of
    the best ones (1.98 at step 110): a run whose best snapshot is not its latest now asks which,
    and the next export's dialog starts in the folder the last one went to."""
    import json

    spec = runapi.RunSpec(preset="tiny", autosave_steps=1, train=TrainConfig(
        batch_size=4, seq_len=64, max_steps=3, eval_every=1))
    with runapi.start(spec, [SAMPLE], root=tmp_path / "other") as run:
        run.train()
        folder = run.folder
    snaps = sorted(p.name for p in (folder / "snapshots").iterdir())
    assert len(snaps) >= 2, snaps
    (folder / "best.json").write_text(json.dumps({"snapshot": snaps[0], "step": 1,
                                                  "val_loss": 1.5}))
    win.open_run_view(str(folder))
    asked: list[dict] = []
    monkeypatch.setattr(type(win), "_which_snapshot",
                        lambda self, f, best, training=None: asked.append(best) or "best")
    calls = _fake_save(monkeypatch, tmp_path / "exports" / "best-merged")
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert asked and asked[0]["step"] == 1
    assert "(best, step 1)" in calls[0][0] and Path(calls[0][1]).name == f"{folder.name}-step-1-merged"
    card = (tmp_path / "exports" / "best-merged" / "README.md").read_text()
    assert "\n- 1 optimizer step, batch " in card, card  # (it said "1 optimizer steps")
    assert f"(from run {folder.name}, snapshot {snaps[0]})" in win.log.toPlainText()  # (it
    # said "from run step-1": which run, and that it was a snapshot, went unsaid)
    calls = _fake_save(monkeypatch, tmp_path / "exports" / "latest.gguf")
    monkeypatch.setattr(type(win), "_which_snapshot", lambda self, f, best, training=None: "latest")
    _action(win, GGUF_ITEM).trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "gguf written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert Path(calls[0][1]).parent == tmp_path / "exports"  # where the last export went
    assert "(step 3)" in calls[0][0]


def test_export_of_the_training_run_asks_best_or_current_and_reads_the_snapshot_between_steps(
        win, qtbot, tmp_path, monkeypatch):
    """File > Export on the run that trains wrote its current (overfit) weights without asking,
    where the same run, stopped, was asked "Best (step N) / Latest (step M)"."""
    import engine

    win.train.epochs.setValue(200)
    win.train.eval_every.setValue(10**6)  # no saves while it trains: step-0 stays on disk
    win.start_training()
    qtbot.waitUntil(lambda: win.current_run is not None and len(win.plots.steps) >= 2,
                    timeout=RUN_TIMEOUT)
    folder = Path(win.current_run)
    snap0 = folder / "snapshots" / "step-0"
    assert snap0.is_dir()
    nows: list[int | None] = []
    monkeypatch.setattr(engine, "best_if_not_latest", lambda f, now=None: nows.append(now) or (
        snap0, {"snapshot": "step-0", "step": 0, "val_loss": 1.0}))
    asked: list[str | None] = []
    monkeypatch.setattr(type(win), "_which_snapshot",
                        lambda self, f, best, training=None: asked.append(training) or "best")
    _fake_save(monkeypatch, tmp_path / "best-merged")
    from app import export_flow

    def off_thread(*a):  # noqa: ANN002, ANN202
        raise AssertionError("the snapshot was read on the thread pool while the run trains")

    monkeypatch.setattr(export_flow, "export_run", off_thread)  # (an autosave could prune it
    # mid-read): only the training worker, between two steps, may write this export
    _action(win, "Export model (merged)…").trigger()
    assert asked and asked[0] is not None and asked[0] == nows[0]  # the live step, asked about
    assert isinstance(nows[0], int) and nows[0] >= 2  # compared with the live step, not latest.json
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert "snapshot step-0" in win.log.toPlainText()
    card = (tmp_path / "best-merged" / "README.md").read_text()
    assert "0 optimizer steps" in card, card


def test_export_dialog_suggests_a_free_name_and_never_offers_to_replace_a_users_folder(
        win, qtbot, tmp_path, monkeypatch):
    """A second export was suggested the first one's folder name (the dialog then opened inside
    it, with Save off); a folder holding the user's notes.txt was offered as "the earlier
    export" to replace, and the refusal then named a command-line flag."""
    opened = _run(tmp_path / "other", 1)
    win.open_run_view(opened)
    first = tmp_path / "exports" / f"{Path(opened).name}-merged"
    calls = _fake_save(monkeypatch, first)
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    calls = _fake_save(monkeypatch, tmp_path / "mine")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or
                        QMessageBox.StandardButton.Yes)
    _action(win, "Export model (merged)…").trigger()
    assert Path(calls[0][1]) == first.with_name(first.name + "-2")  # not the folder made above
    assert not asked and win.errors, (asked, win.errors)
    assert "holds files an export does not write (notes.txt); choose a new folder name" in \
        win.errors[-1] and "--force" not in win.errors[-1]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_the_question_for_a_training_run_names_no_step_the_export_will_not_have(win, tmp_path):
    """While a run trains, "Current (step 193)" exported step 298: the weights move on until the
    export runs between two steps after the save dialog. The question says when they are taken."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    folder = _run(tmp_path / "runs", 0)
    seen: list[tuple[str, list[str]]] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        if box is None:
            QTimer.singleShot(20, answer)
            return
        seen.append((box.text(), [b.text() for b in box.buttons()]))
        box.reject()

    QTimer.singleShot(0, answer)
    assert win._which_snapshot(folder, {"step": 1, "val_loss": 1.5}, training=193) is None
    text, buttons = seen[0]
    assert "Best (step 1)" in buttons and "Current (at Save)" in buttons
    assert "when you press Save" in text
    QTimer.singleShot(0, answer)
    win._which_snapshot(folder, {"step": 1, "val_loss": 1.5})  # a closed run: its latest step
    assert "Latest (step 0)" in seen[1][1]


def test_enter_in_the_best_or_latest_question_takes_the_best_snapshot(win, tmp_path):
    """The question is there because the latest, overfit weights were exported without a
    word; Enter pressed on reflex must not take them again."""
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    folder = _run(tmp_path / "runs", 0)
    defaults: list[str] = []

    def enter() -> None:
        box = QApplication.activeModalWidget()
        if box is None:  # not shown yet
            QTimer.singleShot(20, enter)
            return
        defaults.append(box.defaultButton().text())
        QTest.keyClick(box, Qt.Key.Key_Return)
        if box.isVisible():  # (Enter did nothing: the test must not hang)
            box.reject()

    QTimer.singleShot(0, enter)
    assert win._which_snapshot(folder, {"step": 1, "val_loss": 1.5}) == "best"
    QTimer.singleShot(0, enter)
    assert win._which_snapshot(folder, {"step": 1, "val_loss": 1.5}, training=193) == "best"
    assert defaults == ["Best (step 1)", "Best (step 1)"]


def test_save_on_an_earlier_exports_own_name_replaces_it_after_asking(
        win, qtbot, tmp_path, monkeypatch):
    """Picking an earlier export folder in the save dialog (Qt opens it and suggests its own
    name, so the dialog answers X/X) wrote a second export nested inside the first, without a
    word, and X looked unchanged."""
    opened = _run(tmp_path / "other", 1)
    win.open_run_view(opened)
    first = tmp_path / "exports" / f"{Path(opened).name}-merged"
    _fake_save(monkeypatch, first)
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    (first / "README.md").write_text("the earlier export's card")
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or
                        QMessageBox.StandardButton.Yes)
    _fake_save(monkeypatch, first / first.name)
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or win.log.toPlainText().count("merged written") == 2,
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert asked == [f"{first} holds an earlier export. Replace it?"]
    assert not (first / first.name).exists()  # no export inside the export
    assert (first / "README.md").read_text() != "the earlier export's card"  # replaced
    assert f"merged written to {first} " in win.log.toPlainText()


def test_deleting_the_run_chosen_for_the_next_start_forgets_it(win, tmp_path):
    """A run chosen for Continue (or opened as the next run's starting weights) and then
    deleted in the Runs tab stayed chosen: the Next Start line still said "continues run X",
    and Start then failed on a folder that was gone."""
    cont, init = _run(tmp_path / "runs", 0), _run(tmp_path / "runs", 0)
    win.runs.refresh()
    win.choose_continue(cont)
    assert win.continue_dir == cont and "continues run" in win.next_label.full
    assert win.runs.delete_run(cont)
    assert win.continue_dir is None
    assert "continues run" not in win.next_label.full
    assert win.next_label.full.startswith("Next Start: a new run")
    win.init_dir = init  # as File > Open model of that run does
    win._update_next()
    assert win.runs.delete_run(init)
    assert win.init_dir is None
    assert win.next_label.full.startswith("Next Start: a new run")


def test_export_of_a_run_deleted_outside_the_window_is_refused_before_the_dialog(
        win, tmp_path, monkeypatch):
    """The run shown was deleted from outside (a shell, another window): Export still opened
    the save dialog, and only after a destination was picked came an engine error."""
    import shutil

    folder = _run(tmp_path / "other", 0)
    win.open_run_view(folder)
    calls = _fake_save(monkeypatch, tmp_path / "exports" / "gone-merged")
    shutil.rmtree(folder)
    _action(win, "Export model (merged)…").trigger()
    assert calls == []
    assert win.errors[-1] == f"cannot export {folder}: it is gone"
    assert not (tmp_path / "exports").exists()


def test_an_exports_warnings_reach_the_log(win, qtbot, tmp_path, monkeypatch):
    """What the exporter warns about (a model card with no held-out score, PEFT limits) never
    reached the Log: the export looked clean."""
    from app import export_flow

    folder = _run(tmp_path / "other", 0)
    monkeypatch.setattr(export_flow, "export_run",
                        lambda *a: ["the held-out set was not scored"])
    win.export("merged", str(tmp_path / "out"), folder)
    qtbot.waitUntil(lambda: "merged written" in win.log.toPlainText(), timeout=RUN_TIMEOUT)
    assert "warning: the held-out set was not scored" in win.log.toPlainText()

def test_delete_keeps_a_users_files_in_the_run_folder_and_says_so(win, tmp_path, monkeypatch):
    """Delete removed the whole folder with shutil.rmtree, a user's notes in it too (what the
    CLI's --force never deletes); then it refused and said to move them out by hand: it asks
    to delete the run and keep them, naming them, and No keeps everything."""
    from app.panels import runs_panel

    folder = _run(tmp_path / "runs", 0)
    (Path(folder) / "notes.md").write_text("mine")
    win.runs.refresh()
    said: list[str] = []
    win.runs.message.connect(said.append)
    asked: list[str] = []
    answers = [False, True]
    monkeypatch.setattr(runs_panel, "confirm", lambda *a: asked.append(a[2]) or answers.pop(0))
    win.runs.select(folder)
    win.runs._delete_selected()  # the Delete… button: No
    assert "notes.md" in asked[-1] and "keep those files" in asked[-1]
    assert (Path(folder) / engine.runformat.RUN_JSON).is_file()  # declined: all kept
    assert not win.runs.delete_run(folder)  # without keeping them: refused, named
    assert "notes.md" in said[-1] and (Path(folder) / "notes.md").read_text() == "mine"
    win.runs._delete_selected()  # Yes
    assert sorted(p.name for p in Path(folder).iterdir()) == ["notes.md"]
    assert (Path(folder) / "notes.md").read_text() == "mine"
    assert said[-1] == f"deleted the run in {folder}; kept notes.md", said[-1]
    assert not any(str(r.path) == folder for r in win.runs.runs)


def test_delete_is_refused_while_another_process_trains_the_run(win, tmp_path):
    import fcntl

    folder = _run(tmp_path / "runs", 0)
    win.runs.refresh()
    said: list[str] = []
    win.runs.message.connect(said.append)
    fd = os.open(Path(folder) / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a training process holds
    try:
        assert not win.runs.delete_run(folder)
    finally:
        os.close(fd)
    assert "training in another process" in said[-1] and Path(folder).is_dir()


def test_engine_advice_about_cli_flags_is_said_in_the_windows_terms(tmp_path, monkeypatch):
    """Continue of a run a CLI process trains said "... or train into another --out", and a
    read-only runs folder "choose another --out": the window has no --out."""
    import fcntl

    from app.words import in_window_terms
    from engine import runformat as rf

    folder = Path(_run(tmp_path / "runs", 0))
    fd = os.open(folder / rf.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(engine.CheckpointError) as busy:
            rf.RunLock(folder).acquire()
    finally:
        os.close(fd)
    (tmp_path / "file").write_text("x")
    with pytest.raises(engine.CheckpointError) as not_dir:
        rf.check_out_dir(tmp_path / "file" / "run", 0)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: type("U", (), {"free": 0})())
    with pytest.raises(engine.CheckpointError) as full:
        rf.check_out_dir(tmp_path / "ok", 1 << 20)
    for exc in (busy, not_dir, full):
        msg = str(exc.value)
        assert "--out" in msg  # the engine's (CLI) advice ...
        assert "--out" not in in_window_terms(msg), in_window_terms(msg)  # ... said for the window
    (folder / rf.IDS).write_bytes(b"garbage")  # token ids damaged: "... with --init X/step-N"
    with pytest.raises(engine.CheckpointError) as damaged:
        rf.read_data(folder)
    said = in_window_terms(str(damaged.value))
    assert "--init" in str(damaged.value) and "--init" not in said, said
    assert f"open {folder / rf.SNAPSHOTS}/step-N with File > Open model… and Start" in said, said


def test_a_failed_start_says_the_engines_advice_in_the_windows_terms(win, qtbot, tmp_path):
    """Continue of a run a CLI process trains: the dialog said "... or train into another
    --out" (only the wording helper was tested, not that the window uses it)."""
    import fcntl

    from engine import runformat as rf

    folder = _run(tmp_path / "runs", 1)
    win.runs.refresh()
    win.choose_continue(folder)
    win.train.max_steps.setValue(3)
    fd = os.open(Path(folder) / rf.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as the CLI process training it holds
    try:
        win.start_training()
        qtbot.waitUntil(lambda: win.state == "idle" and win.worker is None, timeout=60_000)
    finally:
        os.close(fd)
    assert win.errors and "the run is in use" in win.errors[-1], win.errors
    assert "--out" not in win.errors[-1] and "instead of continuing" in win.errors[-1]


def test_a_gguf_name_for_the_merged_export_offers_a_gguf_file(win, qtbot, tmp_path,
                                                             monkeypatch):
    """The Runs tab's Export model with "m.gguf" typed wrote a Hugging Face folder named
    m.gguf, without a word and after ~10 s of nothing on screen: it asks to write a GGUF file
    instead (No writes nothing), and says at once that an export is being written."""
    import gguf

    opened = _run(tmp_path / "runs", 1)
    win.open_run_view(opened)
    target = tmp_path / "out" / "m.gguf"
    _fake_save(monkeypatch, target)
    answers = [QMessageBox.StandardButton.No, QMessageBox.StandardButton.Yes]
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question",
                        lambda _p, _t, text, *a, **k: (asked.append(text), answers.pop(0))[1])
    _action(win, "Export model (merged)…").trigger()
    assert "GGUF" in asked[-1] and not target.exists()  # declined: nothing written
    _action(win, "Export model (merged)…").trigger()
    assert win.statusBar().currentMessage() == f"writing the gguf export to {target}…"
    qtbot.waitUntil(lambda: bool(win.errors) or "gguf written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    assert target.is_file() and len(gguf.GGUFReader(str(target)).tensors) > 0


def test_open_model_of_a_run_whose_best_is_not_its_latest_asks_which(win, qtbot, tmp_path,
                                                                    monkeypatch):
    """File > Open model took a run's latest snapshot without a word where Export asks best or
    latest; the Log did not say which snapshot was opened."""
    import json

    spec = runapi.RunSpec(preset="tiny", autosave_steps=1, train=TrainConfig(
        batch_size=4, seq_len=64, max_steps=3, eval_every=1))
    with runapi.start(spec, [SAMPLE], root=tmp_path / "other") as run:
        run.train()
        folder = run.folder
    (folder / "best.json").write_text(json.dumps({"snapshot": "step-1", "step": 1,
                                                  "val_loss": 1.5}))
    asked: list[tuple] = []
    answers = ["best", "latest", None]
    monkeypatch.setattr(type(win), "_which_snapshot", lambda self, f, best, training=None,
                        action="Export": asked.append((best["step"], action)) or answers.pop(0))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    _action(win, "Open model or HF Mamba folder…").trigger()
    assert asked[-1] == (1, "Start from")
    qtbot.waitUntil(lambda: win.init_dir is not None, timeout=RUN_TIMEOUT)
    assert Path(win.init_dir) == folder / "snapshots" / "step-1"
    _action(win, "Open model or HF Mamba folder…").trigger()
    qtbot.waitUntil(lambda: win.init_dir == str(folder), timeout=RUN_TIMEOUT)
    qtbot.waitUntil(lambda: "(snapshot step-3)" in win.log.toPlainText(), timeout=RUN_TIMEOUT)
    win.new_model()
    _action(win, "Open model or HF Mamba folder…").trigger()  # Cancel: nothing opened
    qtbot.wait(200)
    assert win.init_dir is None and len(asked) == 3


def test_the_open_model_question_says_start_from(win, tmp_path, monkeypatch):
    """The best-or-latest question is Export's; for Open model it must not ask "Export which?"."""
    seen: list[tuple[str, str]] = []

    def capture(box):  # noqa: ANN001, ANN202
        seen.append((box.windowTitle(), box.text()))
        return 0

    monkeypatch.setattr(QMessageBox, "exec", capture)
    win._which_snapshot(str(tmp_path), {"step": 1, "val_loss": 1.5}, action="Start from")
    assert seen[-1][0] == "Open model" and seen[-1][1].endswith("Start from which?"), seen
    win._which_snapshot(str(tmp_path), {"step": 1, "val_loss": 1.5})
    assert seen[-1][0] == "Export" and seen[-1][1].endswith("Export which?"), seen


def test_a_gguf_instead_of_a_merged_folder_asks_before_replacing_one(win, qtbot, tmp_path,
                                                                    monkeypatch):
    opened = _run(tmp_path / "runs", 1)
    win.open_run_view(opened)
    target = tmp_path / "m.gguf"
    win.export("gguf", str(target), opened)
    qtbot.waitUntil(lambda: "gguf written" in win.log.toPlainText(), timeout=RUN_TIMEOUT)
    # (the file is published before the export has ended: waiting for it, the next export was
    # asked for while this one still ran, 1 failure in ~10 runs)
    os.utime(target, ns=(10**9, 10**9))  # (two quick writes can share a timestamp tick)
    first = target.stat().st_mtime_ns
    _fake_save(monkeypatch, target)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda _p, _t, text, *a, **k: (
        asked.append(text), QMessageBox.StandardButton.Yes)[1])
    n = win.log.toPlainText().count("gguf written")
    _action(win, "Export model (merged)…").trigger()
    assert len(asked) == 2 and "GGUF" in asked[0] and "Replace the earlier export" in asked[1]
    qtbot.waitUntil(lambda: win.log.toPlainText().count("gguf written") == n + 1,
                    timeout=RUN_TIMEOUT)
    assert target.stat().st_mtime_ns != first and not win.errors, win.errors


def test_a_run_from_a_models_weights_names_them_in_its_runs_tooltip(win, tmp_path):
    first = _run(tmp_path / "runs", 1)
    spec = runapi.RunSpec(init=first, train=TrainConfig(batch_size=4, seq_len=64, max_steps=1))
    with runapi.start(spec, [SAMPLE], root=tmp_path / "runs") as run:
        second = str(run.folder)
    win.runs.refresh()
    row = next(i for i, r in enumerate(win.runs.runs) if str(r.path) == second)
    tip = win.runs.table.item(row, 0).toolTip()
    assert f"from {Path(first).resolve() / 'snapshots' / 'step-1'} (step 1)" in tip, tip
    other = next(i for i, r in enumerate(win.runs.runs) if str(r.path) == first)
    assert win.runs.table.item(other, 0).toolTip() == first  # a new model's: its path alone


def test_delete_names_three_of_a_users_files_and_counts_the_rest(win, tmp_path, monkeypatch):
    from app.panels import runs_panel

    folder = _run(tmp_path / "runs", 0)
    for name in ("a.md", "b.md", "c.md", "d.md", "e.md"):
        (Path(folder) / name).write_text("mine")
    win.runs.refresh()
    asked: list[str] = []
    monkeypatch.setattr(runs_panel, "confirm", lambda *a: asked.append(a[2]) or False)
    win.runs.select(folder)
    win.runs._delete_selected()
    assert "(a.md, b.md, c.md and 2 more)" in asked[-1], asked


def test_a_gguf_export_over_a_file_of_the_users_is_refused_in_the_windows_terms(win, qtbot,
                                                                              tmp_path):
    """Yes to "replace the earlier export?" over a .gguf that is not one: refused, untouched,
    and the error named the CLI's --force."""
    folder = _run(tmp_path / "runs", 1)
    fake = tmp_path / "fake.gguf"
    fake.write_text("my notes")
    win.export("gguf", str(fake), folder, force=True)
    qtbot.waitUntil(lambda: bool(win.errors), timeout=RUN_TIMEOUT)
    assert "is not a GGUF file" in win.errors[-1] and "--force" not in win.errors[-1]
    assert "only an earlier GGUF export is ever replaced" in win.errors[-1]
    assert fake.read_text() == "my notes"


def test_the_gguf_dialog_on_a_file_of_the_users_says_no_before_asking_to_replace(
        win, tmp_path, monkeypatch):
    """The dialog on a .gguf that is no export asked "Replace the earlier export?", and after Yes
    refused it: a question that could not succeed."""
    folder = _run(tmp_path / "runs", 1)
    win.open_run_view(folder)
    fake = tmp_path / "user.gguf"
    fake.write_text("my notes")
    _fake_save(monkeypatch, fake)
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]))
    _action(win, "Export model (GGUF, for llama.cpp/Ollama/LM Studio)…").trigger()
    assert asked == [] and "is not a GGUF file" in win.errors[-1], asked
    assert fake.read_text() == "my notes"


def test_an_export_folder_that_cannot_be_written_is_not_where_the_next_starts(
        win, qtbot, tmp_path, monkeypatch):
    """After an export refused in a read-only folder ("cannot write in ..."), the next Export
    dialog opened in that folder again."""
    from app import export_flow, settings

    opened = _run(tmp_path / "other", 1)
    win.open_run_view(opened)
    good = tmp_path / "exports"
    good.mkdir()
    _fake_save(monkeypatch, good / "m0")
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or "merged written" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)
    assert settings.last_folder("export", "") == str(good)
    step = engine.read_pointer(Path(opened))["step"]  # the step written is said (it was not)
    assert f"merged written to {good / 'm0'} (from run {Path(opened).name}, step {step})" in \
        win.log.toPlainText()
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(export_flow.os, "access",
                        lambda p, mode: Path(p) != ro and real(p, mode))  # (root writes anyway)
    _fake_save(monkeypatch, ro / "m1")
    _action(win, "Export model (merged)…").trigger()
    qtbot.waitUntil(lambda: bool(win.errors) or f"written to {ro / 'm1'}" in win.log.toPlainText(),
                    timeout=RUN_TIMEOUT)  # (as root it is written: the rule is the folder's)
    assert settings.last_folder("export", "") == str(good)


def test_the_suggested_export_name_passes_over_a_dangling_link(tmp_path):
    """A link whose target is gone does not "exist" to Path.exists(); suggested as the export's
    name, the export would be written through it (or refused as a link) instead of beside it."""
    from app.export_flow import _free

    (tmp_path / "run-merged").symlink_to(tmp_path / "gone")
    (tmp_path / "run-merged-2").mkdir()
    assert _free(tmp_path / "run-merged") == tmp_path / "run-merged-3"
    assert _free(tmp_path / "run-gguf") == tmp_path / "run-gguf"


def test_opening_a_run_whose_metrics_cannot_be_read_says_so_and_clears_the_curves(win, tmp_path):
    """A metrics.csv that is a FIFO (or a link to a device): Open raised out of the slot (a
    traceback on the terminal only), and the previous run's curves stayed on screen."""
    import os

    good = _run(tmp_path / "good", 2)
    bad = _run(tmp_path / "bad", 2)
    win.open_run_view(good)
    assert win.plots.steps
    os.unlink(Path(bad) / "metrics.csv")
    os.mkfifo(Path(bad) / "metrics.csv")
    win.open_run_view(bad)
    assert win.errors and win.errors[-1].startswith(f"cannot draw the curves of {bad}: ")
    assert "metrics.csv" in win.errors[-1] and not win.plots.steps
    assert win.shown_run == bad  # the rest of it is shown


def test_continue_of_a_run_another_process_trains_is_refused_at_once(win, tmp_path):
    """Continue took a run a CLI process was training ("next Start continues ..."): only Start
    then failed, and the status line said "last run: not started"."""
    import engine

    folder = _run(tmp_path / "runs", 0)
    lock = engine.RunLock(Path(folder)).acquire()  # as the training process holds it
    try:
        win.choose_continue(folder)
    finally:
        lock.release()
    assert win.continue_dir is None
    assert "another process is training it" in win.errors[-1] and "Open follows it" in win.errors[-1]
    win.choose_continue(folder)  # once it ended
    assert win.continue_dir == folder


def test_opening_a_moved_peft_export_without_its_base_says_which_base_it_took(win, qtbot,
                                                                             tmp_path):
    """File > Open model of a PEFT export whose base/ was deleted took whatever model sat at
    the path its adapter_config.json names, without a word: the Log says which base it took."""
    folder = _run(tmp_path / "runs", 0, lora=True)
    engine.export_peft(folder, tmp_path / "p")
    shutil.copytree(tmp_path / "p", tmp_path / "moved")
    shutil.rmtree(tmp_path / "moved" / "base")
    win.open_model(str(tmp_path / "moved"))
    qtbot.waitUntil(lambda: win.init_dir == str(tmp_path / "moved") or bool(win.errors),
                    timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    said = [x for x in win.log.toPlainText().splitlines() if "has no base/ folder" in x]
    assert len(said) == 1 and said[0].startswith("warning: "), win.log.toPlainText()
    assert str((tmp_path / "p" / "base").resolve()) in said[0], said


def test_the_playground_on_a_peft_export_without_base_names_no_passed_over_snapshot(
        win, qtbot, tmp_path):
    """The Playground's summary of a PEFT export whose base/ was deleted called the note on
    the base it took a snapshot passed over ("not the snapshot latest.json names")."""
    folder = _run(tmp_path / "runs", 0, lora=True)
    engine.export_peft(folder, tmp_path / "p")
    shutil.copytree(tmp_path / "p", tmp_path / "moved")
    shutil.rmtree(tmp_path / "moved" / "base")
    pg = win.playground
    pg.set_source(str(tmp_path / "moved"))
    pg.max_tokens.setValue(3)
    pg.backend.setCurrentText("cpu")
    with qtbot.waitSignal(pg.finished, timeout=RUN_TIMEOUT) as done:
        pg.generate()
    assert "· moved" in done.args[0] and "latest.json" not in done.args[0], done.args[0]


def test_continue_or_delete_says_what_it_takes_from_the_opened_model(win, qtbot, tmp_path,
                                                                       monkeypatch):
    """A model opened with its LoRA set up was dropped, unsaid, by a Continue of another run,
    and by deleting its run (the dialog said only "Delete …?"): the next Start trained a new
    model from random weights."""
    from app.panels import runs_panel

    base, other = _run(tmp_path / "runs", 1), _run(tmp_path / "runs", 1)
    win.open_model(base)
    qtbot.waitUntil(lambda: win.init_dir is not None, timeout=RUN_TIMEOUT)
    opened = win.init_dir
    win.train.lora.setChecked(True)
    win.choose_continue(other)
    assert (f"note: the opened model {opened} with its LoRA set-up is no longer where the next "
            f"Start begins: it continues {Path(other).name} (File > Open model… opens it again)"
            in win.log.toPlainText()), win.log.toPlainText()[-600:]
    win.open_model(base)
    qtbot.waitUntil(lambda: win.init_dir is not None, timeout=RUN_TIMEOUT)
    asked: list[str] = []
    monkeypatch.setattr(runs_panel, "confirm", lambda *a: asked.append(a[2]) or True)
    win.runs.refresh()
    win.runs.select(base)
    win.runs._delete_selected()
    assert asked == [f"Delete {base} and all its snapshots? It holds the model the next Start "
                     "begins from (opened with File > Open model…): that Start would train a new "
                     "model from random weights."], asked
    assert not Path(base).exists() and win.init_dir is None
    assert (f"note: the opened model {opened} with its LoRA set-up went with {Path(base).name}"
            ": the next Start "
            "trains a new model from random weights") in win.log.toPlainText()
    win.runs.select(other)  # a run the next Start does not use: the plain question
    win.runs._delete_selected()
    assert asked[-1] == f"Delete {other} and all its snapshots?", asked
