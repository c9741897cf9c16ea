"""Sample gallery: the previews of a run (samples.jsonl in its folder), filterable by epoch, so a
user can read how the model improved. Survives relaunch: it is only a view of the file."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import engine

from ..words import plural
from .preview_panel import blank_note, visible_blanks, visible_controls


class GalleryPanel(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.folder: str | None = None
        self.samples: list[dict] = []
        self.shown: list[dict] = []
        self.epoch = QComboBox()
        self.epoch.setToolTip("Show the samples taken after N epochs (0: before training), or all")
        self.epoch.currentIndexChanged.connect(self._fill)
        self.title = QLabel("no run selected")
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # a
        # 200-character run name made the window wider than the screen
        self.table = QTableWidget(0, 4)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (it cycled its cells)
        self.table.setHorizontalHeaderLabels(["step", "epochs done", "prompt", "text"])
        self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.itemSelectionChanged.connect(self._show_selected)
        self.detail = QPlainTextEdit()
        self.detail.setReadOnly(True)
        self.detail.setPlaceholderText("Select a sample to read it whole, with its settings.")
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(QLabel("epoch"))
        top.addWidget(self.epoch)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(split, 1)

    def show_run(self, folder: str | None) -> None:
        self.folder = folder
        self.reload()

    def reload(self) -> None:
        self.samples = engine.read_kept_samples(self.folder) if self.folder else []
        epochs = sorted({int(s.get("epoch", 0)) for s in self.samples})
        keep = self.epoch.currentText()
        self.epoch.blockSignals(True)
        self.epoch.clear()
        self.epoch.addItem("all")
        self.epoch.addItems([str(e) for e in epochs])
        self.epoch.setCurrentText(keep if keep else "all")
        self.epoch.blockSignals(False)
        cut = (" (the newest 64 MB of samples.jsonl; older ones are not shown)"
               if self.folder and engine.samples_cut(self.folder) else "")  # (it was unsaid)
        self.title.setText(f"{plural(len(self.samples), 'sample')} in {self.folder}{cut}"
                           if self.folder else "no run selected")
        self._fill()

    def _fill(self) -> None:
        self.detail.clear()  # (it kept the sample of another run or epoch)
        e = self.epoch.currentText()
        self.shown = [s for s in self.samples if e in ("", "all") or int(s.get("epoch", 0)) == int(e)]
        self.table.setRowCount(len(self.shown))
        for row, s in enumerate(self.shown):
            text = str(s.get("text", ""))
            prompt = str(s.get("prompt", ""))
            cont = text[len(prompt):]
            shown = (visible_blanks(cont).replace("\n", " ")[:200] if cont.strip() else
                     blank_note(cont) if cont else "[nothing generated]")
            cells = (str(s.get("step", "")), str(s.get("epoch", 0)), visible_controls(prompt),
                     shown)
            for col, c in enumerate(cells):
                self.table.setItem(row, col, QTableWidgetItem(c))

    def _show_selected(self) -> None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        if not rows:
            return
        s = self.shown[min(rows)]
        head = (f"step {s.get('step')} · after epoch {s.get('epoch', 0)} · seed {s.get('seed')}"
                f" · temperature {s.get('temperature')} · top-k {s.get('top_k')} · top-p "
                f"{s.get('top_p')} · repetition {s.get('repetition_penalty')} · {s.get('backend')}")
        self.detail.setPlainText(f"{head}\n\n{visible_controls(str(s.get('text', '')))}")
