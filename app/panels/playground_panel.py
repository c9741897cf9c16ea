"""Playground tab: pick a run (or any model / HF Mamba folder), type a prompt, watch the tokens
stream in, with temperature, top-k, top-p, repetition penalty, length, seed and backend."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QThread, Signal
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

import engine

from .. import settings
from ..words import in_window_terms
from ..workers import GenerateWorker
from .number_boxes import FloatBox, IntBox, say_untaken
from .preview_panel import SAMPLING_TIPS, visible_controls

BACKEND_TIPS = {"auto": "a hardware GPU when there is one, else the CPU step",
                "cpu": "the CPU recurrent step (Numba)",
                "gpu": "any wgpu adapter, including lavapipe (Vulkan on the CPU, slow)"}


KEPT_PROMPT_CHARS = 100_000  # the longest prompt kept for the next launch


class PlaygroundPanel(QWidget):
    finished = Signal(str)

    def __init__(self, runs_root: str) -> None:
        super().__init__()
        self.runs_root = runs_root
        self.source = QComboBox()
        self.source.setEditable(True)
        self.source.setToolTip("A run folder (its latest snapshot), a snapshot, or any model "
                               "folder, including a Hugging Face Mamba checkpoint")
        self.browse = browse = QPushButton("Browse…")
        browse.setToolTip("Pick a model or run folder")
        browse.clicked.connect(self._browse)
        self.prompt = QPlainTextEdit(settings.load("playground/prompt", engine.DEFAULT_PROMPT))
        self.prompt.setMaximumHeight(70)
        self.prompt.setTabChangesFocus(True)  # Tab moves on (it typed tabs into the prompt)
        self.prompt.setToolTip("The text the model continues")
        gen = engine.GENERATION_DEFAULTS  # the training previews' (Gallery) defaults too
        self.temperature = FloatBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(gen.temperature)
        self.top_k = IntBox()
        self.top_k.setRange(0, 100000)
        self.top_k.setValue(gen.top_k)
        self.top_p = FloatBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(gen.top_p)
        for name, tip in SAMPLING_TIPS.items():
            getattr(self, name).setToolTip(tip)
        self.rep = FloatBox()
        self.rep.setRange(1.0, 5.0)
        self.rep.setSingleStep(0.05)
        self.rep.setValue(gen.repetition_penalty)
        self.rep.setToolTip(f"Makes tokens seen in the last {gen.repetition_window} less likely "
                            "(1 = off); stops greedy output from looping")
        self.max_tokens = IntBox()
        self.max_tokens.setRange(1, 100000)
        self.max_tokens.setValue(gen.max_new_tokens)
        self.max_tokens.setToolTip("How many tokens to generate")
        self.seed = IntBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setToolTip("Same seed + same settings = same text")
        self.stop_at_end = QCheckBox("stop at end of text")
        self.stop_at_end.setChecked(gen.stop_at_eos)
        self.stop_at_end.setToolTip("End where the model writes its end-of-text token (training "
                                    "puts one after every document or example); off: always "
                                    "generate the full number of tokens")
        self.backend = QComboBox()
        self.backend.addItems(list(BACKEND_TIPS))
        self.backend.setToolTip("; ".join(f"{k}: {v}" for k, v in BACKEND_TIPS.items()))
        for key, box in self._knobs().items():  # as the last Generate left them (only the
            settings.restore(box, f"playground/{key}")  # prompt came back)
        self.generate_btn = QPushButton("Generate")
        self.generate_btn.setToolTip("Generate (Ctrl+G)")
        self.generate_btn.clicked.connect(self.generate)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("Stop after the current token")
        self.stop_btn.clicked.connect(self.stop)
        self.stop_btn.setEnabled(False)
        self.output = QPlainTextEdit()
        self._made_with = ""  # the model the output's text was generated with
        self.output.setReadOnly(True)
        self.output.setPlaceholderText("Generated text streams here.")
        self.status = QLabel("pick a run or a model folder")
        self.status.setWordWrap(True)
        src = QHBoxLayout()
        src.addWidget(QLabel("Model"))
        src.addWidget(self.source, 1)
        src.addWidget(browse)
        knobs = QGridLayout()
        for i, (label, w) in enumerate((("temperature", self.temperature), ("top-k", self.top_k),
                                        ("top-p", self.top_p), ("repetition", self.rep),
                                        ("tokens", self.max_tokens), ("seed", self.seed),
                                        ("backend", self.backend))):
            knobs.addWidget(QLabel(label), i // 4, 2 * (i % 4))
            knobs.addWidget(w, i // 4, 2 * (i % 4) + 1)
        knobs.addWidget(self.stop_at_end, 1, 6, 1, 2)
        form = QFormLayout()
        form.addRow("Prompt", self.prompt)
        actions = QHBoxLayout()
        actions.addWidget(self.generate_btn)
        actions.addWidget(self.stop_btn)
        actions.addWidget(self.status, 1)
        lay = QVBoxLayout(self)
        lay.addLayout(src)
        lay.addLayout(form)
        lay.addLayout(knobs)
        lay.addLayout(actions)
        lay.addWidget(self.output, 1)
        self._untaken = say_untaken(self.temperature, self.top_k, self.top_p, self.rep,
                                    self.max_tokens, self.seed)
        self.gen_thread: QThread | None = None
        self.worker: GenerateWorker | None = None
        self._next_source: str | None = None  # a model chosen while generating, for after
        self.source.currentTextChanged.connect(self._source_changed)
        self.refresh_runs()

    def refresh_runs(self) -> None:
        current = self.source.currentText()
        self.source.blockSignals(True)
        self.source.clear()
        self.source.addItems([str(r.path) for r in engine.list_runs(self.runs_root)
                              if r.status != "broken"])
        if current:
            self.source.setCurrentText(current)
        self.source.blockSignals(False)
        if self.source.currentText() != current:  # the combo picked a run (the last
            self._source_changed(self.source.currentText())  # generation's line stays else)

    def set_source(self, folder: str) -> None:
        if self.gen_thread is not None:  # (Open or a run's end changed the locked box while
            self._next_source = folder  # another model's text streamed on): after it
            return
        if folder and folder == self.source.currentText():  # the same model: the line stays
            return  # (the end of the run it generated from wiped its generation's summary)
        self.source.setCurrentText(folder)
        self._source_changed(folder)

    def _source_changed(self, text: str) -> None:
        """The status line says what Generate will use (it said "pick a run" even with one
        picked: after a run ended, after Open in the Runs tab, and at start-up)."""
        if self.gen_thread is not None:
            return  # a generation in flight keeps its own status
        text = text.strip()
        made = self._made_with  # the text below stays, so it says whose it is when that changed
        note = (f" · the text below is from {Path(made).name}"
                if made and made != text and self.output.toPlainText() else "")
        self.status.setText((f"model: {text} — Generate (Ctrl+G)" if text
                             else "pick a run or a model folder") + note)

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a model or run folder", self.runs_root)
        if path:
            self.set_source(path)

    def _knobs(self) -> dict[str, QWidget]:
        """The sampling boxes, by their settings key."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p,
                "repetition": self.rep, "tokens": self.max_tokens, "seed": self.seed,
                "stop_at_end": self.stop_at_end, "backend": self.backend}

    def remember(self) -> None:
        """The prompt and the sampling boxes, for the next launch."""
        prompt = self.prompt.toPlainText()  # (a pasted 854 KB prompt went into the settings
        # file and slowed every launch by ~2 s: one longer than this is not kept)
        settings.save("playground/prompt", prompt if len(prompt) <= KEPT_PROMPT_CHARS
                      else engine.DEFAULT_PROMPT)
        for key, box in self._knobs().items():
            settings.save_box(box, f"playground/{key}")

    def sampling(self) -> engine.SamplingConfig:
        return replace(engine.GENERATION_DEFAULTS,
                       temperature=self.temperature.value(), top_k=self.top_k.value(),
                       top_p=self.top_p.value(), max_new_tokens=self.max_tokens.value(),
                       seed=self.seed.value(), repetition_penalty=self.rep.value(),
                       stop_at_eos=self.stop_at_end.isChecked())

    def generate(self) -> None:
        if self.gen_thread is not None:
            return
        source = self.source.currentText().strip()
        if not source:
            self.status.setText("Pick a run or a model folder first.")
            return
        prompt = self.prompt.toPlainText()
        self.remember()
        self.output.setPlainText(visible_controls(prompt))
        self._made_with = ""  # the prompt alone, until the model's text follows it
        self.worker = GenerateWorker(source, prompt, self.sampling(), self.backend.currentText())
        self.gen_thread = QThread(self)
        self.worker.moveToThread(self.gen_thread)
        self.gen_thread.started.connect(self.worker.run)
        self.worker.piece.connect(self._piece)
        self.worker.progress.connect(self.status.setText)
        self.worker.failed.connect(self._failed)
        self.worker.done.connect(self._done)
        self.generate_btn.setEnabled(False)
        self.stop_btn.setEnabled(True)
        self.source.setEnabled(False)  # (another model typed mid-generation read as in use)
        self.browse.setEnabled(False)
        self.status.setText("loading the model…")
        self.gen_thread.start()

    def _piece(self, text: str) -> None:
        if self.worker is not None:
            self._made_with = self.worker.source
        self.output.moveCursor(QTextCursor.MoveOperation.End)
        self.output.insertPlainText(visible_controls(text))
        if not self.status.text().startswith("generating"):  # (the count of tokens stays)
            self.status.setText("generating…")

    def _failed(self, msg: str) -> None:
        """A generation that failed: its error in the window's terms (a model gone from disk
        said "pass a run folder", the CLI's)."""
        self.status.setText(in_window_terms(msg))

    def _done(self, summary: str) -> None:
        if summary != "failed":
            self.status.setText(summary)
        elif not self._made_with:  # nothing generated (a wrong model path): the prompt alone
            self.output.clear()  # read as if generation had started; the status says why
        if self.gen_thread is not None:
            self.gen_thread.quit()
            self.gen_thread.wait()
        self.gen_thread = self.worker = None
        self.generate_btn.setEnabled(True)
        self.stop_btn.setEnabled(False)
        self.source.setEnabled(True)
        self.browse.setEnabled(True)
        said = self.status.text()
        if self._next_source is not None:  # chosen while it generated
            self.set_source(self._next_source)
            self._next_source = None
        elif not Path(self._made_with or ".").exists():  # its run was deleted while generating:
            self.refresh_runs()  # the list loses it, and the box is emptied, not swapped to
            self.source.blockSignals(True)  # another run the next Generate would use
            self.source.setCurrentText("")
            self.source.blockSignals(False)
        self.status.setText(said)  # the summary stays
        self.finished.emit(summary)

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.stop_btn.setEnabled(False)  # (pressed: it stayed on until the end)
            if self.status.text().startswith("reading the prompt"):
                self.status.setText("stopping…")  # (within a piece of the prompt: ~0.1 s)
