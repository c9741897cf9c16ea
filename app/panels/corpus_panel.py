"""Corpus panel: a drop zone and the list of accepted files (size, tokens) and rejected ones."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import engine

from ..workers import run_in_thread


class DropZone(QFrame):
    dropped = Signal(list)  # list[str]

    def __init__(self) -> None:
        super().__init__()
        self.setAcceptDrops(True)
        self.setObjectName("dropZone")
        self.setMinimumHeight(70)
        self.setStyleSheet("#dropZone { border: 2px dashed #7a8ca3; border-radius: 8px; }")
        lay = QVBoxLayout(self)
        label = QLabel("Drop text or code files / folders here")
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(label)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if event.mimeData().hasUrls():
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            self.dropped.emit(paths)
            event.acceptProposedAction()


def _inspect(paths: list[str]) -> tuple[list[engine.CorpusFile], list[tuple[str, str]]]:
    files: list[engine.CorpusFile] = []
    rejected: list[tuple[str, str]] = []
    for p in paths:
        try:
            c = engine.load_corpus([p])
        except engine.CorpusError as exc:
            rejected.append((p, str(exc)))
            continue
        files.extend(c.files)
        rejected.extend((str(a), b) for a, b in c.rejected)
    return files, rejected


class CorpusPanel(QWidget):
    changed = Signal()
    rejected = Signal(str)  # a message listing rejected files

    def __init__(self, sample_dir: Path) -> None:
        super().__init__()
        self.sample_dir = sample_dir
        self.files: dict[str, engine.CorpusFile] = {}
        self.drop = DropZone()
        self.drop.dropped.connect(self.add_paths)
        self.setAcceptDrops(True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["file", "size", "tokens (bytes)"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.summary = QLabel()
        self.status = QLabel()
        self.status.setWordWrap(True)
        add_files = QPushButton("Add files…")
        add_files.clicked.connect(self._pick_files)
        add_dir = QPushButton("Add folder…")
        add_dir.clicked.connect(self._pick_dir)
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove_selected)
        sample = QPushButton("Sample corpus")
        sample.clicked.connect(self.load_sample)
        buttons = QHBoxLayout()
        for b in (add_files, add_dir, remove, sample):
            buttons.addWidget(b)
        lay = QVBoxLayout(self)
        lay.addWidget(self.drop)
        lay.addLayout(buttons)
        lay.addWidget(self.table, 1)
        lay.addWidget(self.summary)
        lay.addWidget(self.status)
        self.pending = 0

    # the whole panel accepts drops too (not only the dashed zone)
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        self.drop.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.drop.dropEvent(event)

    def paths(self) -> list[str]:
        return list(self.files)

    def load_sample(self) -> None:
        self.files.clear()
        self.add_paths([str(self.sample_dir)], sync=True)

    def add_paths(self, paths: list[str], sync: bool = False) -> None:
        """Validate ``paths`` (in a worker unless ``sync``) and add the good files."""
        if sync:
            self._accept(_inspect(paths))
            return
        self.pending += 1
        self.status.setText("reading files…")

        def done(result: tuple) -> None:
            self.pending -= 1
            self._accept(result)

        def fail(msg: str) -> None:
            self.pending -= 1
            self.rejected.emit(msg)

        run_in_thread(lambda: _inspect(paths), done, fail)

    def _accept(self, result: tuple[list[engine.CorpusFile], list[tuple[str, str]]]) -> None:
        files, rejected = result
        for f in files:
            self.files[str(f.path)] = f
        self._refresh()
        if rejected:
            msg = "Rejected:\n" + "\n".join(f"• {Path(p).name}: {why.split(': ', 1)[-1]}"
                                              for p, why in rejected)
            self.status.setText(msg)
            self.rejected.emit(msg)
        else:
            self.status.setText("")
        self.changed.emit()

    def _refresh(self) -> None:
        self.table.setRowCount(len(self.files))
        for row, (path, f) in enumerate(self.files.items()):
            self.table.setItem(row, 0, QTableWidgetItem(Path(path).name))
            self.table.item(row, 0).setToolTip(path)
            self.table.setItem(row, 1, QTableWidgetItem(f"{f.n_bytes / 1024:.1f} KiB"))
            self.table.setItem(row, 2, QTableWidgetItem(f"{f.n_bytes:,}"))
        total = sum(f.n_bytes for f in self.files.values())
        self.summary.setText(f"{len(self.files)} files, {total:,} bytes")

    def _remove_selected(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()}, reverse=True)
        keys = list(self.files)
        for r in rows:
            self.files.pop(keys[r], None)
        self._refresh()
        self.changed.emit()

    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add corpus files")
        if paths:
            self.add_paths(paths)

    def _pick_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Add a folder")
        if path:
            self.add_paths([path])
