"""Model and training settings: preset or custom sizes, tokenizer, hyper-parameters, early
stopping, LoRA targets (with a live trainable-parameter count of the model that will train) and
the WSLA fast-adapt toggle. Every control has a one-sentence tooltip."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

import engine

from .. import settings
from .number_boxes import GBox, float_box, int_box, say_untaken

OWN_TOKENIZER_TIP = {
    "opened": "The opened model's own tokenizer is used (File > New model to choose one for a "
              "new model)",
    "continue": "The run's own tokenizer is used (File > New model to choose one for a new run)",
    "new": "The opened model's own tokenizer is used",
}
# A new key: versions before tokenizer "auto" saved "train/tokenizer" (bytes) on every Start, so
# the new default would never have reached anyone who had trained once.
TOKENIZER_KEY = "train/tokenizer_choice"

TIPS = {
    "preset": "Model size: tiny/small/medium presets, or custom sizes below",
    "d_model": "Width of the model (hidden size); parameters grow with its square",
    "n_layer": "Number of Mamba blocks stacked",
    "d_state": "Size of each channel's recurrent state (N in the selective scan)",
    "tokenizer": ("auto (default): bytes below 4 MB of corpus, a BPE trained on it from 4 MB "
                  "(with twice the learning rate); bytes: one token per UTF-8 byte (small corpora: "
                  "BPE overfits below ~2 MB); bpe: on 8 MB of code it reached 19 % below a 5-gram "
                  "model in 7 minutes, bytes 3 %"),
    "bpe_vocab": "Number of tokens the BPE tokenizer learns (bpe only)",
    "init_scheme": "Weight initialisation of a new model (not used when starting from opened "
                   "weights); reference = the mamba_ssm / Hugging Face init",
    "epochs": "Passes over the training text",
    "lr": ("Peak learning rate (after warmup; held, then decayed over the last 20 %). Left at "
           "the preset's value, a new model whose tokenizer is BPE uses twice this rate (not a run "
           "from opened weights, nor Continue)"),
    "batch": "Sequences per micro-batch; more uses more memory and fewer steps per epoch",
    "seq_len": "Tokens per training sequence (the context the model learns from)",
    "accum": "Gradient accumulation: micro-batches summed into one optimizer step "
             "(a larger effective batch without more memory)",
    "weight_decay": "AdamW weight decay: pulls weights toward zero each step",
    "clip": "Gradient clipping: gradients with a larger norm are scaled down to this (0 = off)",
    "seed": "Random seed of initialisation, shuffling and dropout (same seed = same run)",
    "max_steps": "Stop after this many optimizer steps in total (no limit: all epochs)",
    "eval_every": "Measure held-out loss every N steps; auto keeps it under 10% of training time",
    "holdout": "Share of the corpus kept out of training to measure held-out loss: whole "
               "documents chosen by the seed (the Corpus tab marks them); 0: none",
    "patience": "Stop when held-out loss has not improved for this many evaluations (the best "
                "snapshot is kept)",
    "target_loss": "Stop as soon as held-out loss reaches this (nats per token)",
    "checkpointing": "Recompute activations in the backward pass: less memory, ~30% slower",
    "lora": "LoRA: train small low-rank adapters beside frozen weights instead of all weights",
    "rank": "LoRA rank: the adapters' inner size; higher fits more, trains more parameters",
    "alpha": "LoRA alpha: the adapters' output is scaled by alpha / rank",
    "lora_dropout": "Dropout on the adapters' input while training (regularisation)",
    "wsla": "WSLA fast-adapt: train only x_proj (the selection projection) with each weight "
            f"moving at most {engine.WSLA_MAX_DELTA:g} per step; quick style adaptation of a "
            "trained model",
}


QT_INT_MAX = 2**31 - 1  # a spin box's largest value


def _ints(rng: engine.Range) -> tuple[int, int]:
    """An engine range of whole numbers as a spin box can hold it (a seed up to 2^63 - 1 is
    typed into a box of at most 2^31 - 1)."""
    return int(rng.lo), int(min(rng.hi, QT_INT_MAX))


# LoRA and WSLA adapt trained weights: off (and saying why) while the next Start is a new model
NOT_ADAPTABLE = {
    "new": ("{} adapts a trained model: choose Start from one first (File > Open model or HF Mamba "
            "folder…); a new model from random weights trains all its weights"),
    "continue": "Continue trains what the run trained: {} as the run was started",
}


SCHEME_TIPS = {  # per-item tooltips; a scheme the engine adds later shows its name only
    "default": "N(0, 1) embeddings with a 1/sqrt(d_model) logit scale: learns fast at small widths",
    "reference": "mamba_ssm / Hugging Face init: N(0, 0.02) embeddings, logit scale 1",
    "unit-embeddings": "N(0, 1) embeddings, logit scale 1: the first loss is about d_model nats",
}


KEPT_ON_CONTINUE = ("A continued run keeps its own value (shown here); Start a new run, or open "
                    "the run's weights (File > Open model), to change it")


def _value(w: QWidget) -> object:
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QCheckBox):
        return w.isChecked()
    return w.value()  # type: ignore[attr-defined]


def _set_value(w: QWidget, v: object) -> None:
    if isinstance(w, QComboBox):
        w.setCurrentText(str(v))
    elif isinstance(w, QCheckBox):
        w.setChecked(bool(v))
    else:
        w.setValue(v)  # type: ignore[attr-defined]


# settings with no box in the panel: a loaded settings file's values are kept for the next runs
# of the session, and saved with the settings (they were dropped: a file's warmup_steps 50
# trained with 100, its holdout 0.3 with 0.1 before the box came; its beta2, shuffle and the
# model's d_conv or expand were still dropped, so the window trained another model than --config)
BOXED_TRAIN = ("epochs", "lr", "batch_size", "seq_len", "grad_accum", "weight_decay",
               "max_grad_norm", "seed", "max_steps", "activation_checkpointing", "wsla", "lora",
               "eval_every")
NO_BOX_TRAIN = tuple(f.name for f in fields(engine.TrainConfig) if f.name not in BOXED_TRAIN)
NO_BOX_RUN = ("autosave_steps", "autosave_minutes", "keep")  # (and early stopping's min_delta)
BOXED_MODEL = ("d_model", "n_layer", "d_state")  # a file's other [model] sizes: model_extras


def setting_text(value: Any) -> str:
    """A setting's value as a settings file writes it (True: "true", 0.0003: "0.0003", a seed
    3000000000 as it is: ``:g`` wrote "3e+09")."""
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" \
        if isinstance(value, float) else str(value)


def _training_preset(shown: str, before: str = engine.DEFAULT_PRESET) -> str:
    """The preset whose training defaults a panel preset trains with: "custom" sizes keep the
    preset they were chosen from (``run_spec`` names it; medium -> custom raised the rate from
    medium's 2e-3 to small's 3e-3 for a model of medium's shape)."""
    return shown if shown in engine.PRESET_DEFAULTS else before


class TrainPanel(QWidget):
    changed = Signal()

    def __init__(self) -> None:
        super().__init__()
        # --- model
        self.preset = QComboBox()
        self.preset.addItems([*engine.PRESET_DEFAULTS, "custom"])  # the engine's table
        for i, name in enumerate(engine.PRESET_DEFAULTS):  # what each preset learns, how fast
            self.preset.setItemData(i, engine.PRESET_DEFAULTS[name].learns,
                                    Qt.ItemDataRole.ToolTipRole)
        sizes = engine.MODEL_RANGES  # the engine's ranges, as a settings file's [model] is
        self.d_model = int_box(*sizes["d_model"], 128, 16)  # checked (d_model 7 trained in the
        self.n_layer = int_box(*sizes["n_layer"], 4)  # CLI and became 16 in the window)
        self.d_state = int_box(*sizes["d_state"], 16)
        self.tokenizer = QComboBox()
        self.tokenizer.addItems(["auto", "bytes", "bpe"])
        self.bpe_vocab = int_box(*_ints(engine.BPE_VOCAB_RANGE), engine.RunSpec.bpe_vocab, 256)
        self.init_scheme = QComboBox()
        for i, name in enumerate(engine.INITS):  # read now: the engine owns the list
            self.init_scheme.addItem(name)
            self.init_scheme.setItemData(i, SCHEME_TIPS.get(name, name), Qt.ItemDataRole.ToolTipRole)
        self.init_scheme.setCurrentText(engine.RunSpec.init_scheme)
        self.model_source = QLabel("new model")
        model = QGroupBox("Model")
        mf = QFormLayout(model)
        mf.addRow("Preset", self.preset)
        mf.addRow("d_model", self.d_model)
        mf.addRow("Layers", self.n_layer)
        mf.addRow("d_state", self.d_state)
        mf.addRow("Tokenizer", self.tokenizer)
        mf.addRow("BPE vocab", self.bpe_vocab)
        mf.addRow("Weight init", self.init_scheme)
        mf.addRow("Start from", self.model_source)
        # --- training
        d = engine.PRESET_DEFAULTS[engine.DEFAULT_PRESET]  # the engine's table, not a copy
        r = engine.TRAIN_RANGES  # the engine's ranges, as the CLI's flags and a file's are checked
        self.epochs = int_box(*_ints(r["epochs"]), engine.DEFAULT_EPOCHS)
        self.lr = GBox(1e-8, r["lr"].hi, d.lr, 1e-3)  # (the engine takes (0, 10])
        self.batch = int_box(*_ints(r["batch_size"]), d.batch_size)
        self.seq_len = int_box(*_ints(r["seq_len"]), d.seq_len, 32)
        self.accum = int_box(*_ints(r["grad_accum"]), 1)
        self.weight_decay = GBox(*r["weight_decay"][:2], d.weight_decay, 0.01)
        self.clip = GBox(*r["max_grad_norm"][:2], engine.TrainConfig.max_grad_norm, 0.1)
        self.seed = int_box(*_ints(r["seed"]), 0)
        self.max_steps = int_box(0, _ints(r["max_steps"])[1], 0)
        self.max_steps.setSpecialValueText("no limit")
        self.eval_every = int_box(*_ints(r["eval_every"]), 0)
        self.eval_every.setSpecialValueText("auto")  # (its tooltip says what auto does: the
        # longer text widened the panel past its scroll area at 1024x700)
        held = engine.RUN_RANGES["holdout"]  # the engine's ranges (the CLI's and a file's)
        self.holdout = float_box(held.lo, held.hi, engine.RunSpec.holdout, 2, 0.05)
        self.holdout.setSpecialValueText("none")
        self.checkpointing = QCheckBox("activation checkpointing")
        early = engine.EARLY_RANGES
        self.patience = int_box(int(early["patience"].lo), int(early["patience"].hi), 0)
        self.patience.setSpecialValueText("off")
        self.target_loss = float_box(early["target_loss"].lo, early["target_loss"].hi, 0.0, 3, 0.05)
        self.target_loss.setSpecialValueText("none")
        train = QGroupBox("Training")
        tf = QFormLayout(train)
        for label, w in (("Epochs", self.epochs), ("Learning rate", self.lr), ("Batch", self.batch),
                         ("Sequence length", self.seq_len), ("Grad. accumulation", self.accum),
                         ("Weight decay", self.weight_decay), ("Grad-norm clip", self.clip),
                         ("Seed", self.seed), ("Max steps", self.max_steps),
                         ("Held-out fraction", self.holdout),
                         ("Held-out eval every", self.eval_every),
                         ("Early stop: patience", self.patience),
                         ("Early stop: target loss", self.target_loss)):
            tf.addRow(label, w)
        tf.addRow(self.checkpointing)
        # --- LoRA / WSLA
        self.lora = QCheckBox("LoRA adapters (base frozen)")
        self.targets = {t: QCheckBox(t) for t in engine.LORA_TARGETS}
        for t in engine.LoRAConfig.targets:
            self.targets[t].setChecked(True)
        lora_r = engine.LORA_RANGES
        self.rank = int_box(*_ints(lora_r["rank"]), engine.LoRAConfig.rank)
        self.alpha = float_box(0.01, lora_r["alpha"].hi, engine.LoRAConfig.rank, 2, 1.0)  # (the
        # engine takes (0, hi]; no alpha means the rank, scale 1)
        self.lora_dropout = float_box(*lora_r["dropout"][:2], engine.LoRAConfig.dropout, 3, 0.05)
        self.wsla = QCheckBox("WSLA fast-adapt (x_proj only)")
        self.trainable = QLabel()
        self.trainable.setWordWrap(True)  # a long warning wraps instead of widening the panel
        self.model_override: engine.MambaConfig | None = None  # the opened model's config
        self._tokenizer_choice: str | None = None  # the new-run choice while weights are opened
        self._dims_choice: tuple[int, int, int] = (0, 0, 0)  # ... and its d_model, layers, d_state
        adapt = QGroupBox("Adaptation")
        grid = QGridLayout(adapt)
        grid.addWidget(self.lora, 0, 0, 1, 4)
        targets = QGridLayout()  # three per row keeps the panel narrow (no sideways scroll)
        for i, cb in enumerate(self.targets.values()):
            targets.addWidget(cb, i // 3, i % 3)
        grid.addLayout(targets, 1, 0, 1, 4)
        grid.addWidget(QLabel("rank"), 3, 0)
        grid.addWidget(self.rank, 3, 1)
        grid.addWidget(QLabel("alpha"), 3, 2)
        grid.addWidget(self.alpha, 3, 3)
        grid.addWidget(QLabel("dropout"), 4, 0)
        grid.addWidget(self.lora_dropout, 4, 1)
        grid.addWidget(self.wsla, 5, 0, 1, 4)
        grid.addWidget(self.trainable, 6, 0, 1, 4)
        lay = QVBoxLayout(self)
        lay.addWidget(model)
        lay.addWidget(train)
        lay.addWidget(adapt)
        lay.addStretch(1)
        self.vocab_hint = 257
        self.corpus_bytes = 0  # the corpus panel's total: what tokenizer "auto" resolves by
        self._before_resume: dict[str, object] | None = None  # see show_resumable
        # what the next Start trains from: "new" (random weights), "opened" weights or "continue";
        # LoRA/WSLA as last ticked on opened weights come back once weights are opened again
        self.start = "opened"
        self._adapt_wanted = (False, False)
        for name, tip in TIPS.items():
            getattr(self, name).setToolTip(tip)
        self._target_tips: dict[str, str] = {}
        for t, cb in self.targets.items():
            note = (" (PEFT cannot load this one on Mamba: export merged)"
                    if t in engine.PEFT_REFUSES else
                    f" (PEFT on {engine.PEFT_PARTIAL[t]} skips this one un-merged: export "
                    "merged for an exact model)" if t in engine.PEFT_PARTIAL else "")
            self._target_tips[t] = f"Add a LoRA adapter to {t}{note}"
            cb.setToolTip(self._target_tips[t])
        self.model_source.setWordWrap(True)
        self.model_source.setToolTip("What the next Start does")
        for box in (*self.findChildren(QAbstractSpinBox), *self.findChildren(QComboBox)):
            box.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the wheel does not focus them ...
            box.installEventFilter(self)  # ... nor change them: see eventFilter
        self._untaken = say_untaken(*self.findChildren(QAbstractSpinBox))
        self._restore()
        self._defaults_of = _training_preset(self.preset.currentText())
        self.extras: dict[str, Any] = {}  # NO_BOX_TRAIN / NO_BOX_RUN values from a settings file
        self.continue_extras: dict[str, Any] = {}  # those a file opened for the chosen Continue
        # set that a resume may change (warmup_steps, autosave, min_delta): only those reach it
        self.model_extras: dict[str, Any] = {}  # its [model] settings past BOXED_MODEL (custom)
        self.preset.currentTextChanged.connect(self._follow_preset)
        for combo in (self.preset, self.tokenizer, self.init_scheme):
            combo.currentIndexChanged.connect(self.refresh)
        for w in (self.d_model, self.n_layer, self.d_state, self.rank, self.bpe_vocab):
            w.valueChanged.connect(self.refresh)
        for w in (self.batch, self.seq_len, self.accum, self.epochs, self.lr, self.max_steps,
                  self.eval_every, self.holdout, self.patience, self.target_loss):  # (early
            # stopping changed on a Continue was left out of the Next Start line)
            w.valueChanged.connect(lambda _v: self.changed.emit())
        self.checkpointing.toggled.connect(lambda _v: self.changed.emit())
        for cb in (self.lora, self.wsla, *self.targets.values()):
            cb.toggled.connect(self.refresh)
        self.refresh()

    def _training_boxes(self) -> dict[str, QSpinBox | QDoubleSpinBox]:
        """The boxes of the preset's training defaults, by TrainConfig field."""
        return {"lr": self.lr, "batch_size": self.batch, "seq_len": self.seq_len,
                "weight_decay": self.weight_decay}

    def _follow_preset(self, name: str) -> None:
        """A new preset: each training box at the old preset's default takes the new one's
        (``engine.follow_preset``, as a settings file naming a preset does; medium trained at
        small's rate, and so without the BPE doubling that a rate at the default gets); one set
        by hand stays. A continued run's values are its own (``show_resumable`` sets them)."""
        if name != "custom" and self.start != "continue":  # a preset's shape is its own: a
            self.model_extras = {}  # file's d_conv went on to every later custom model, unshown
        old, self._defaults_of = self._defaults_of, _training_preset(name, self._defaults_of)
        if self.start == "continue" or old == self._defaults_of:
            return
        boxes = self._training_boxes()
        moved = engine.follow_preset({k: b.value() for k, b in boxes.items()}, old,
                                     self._defaults_of)
        for k, b in boxes.items():
            b.setValue(moved[k])  # an int box gets its int default

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802
        """The wheel over a spin or combo box without keyboard focus scrolls the panel (it changed
        Batch from 8 to 1 while the form was scrolled); a clicked or tabbed-to box takes it."""
        if event.type() == QEvent.Type.Wheel and isinstance(obj, QWidget) and not obj.hasFocus():
            event.ignore()  # handled here, and passed on to the parents: the scroll area scrolls
            return True
        return super().eventFilter(obj, event)

    # ---------------------------------------------------------------- config out
    def model_config(self) -> engine.MambaConfig:
        if self.model_override is not None:
            return self.model_override
        if self.preset.currentText() == "custom":
            return engine.MambaConfig(vocab_size=self.vocab_hint, **self.custom_dims() or {})
        return engine.preset(self.preset.currentText(), self.vocab_hint)

    def custom_dims(self) -> dict[str, Any] | None:
        """A custom model's sizes (the boxes', and a settings file's others: d_conv, expand,
        ...); None for a preset's."""
        if self.preset.currentText() != "custom":
            return None
        return {"d_model": self.d_model.value(), "n_layer": self.n_layer.value(),
                "d_state": self.d_state.value(), **self.model_extras}

    def lora_config(self) -> engine.LoRAConfig | None:
        if not self.lora.isChecked():
            return None
        targets = tuple(t for t, cb in self.targets.items() if cb.isChecked())
        if self.wsla.isChecked():
            targets = engine.WSLA_TARGETS
        return engine.LoRAConfig(targets or engine.WSLA_TARGETS, rank=self.rank.value(),
                                 alpha=self.alpha.value(), dropout=self.lora_dropout.value())

    def train_config(self) -> engine.TrainConfig:
        """The boxes' settings over the preset's training defaults (its warmup and decay, which
        have no box)."""
        return engine.TrainConfig.for_preset(
            self._defaults_of, epochs=self.epochs.value(), lr=self.lr.value(), batch_size=self.batch.value(),
            seq_len=self.seq_len.value(), grad_accum=self.accum.value(),
            weight_decay=self.weight_decay.value(), max_grad_norm=self.clip.value(),
            seed=self.seed.value(), max_steps=self.max_steps.value() or None,
            activation_checkpointing=self.checkpointing.isChecked(),
            wsla=self.wsla.isChecked(), lora=self.lora_config(),
            eval_every=self.eval_every.value(),
            **{k: v for k, v in self.extras.items() if k in NO_BOX_TRAIN},
        )

    def early_stopping(self) -> engine.EarlyStopping:
        return engine.EarlyStopping(patience=self.patience.value(),
                                    target_loss=self.target_loss.value() or None,
                                    min_delta=self.extras.get("min_delta", 0.0))  # (no box)

    def set_corpus_bytes(self, n: int) -> None:
        """The corpus size a new run's tokenizer "auto" is chosen by (the estimate's vocabulary)."""
        if n != self.corpus_bytes:
            self.corpus_bytes = n
            self.refresh()

    def run_spec(self, init: str | None, eval_every: int) -> engine.RunSpec:
        """The RunSpec of these settings (``eval_every`` 0: "auto", resolved by the run)."""
        tc = replace(self.train_config(), eval_every=eval_every)
        preset = self.preset.currentText()
        return engine.RunSpec(preset=preset if preset != "custom" else self._defaults_of,
                       model=self.custom_dims() if init is None else None,
                       tokenizer=self.tokenizer.currentText(), bpe_vocab=self.bpe_vocab.value(),
                       init=init, train=tc, early_stopping=self.early_stopping(),
                       holdout=self.holdout.value(),
                       **{k: v for k, v in self.extras.items() if k in NO_BOX_RUN},
                       init_scheme=(self.init_scheme.currentText() if init is None
                                    else engine.RunSpec.init_scheme))

    def set_start(self, start: str) -> None:
        """What the next Start trains from: "new" (random weights), "opened" weights or "continue"
        (a run's own settings, shown by ``show_resumable``). LoRA and WSLA adapt a trained model:
        only with opened weights can they be ticked; otherwise they are off or the run's own, and
        their tooltips say why."""
        if self.start == "opened" and start != "opened":
            self._adapt_wanted = (self.lora.isChecked(), self.wsla.isChecked())
        was, self.start = self.start, start
        if start == "new":
            self.lora.setChecked(False)
            self.wsla.setChecked(False)
        elif start == "opened" and was != "opened":
            self.lora.setChecked(self._adapt_wanted[0])
            self.wsla.setChecked(self._adapt_wanted[1])
        for cb, name in ((self.lora, "LoRA"), (self.wsla, "WSLA")):
            cb.setEnabled(start == "opened")
            cb.setToolTip(TIPS[name.lower()] if start == "opened"
                          else NOT_ADAPTABLE[start].format(name))
        if start != was:
            self.refresh()  # the tokenizer box follows

    # what a continued run keeps as it was trained (engine.RESUME_OVERRIDES are the others)
    CONTINUE_FIXED = ("preset", "d_model", "n_layer", "d_state", "batch", "seq_len", "accum",
                      "weight_decay", "clip", "seed", "holdout", "checkpointing")
    # shown as the run has them, off while continuing (``refresh``): a continue trains with its own
    # tokenizer and weights (the previous run's "bpe" stayed shown for a bytes run)
    _RUN_OWN = ("tokenizer", "bpe_vocab", "init_scheme")
    _RESUMED = ("epochs", "lr", "max_steps", "eval_every", "patience", "target_loss",
                *CONTINUE_FIXED, *_RUN_OWN)

    def show_resumable(self, spec: engine.RunSpec) -> None:
        """Show a run's own settings: epochs, learning rate, max steps and early stopping (what
        Continue may change), its model, batch, sequence and the rest it keeps (shown, and off: Batch 8 -> 4
        changed the estimate while the run went on at 8), and its own LoRA / WSLA. The values it
        replaced come back with ``end_resumable``: a continued BPE run's 2x rate must not become
        the next new run's (or the next launch's) rate."""
        tc = spec.train
        self.continue_extras = {}  # (a file opened for an earlier choice reached this Continue)
        if self._before_resume is None:
            self._before_resume = {k: _value(getattr(self, k)) for k in self._RESUMED}
            self._defaults_before = self._defaults_of
        self.set_start("continue")
        self.preset.setCurrentText("custom" if spec.model else spec.preset)
        self._defaults_of = _training_preset(spec.preset, self._defaults_of)
        for dim, n in (spec.model or {}).items():
            if dim in ("d_model", "n_layer", "d_state"):
                getattr(self, dim).setValue(n)
        es = spec.early_stopping  # kept by the run (a run from before: off)
        shown: list[tuple[QWidget, object]] = [
            (self.epochs, tc.epochs), (self.lr, tc.lr), (self.max_steps, tc.max_steps or 0),
            (self.eval_every, tc.eval_every),  # (the new-run panel's value was shown)
            (self.patience, es.patience), (self.target_loss, es.target_loss or 0.0),
            (self.batch, tc.batch_size), (self.seq_len, tc.seq_len), (self.accum, tc.grad_accum),
            (self.weight_decay, tc.weight_decay), (self.clip, tc.max_grad_norm),
            (self.seed, tc.seed), (self.holdout, spec.holdout)]
        for box, value in shown:
            _set_value(box, value)
        self.checkpointing.setChecked(tc.activation_checkpointing)
        own: list[tuple[QWidget, object]] = [(self.tokenizer, spec.tokenizer),
                                             (self.init_scheme, spec.init_scheme)]
        if not spec.init:  # a run from opened weights has their vocabulary, not this setting's
            own.append((self.bpe_vocab, spec.bpe_vocab))
        for box, value in own:
            if not isinstance(box, QComboBox) or box.findText(str(value)) >= 0:
                _set_value(box, value)
        for k in self.CONTINUE_FIXED:
            getattr(self, k).setEnabled(False)
            getattr(self, k).setToolTip(KEPT_ON_CONTINUE)
        self._show_adapt(tc)
        self.refresh()

    def show_opened_tokenizer(self, kind: str | None) -> None:
        """While weights are opened, the (disabled) tokenizer box shows their tokenizer and the
        size boxes their dims (``refresh``), not the new-run choices ("auto" read beside "opened
        ...: bytes tokenizer", a custom d_model 96 beside a 128-wide model); None puts the
        choices back."""
        if kind is not None:
            if self._tokenizer_choice is None:
                self._tokenizer_choice = self.tokenizer.currentText()
                self._dims_choice = (self.d_model.value(), self.n_layer.value(),
                                     self.d_state.value())
            if self.tokenizer.findText(kind) >= 0:
                self.tokenizer.setCurrentText(kind)
        elif self._tokenizer_choice is not None:
            choice, self._tokenizer_choice = self._tokenizer_choice, None
            self.tokenizer.setCurrentText(choice)
            for w, v in zip((self.d_model, self.n_layer, self.d_state), self._dims_choice,
                            strict=True):
                w.setValue(v)

    def end_resumable(self) -> None:
        """Put back the new-run values ``show_resumable`` replaced, and let the settings a
        continued run keeps be edited again (no-op if none)."""
        self.continue_extras = {}
        if self._before_resume is not None:
            before, self._before_resume = self._before_resume, None
            self.model_override = None  # the continued run's model (MainWindow.choose_continue)
            for k in self._RESUMED:  # the preset first: it sets the dims it implies
                _set_value(getattr(self, k), before[k])
            self._defaults_of = self._defaults_before  # (a custom model's training preset)
            for k in self.CONTINUE_FIXED:
                getattr(self, k).setEnabled(True)
                getattr(self, k).setToolTip(TIPS.get(k, ""))
            self.refresh()

    def set_from(self, spec: engine.RunSpec, early: engine.EarlyStopping) -> list[str]:
        """Show a RunSpec (e.g. from a settings file). Returns what the panel could not show as
        given, as "setting value -> shown value" (a box's range or decimals, LoRA off)."""
        t = spec.train
        pairs: list[tuple[str, QSpinBox | QDoubleSpinBox, float]] = []
        # a Continue keeps the run's own model, batch, ... (CONTINUE_FIXED): its boxes keep
        # showing them (they took the file's, and the estimate counted steps by them)
        continuing = self.start == "continue"
        fixed = {id(getattr(self, k)) for k in (*self.CONTINUE_FIXED, *self._RUN_OWN)
                 if continuing}
        if spec.model:
            if not continuing:
                self.preset.setCurrentText("custom")
                self._defaults_of = _training_preset(spec.preset, self._defaults_of)  # its rates'
            pairs += [(k, getattr(self, k), spec.model[k]) for k in BOXED_MODEL if k in spec.model]
        elif not continuing:
            self.preset.setCurrentText(spec.preset)
        if not continuing:
            self.tokenizer.setCurrentText(spec.tokenizer)
            if self.init_scheme.findText(spec.init_scheme) >= 0:
                self.init_scheme.setCurrentText(spec.init_scheme)
        pairs += [("bpe_vocab", self.bpe_vocab, spec.bpe_vocab), ("epochs", self.epochs, t.epochs),
                  ("lr", self.lr, t.lr), ("batch_size", self.batch, t.batch_size),
                  ("seq_len", self.seq_len, t.seq_len), ("grad_accum", self.accum, t.grad_accum),
                  ("weight_decay", self.weight_decay, t.weight_decay),
                  ("max_grad_norm", self.clip, t.max_grad_norm), ("seed", self.seed, t.seed),
                  ("max_steps", self.max_steps, t.max_steps or 0),
                  ("eval_every", self.eval_every, t.eval_every),
                  ("holdout", self.holdout, spec.holdout),
                  ("patience", self.patience, early.patience),
                  ("target_loss", self.target_loss, early.target_loss or 0.0)]
        if t.lora is not None:
            pairs += [("lora rank", self.rank, t.lora.rank),
                      ("lora alpha", self.alpha, t.lora.alpha if t.lora.alpha is not None
                       else t.lora.rank), ("lora dropout", self.lora_dropout, t.lora.dropout)]
        changed, kept = [], []
        for name, w, v in pairs:
            if id(w) in fixed:
                if not math.isclose(w.value(), v, rel_tol=1e-9):
                    kept.append(f"{name} {setting_text(v)}")
                continue
            w.setValue(min(max(v, w.minimum()), w.maximum()))  # type: ignore[arg-type]  # int->int box
            if not math.isclose(w.value(), v, rel_tol=1e-9):
                changed.append(f"{name} {setting_text(v)} -> {w.text()}")
        if not continuing:
            self.checkpointing.setChecked(t.activation_checkpointing)
        self._show_adapt(t)
        base = engine.TrainConfig.for_preset(self._defaults_of)
        self.extras = {k: getattr(t, k) for k in NO_BOX_TRAIN if getattr(t, k) != getattr(base, k)}
        if spec.early_stopping.min_delta:  # (a file's min_delta was dropped without a word)
            self.extras["min_delta"] = spec.early_stopping.min_delta
        self.extras |= {k: getattr(spec, k) for k in NO_BOX_RUN
                        if getattr(spec, k) != getattr(engine.RunSpec, k)}
        self.model_extras = {k: v for k, v in (spec.model or {}).items() if k not in BOXED_MODEL}
        if continuing:  # what a resume cannot change (beta2, d_conv, ...) is named; it stays
            kept += [f"{k} {setting_text(v)}" for k, v in  # for the next new run (New model)
                     [*self.extras.items(), *self.model_extras.items()]
                     if k not in engine.RESUME_OVERRIDES and k != "min_delta"]
            self.continue_extras = {k: v for k, v in self.extras.items()
                                    if k in engine.RESUME_OVERRIDES or k == "min_delta"}
        if kept:
            changed.append(f"not {', '.join(kept)}: the continued run keeps its own (File > New "
                           "model trains a new run with them)")
        if self.start == "new" and not spec.init and (t.lora is not None or t.wsla):
            changed.append("LoRA / WSLA -> off (they adapt a trained model; the file starts a new "
                           "one)")
        self.refresh()
        return changed

    def _show_adapt(self, t: engine.TrainConfig) -> None:
        if self.start == "new":  # ticked once weights are opened (e.g. the settings file's init)
            self._adapt_wanted = (t.lora is not None, t.wsla)
        else:
            self.wsla.setChecked(t.wsla)
            self.lora.setChecked(t.lora is not None)
        if t.lora is not None:
            for name, cb in self.targets.items():
                cb.setChecked(name in t.lora.targets)
            self.rank.setValue(t.lora.rank)
            self.alpha.setValue(t.lora.alpha if t.lora.alpha is not None else t.lora.rank)
            self.lora_dropout.setValue(t.lora.dropout)

    # ---------------------------------------------------------------- live readout
    def refresh(self) -> None:
        custom = (self.preset.currentText() == "custom" and self.model_override is None
                  and self.start != "continue")  # a continued run keeps its dims
        for w in (self.d_model, self.n_layer, self.d_state):
            w.setEnabled(custom)
        self.preset.setEnabled(self.model_override is None and self.start != "continue")
        shown = self.model_override  # opened weights (or a continued run's model): their dims
        if shown is not None:  # (a custom d_model 96 stayed beside a 128-wide opened model)
            for w, v in ((self.d_model, shown.d_model), (self.n_layer, shown.n_layer),
                         (self.d_state, shown.d_state)):
                w.blockSignals(True)
                w.setValue(v)
                w.blockSignals(False)
        elif not custom and self.preset.currentText() != "custom":  # "custom" with dims kept
            c = engine.preset(self.preset.currentText(), 257)  # (a continued run, opened weights):
            # they stay as shown (it raised "unknown preset 'custom'" and left the panel half-set)
            for w, v in ((self.d_model, c.d_model), (self.n_layer, c.n_layer),
                         (self.d_state, c.d_state)):
                w.blockSignals(True)
                w.setValue(v)
                w.blockSignals(False)
        bpe = engine.choose_tokenizer(self.tokenizer.currentText(), self.corpus_bytes) == "bpe"
        # opened weights and a continued run train with their own tokenizer: no choice to make
        own = self.model_override is not None or self.start == "continue"
        self.tokenizer.setEnabled(not own)
        self.bpe_vocab.setEnabled(not own and self.tokenizer.currentText() != "bytes")
        self.tokenizer.setToolTip(OWN_TOKENIZER_TIP[self.start] if own else TIPS["tokenizer"])
        self.init_scheme.setEnabled(not own)  # opened weights and a continued run need no init
        self.vocab_hint = self.bpe_vocab.value() if bpe else engine.ByteTokenizer.vocab_size
        lora_on = self.lora.isChecked() and self.start == "opened"  # not isEnabled(): false
        # while training disables the whole panel, which left the knobs off after the run
        for t, cb in self.targets.items():
            wsla_only = self.wsla.isChecked() and t not in engine.WSLA_TARGETS  # (ticked: it trained
            cb.setEnabled(lora_on and not wsla_only)  # x_proj alone without a word there)
            cb.setToolTip(self._target_tips[t] + (" — not with WSLA: WSLA + LoRA trains x_proj "
                                                  "only" if wsla_only else ""))
        for knob in (self.rank, self.alpha, self.lora_dropout):  # off with the adapter they shape
            knob.setEnabled(lora_on)
        cfg = self.model_config()
        lc = self.lora_config()
        n = engine.count_trainable(cfg, lc, self.wsla.isChecked())
        total = engine.count_trainable(cfg)
        warn = ""
        refused = sorted(set(lc.targets) & set(engine.PEFT_REFUSES)) if lc is not None else []
        partial = sorted(set(lc.targets) & set(engine.PEFT_PARTIAL)) if lc is not None else []
        if refused:
            warn = (f" — PEFT cannot apply {', '.join(refused)} un-merged on Mamba: export the "
                    "merged model")
        elif partial:
            lines = sorted({engine.PEFT_PARTIAL[t] for t in partial})
            warn = (f" — PEFT on {', '.join(lines)} skips {', '.join(partial)} un-merged: export "
                    "the merged model for an exact one")
        self.trainable.setText(f"trainable parameters: {n:,} of {total:,}{warn}")
        self.changed.emit()

    # ---------------------------------------------------------------- QSettings
    _KEYS = ("epochs", "lr", "batch", "seq_len", "accum", "weight_decay", "clip", "seed",
             "max_steps", "eval_every", "holdout", "patience", "target_loss", "rank", "alpha", "lora_dropout",
             "d_model", "n_layer", "d_state", "bpe_vocab")

    def _restore(self) -> None:
        for k in self._KEYS:  # a value a box cannot hold keeps its default (and is logged)
            settings.restore(getattr(self, k), f"train/{k}")
        self.preset.setCurrentText(engine.DEFAULT_PRESET)  # the defaults a bad value keeps
        self.tokenizer.setCurrentText("auto")
        self.init_scheme.setCurrentText(engine.RunSpec.init_scheme)
        settings.restore(self.preset, "train/preset")
        settings.restore(self.tokenizer, TOKENIZER_KEY)
        settings.restore(self.init_scheme, "train/init_scheme")  # (a scheme since removed)
        settings.restore(self.lora, "train/lora")
        settings.restore(self.wsla, "train/wsla")

    def remember(self) -> None:
        kept = dict(self._before_resume or {})
        if self._tokenizer_choice is not None:  # weights opened: the own sizes, not theirs
            for k, v in zip(("d_model", "n_layer", "d_state"), self._dims_choice, strict=True):
                kept.setdefault(k, v)
        for k in self._KEYS:  # while continuing a run, its own values are not remembered
            settings.save(f"train/{k}", kept.get(k, getattr(self, k).value()))
        settings.save("train/preset", kept.get("preset", self.preset.currentText()))
        settings.save(TOKENIZER_KEY, kept.get("tokenizer", self._tokenizer_choice
                                              or self.tokenizer.currentText()))
        settings.save("train/init_scheme", kept.get("init_scheme", self.init_scheme.currentText()))
        lora, wsla = ((self.lora.isChecked(), self.wsla.isChecked()) if self.start == "opened"
                      else self._adapt_wanted)  # ticked again when weights are next opened
        settings.save("train/lora", lora)
        settings.save("train/wsla", wsla)
