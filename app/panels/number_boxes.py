"""Number boxes that say when typed text is not taken.

Qt's spin boxes put back their last value, without a word, when the text typed in them is not
a number in range: "1e300" typed as the learning rate became 1 (the "1" typed on the way was
taken), and "5000" in a box of 1 to 4,096 became 500 (the last key was refused).
``IntBox``, ``FloatBox`` and ``GBox`` let such text be typed; ``say_untaken`` puts back the
value the box had before the edit and says why, at the box and in the window's status bar.
"""

from __future__ import annotations

from typing import Any, cast

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, QTimer
from PySide6.QtGui import QKeyEvent, QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QBoxLayout,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QLabel,
    QLayout,
    QMainWindow,
    QSpinBox,
    QToolTip,
    QWidget,
)

STEP_KEYS = (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown)
SAY_MS = 8000  # how long the tooltip stays (the status bar's message twice that)
TIP_DELAY_MS = 250


def _bare(box: QSpinBox | QDoubleSpinBox, text: str) -> str:
    """``text`` without the box's prefix and suffix (" steps")."""
    return text.strip().removeprefix(box.prefix().strip()).removesuffix(
        box.suffix().strip()).strip()


def _out_of_range(box: QSpinBox | QDoubleSpinBox, state: QValidator.State, text: str,
                  number: type[int] | type[float]) -> QValidator.State:
    """Intermediate instead of Invalid for a number out of the box's range: the key that takes
    it out of range is kept (Qt refused it: "5000" became "500"), for ``say_untaken`` to refuse
    the number in words."""
    if state != QValidator.State.Invalid:
        return state
    bare = _bare(box, text).replace(",", "")
    if bare in ("-", "+", "-.", "+."):  # a sign on the way to "-3" in a box of 0 and up: Qt
        return QValidator.State.Intermediate  # refused the key, so "-3" became 3 unsaid
    try:
        number(bare)
    except ValueError:
        return state
    return QValidator.State.Intermediate


class IntBox(QSpinBox):
    """A QSpinBox that lets a number out of its range be typed (``_out_of_range``); with a step
    above 1 its arrows go to the step's multiples (d_model from 1 went 17, 33, 49: sizes no
    preset or kernel width uses)."""

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        state, text, pos = super().validate(text, pos)
        return _out_of_range(self, state, text, int), text, pos

    def stepBy(self, steps: int) -> None:  # noqa: N802 (Qt's name)
        step, v = self.singleStep(), self.value()
        if step <= 1 or not steps:
            super().stepBy(steps)
            return
        base = v // step if steps > 0 else -(-v // step)  # the multiple below / above v
        self.setValue(max(self.minimum(), min(self.maximum(), (base + steps) * step)))
        self.selectAll()


class FloatBox(QDoubleSpinBox):
    """A QDoubleSpinBox that lets a number out of its range be typed (``_out_of_range``)."""

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        state, text, pos = super().validate(text, pos)
        return _out_of_range(self, state, text, float), text, pos


class GBox(QDoubleSpinBox):
    """A number box that shows 1e-06 and 0.003 as such (fixed decimals showed 1e-06 as 0.00000)
    and takes what ``float`` reads; text out of range is not taken (``say_untaken`` says so)."""

    def __init__(self, lo: float, hi: float, value: float, step: float) -> None:
        super().__init__()
        self.setDecimals(12)  # the value is kept to 12 decimals, shown as %g
        self.setRange(lo, hi)
        self.setSingleStep(step)
        self.setStepType(QDoubleSpinBox.StepType.AdaptiveDecimalStepType)
        self.setValue(value)

    def textFromValue(self, v: float) -> str:  # noqa: N802
        return f"{v:g}"

    def valueFromText(self, text: str) -> float:  # noqa: N802
        return float(text)

    def validate(self, text: str, pos: int) -> tuple[QValidator.State, str, int]:
        try:
            ok = self.minimum() <= float(text) <= self.maximum()
        except ValueError:
            ok = False  # still typing ("1e-"), or not a number: not taken
        return (QValidator.State.Acceptable if ok else QValidator.State.Intermediate), text, pos


def int_box(lo: int, hi: int, value: int, step: int = 1) -> IntBox:
    s = IntBox()
    s.setRange(lo, hi)
    s.setSingleStep(step)
    s.setValue(value)
    return s


