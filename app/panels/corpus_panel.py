"""Corpus panel: a drop zone, a table of accepted files (bytes, tokens for the chosen tokenizer,
the held-out ones marked), totals, a collapsible "N files skipped" list, and a preview of the
selected file. Files are read in a worker (a busy bar shows progress). When an add skips files,
a notice under the drop zone names the first few, one line each with the reason and what to do
(``skip_line``), until the next add; thousands of rejected files cost a few lines there and one
in the collapsed list until the user opens it."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

import engine

from .. import settings
from ..confirm import confirm
from ..words import in_window_terms, plural
from ..workers import run_in_thread
from .table_fill import bulk_fill

PREVIEW_BYTES = 4096
MAX_SKIPPED_SHOWN = 5000  # lines in the skipped list (the count is always exact)
NOTICE_LINES = 3  # skipped files named in the notice under the drop zone
# what to do about a rejected file, by a word of the engine's reason (reasons that already say
# what to do, after a "; ", get nothing more)
FIXES = (
    ("empty folder", "drop a folder that holds text files"),
    ("file is empty", "add a file that has text in it"),
    ("no such file", "it was moved or deleted; add it from where it is now"),
    ("cannot read", "check that you may read it"),
    ("cannot list", "check that you may open the folder"),
    ("not a regular file", "add regular text files"),
)
# engine.RECORDS -> (combo label, tooltip); the first is the default (RunSpec.records)
RECORD_CHOICES = {
    "file": ("each file is one document",
             "Code, books, notes: the model reads every file from its start, across its lines"),
    "blank-line": ("paragraphs (split at blank lines)",
                   "Text made of separate entries divided by empty lines"),
    "line": ("each line is one example",
             "Datasets of one example per line (pairs, puzzles, commands): every line is read "
             "from a fresh state; this is what makes the copying and recall tasks learnable "
             "in minutes (docs/learning.md)"),
}


NO_BREAK_HELD_OUT = "\u00a0held\u2011out"  # no line break in it (the footer read "held-/out")


class DropZone(QFrame):
    dropped = Signal(list)  # list[str]

    def __init__(self) -> None:
        super().__init__()
        self.setAcceptDrops(True)
        self.setObjectName("dropZone")
        self.setMinimumHeight(56)
        self.setStyleSheet("#dropZone { border: 2px dashed #7a8ca3; border-radius: 8px; }")
        self.setToolTip("Drop files or folders: they are only read, never copied or changed "
                        "(text and code files; others are listed as skipped)")
        lay = QVBoxLayout(self)
        label = QLabel("Drop text or code files / folders here")
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(label)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if event.mimeData().hasUrls():
            event.setDropAction(Qt.DropAction.CopyAction)  # the files stay where they are
            event.accept()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        paths = [u.toLocalFile() if u.isLocalFile() else u.toDisplayString()  # (a web address
                 for u in event.mimeData().urls()]  # was dropped without a word: add_paths says)
        if paths:
            self.dropped.emit(paths)
            event.setDropAction(Qt.DropAction.CopyAction)
            event.accept()


WEB_WHY = "not a file on this computer (a web address); download it, then add the file"


def _is_web(path: str) -> bool:
    """Whether a dropped or given path is a web address (http://…), not a file name."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.isalpha() and scheme.lower() != "file"


Counted = tuple[dict[str, int], list[tuple[str, str]]]  # tokens by path, (path, why) skipped


def reason(why: str) -> str:
    """The engine's reason without the path some of its messages start with."""
    return why.split(": ", 1)[-1]


def skip_line(path: str, why: str, name: str | None = None) -> str:
    """One line for a skipped file: its name (or ``name``), why, and what to do about it."""
    text = in_window_terms(reason(why))  # ("name the file itself": the CLI's way)
    fix = "" if "; " in text else next((f for key, f in FIXES if key in text), "")
    return f"{name or Path(path).name}: {text}" + (f" — {fix}" if fix else "")


def skipped_count(rejected: list[tuple[str, str]]) -> str:
    """"3 files", "1 folder", "2 files and 1 folder": what ``rejected`` holds (an empty folder
    was "1 file skipped")."""
    folders = sum(1 for p, _ in rejected if Path(p).is_dir())
    files = len(rejected) - folders
    parts = ([plural(files, "file")] if files or not folders else []) + (
        [plural(folders, "folder")] if folders else [])
    return " and ".join(parts)


def told_apart(paths: list[str]) -> list[str]:
    """Each path's file name, with as many of its folders' names before it as tell it from the
    others of that name ("email/__init__.py", "a/x/core.py" and "b/x/core.py": rows and lines of
    one name could not be told apart)."""
    parts = [Path(p).parts[1:] if Path(p).anchor else Path(p).parts for p in paths]
    depth = [1] * len(paths)
    while True:
        shown = ["/".join(ps[-d:]) for ps, d in zip(parts, depth, strict=True)]
        seen = Counter(shown)  # (counted once: 20,000 files took 3.4 s counting each name)
        again = [i for i, n in enumerate(shown) if seen[n] > 1 and depth[i] < len(parts[i])]
        if not again:
            return shown
        for i in again:
            depth[i] += 1


def skip_lines(rejected: list[tuple[str, str]], most: int) -> list[str]:
    """"• " lines for the first ``most`` skipped files (three "__init__.py: file is empty"
    lines could not be told apart: ``told_apart``)."""
    shown = rejected[:most]
    return [f"• {skip_line(p, why, n)}"
            for (p, why), n in zip(shown, told_apart([p for p, _ in shown]), strict=True)]


def _count(files: list[engine.CorpusFile], tokenizer: Any) -> Counted:
    """Tokens of each file (``engine.count_tokens``); files that vanished or turned unreadable
    since they were read are skipped with their reason, as training skips them."""
    corpus = engine.Corpus(files=list(files))
    counts = engine.count_tokens(corpus, tokenizer)
    return {str(p): n for p, n in counts.items()}, [(str(p), why) for p, why in corpus.gone]


Inspected = tuple[list[tuple[engine.CorpusFile, int, str]], list[tuple[str, str]]]


def _inspect(paths: list[str], tokenizer: Any) -> Inspected:
    """(file, tokens, the path given that it came from) of each good file; (path, why) of each
    rejected one."""
    files: list[tuple[engine.CorpusFile, int, str]] = []
    rejected: list[tuple[str, str]] = []
    for p in paths:
        try:
            c = engine.load_corpus([p], allow_empty=True)  # every rejected file listed on its own
        except engine.CorpusError as exc:
            rejected.append((p, str(exc)))
            continue
        counts, gone = _count(c.files, tokenizer)
        files.extend((f, counts[str(f.path)], p) for f in c.files if str(f.path) in counts)
        rejected.extend(gone)
        rejected.extend((str(a), b) for a, b in c.rejected)
    return files, rejected


class CorpusPanel(QWidget):
    changed = Signal()
    rejected = Signal(str)  # a one-line summary of rejected files
    added = Signal(str, list)  # after an add: what it added ("3 files"), [(path, why)] skipped
    said = Signal(str)  # a message for the status bar (nothing was added or skipped)

    def __init__(self, sample_dir: Path) -> None:
        super().__init__()
        self.sample_dir = sample_dir
        self.files: dict[str, engine.CorpusFile] = {}
        self.tokens: dict[str, int] = {}
        self.skipped: list[tuple[str, str]] = []
        self.origin: dict[str, str] = {}  # file -> the path added that brought it (a folder, itself)
        self.folders: dict[str, None] = {}  # folders added, in order
        self.cut: set[str] = set()  # added folders some of whose files were removed one by one
        self.generation = 0  # counts clear(): an add read before the last one is dropped
        self.holdout = engine.RunSpec.holdout  # the split (set_split), for the held-out column
        self.seed = 0
        self.min_tokens = 0
        self.tokenizer: Any = None  # None: bytes; else an opened model's tokenizer
        self.tokenizer_kind = "bytes"
        self.drop = DropZone()
        self.drop.dropped.connect(self.add_paths)
        self.setAcceptDrops(True)
        self.table = QTableWidget(0, 4)
        self.table.setTabKeyNavigation(False)  # Tab leaves the table (it cycled its cells)
        delete = QShortcut(QKeySequence(QKeySequence.StandardKey.Delete), self.table)
        delete.setContext(Qt.ShortcutContext.WidgetShortcut)  # Delete on the table: Remove
        delete.activated.connect(self._remove_selected)
        self.table.setHorizontalHeaderLabels(["file", "bytes", "tokens", "split"])
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)  # names get the room
        for col in (1, 2, 3):  # numbers and "held-out": as wide as their contents, no wider
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setVisible(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.itemSelectionChanged.connect(self._preview_selected)
        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        self.preview.setPlaceholderText("Select a file to preview its first 4 KB.")
        self.previewed: str | None = None  # the file whose text the preview shows
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)  # busy
        self.progress.setVisible(False)
        self.progress.setMaximumHeight(14)
        self.skipped_btn = QToolButton()
        self.skipped_btn.setCheckable(True)
        self.skipped_btn.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.skipped_btn.setArrowType(Qt.ArrowType.RightArrow)
        self.skipped_btn.toggled.connect(self._toggle_skipped)
        self.skipped_btn.setToolTip("Show or hide the files that were not added, with the reason")
        self.skipped_btn.setVisible(False)
        self.skipped_list = QPlainTextEdit()
        self.skipped_list.setReadOnly(True)
        self.skipped_list.setMaximumHeight(140)
        self.skipped_list.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.skipped_list.setVisible(False)
        self.notice = QLabel()  # what the last add skipped, named, one line a file
        self.notice.setObjectName("skipNotice")
        self.notice.setTextFormat(Qt.TextFormat.PlainText)  # file names are not markup
        self.notice.setWordWrap(True)
        self.notice.setStyleSheet("#skipNotice { border: 1px solid #d9a400; border-radius: 4px; "
                                  "padding: 4px; background: rgba(255, 196, 0, 40); }")
        self.notice_box = QWidget()
        hide = QToolButton()  # the note took rows from the file table at 900x600, for good
        hide.setText("×")
        hide.setToolTip("Hide this note (the skipped list below keeps every file and reason)")
        hide.setAutoRaise(True)
        hide.clicked.connect(lambda: self.notice_box.setVisible(False))
        box = QHBoxLayout(self.notice_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.notice, 1)
        box.addWidget(hide, 0, Qt.AlignmentFlag.AlignTop)
        self.notice_box.setVisible(False)
        self.status = self.summary  # one line of status (kept for callers)
        self.records = QComboBox()
        self.records.setSizeAdjustPolicy(  # its longest choice set the panel's width
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.records.setMinimumContentsLength(14)
        for key, (label, tip) in RECORD_CHOICES.items():
            self.records.addItem(label, key)
            self.records.setItemData(self.records.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.records.setToolTip("How your text splits into examples. The model reads each example "
                                "from a fresh state; whole examples are held out for evaluation.")
        self.records.currentIndexChanged.connect(self._records_changed)
        records_row = QHBoxLayout()
        records_row.addWidget(QLabel("Examples:"))
        records_row.addWidget(self.records, 1)
        buttons = QGridLayout()  # two by two: in one row they held the window at 903 px wide
        for i, (text, tip, slot) in enumerate((
                ("Add files…", "Add text or code files", self._pick_files),
                ("Add folder…", "Add every text/code file under a folder (hidden ones skipped)",
                 self._pick_dir),
                ("Remove", "Remove the selected files from the corpus", self._remove_selected),
                ("Sample corpus", "Replace the corpus with the bundled sample texts",
                 self._ask_sample))):
            b = QPushButton(text)
            b.setToolTip(tip)
            b.clicked.connect(slot)
            buttons.addWidget(b, i // 2, i % 2)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.preview)
        split.setSizes([300, 120])
        lay = QVBoxLayout(self)
        lay.addWidget(self.drop)
        lay.addLayout(buttons)
        lay.addLayout(records_row)
        lay.addWidget(self.progress)
        lay.addWidget(self.notice_box)  # under the controls: it takes rows from the table
        # instead of moving the buttons under the mouse when it appears
        lay.addWidget(split, 1)
        lay.addWidget(self.summary)
        lay.addWidget(self.skipped_btn)
        lay.addWidget(self.skipped_list)
        self.pending = 0
        self.message = ""

    # the whole panel accepts drops too (not only the dashed zone)
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        self.drop.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.drop.dropEvent(event)

    def paths(self) -> list[str]:
        return list(self.files)

    def settings_paths(self) -> list[str]:
        """The corpus as a settings file names it: each folder added whole (none of the files
        under it removed one by one) as the folder, so files added to it later are trained on
        too, as when the folder is given to the CLI (it was saved as its files of the day); other
        files one by one. A file under several such folders is named once, by the outermost."""
        whole = [Path(f) for f in self.folders if f not in self.cut]
        out: dict[str, None] = {}
        for p in self.files:
            src = self.origin.get(p, p)  # a file a folder's walk read (one added by itself may
            roots = ([f for f in whole if Path(src).is_relative_to(f)]  # be one the walk skips:
                     if src in self.folders else [])  # a .xyz, a hidden file, read by name)
            out[str(min(roots, key=lambda f: len(f.parts))) if roots else p] = None
        return list(out)

    def drop_vanished(self) -> list[str]:
        """Take out the files that a folder added whole brought in and that are gone from disk
        now (deleted or moved since the folder was read), as a new read of the folder would: the
        folder stays whole (its settings entry is still the folder). Returns them, in corpus
        order. A file added by itself and gone stays: Start names it, as the CLI does a file
        named on its command line."""
        gone = [p for p in self.files if self.origin.get(p, p) in self.folders
                and not os.path.exists(p)]
        for p in gone:
            for d in (self.files, self.tokens, self.origin):
                d.pop(p, None)
        if gone:
            self._refresh()
            self.changed.emit()
        return gone

    def clear(self) -> None:
        """No files: what a new corpus (the sample, a settings file's) starts from. An add still
        being read lands nowhere (it landed in the new corpus: a file added just before Sample
        corpus came back after it)."""
        self.generation += 1
        for d in (self.files, self.tokens, self.origin, self.folders):
            d.clear()
        self.skipped.clear()
        self.cut.clear()

    def record_mode(self) -> str:
        """The RunSpec ``records`` value chosen (``engine.RECORDS``)."""
        return str(self.records.currentData())

    def set_record_mode(self, records: str) -> None:
        i = self.records.findData(records)
        if i >= 0:
            self.records.setCurrentIndex(i)

    def load_sample(self) -> None:
        self.clear()
        self.add_paths([str(self.sample_dir)], sync=True)

    def set_tokenizer(self, tokenizer: Any, kind: str) -> None:
        """Count tokens with an opened model's tokenizer (None: bytes; "bpe" untrained: unknown).
        The files stay; only their token counts are recomputed (in a worker)."""
        self.tokenizer, self.tokenizer_kind = tokenizer, kind
        files = dict(self.files)
        if not files:
            self._refresh()
            return
        self.pending += 1
        self.progress.setVisible(True)

        def done(result: Counted) -> None:
            self.pending -= 1
            self.progress.setVisible(self.pending > 0)
            counts, gone = result
            self.tokens.update({p: n for p, n in counts.items() if p in self.files})
            gone = [(p, why) for p, why in gone if self.files.pop(p, None) is not None]
            for p, _ in gone:
                self.tokens.pop(p, None)
            self.skipped.extend(gone)
            self._refresh()
            if gone:
                self.message = (f"{plural(len(gone), 'file')} skipped while counting tokens (they vanished "
                                f"or turned unreadable); counted the other {len(counts):,}")
                self.rejected.emit(f"{self.message}: " + "; ".join(
                    f"{Path(p).name}: {why}" for p, why in gone[:20])
                    + (" …" if len(gone) > 20 else ""))
            self.changed.emit()

        def fail(msg: str) -> None:
            self.pending -= 1
            self.progress.setVisible(self.pending > 0)
            self.rejected.emit(msg)

        run_in_thread(lambda: _count(list(files.values()), tokenizer), done, fail, owner=self)

    def add_paths(self, paths: list[str], sync: bool = False, quiet: bool = False) -> None:
        """Validate ``paths`` (in a worker unless ``sync``) and add the good files; ``quiet``
        (the last session's corpus read again): skipped files are listed, not announced."""
        tok = self.tokenizer
        self.notice_box.setVisible(False)  # it speaks of the last add only
        web = [(p, WEB_WHY) for p in paths if _is_web(p)]  # (a link dragged from a browser)
        paths = [p for p in paths if not _is_web(p)]

        def inspect() -> Inspected:
            files, rejected = _inspect(paths, tok)
            return files, [*rejected, *web]
        if sync:
            self._accept(inspect(), quiet)
            return
        self.pending += 1
        self.progress.setVisible(True)
        self.summary.setText(f"reading {len(paths)} path(s)…")
        generation = self.generation

        def done(result: tuple) -> None:
            self.pending -= 1
            self.progress.setVisible(self.pending > 0)
            if generation == self.generation:  # (else the corpus was replaced meanwhile)
                self._accept(result, quiet)
            elif not self.pending:
                self._refresh()  # (its "reading N path(s)…" line)

        def fail(msg: str) -> None:
            self.pending -= 1
            self.progress.setVisible(self.pending > 0)
            self.rejected.emit(msg)

        run_in_thread(inspect, done, fail, owner=self)

    def _accept(self, result: Inspected, quiet: bool = False) -> None:
        files, rejected = result
        keep, again = engine.first_of_each_file([f.path for f, _, _ in files], list(self.files))
        rejected = [*rejected, *((str(files[i][0].path), why) for i, why in again.items())]
        unique: dict[str, tuple[str, str]] = {}  # a FIFO dropped with its folder was listed
        for path, why in rejected:  # (and counted) twice: by the folder's walk, by its name
            unique.setdefault(os.path.normpath(path), (path, why))
        rejected = list(unique.values())
        kept = set(keep)
        files = [x for i, x in enumerate(files)  # (a path already here: added again)
                 if i in kept or str(x[0].path) in self.files]
        taken = {str(f.path) for f, _, _ in files}  # (a folder and a file in it: one file)
        known = len(taken & set(self.files))
        folders = {src for src in {x[2] for x in files} if Path(src).is_dir()}  # (one stat a
        for f, n, src in files:  # path given, not two a file: an add of 3,000 files)
            self.files[str(f.path)] = f
            self.tokens[str(f.path)] = n
            if src in folders or str(f.path) not in self.origin:  # a folder's walk read it
                self.origin[str(f.path)] = src  # (added again by name, it stays the folder's)
        for src in folders:
            self.folders[src] = None
            self.cut.discard(src)  # added again: whole again
        listed = {p for p, _ in rejected}  # a folder added twice listed its skipped files twice,
        self.skipped = [(p, why) for p, why in self.skipped  # and a file fixed since stayed
                        if p not in listed and p not in self.files
                        and self._in_corpus(p)] + rejected  # (an earlier add refused whole,
        # an empty folder: its lines stayed through every later add, removes and all)
        self._refresh()
        new = len(taken) - known
        what = ((plural(new, "file") if new else "no new file")
                + (f" ({known:,} already in the corpus)" if known else "")) if files else ""
        if rejected and not quiet:
            self.message = f"{skipped_count(rejected)} skipped"
            self.rejected.emit(f"{self.message}: " + "; ".join(
                f"{Path(p).name}: {reason(why)}" for p, why in rejected[:20])
                + (" …" if len(rejected) > 20 else ""))
            self._show_notice(what, rejected)
        self.changed.emit()
        if not quiet:
            self.added.emit(what, rejected)

    def _show_notice(self, what: str, rejected: list[tuple[str, str]]) -> None:
        head = f"Added {what}; not added:" if what else "Nothing added:"
        lines = skip_lines(rejected, NOTICE_LINES)
        more = len(rejected) - len(lines)
        if more > 0:
            lines.append(f"… and {more:,} more (the skipped list below names them all)")
        self.notice.setText("\n".join([head, *lines]))
        self.notice.setToolTip("\n".join(p for p, _ in rejected[:NOTICE_LINES]))
        self.notice_box.setVisible(True)

    def _toggle_skipped(self, on: bool) -> None:
        self.skipped_btn.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        if on and not self.skipped_list.toPlainText():
            shown = self.skipped[:MAX_SKIPPED_SHOWN]
            extra = len(self.skipped) - len(shown)
            self.skipped_list.setPlainText(
                "\n".join(f"{skip_line(p, why)}   ({p})" for p, why in shown)
                + (f"\n… and {extra} more" if extra > 0 else ""))
        self.skipped_list.setVisible(on)
        if on:  # the list names what the note did: with both, the file table kept 1.5 rows
            self.notice_box.setVisible(False)

    def held_out(self) -> dict[str, bool]:
        """Files held out -> True when the whole file is, False when only a window of it is (no
        whole file fits the held-out share), by the engine's own seeded split of whole documents
        (engine.documents.split_documents) over these files' token counts (each file one
        document, as with records "file"); ``seed``/``min_tokens`` follow the training panel."""
        if self.record_mode() != "file":
            return {}  # lines / paragraphs: examples of every file are held out, not files
        return engine.held_out_files({p: self.tokens.get(p, f.n_bytes) for p, f in self.files.items()},
                                     self.holdout, self.seed, self.min_tokens)

    def set_split(self, holdout: float, seed: int, min_tokens: int) -> None:
        if (holdout, seed, min_tokens) != (self.holdout, self.seed, self.min_tokens):
            self.holdout, self.seed, self.min_tokens = holdout, seed, min_tokens
            self._refresh()

    def set_new_run_kind(self, kind: str) -> None:
        """The tokenizer choice of a new run (auto / bytes / bpe), shown in the summary."""
        self.tokenizer_kind = kind
        self._refresh()

    def n_bytes(self) -> int:
        """Bytes of the accepted files."""
        return sum(f.n_bytes for f in self.files.values())

    def new_run_kind(self) -> str:
        """The tokenizer a new run on these files gets: "auto" made concrete by their size."""
        return engine.choose_tokenizer(self.tokenizer_kind, self.n_bytes())

    def _records_changed(self, _index: int) -> None:
        """Another split into examples: other rows, so other steps an epoch (the estimate kept
        the old count until some other setting changed)."""
        self._refresh()
        self.changed.emit()

    def _refresh(self) -> None:
        if self.previewed not in self.files:  # its file was removed: its text goes too
            self.previewed = None
            self.preview.clear()
        held = self.held_out()
        by_file = self.record_mode() == "file"
        kind = self.tokenizer_kind if self.tokenizer is not None else self.new_run_kind()
        unknown = self.tokenizer is None and kind == "bpe"
        unit = "lines" if self.record_mode() == "line" else "paragraphs"
        with bulk_fill(self.table):  # (2,193 files held the window ~2 min after a run)
            self._fill_table(held, by_file, unknown, unit)
        total = self.n_bytes()
        auto = " (auto)" if self.tokenizer is None and self.tokenizer_kind == "auto" else ""
        ntok = (f"; tokenizer bpe{auto}: trained at Start" if unknown
                else f", {plural(sum(self.tokens.values()), 'token')} ({kind}{auto})")
        whole, part = sum(held.values()), sum(not v for v in held.values())
        held_text = (", ".join([*([f"{whole} held-out"] if whole or not part else []),
                                *([f"{part} partly held-out"] if part else [])]) if by_file
                     else f"about {self.holdout:.0%} of the {unit} held-out")  # ("1 held-out"
        # of one file of which only a window is held out read as nothing left to train on)
        self.summary.setText(f"{plural(len(self.files), 'file')}, {plural(total, 'byte')}{ntok}; "
                             + held_text.replace(" held-out", NO_BREAK_HELD_OUT))
        n = len(self.skipped)
        self.skipped_btn.setVisible(n > 0)
        self.skipped_btn.setText(f"{skipped_count(self.skipped)} skipped")
        self.skipped_list.clear()
        if n == 0 and self.skipped_btn.isChecked():  # an empty list was left open, with no
            self.skipped_btn.setChecked(False)  # button to close it
            self._toggle_skipped(False)
        elif self.skipped_btn.isChecked():
            self._toggle_skipped(True)

    def _fill_table(self, held: dict[str, bool], by_file: bool, unknown: bool, unit: str) -> None:
        """One row per corpus file: name, bytes, tokens, split (``held``: the held-out files;
        ``unit``: what an example is, lines or paragraphs)."""
        self.table.setRowCount(len(self.files))
        split_tip = (f"about {self.holdout:.0%} of the tokens, whole files chosen by the seed, are "
                     "held out to measure generalisation" if by_file else
                     f"about {self.holdout:.0%} of the examples (whole {unit} chosen by the seed, "
                     "from every file) are held out to measure generalisation")
        window_tip = (f"no whole file fits about {self.holdout:.0%} of the tokens, so a window of "
                      "that size, placed by the seed inside this file, is held out to measure "
                      "generalisation; the rest of the file trains")
        names = told_apart(list(self.files))  # (two win.txt rows of two folders)
        for row, (path, f) in enumerate(self.files.items()):
            tok = "after Start" if unknown else f"{self.tokens.get(path, f.n_bytes):,}"
            split = ("train" if path not in held else "held-out" if held[path]
                     else "part held-out") if by_file else "by example"
            cells = (names[row], f"{f.n_bytes:,}", tok, split)
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col in (1, 2):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(path if col == 0 else (
                    "the BPE tokenizer is trained on the corpus when the run starts" if col == 2
                    and unknown else split_tip if col == 3 and held.get(path, True) else
                    window_tip if col == 3 else ""))
                self.table.setItem(row, col, item)

    def _preview_selected(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        if not rows:
            return
        path = list(self.files)[rows[0]]
        self.previewed = path
        try:  # (a plain open of a file since replaced by a FIFO hung the window)
            raw = engine.read_head(path, PREVIEW_BYTES, "text file")
            self.preview.setPlainText(raw.decode("utf-8", errors="replace"))
        except engine.MambaStudioError as exc:
            self.preview.setPlainText(f"cannot show it: {exc}")

    def _in_corpus(self, path: str) -> bool:
        """Whether ``path`` lies in a folder the corpus holds files of (a skipped file of it is
        part of what the corpus is)."""
        return any(path == f or Path(path).is_relative_to(f) for f in self.folders)

    def _remove_selected(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()}, reverse=True)
        keys = list(self.files)
        before = {self.origin.get(p, p) for p in self.files}
        for r in rows:
            self.files.pop(keys[r], None)
            self.tokens.pop(keys[r], None)
            if os.path.exists(keys[r]):  # (one gone from its folder leaves the folder whole:
                self.cut.update(f for f in self.folders  # a new read of it would not list it)
                                if Path(keys[r]).is_relative_to(f))
        gone = before - {self.origin.get(p, p) for p in self.files}  # paths with no file left:
        removed = {keys[r] for r in rows}  # their skipped files go too, and the other names of
        self.skipped = [(p, why) for p, why in self.skipped  # a removed file
                        if not any(p == g or Path(p).is_relative_to(g) for g in gone)
                        and engine.same_file_as(why) not in removed]
        self.table.clearSelection()  # the same rows stayed selected: a second Remove took others
        if not self.files:  # ("Added 3 files; not added: ..." stayed over an empty corpus)
            self.notice_box.setVisible(False)
        self._refresh()
        self.changed.emit()

    def _pick_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(
            self, "Add corpus files", settings.last_folder("corpus", str(Path.home())))
        if paths:
            settings.remember_folder("corpus", paths[0])
            self.add_paths(paths)

    def _pick_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(
            self, "Add a folder", settings.last_folder("corpus", str(Path.home())))
        if path:
            settings.remember_folder("corpus", path)
            self.add_paths([path])

    def _ask_sample(self) -> None:
        """The Sample corpus button: replacing a corpus of the user's own files asks first (3,007
        files went without a word)."""
        sample = self.sample_dir.resolve()
        own = [p for p in self.files if sample not in Path(p).resolve().parents]
        if (self.files and not own and not self.cut and not self.skipped and not self.pending
                and [Path(f).resolve() for f in self.folders] == [sample]):
            # (it cleared and added the same files again, and said "Added 6 files")
            self.said.emit(f"The sample corpus is already loaded "
                           f"({plural(len(self.files), 'file')})")
            return
        if own and not confirm(
                self, "Sample corpus", f"Replace the {plural(len(self.files), 'file')} of the "
                "corpus with the bundled sample texts?"):
            return
        self.load_sample()
