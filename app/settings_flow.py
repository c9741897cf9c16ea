"""Settings files in the window: File > Save settings writes what the panels show as a TOML file
(the CLI's ``train --config``), File > Open settings lays a file's settings over what is shown and
says what it set, what it changed to fit the panel and what no box shows. A mixin of
``MainWindow``, whose panels and status line it uses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import cast

from PySide6.QtWidgets import QFileDialog, QWidget

import engine

from . import settings
from .panels.corpus_panel import CorpusPanel
from .panels.preview_panel import PreviewPanel
from .panels.train_panel import TrainPanel, setting_text
from .words import plural


class SettingsFlow:
    """The window's settings-file actions (``MainWindow`` mixes it in). Needs the window's
    panels (``train``, ``corpus``, ``preview``), ``init_dir``, ``open_model`` and its ``_say`` /
    ``_error`` / ``_log``."""

    train: TrainPanel
    corpus: CorpusPanel
    preview: PreviewPanel
    init_dir: str | None
    open_model: Callable[[str], None]
    _say: Callable[[str], None]
    _error: Callable[[str], None]
    _log: Callable[[str], None]

    def current_settings(self) -> engine.RunSettings:
        tc = self.train.train_config()
        spec = replace(self.train.run_spec(self.init_dir, tc.eval_every),
                       records=self.corpus.record_mode(), prompts=tuple(self.preview.prompt_list()))
        return engine.RunSettings(spec, tuple(self.corpus.settings_paths()))

    def save_settings_file(self, path: str) -> None:
        try:
            engine.save_settings(path, self.current_settings())
        except (OSError, ValueError, engine.MambaStudioError) as exc:
            self._error(f"could not save {path}: {exc}")
            return
        self._say(f"settings saved to {path} (python -m engine train --config {path})")

    def load_settings_file(self, path: str) -> None:
        try:
            s = engine.load_settings(path)
        except engine.MambaStudioError as exc:
            self._error(str(exc))  # (in the window's terms: it said "check the --config path")
            return
        # the settings the file names, over what the window shows (a file naming only lr reset
        # Epochs 10 -> 3, the preset and the preview prompts to their defaults)
        try:  # (a file's LoRA with WSLA ticked raised out of the slot)
            merged = engine.overlay_settings(self.current_settings(), s,
                                             f"{path} over the settings shown")
        except engine.MambaStudioError as exc:
            self._error(str(exc))
            return
        changed = self.train.set_from(merged.spec, merged.early_stopping)
        self.corpus.set_record_mode(merged.spec.records)
        self.preview.set_prompts(merged.spec.prompts)
        if "run.init" in s.named and s.spec.init:
            self.open_model(s.spec.init)
        if s.corpus and any(Path(c).exists() for c in s.corpus):
            self.corpus.clear()
            self.corpus.add_paths(list(s.corpus))
        elif s.corpus:  # none of it is there: the corpus shown stays (it was emptied)
            self._error(f"{path}: its corpus ({', '.join(Path(c).name for c in s.corpus[:3])}"
                        f"{', …' if len(s.corpus) > 3 else ''}) no longer exists; the corpus "
                        "shown stays")
        if not s.named:  # (an emptied file said "settings loaded")
            self._say(f"{path} names no settings (empty, or comments only): nothing changed")
        elif engine.defaulted(s):
            names = [k.split(".")[-1] for k in s.named]
            self._say(f"settings loaded from {path}: it sets "
                      f"{plural(len(names), 'setting')} ({', '.join(names[:6])}"
                      f"{', ...' if len(names) > 6 else ''}); the others stay as they were")
        else:
            self._say(f"settings loaded from {path}")
        extras = self.train.model_extras | self.train.extras
        if extras:  # (dropped without a word: no box shows them)
            self._log(f"settings of {path} with no box in the panel, used by the next runs: "
                      + ", ".join(f"{k} {setting_text(v)}" for k, v in extras.items()))
        if changed:
            self._error(f"settings loaded from {path}, but changed to fit the panel: "
                        + "; ".join(changed))

    def _open_settings_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            cast(QWidget, self), "Open settings", settings.last_folder("settings"),
            "Settings (*.toml)")
        if path:
            settings.remember_folder("settings", path)
            self.load_settings_file(path)

    def _save_settings_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(cast(QWidget, self), "Save settings as", str(
            Path(settings.last_folder("settings")) / "run.toml"),
            "Settings (*.toml)")
        if path:
            settings.remember_folder("settings", path)
            self.save_settings_file(path if path.endswith(".toml") else path + ".toml")
