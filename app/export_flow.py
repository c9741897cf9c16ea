"""File > Export in the window: the save dialog named with the run's step, the Best-or-Latest
question, replacing an earlier export, and the export itself off the UI thread (or between two
steps of the run in training). A mixin of ``MainWindow``, whose status line, error box and
worker it uses."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import cast

from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

import engine

from . import settings
from .confirm import confirm
from .workers import TrainWorker, export_run, run_in_thread

EXPORT_KINDS = {  # File menu item, what the save dialog's title calls it
    "merged": ("Export model (&merged)…", "a merged model"),  # (&: Alt+F then the letter)
    "adapter": ("Export LoRA &adapter (PEFT)…", "a LoRA adapter (PEFT)"),
    "gguf": ("Export model (&GGUF, for llama.cpp/Ollama/LM Studio)…", "a GGUF file (llama.cpp)"),
}
NO_RUN_SHOWN = "No run is shown: Open one in the Runs tab, or train one, to export it."


def _free(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... the first that does not exist (a save dialog given
    an existing folder opens inside it, with no name to save under)."""
    n, free = 1, path
    while free.exists() or free.is_symlink():
        n += 1
        free = path.with_name(f"{path.name}-{n}")
    return free


class ExportFlow:
    """The window's export actions (``MainWindow`` mixes it in). Needs the window's ``shown_run``,
    ``current_run``, ``worker`` and its ``_say`` / ``_error`` / ``_notice`` / ``_failed``."""

    shown_run: str | None
    current_run: str | None
    worker: TrainWorker | None
    _say: Callable[[str], None]
    _error: Callable[[str], None]
    _notice: Callable[[str], None]
    _failed: Callable[[str], None]

    @property
    def _widget(self) -> QWidget:
        """The window itself, as its dialogs' parent."""
        return cast(QWidget, self)

    def export(self, kind: str, path: str, folder: str | None = None, force: bool = False) -> None:
        """'merged' | 'adapter' | 'gguf' of ``folder`` (default: the run the window shows) into
        ``path`` (``force``: replace an earlier export there), off the UI thread."""
        folder = folder or self.shown_run
        if folder is None:
            self._error(NO_RUN_SHOWN)
            return
        card = " (its model card's held-out loss is measured first: up to 10 s)" if \
            kind != "gguf" else ""  # (~10 s with no word of why, then a note it was dropped)
        self._say(f"writing the {kind} export to {path}…{card}")
        if self.worker is not None and folder == self.current_run:
            self.worker.request(kind, path, force)  # between two steps of the running run
            return
        if self.worker is not None and str(engine.snapshot_run(folder)) == self.current_run:
            self.worker.request(kind, path, force, source=folder)  # a snapshot of it: read
            return  # between two steps, so that no save prunes it meanwhile
        def done(warnings: list[str]) -> None:
            for w in warnings:
                self._notice(f"warning: {w}")
            src, run = Path(folder), engine.snapshot_run(folder)
            kept = engine.expected_snapshot(src) if run is None else None  # (a run's latest:
            what = (f"run {run.name}, snapshot {src.name}" if run else  # its step was unsaid)
                    f"run {src.name}" + (f", step {kept[1]}" if kept else ""))
            self._say(f"{kind} written to {path} (from {what})")

        run_in_thread(lambda: export_run(folder, kind, path, force), done, self._failed,
                      owner=self._widget)  # (in the window's terms: it named --force)

    def _run_step(self, folder: str) -> str:
        """The step an export of ``folder`` starts from, for the save dialog's title."""
        run = self.worker.run_obj if self.worker is not None else None
        if run is not None and str(run.folder) == folder:
            return f"training, step {run.step}: the weights at Save"
        ptr = engine.read_pointer(Path(folder))
        return f"step {ptr['step']}" if ptr else "no snapshot yet"

    def _export_dialog(self, folder: str | None, kind: str) -> None:
        """Export ``folder`` (default: the run the window shows), named with its step in the
        title. Merged/adapter: type a new folder name (it is created) or pick an empty one; GGUF:
        a file name (default ``<run>.gguf``). Starts where the last export went, else in the
        user's Documents folder (the runs folder is hidden: an export left there could not be
        found from the window); replacing an earlier export asks first."""
        folder = folder or self.shown_run
        if folder is None or not Path(folder).is_dir():
            self._error(NO_RUN_SHOWN if folder is None else f"cannot export {folder}: it is gone")
            return
        name = Path(folder).name
        step = self._run_step(folder)
        source = folder
        run = self.worker.run_obj if self.worker is not None and folder == self.current_run \
            else None
        now = run.step if run is not None else None  # the live weights' step, while it trains
        best = engine.best_if_not_latest(Path(folder), now)
        if best is not None:  # the latest weights were exported even when they had overfit
            which = self._which_snapshot(folder, best[1], now)
            if which is None:
                return
            if which == "best":
                source, step = str(best[0]), f"best, step {best[1]['step']}"
                name = f"{name}-step-{best[1]['step']}"
        title = f"Export run {Path(folder).name} ({step}) as {EXPORT_KINDS[kind][1]}"
        where = Path(settings.last_folder("export"))
        if kind == "gguf":
            path, _ = QFileDialog.getSaveFileName(
                self._widget, title, str(where / f"{name}.gguf"), "GGUF (*.gguf)",
                options=QFileDialog.Option.DontConfirmOverwrite)
            if path and not path.endswith(".gguf") and not Path(path).is_dir():
                path += ".gguf"
            earlier = bool(path) and Path(path).is_file()  # the engine refuses it otherwise
            if earlier and not engine.is_gguf(Path(path)):  # (it asked "Replace the earlier
                self._error(f"{path}: exists and is not a GGUF file; choose a new file name "
                            "(only an earlier GGUF export is ever replaced)")  # export?", then
                return  # refused it)
            what = ""  # (the GGUF question)
        else:
            path, _ = QFileDialog.getSaveFileName(
                self._widget, title + " into a new folder", str(_free(where / f"{name}-{kind}")),
                options=QFileDialog.Option.DontConfirmOverwrite)
            chosen = Path(path)
            if kind == "merged" and chosen.suffix.lower() == ".gguf" and not chosen.is_dir():
                if not confirm(self._widget, "Export", f"{chosen.name} is a GGUF file's name, and "
                               "this export writes a Hugging Face model folder. Write one GGUF "
                               "file (for llama.cpp, Ollama, LM Studio) instead? (No writes "
                               "nothing: a folder's name needs no .gguf)"):
                    return  # (a folder named m.gguf was written without a word)
                self._export_dialog_done("gguf", path, source, Path(path).is_file())
                return
            if (path and chosen.name == chosen.parent.name and not chosen.exists()
                    and any(chosen.parent.iterdir()) and not engine.not_export_files(chosen.parent)):
                path = str(chosen.parent)  # Save on an earlier export's name steps into it
            earlier = bool(path) and Path(path).is_dir() and any(Path(path).iterdir())
            other = engine.not_export_files(path) if earlier else []
            if other:  # it asked to replace "the earlier export", then named a CLI flag
                self._error(f"{path} holds files an export does not write "
                            f"({', '.join(other[:3])}{', ...' if len(other) > 3 else ''}); "
                            "choose a new folder name (a folder of yours is never emptied)")
                return
            what = f"{path} holds an earlier export. Replace it?"
        if not path:
            return
        self._export_dialog_done(kind, path, source, earlier, what)

    def _export_dialog_done(self, kind: str, path: str, source: str, earlier: bool,
                            what: str = "") -> None:
        """Export as chosen in the dialog; ``earlier``: an export is there (asks ``what`` or,
        for GGUF, whether to replace it)."""
        base = next((p for p in Path(path).parents if p.is_dir()), None)
        if base is not None and os.access(base, os.W_OK | os.X_OK):  # the next export starts
            settings.remember_folder("export", path)  # there (a read-only one: it started there)
        force = False
        if earlier:
            if not confirm(self._widget, "Export", what or f"{path} exists. Replace the earlier export? "
                           "(A file that is not a GGUF export is never replaced.)"):
                return
            force = True
        self.export(kind, path, source, force)

    def _which_snapshot(self, folder: str, best: dict[str, object],
                        training: int | None = None, action: str = "Export") -> str | None:
        """Ask whether to export (``action``: or start from) the best snapshot or the latest
        weights (``training``: the step of the running run's current ones, which move on until
        the export is made between two steps after the save dialog): "best", "latest" or None
        (cancelled)."""
        latest = engine.read_pointer(Path(folder)) or {}
        val = latest.get("val_loss")
        now = f"held-out {val:.4f}" if isinstance(val, float) else "held-out loss not measured"
        kept = engine.expected_snapshot(Path(folder))  # what "latest" loads (step-165 gone:
        if kept is not None and kept[2]:  # step 154, where the question said 165)
            latest, now = {"step": kept[1]}, kept[2]
        last_step = training if training is not None else latest.get("step")
        what = (f"it is training (step {last_step} as this opened): Current exports its weights "
                "when you press Save in the next dialog" if training is not None
                else f"its latest weights are from step {last_step} ({now})")
        box = QMessageBox(QMessageBox.Icon.Question, "Export" if action == "Export" else
                          "Open model",
                          f"{Path(folder).name}: its lowest held-out loss, {best['val_loss']:.4f}, "
                          f"was at step {best['step']}; {what}. {action} which?", parent=self._widget)
        b = box.addButton(f"Best (step {best['step']})", QMessageBox.ButtonRole.AcceptRole)
        last = box.addButton("Current (at Save)" if training is not None else f"Latest (step {last_step})",
                             QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(b)
        box.exec()
        return "best" if box.clickedButton() is b else "latest" if box.clickedButton() is last \
            else None
