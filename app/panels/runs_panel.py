"""Runs tab: every run in the runs folder (name, date, model (preset), steps, best held-out
loss, status; a header click sorts by that column) with Open, Continue, Compare, Export and
Delete. Listing reads only small JSON files. Live: the run training in this window updates its
row from its step signals (``update_live``), and while the tab is visible every run's status is
re-read on the thread pool every ``REFRESH_MS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal, SignalInstance
from PySide6.QtGui import QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

import engine

from .. import settings
from ..confirm import confirm
from ..workers import run_in_thread
from .table_fill import bulk_fill

ADAPTER_TIP = "Write the LoRA adapter in PEFT format (LoRA runs only)"
NO_ADAPTER_TIP = "This run trained all its weights, no LoRA adapter: use Export model…"
NO_RUN_SELECTED = "Select a run first."
ROW_BUTTONS = ("Open", "Continue", "Compare", "Export model…", "Delete…")  # act on the selected
BROKEN_BUTTONS = ("Open", "Delete…")  # what a broken run's row offers
EXPORT_CHOICES = {"merged": "Model folder (transformers; any LoRA merged)…",
                  "gguf": "GGUF file (llama.cpp, Ollama, LM Studio)…"}  # Export model…'s menu
REFRESH_MS = 3000  # while the tab is visible: re-read every run's status this often (off-thread)
COLUMNS = ("name", "date", "model", "steps", "best held-out", "status")
# each column's sort key; a click sorts by it (again: the other way), runs without a held-out
# loss last either way; the newest first until a column is clicked (remembered across launches)
SORT_KEYS: tuple[Callable[[engine.RunInfo], Any], ...] = (
    lambda r: (r.name.casefold(), r.name), lambda r: (r.created, r.name), lambda r: r.preset,
    lambda r: r.steps, lambda r: _per_byte(r), lambda r: r.status)
DEFAULT_SORT = (1, Qt.SortOrder.DescendingOrder)


def _per_byte(r: engine.RunInfo) -> tuple[bool, float] | None:
    """The best held-out column's sort key: bits per corpus byte, which ranks runs of different
    tokenizers fairly (nats/token put a byte run at 1.44 above a BPE run at 1.96 that was 4x
    better per byte); the runs whose data cannot be read after them, by their loss (counted at
    one token per byte, a BPE run was misranked among the others)."""
    if r.best_val_loss is None:
        return None
    return (False, r.bits_per_byte) if r.bits_per_byte is not None else (True, r.best_val_loss)


def sorted_runs(runs: list[engine.RunInfo], column: int,
                order: Qt.SortOrder) -> list[engine.RunInfo]:
    """``runs`` by a column's key (stable: equal keys keep the listing's newest-first order);
    a run without a held-out loss goes last in both orders, and a run whose bits/byte cannot be
    told (``_per_byte``) before those (descending, they came first)."""
    key = SORT_KEYS[column]
    have = sorted((r for r in runs if key(r) is not None), key=key,
                  reverse=order == Qt.SortOrder.DescendingOrder)
    have.sort(key=lambda r: _unreadable(key(r)))  # (stable: the order within each part stays)
    return have + [r for r in runs if key(r) is None]


def _unreadable(k: Any) -> bool:
    """A ``_per_byte`` key of a run whose data cannot be read."""
    return isinstance(k, tuple) and k[0] is True


def _saved_sort() -> tuple[int, Qt.SortOrder]:
    """The sort a header click chose at an earlier launch (the default when none or unreadable)."""
    try:
        col, order = (int(v) for v in str(settings.load("runs/sort", "")).split(","))
        if 0 <= col < len(COLUMNS) and order in (0, 1):
            return col, Qt.SortOrder(order)
    except ValueError:
        pass
    return DEFAULT_SORT


def adapter_problem(folder: str | None) -> str | None:
    """Why a run has no PEFT adapter to export (None: it has one, or its run.json cannot be
    read and the export says why): no run chosen, all its weights trained, or a LoRA target
    PEFT cannot apply (each was said only after the destination was picked)."""
    if folder is None:
        return NO_RUN_SELECTED
    try:
        lora = engine.read_run_spec(folder).train.lora
    except (OSError, ValueError, engine.MambaStudioError):
        return None
    if lora is None:
        return NO_ADAPTER_TIP
    if refused := engine.peft_refused(lora.targets):
        return (f"PEFT cannot apply this run's LoRA on {', '.join(refused)} un-merged (the adapter "
                "would compute another model): use Export model… (merged)")
    return None


class RunsPanel(QWidget):
    open_requested = Signal(str)
    continue_requested = Signal(str)
    compare_requested = Signal(str)
    export_requested = Signal(str, str)  # folder, "merged" | "gguf" | "adapter"
    message = Signal(str)
    deleted = Signal(str)  # a run folder deleted here
    listed = Signal()  # the rows were read again (steps and states may have moved)

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root
        self.busy_folder: str | None = None  # the run training now: never deleted
        self.runs: list[engine.RunInfo] = []
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (it cycled its cells)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        best = self.table.horizontalHeaderItem(COLUMNS.index("best held-out"))
        assert best is not None  # (set just above)
        best.setToolTip("The best held-out loss in nats per token, and in bits per corpus byte: "
                        "runs of different tokenizers compare (and sort) by bits per byte")
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.sort = _saved_sort()
        header.setSectionsClickable(True)
        header.setSortIndicatorShown(True)
        header.setSortIndicator(*self.sort)
        header.sectionClicked.connect(self.sort_by)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.doubleClicked.connect(lambda _i: self._emit(self.open_requested))
        self.table.installEventFilter(self)  # Return on a row opens it too (``eventFilter``)
        self.where = QLabel()
        self.where.setWordWrap(True)
        buttons = QHBoxLayout()
        specs = (
            ("Open", "Show this run's curves and samples (to start a new run from its weights, "
             "use File > Open model…)", lambda: self._emit(self.open_requested)),
            ("Continue", "The next Start continues this run where it stopped (same folder)",
             lambda: self._emit(self.continue_requested)),
            ("Compare", "Overlay this run's loss curves (grey) on the plots",
             lambda: self._emit(self.compare_requested)),
            ("Export model…", "Write the model (any LoRA adapter merged) to a folder for "
             "transformers, or to a GGUF file for llama.cpp, Ollama and LM Studio", None),
            ("Export adapter…", ADAPTER_TIP, lambda: self._export("adapter")),
            ("Delete…", "Delete this run folder from disk (asks first)", self._delete_selected),
            ("Refresh", "Read the runs folder again", self.refresh),
        )
        self.buttons: dict[str, QPushButton] = {}
        self.tips = {text: tip for text, tip, _ in specs}
        for text, tip, slot in specs:
            b = QPushButton(text)
            b.setToolTip(tip)
            if slot is not None:
                b.clicked.connect(slot)
            buttons.addWidget(b)
            self.buttons[text] = b
        self.export_menu = QMenu(self)  # (only a merged folder could be exported from here:
        for kind, what in EXPORT_CHOICES.items():  # a GGUF file only from the File menu, for
            self.export_menu.addAction(what).triggered.connect(  # the run shown, not the one
                lambda _=False, k=kind: self._export(k))  # selected)
        self.buttons["Export model…"].setMenu(self.export_menu)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        lay = QVBoxLayout(self)
        lay.addWidget(self.where)
        lay.addWidget(self.table, 1)
        lay.addLayout(buttons)
        self.live: tuple[str, int, str] | None = None  # (folder, step, state) training here
        self.next_start_use: Callable[[str], str] = lambda folder: ""  # what deleting a run
        # takes from the next Start (the window's model or Continue), said in the Delete dialog
        self._reading = False
        self._generation = 0
        self.refresh()
        self.timer = QTimer(self)  # statuses of every run (also those trained elsewhere)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Return or Enter on a row of the table opens it, as a double click does (it did
        nothing: Open had to be tabbed to; the table's ``activated`` would also fire on one
        click where a desktop opens items so)."""
        if (watched is self.table and event.type() == QEvent.Type.KeyPress
                and isinstance(event, QKeyEvent)
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)):
            current = self.table.currentIndex()  # the row with the keyboard's focus frame,
            if not self.table.selectedIndexes() and current.isValid():  # tabbed to, unselected
                self.table.selectRow(current.row())  # (it said "Select a run first.")
            self._emit(self.open_requested)
            return True
        return super().eventFilter(watched, event)

    def refresh(self) -> None:
        """Read the runs folder now (on this thread; ``refresh_soon`` reads it on the pool)."""
        self._generation += 1  # a pool read started before this one is stale when it lands
        try:
            runs = engine.list_runs(self.root)
        except (OSError, ValueError, engine.MambaStudioError) as exc:  # (it raised out of the
            self.message.emit(f"could not list the runs in {self.root}: {exc}")  # end-of-run
            return  # handler, which then never closed a window asked to close)
        self._show(runs)

    def refresh_soon(self) -> None:
        """Re-read the runs folder off the GUI thread (the timer's refresh of every run's status,
        including runs other processes train); one read at a time."""
        if self._reading:
            return
        self._reading = True
        gen = self._generation

        def done(runs: list[engine.RunInfo]) -> None:
            self._reading = False
            if gen == self._generation:
                self._show(runs)

        def failed(msg: str) -> None:
            self._reading = False

        run_in_thread(lambda: engine.list_runs(self.root), done, failed, owner=self)

    def _tick(self) -> None:
        if self.isVisible():
            self.refresh_soon()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802
        super().showEvent(event)
        self.refresh_soon()  # the tab just came into view: show what changed meanwhile

    def update_live(self, folder: str, step: int, state: str) -> None:
        """The row of the run training in this window, from its step signals (no disk read)."""
        self.live = (folder, step, state)
        row = next((i for i, r in enumerate(self.runs) if str(r.path) == folder), None)
        if row is None:
            self.refresh_soon()  # a new run's first step: list it
            return
        self._cell(row, 3).setText(str(step))
        self._cell(row, 5).setText(state)

    def _cell(self, row: int, col: int) -> QTableWidgetItem:
        item = self.table.item(row, col)
        assert item is not None
        return item

    def _show(self, runs: list[engine.RunInfo]) -> None:
        keep = self.selected()
        if self.live is not None:  # the live run's step and state beat its last saved snapshot
            folder, step, state = self.live
            runs = [replace(r, steps=max(step, r.steps), status=state)
                    if str(r.path) == folder else r for r in runs]
        self.runs = sorted_runs(runs, *self.sort)
        self.where.setText(f"Runs in {self.root} ({len(self.runs)})")
        with bulk_fill(self.table):  # (200 runs took 5.5 s at each refresh, every 3 s)
            self._fill_table()
        if keep is not None:  # the same run stays selected when rows move
            self.table.clearSelection()
            self.select(keep)
        else:  # (no selection to signal a change: with no row selected the buttons were on)
            self._selection_changed()
        self.listed.emit()

    def _fill_table(self) -> None:
        """One row per run of ``self.runs``: name, created, preset, steps, best, status."""
        self.table.setRowCount(len(self.runs))
        for row, r in enumerate(self.runs):
            best = ("—" if r.best_val_loss is None else f"{r.best_val_loss:.4f}" if
                    r.bits_per_byte is None else
                    f"{r.best_val_loss:.4f} ({r.bits_per_byte:.3f} bits/byte)")
            cells = (r.name, r.created.replace("T", " ")[:19], r.preset, str(r.steps), best,
                     r.status)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col in (3, 4):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(r.error or f"{r.path}\n{r.source}".strip())  # (a run from
                # a model's weights named the model nowhere in the window)
                self.table.setItem(row, col, item)

    def sort_by(self, column: int) -> None:
        """A header click: sort by that column, ascending first, the other way on a second
        click; the selected run stays selected."""
        col, order = self.sort
        flip = (Qt.SortOrder.AscendingOrder if order == Qt.SortOrder.DescendingOrder
                else Qt.SortOrder.DescendingOrder)
        self.sort = (column, flip if column == col else Qt.SortOrder.AscendingOrder)
        self.table.horizontalHeader().setSortIndicator(*self.sort)
        settings.save("runs/sort", f"{self.sort[0]},{self.sort[1].value}")
        self._show(self.runs)

    def selected(self) -> str | None:
        rows = {i.row() for i in self.table.selectedIndexes()}
        return str(self.runs[min(rows)].path) if rows else None

    def select(self, folder: str) -> None:
        for row, r in enumerate(self.runs):
            if str(r.path) == str(folder):
                self.table.selectRow(row)

    def _selection_changed(self) -> None:
        """Export adapter… is off (and says why) for a selected run without LoRA (it complained
        only after the destination was picked)."""
        folder = self.selected()
        info = next((r for r in self.runs if str(r.path) == folder), None)
        broken = ((info.error or "broken") if info is not None and info.status == "broken"
                  else None)
        why = broken or adapter_problem(folder)
        button = self.buttons["Export adapter…"]
        button.setEnabled(why is None)
        button.setToolTip(ADAPTER_TIP if why is None else why)
        for name in ROW_BUTTONS:  # (on with no row, each said "Select a run first." when pressed)
            # a broken run can be opened (which says why it is broken) and deleted: the others
            # could only fail (a run killed while prepared offered all five)
            off = folder is None or (broken is not None and name not in BROKEN_BUTTONS)
            self.buttons[name].setEnabled(not off)
            self.buttons[name].setToolTip(f"{info.name if info else ''} is broken: {broken}"
                                          if off and broken else self.tips[name])

    def _emit(self, signal: SignalInstance) -> None:
        folder = self.selected()
        if folder is None:
            self.message.emit(NO_RUN_SELECTED)
            return
        signal.emit(folder)

    def _export(self, kind: str) -> None:
        folder = self.selected()
        if folder is None:
            self.message.emit(NO_RUN_SELECTED)
            return
        self.export_requested.emit(folder, kind)

    def _delete_selected(self) -> None:
        folder = self.selected()
        if folder is None:
            self.message.emit(NO_RUN_SELECTED)
            return
        if self._training(folder, keep_others=True):  # refused before asking (it asked, then
            return  # refused)
        others = engine.others_in_run(folder)
        if not others:
            if confirm(self, "Delete run", f"Delete {folder} and all its snapshots?"
                       f"{self.next_start_use(folder)}"):
                self.delete_run(folder)
            return
        if confirm(self, "Delete run", f"{folder} also holds files that no run writes "
                   f"({engine.listing(others)}). Delete the run (its snapshots, data and settings) and keep "
                   "those files in the folder?"):
            self.delete_run(folder, keep_others=True)

    def _training(self, folder: str, keep_others: bool = False) -> bool:
        """True (and says so) while ``folder`` trains, here or in another process, or cannot be
        deleted (``engine.why_not_delete``; ``keep_others``: a user's files there stay)."""
        if folder == self.busy_folder:
            paused = self.live is not None and self.live[0] == folder and self.live[2] == "paused"
            doing = "is paused (its training is still open here)" if paused else "is training"
            self.message.emit(f"{folder} {doing}; stop it before deleting it.")
            return True
        why = engine.why_not_delete(folder, keep_others)  # another process trains it, or the
        if why is not None:  # user's files are in it (they went with the run)
            self.message.emit(why)
            return True
        return False

    def delete_run(self, folder: str, keep_others: bool = False) -> bool:
        """Delete a run folder unless it is training (here or in another process); with
        ``keep_others`` a user's files in it stay, in the folder."""
        if self._training(folder, keep_others):
            return False
        try:
            engine.delete_run(folder, keep_others)  # the run's own files only, under its lock
        except engine.CheckpointError as exc:
            self.message.emit(str(exc))
            self.refresh()
            return False
        except OSError as exc:  # a file it may not remove: say so (it said "deleted")
            self.message.emit(f"could not delete all of {folder}: {exc.strerror or exc} "
                              f"({exc.filename}); what is left is listed again")
            self.refresh()
            return False
        kept = engine.others_in_run(folder) if keep_others and Path(folder).is_dir() else []
        self.message.emit(f"deleted the run in {folder}; kept {engine.listing(kept)}" if kept
                          else f"deleted {folder}")
        self.refresh()
        self.deleted.emit(folder)
        return True
