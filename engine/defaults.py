"""The one table of per-preset defaults: model shape, training settings, and what each preset
learns in how long (tooltip text for the app). ``MambaConfig``/``TrainConfig`` read it; the
evidence for every number is in docs/learning.md (``benchmarks/learning``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PresetDefaults:
    d_model: int
    n_layer: int
    lr: float  # 3e-3: the PyTorch twin solved copying/induction at this rate (issue 15)
    batch_size: int  # 8 x 256 tokens: ~0.1 s steps on 2 cores, so the curve moves every second
    seq_len: int  # 256: holds several task lines / a page of code; longer only slows the step
    warmup_steps: int  # 100: the unit-embedding tied head starts far from uniform (first loss ~9)
    min_lr_ratio: float  # decay to 10% of lr: keeps learning if the user extends the run
    decay_fraction: float  # 0.2: lr held, then decayed over the last 20 % (warmup-stable-decay)
    weight_decay: float  # 0.01 on projections only (never A_log, D, norms, embeddings)
    learns: str  # one line for the preset's tooltip: what it learns, in how long, on 2 cores

    def model(self) -> dict[str, int]:
        return {"d_model": self.d_model, "n_layer": self.n_layer}

    def training(self, tokenizer: str = "bytes") -> dict[str, Any]:
        """TrainConfig fields; a BPE run's rate is ``BPE_LR_SCALE`` times the byte rate."""
        lr = self.lr * BPE_LR_SCALE if tokenizer == "bpe" else self.lr
        return {"lr": lr, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "warmup_steps": self.warmup_steps, "min_lr_ratio": self.min_lr_ratio,
                "decay_fraction": self.decay_fraction,
                "weight_decay": self.weight_decay}


DEFAULT_PRESET = "small"
# Passes over the training text when none is given, for the CLI, settings files and the window
# alike: on the bundled corpus (11 steps an epoch) a first run trains 110 steps, past the
# 100-step warmup, to word-like samples (3 passes gave 33 steps inside the warmup: noise).
DEFAULT_EPOCHS = 10
DEFAULT_PROMPT = "The"  # a run's preview prompt, generate's and the window's until changed
# (not "The ": a BPE tokenizer reads its trailing space as a token of its own, which training
# text holds almost only in runs of spaces, so previews of a BPE run showed "The" and spaces)
PROMPT_PIECE = 2048  # tokens of a prompt read in one call: between pieces a stop is seen (a
# 200,000-token prompt read in one call took 7-12 s, and its activations grow with its length)
SAMPLE_CORPUS = Path(__file__).resolve().parent.parent / "assets" / "sample_corpus"  # (bundled:
# train and eval without a corpus, and the window's first one)

# Tokenizer "auto" (the default): bytes below this many corpus bytes, a 2,048-token BPE trained
# on the corpus from here up. In 5-minute runs of `small` on Python sources BPE overfit below
# 2 MB (held-out bits/byte at 1 MB: bytes 1.82, BPE 1.87 at best then 1.99; at 500 KB 2.55 vs
# 2.71 then 5.0) and won from 2 MB (1.60 vs 1.73); at 8 MB it is the only way to 15 % below a
# 5-gram in 10 minutes (1.39 vs 1.65). 4 MB leaves room for 10-minute runs; docs/learning.md.
BPE_MIN_BYTES = 4_000_000
# A BPE run's learning rate is twice the byte rate: on 8 MB, small reached 1.39 / 1.37 bits/byte
# at 6e-3 (two seeds) against 1.46 at 3e-3, and still learned copying and induction; a byte
# run at 6e-3 stayed at chance on copying, so bytes keep 3e-3 (docs/learning.md).
BPE_LR_SCALE = 2.0


def follow_preset(values: Mapping[str, Any], old: str, new: str, old_kind: str = "bytes",
                  new_kind: str = "bytes") -> dict[str, Any]:
    """``values`` (TrainConfig fields) with each one at preset ``old``'s default for an
    ``old_kind`` tokenizer ("bytes" / "bpe") moved to preset ``new``'s for ``new_kind``; values
    set by hand and any preset not in the table stay. How a changed
    preset or tokenizer carries the training settings: a settings file over another
    (``overlay_settings``) and the window's preset box (medium trained at small's rate there)."""
    if old not in PRESET_DEFAULTS or new not in PRESET_DEFAULTS:
        return dict(values)
    old_d = PRESET_DEFAULTS[old].training(old_kind)
    new_d = PRESET_DEFAULTS[new].training(new_kind)

    def at_default(k: str, v: Any) -> bool:
        d = old_d[k]
        return (v == d if isinstance(d, int) or isinstance(v, bool)
                else isinstance(v, (int, float)) and math.isclose(v, d, rel_tol=1e-9))

    return {k: (new_d[k] if k in new_d and at_default(k, v) else v)
            for k, v in values.items()}


def choose_tokenizer(kind: str, corpus_bytes: int) -> str:
    """The tokenizer a run uses: ``kind`` ("bytes" / "bpe"), or for "auto" bytes below
    ``BPE_MIN_BYTES`` of corpus and BPE from there."""
    if kind != "auto":
        return kind
    return "bpe" if corpus_bytes >= BPE_MIN_BYTES else "bytes"


PRESET_DEFAULTS: dict[str, PresetDefaults] = {
    "tiny": PresetDefaults(
        d_model=64, n_layer=2, lr=3e-3, batch_size=8, seq_len=256, warmup_steps=100,
        min_lr_ratio=0.1, decay_fraction=0.2, weight_decay=0.01,
        learns="tiny (0.1M weights): quick experiments; with one example per line it learns "
               "selective copying and induction-head recall in about 2 minutes on 2 cores",
    ),
    "small": PresetDefaults(
        # 2 layers of d 128, not 4: 4-layer models learned selective copying in only 1 of 10
        # runs, 2-layer d 128 learned it in 4 of 4 seeds (and induction in 750 steps), with text
        # as good in equal time (1.647 vs 1.665 bits/byte in 6.3 min); docs/learning.md
        d_model=128, n_layer=2, lr=3e-3, batch_size=8, seq_len=256, warmup_steps=100,
        min_lr_ratio=0.1, decay_fraction=0.2, weight_decay=0.01,
        learns="small (0.27M weights with bytes, 0.5M with BPE; the default): with one example "
               "per line it learns selective copying and induction-head recall in 2-8 minutes on "
               "2 cores; on 8 MB of code (BPE, auto from 4 MB) it reaches 18 % below a 5-gram "
               "model's bits per byte in 10 minutes",
    ),
    "medium": PresetDefaults(
        d_model=256, n_layer=6, lr=2e-3, batch_size=8, seq_len=256, warmup_steps=100,
        min_lr_ratio=0.1, decay_fraction=0.2, weight_decay=0.01,
        learns="medium (2.6M weights, 6 layers): about 5x slower per step than small, for runs "
               "of an hour or more; in our study models of 4+ layers rarely learned selective copying",
    ),
}
