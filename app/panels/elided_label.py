"""A one-line label that ends in "…" when its text does not fit."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy


class ElidedLabel(QLabel):
    """One line that ends in "…" when it does not fit (its full text is the tooltip): the
    backend's reason wrapped over three lines and was drawn over the sample box at 900x600."""

    def __init__(self, text: str = "", tip: str = "") -> None:
        super().__init__()
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.tip = tip  # what the line means: under its full text in the tooltip
        self.full = ""
        self.set_full(text)

    def set_full(self, text: str) -> None:
        self.full = text
        self.setToolTip(f"{text}\n\n{self.tip}" if self.tip else text)
        self._elide()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self.full, Qt.TextElideMode.ElideRight,
                                                   max(self.width(), 40)))