def float_box(lo: float, hi: float, value: float, decimals: int, step: float) -> FloatBox:
    s = FloatBox()
    s.setRange(lo, hi)
    s.setDecimals(decimals)
    s.setSingleStep(step)
    s.setValue(value)
    return s


def label_of(box: QWidget) -> str:
    """The text of the label beside ``box`` (its form row's, or the QLabel before it in a grid
    row or a box layout) in its parent; "This box" when it has none."""
    parent = box.parentWidget()
    for lay in parent.findChildren(QLayout) if parent is not None else []:
        if (i := lay.indexOf(box)) < 0:
            continue
        label: QWidget | None = None
        if isinstance(lay, QFormLayout):
            label = lay.labelForField(box)
        elif isinstance(lay, QGridLayout):
            row, col, _, _ = cast(tuple[int, int, int, int], lay.getItemPosition(i))
            item = lay.itemAtPosition(row, col - 1) if col > 0 else None
            label = item.widget() if item is not None else None
        elif isinstance(lay, QBoxLayout) and i > 0 and (item := lay.itemAt(i - 1)) is not None:
            label = item.widget()
        if isinstance(label, QLabel) and label.text():
            return label.text()
    return box.accessibleName() or "This box"


class _Untaken(QObject):
    """Remembers a box's value when it takes the focus and the text typed since; at the edit's
    end (Enter, Tab, a click elsewhere) puts that value back if the text was not a number in
    range, and says so."""

    def __init__(self, box: QSpinBox | QDoubleSpinBox) -> None:
        super().__init__(box)
        self.box: Any = box  # (either kind: their value() and setValue() differ in type only)
        self.before = box.value()
        self.typed: str | None = None
        self.said: str | None = None  # the refusal on the status bar, cleared once a value is
        box.installEventFilter(self)  # taken (it stayed its 16 s after the value was fixed)
        edit = box.lineEdit()
        assert edit is not None
        edit.textEdited.connect(self._edited)
        box.editingFinished.connect(self._finished)
        box.valueChanged.connect(self._changed)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.FocusIn:
            self.before, self.typed = self.box.value(), None
        elif event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent) and \
                event.key() in STEP_KEYS:  # an arrow after text: the arrow's value is taken
            self.typed = None  # (it was put back, with words about the text)
        return False

    def _changed(self, _value: float) -> None:
        self._unsay()
        if self.typed is None:  # set by the program, or by an arrow: kept (a value set while
            self.before = self.box.value()  # the box had the focus was put back)

    def _edited(self, text: str) -> None:
        self.typed = text

    def _finished(self) -> None:
        box, typed, self.typed = self.box, self.typed, None
        if typed is not None and box.validate(typed, 0)[0] != QValidator.State.Acceptable:
            box.setValue(self.before)
            bare = _bare(box, typed)
            said = f"“{bare}” is not one" if bare else "an empty box is not one"
            lo = box.textFromValue(box.minimum())
            if box.specialValueText():  # ("no limit", "auto": an empty box is not 0)
                lo += f" (“{box.specialValueText()}”)"
            self._say(f"{label_of(box)} takes a number from {lo} to "
                      f"{box.textFromValue(box.maximum())}: {said}, so it stays {box.text()}")
        elif typed is not None:
            self._unsay()
        self.before = box.value()

    def _unsay(self) -> None:
        """Take this box's refusal off the status bar (when it is still the one shown)."""
        win = self.box.window()
        if self.said is not None and isinstance(win, QMainWindow) and \
                win.statusBar().currentMessage() == self.said:
            win.statusBar().clearMessage()
        self.said = None


    def _say(self, text: str) -> None:
        """In the window's status bar, and in a tooltip at the box once the key that ended the
        edit is up (its release hid a tooltip shown at once)."""
        box = self.box
        win = box.window()
        if isinstance(win, QMainWindow):
            win.statusBar().showMessage(text, 2 * SAY_MS)
            self.said = text
        QTimer.singleShot(TIP_DELAY_MS, self, lambda: QToolTip.showText(
            box.mapToGlobal(QPoint(0, box.height())), text, box, box.rect(), SAY_MS))


def say_untaken(*boxes: QAbstractSpinBox) -> list[QObject]:
    """Watch each box (``_Untaken``): typed text it cannot take puts its value back and says so.
    Keep the list returned (its Python objects hold the watching; collected, it stops)."""
    return [_Untaken(box) for box in boxes if isinstance(box, (QSpinBox, QDoubleSpinBox))]
