"""The model the next new run starts from: File > Open model… (a run, a snapshot, ours or a
local HF Mamba folder, loaded off the UI thread), the one reopened at launch, File > New model,
and what a Continue or a deleted run takes from it. A mixin of ``MainWindow``, whose panels and
status lines it uses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

import engine

from . import settings
from .workers import run_in_thread

if TYPE_CHECKING:
    from .panels.corpus_panel import CorpusPanel
    from .panels.train_panel import TrainPanel

OPENED_KEY = "model/opened"  # the model opened as the next run's start (reopened at launch: the
# panel kept its LoRA, rate and tokenizer, and the next Start trained them from random weights)


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies in it (an opened run's snapshot in its run)."""
    return Path(path) == Path(folder) or Path(folder) in Path(path).parents


class ModelFlow:
    """The opened model (``MainWindow`` mixes it in). Needs the window's panels (``train``,
    ``corpus``), ``init_dir`` / ``continue_dir``, ``runs_root``, and its ``_say`` / ``_log`` /
    ``_error`` / ``_update_next`` / ``_which_snapshot``."""

    train: TrainPanel
    corpus: CorpusPanel
    init_dir: str | None
    continue_dir: str | None
    runs_root: str
    _reopening: str | None
    _say: Callable[[str], None]
    _log: Callable[[str], None]
    _error: Callable[[str], None]
    _update_next: Callable[[], None]
    _which_snapshot: Callable[..., str | None]

    def open_model(self, path: str, reopen: bool = False) -> None:
        """Use a model folder (a run, a snapshot, ours or a local HF Mamba folder) as the
        starting point of the next new run. ``reopen``: the model opened when the app last
        closed (``_reopen_model``): Start waits for it, and another choice made meanwhile (a
        Continue, New model, another model) wins over it."""
        said: list[str] = []  # (a PEFT export without base/: which base it took, unsaid)
        self._reopening = path if reopen else None

        def load() -> engine.MambaLM:
            return engine.load_model(path, notify=said.append)

        def failed(msg: str) -> None:
            if not reopen:
                self._error(msg)
            elif self._reopening == path:  # (an ERROR at every launch, for a model now broken)
                self._forget_opened()
                self._log(f"note: the model opened last time could not be opened again: {msg}")

        def done(lm: engine.MambaLM) -> None:
            if reopen and self._reopening != path:  # the user chose something else meanwhile
                return
            self._reopening = None
            for note in said:
                self._log(f"warning: {note}")
            self.init_dir = path
            settings.save(OPENED_KEY, path)
            self.continue_dir = None
            self.train.end_resumable()
            self.train.model_override = lm.config
            self.train.show_opened_tokenizer(lm.tokenizer.kind)
            self.train.refresh()
            self.corpus.set_tokenizer(lm.tokenizer, lm.tokenizer.kind)
            self._update_next()
            snap = (f" (snapshot {lm.source.name})" if lm.source is not None
                    and engine.snapshot_run(lm.source) is not None
                    and Path(path).resolve() != lm.source.resolve() else "")  # (which one: unsaid)
            self._say(f"opened {path}{snap}: {lm.n_params:,} parameters, {lm.tokenizer.kind} "
                      "tokenizer")

        run_in_thread(load, done, failed, owner=cast(QObject, self))

    def _reopen_model(self) -> None:
        """Open again the model opened when the app was last closed (a relaunch showed its
        LoRA settings over a new model of random weights, and said nothing)."""
        path = str(settings.load(OPENED_KEY, ""))
        if not path:
            return
        if not Path(path).exists():
            self._forget_opened()
            self._log(f"note: the model opened last time, {path}, is gone; the next Start trains "
                      "a new model (File > Open model… to start from another)")
            return
        self._log(f"reopening {path}, the model opened last time (File > New model to start "
                  "from random weights)")
        self.open_model(path, reopen=True)

    def _forget_opened(self) -> None:
        """No model is reopened at the next launch (nor is one being reopened now)."""
        self._reopening = None
        settings.save(OPENED_KEY, "")

    def new_model(self) -> None:
        self._forget_opened()
        self.init_dir = self.continue_dir = None
        self.train.end_resumable()
        self._drop_opened_model()
        self._update_next()

    def _opened_words(self) -> str:
        """The opened model, and the adapter set up to train on it ("the opened model X, with
        its LoRA set-up")."""
        adapt = (" with its LoRA set-up" if self.train.lora.isChecked() else
                 " with its WSLA set-up" if self.train.wsla.isChecked() else "")
        return f"the opened model {self.init_dir}{adapt}"

    def _next_start_use(self, folder: str) -> str:
        """What deleting run ``folder`` takes from the next Start, for the Delete dialog."""
        if self.init_dir is not None and _inside(self.init_dir, folder):
            return (" It holds the model the next Start begins from (opened with File > Open "
                    "model…): that Start would train a new model from random weights.")
        if folder == self.continue_dir:
            return " The next Start continues it: that Start would train a new run instead."
        return ""

    def _drop_opened_model(self) -> None:
        """Forget an opened model's shape and tokenizer (``open_model``): the model settings and
        the corpus token counts follow the panel's preset and tokenizer choice again."""
        self.train.model_override = None
        self.train.show_opened_tokenizer(None)
        self.train.refresh()
        if self.corpus.tokenizer is not None:
            self.corpus.set_tokenizer(None, self.train.tokenizer.currentText())

    def _open_model_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(cast(QWidget, self), "Open a model, run or HF Mamba folder",
                                                settings.last_folder("model", self.runs_root))
        if path:
            settings.remember_folder("model", path)
            best = engine.best_if_not_latest(Path(path)) if engine.is_run(Path(path)) else None
            if best is not None:  # (it took the latest without a word, where Export asks)
                which = self._which_snapshot(path, best[1], action="Start from")
                if which is None:
                    return
                if which == "best":
                    path = str(best[0])
            self.open_model(path)
