"""Generation preview: editable prompts (one per line; edits apply at the next preview), sampling
knobs, the latest samples, and which backend produced them."""

from __future__ import annotations

import re
from dataclasses import replace

from PySide6.QtWidgets import (
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

import engine

from .. import settings
from .elided_label import ElidedLabel
from .number_boxes import FloatBox, IntBox, say_untaken

LONG_BLANK = re.compile(r"[ \t]{24,}")  # longer than any indentation


def visible_controls(text: str) -> str:
    """``text`` with each bidirectional control shown as "[U+202E]", not obeyed (a prompt
    holding U+202E was drawn reversed in the Gallery): ``engine.show_bidi``, as the CLI shows
    samples on a terminal."""
    return engine.show_bidi(text)


def blank_note(run: str) -> str:
    """"[160 spaces]", "[3 tabs]", "[12 blanks]": a run of blank characters said (the Preview
    and the Gallery said one sample's as "[161 spaces]" and "[160 blank characters]")."""
    what = "spaces" if set(run) == {" "} else "tabs" if set(run) == {"\t"} else "blanks"
    return f"[{len(run)} {what}]"


def visible_blanks(text: str) -> str:
    """``text`` with each run of 24 or more spaces/tabs followed by a note of its length (an
    early model's "The" and 160 spaces looked like an empty sample), and its bidirectional
    controls shown (``visible_controls``)."""
    return LONG_BLANK.sub(lambda m: m.group(0) + blank_note(m.group(0)), visible_controls(text))


SAMPLING_TIPS = {  # the Preview's and the Playground's sampling boxes alike
    "temperature": "Randomness: 0 always picks the most likely token; higher flattens the "
                   "distribution",
    "top_k": "Sample only among the k most likely tokens (0 = all)",
    "top_p": "Sample only among the most likely tokens whose probabilities add up to p (1 = all)",
}


class PreviewPanel(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.prompts = QPlainTextEdit(settings.load("preview/prompts", engine.DEFAULT_PROMPT))
        self.prompts.setMaximumHeight(48)  # two lines (more scroll): the plots above keep room
        self.prompts.setTabChangesFocus(True)  # Tab moves on (it typed tabs into saved prompts)
        gen = engine.GENERATION_DEFAULTS  # the Playground's defaults too
        self.temperature = FloatBox()
        self.temperature.setRange(0.0, 5.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(gen.temperature)
        settings.restore(self.temperature, "preview/temperature")
        self.top_k = IntBox()
        self.top_k.setRange(0, 100000)
        self.top_k.setValue(gen.top_k)
        settings.restore(self.top_k, "preview/top_k")
        self.top_p = FloatBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(gen.top_p)
        settings.restore(self.top_p, "preview/top_p")
        self.length = IntBox()
        self.length.setRange(1, 4000)
        self.length.setValue(160)
        settings.restore(self.length, "preview/length")
        for name, tip in SAMPLING_TIPS.items():  # (the Preview's boxes had none)
            getattr(self, name).setToolTip(tip)
        self.length.setToolTip("Tokens of each training sample")
        self.prompts.setToolTip("What the training samples continue, one prompt per line")
        self.every = IntBox()  # (a 1.7 MB corpus showed its first sample after 741 steps)
        self.every.setRange(0, 1_000_000)
        self.every.setSingleStep(50)
        self.every.setSuffix(" steps")
        self.every.setSpecialValueText("epoch ends")  # shown at 0
        self.every.setValue(engine.SAMPLE_EVERY)
        settings.restore(self.every, "preview/every")
        self.every.setToolTip("Inside an epoch, a sample once this many steps have gone by since "
                              "the last one (0: after each epoch only). Samples also come at "
                              "step 0, after every epoch and at the run's end; one still being "
                              "written is not queued behind.")
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setMinimumHeight(40)  # its default minimum (70 px) squeezed the plots
        self.output.setPlaceholderText("Samples appear at step 0, every few hundred steps "
                                       "(\"every\") and after every epoch.")
        self.tag = ElidedLabel("no preview yet")  # (a long run name made the window wider
        # than the screen; a long tag was cut mid-word, with no "…")
        self.backend = ElidedLabel("backend: —")
        self.every_label = QLabel("a sample every")  # beside the prompts: in the knobs' row it
        when = QVBoxLayout()  # widened the window by 160 px, under them it took the plots' height
        when.addWidget(self.every_label)
        when.addWidget(self.every)
        when.addStretch(1)
        prompts = QHBoxLayout()
        prompts.addWidget(self.prompts, 1)
        prompts.addLayout(when)
        knobs = QFormLayout()
        knobs.addRow("Prompts (one per line)", prompts)
        row = QHBoxLayout()
        for label, w in (("temperature", self.temperature), ("top-k", self.top_k),
                         ("top-p", self.top_p), ("tokens", self.length)):
            row.addWidget(QLabel(label))
            row.addWidget(w)
        lay = QVBoxLayout(self)
        lay.addLayout(knobs)
        lay.addLayout(row)
        head = QHBoxLayout()  # one line above the samples: what they are and what made them
        head.addWidget(self.tag, 3)  # (without a stretch of its own the backend's line took
        head.addSpacing(12)  # all the width: the tag was 0 px wide, no step ever said)
        head.addWidget(self.backend, 2)
        lay.addLayout(head)
        lay.addWidget(self.output, 1)
        self._untaken = say_untaken(self.temperature, self.top_k, self.top_p, self.length, self.every)

    def prompt_list(self) -> list[str]:
        lines = [p for p in self.prompts.toPlainText().split("\n") if p.strip()]
        return lines or [engine.DEFAULT_PROMPT]

    def set_prompts(self, prompts: tuple[str, ...]) -> None:
        """Show a run's (or a settings file's) preview prompts, one per line."""
        self.prompts.setPlainText("\n".join(prompts))

    def sampling(self) -> engine.SamplingConfig:
        """The engine's generation defaults (repetition penalty, stop at end of text) with this
        panel's knobs; seed 0 (each prompt gets its own: ``engine.sample_seed``)."""
        return replace(engine.GENERATION_DEFAULTS, temperature=self.temperature.value(),
                       top_k=self.top_k.value(), top_p=self.top_p.value(),
                       max_new_tokens=self.length.value(), seed=0)

    def show_preview(self, tag: str, text: str, backend: str) -> None:
        self.tag.set_full(f"sample — {tag}")
        self.output.setPlainText(visible_blanks(text))
        self.backend.set_full(f"backend: {backend}")

    def remember(self) -> None:
        settings.save("preview/prompts", self.prompts.toPlainText())
        settings.save("preview/temperature", self.temperature.value())
        settings.save("preview/top_k", self.top_k.value())
        settings.save("preview/top_p", self.top_p.value())
        settings.save("preview/length", self.length.value())
        settings.save("preview/every", self.every.value())
