"""Typed text a number box cannot take: its value before the edit stays, and a tooltip at the box
says why (Qt put back its last value without a word: "1e300" as the learning rate became 1, and
"5000" in a box of 1 to 4,096 became 500)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit, QToolTip

from app.panels.playground_panel import PlaygroundPanel
from app.panels.preview_panel import PreviewPanel
from app.panels.train_panel import TrainPanel


@pytest.fixture()
def said(monkeypatch) -> list[str]:
    tips: list[str] = []
    monkeypatch.setattr(QToolTip, "showText", lambda _pos, text, *a: tips.append(text))
    return tips


def _type(qtbot, panel, box, text: str) -> None:  # noqa: ANN001
    """Click into ``box``, select all, type ``text`` with real keys, then Tab out of it."""
    other = QLineEdit()
    panel.layout().addWidget(other)
    panel.activateWindow()
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    box.selectAll()
    if text:
        QTest.keyClicks(box, text)
    else:
        QTest.keyClick(box, Qt.Key.Key_Delete)
    other.setFocus()
    qtbot.waitUntil(other.hasFocus)


@pytest.mark.parametrize(("name", "typed", "label"), [
    ("lr", "1e300", "Learning rate takes a number from 1e-08 to 10: “1e300” is not one, so it "
                    "stays 0.003"),  # (it became 1: the "1" typed on the way)
    ("batch", "100000", "Batch takes a number from 1 to 65536: “100000” is not one, so it stays"),
    ("rank", "5000", "rank takes a number from 1 to 4096: “5000” is not one, so it stays 8"),
    ("holdout", "0.95", "Held-out fraction takes a number from 0.00 (“none”) to 0.90: “0.95” is "
                        "not one"),
    ("epochs", "-3", "Epochs takes a number from 1 to 1000000: “-3” is not one, so it stays"),
    ("holdout", "-0.5", "Held-out fraction takes a number from 0.00 (“none”) to 0.90: “-0.5” "
                        "is not one"),  # (a typed minus was refused by Qt unsaid: 3, 0.5)
    ("seq_len", "", "Sequence length takes a number from 2 to 16777216: an empty box is not one"),
])
def test_the_train_panel_keeps_the_value_and_says_why(qtbot, said, name, typed, label):
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.lora.setChecked(True)  # (rank is greyed without it)
    box = getattr(panel, name)
    before = box.value()
    _type(qtbot, panel, box, typed)
    assert box.value() == before
    qtbot.waitUntil(lambda: bool(said))
    assert len(said) == 1 and said[0].startswith(label), said


def test_a_number_in_range_is_taken_without_a_word(qtbot, said):
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    _type(qtbot, panel, panel.lr, "0.01")
    _type(qtbot, panel, panel.batch, "5000")
    assert (panel.lr.value(), panel.batch.value()) == (0.01, 5000)
    qtbot.wait(400)
    assert said == []
    _type(qtbot, panel, panel.batch, "70000")  # the value before this edit stays, not the
    assert panel.batch.value() == 5000  # panel's first
    qtbot.waitUntil(lambda: bool(said))
    assert said[-1].endswith("so it stays 5000")


def test_the_playground_and_preview_boxes_say_it_too(qtbot, said, tmp_path):
    play = PlaygroundPanel(str(tmp_path))
    preview = PreviewPanel()
    for panel in (play, preview):
        qtbot.addWidget(panel)
        panel.show()
    seed = play.seed.value()
    _type(qtbot, play, play.seed, "99999999999")
    _type(qtbot, preview, preview.every, "2000000")
    _type(qtbot, preview, preview.temperature, "7")
    assert play.seed.value() == seed and preview.every.value() != 2_000_000
    assert preview.temperature.value() <= 5.0
    qtbot.waitUntil(lambda: len(said) == 3)
    assert [s.split(":")[0] for s in said] == [
        "seed takes a number from 0 to 2147483647",
        "a sample every takes a number from 0 (“epoch ends”) to 1000000",
        "temperature takes a number from 0.00 to 5.00"], said


def test_in_the_window_the_status_bar_says_it_too(win, qtbot, said):
    """The tooltip goes at the next key; the status bar keeps the words a while."""
    win.tabs.setCurrentIndex(0)
    _type(qtbot, win, win.train.lr, "1e300")
    assert win.train.lr.value() == 0.003
    assert win.statusBar().currentMessage().startswith(
        "Learning rate takes a number from 1e-08 to 10: “1e300” is not one, so it stays 0.003")
    qtbot.waitUntil(lambda: bool(said))


def test_a_value_set_while_focused_or_by_an_arrow_is_the_one_kept(qtbot, said):
    """A value the program set while the box had the focus was put back to the one before it;
    an arrow key after untaken text gave a value that was then put back, with words about the
    text."""
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    box = panel.batch
    other = QLineEdit()
    panel.layout().addWidget(other)
    panel.activateWindow()
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    box.setValue(64)  # (settings loaded while the box has the focus)
    box.selectAll()
    QTest.keyClicks(box, "99999999")
    other.setFocus()
    qtbot.waitUntil(other.hasFocus)
    assert box.value() == 64
    qtbot.waitUntil(lambda: bool(said))
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    box.selectAll()
    QTest.keyClicks(box, "99999999")
    QTest.keyClick(box, Qt.Key.Key_Up)
    shown = box.value()
    other.setFocus()
    qtbot.waitUntil(other.hasFocus)
    qtbot.wait(400)
    assert box.value() == shown and len(said) == 1, said


def test_a_box_with_a_word_for_its_least_value_names_it(qtbot, said):
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    _type(qtbot, panel, panel.max_steps, "")
    qtbot.waitUntil(lambda: bool(said))
    assert said[0].startswith("Max steps takes a number from 0 (“no limit”) to 2147483647: an "
                              "empty box is not one, so it stays"), said


def test_enter_takes_a_number_and_untaken_text_after_it_keeps_that_number(qtbot, said):
    """Enter ends an edit without leaving the box: the number it took is the one a later edit's
    untaken text puts back (it put back the value from before the box took the focus)."""
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    box = panel.batch
    panel.activateWindow()
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    box.selectAll()
    QTest.keyClicks(box, "48")
    QTest.keyClick(box, Qt.Key.Key_Return)
    assert box.value() == 48 and box.hasFocus()
    box.selectAll()
    QTest.keyClicks(box, "99999999")
    QTest.keyClick(box, Qt.Key.Key_Return)
    assert box.value() == 48
    qtbot.waitUntil(lambda: bool(said))
    assert said[-1].endswith("so it stays 48"), said


def test_the_ends_of_a_boxs_range_are_taken(qtbot, said):
    """The least and the greatest number a box holds are numbers in its range (the learning
    rate's 1e-08 and 10 typed were refused by a strict bound)."""
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.show()
    _type(qtbot, panel, panel.lr, "1e-08")
    assert panel.lr.value() == 1e-08
    _type(qtbot, panel, panel.lr, "10")
    assert panel.lr.value() == 10
    qtbot.wait(400)
    assert said == []


def test_the_arrows_of_a_box_with_a_step_go_to_its_multiples(qtbot):
    """d_model 1 went 17, 33, 49 by its arrows (a step of 16 from wherever it stood): the
    arrows of a box with a step go to that step's multiples, within its range."""
    panel = TrainPanel()
    qtbot.addWidget(panel)
    panel.preset.setCurrentText("custom")
    box = panel.d_model
    seen = []
    for start, key in ((1, Qt.Key.Key_Up), (17, Qt.Key.Key_Up), (17, Qt.Key.Key_Down),
                       (16, Qt.Key.Key_Down), (1, Qt.Key.Key_Down), (130, Qt.Key.Key_PageUp)):
        box.setValue(start)
        QTest.keyClick(box, key)
        seen.append(box.value())
    assert seen == [16, 32, 16, 1, 1, 288], seen  # PageUp: ten steps from 128
    panel.n_layer.setValue(3)  # a step of 1 is as before
    QTest.keyClick(panel.n_layer, Qt.Key.Key_Up)
    assert panel.n_layer.value() == 4


def test_the_status_bar_drops_the_refusal_once_a_value_is_taken(win, qtbot, said):
    """(it stayed its 16 s after the box was given a number it takes)"""
    win.tabs.setCurrentIndex(0)
    _type(qtbot, win, win.train.lr, "1e300")
    assert win.statusBar().currentMessage().startswith("Learning rate takes a number")
    _type(qtbot, win, win.train.lr, "0.002")
    assert win.train.lr.value() == 0.002
    assert win.statusBar().currentMessage() == ""
    _type(qtbot, win, win.train.batch, "100000")  # by an arrow (or a preset) as well
    assert win.statusBar().currentMessage().startswith("Batch takes a number")
    win.train.batch.stepUp()
    assert win.statusBar().currentMessage() == ""
    win.statusBar().showMessage("something else")  # another message is left alone
    _type(qtbot, win, win.train.lr, "0.001")
    assert win.statusBar().currentMessage() == "something else"
