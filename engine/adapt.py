"""WSLA fast-adapt: a short, bounded burst of training on new text that is rolled back when it hurts.

Only each layer's ``x_proj`` trains (the delta, B and C rows; or a LoRA adapter on x_proj only),
AdamW's trust region ``max_delta`` defaults to 0.05, and every call

1. snapshots the weights *and* the optimizer state (moments, step, adapters),
2. measures held-out loss/perplexity before,
3. trains for ``epochs`` on the text,
4. measures again and restores the snapshot exactly when the loss is non-finite, training raised,
   or perplexity rose past ``tolerance`` x the value before (default 1.25).

The optimizer state persists across calls of one ``FastAdapter`` (so the snapshot matters). The
held-out text is ``holdout`` when given, otherwise the last 20% of the text (the seed library
measured in-sample). ``active`` is True only while a call runs, also when it raises.
"""

from __future__ import annotations

import math
import time
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .data import split_holdout
from .errors import CorpusError
from .lm import MambaLM
from .lora import LoRAConfig
from .optim import AdamW
from .trainable import Trainable
from .trainer import WSLA_MAX_DELTA, TrainConfig, Trainer, evaluate


@dataclass(frozen=True)
class AdaptReport:
    losses: list[float]  # per-epoch mean training loss
    loss_before: float
    loss_after: float
    perplexity_before: float
    perplexity_after: float
    rolled_back: bool
    reason: str | None  # "non-finite loss" | "perplexity regression" | "error: ..." | None
    duration_s: float
    trainable_params: int


@dataclass
class _Snapshot:
    """Weights plus the ``state_dict()`` copies of the optimizer and the trainable (None before
    the first call created them)."""

    params: dict[str, np.ndarray]
    optimizer: dict[str, Any] | None
    trainable: dict[str, Any] | None


@dataclass
class FastAdapter:
    lm: MambaLM
    epochs: int = 3
    lr: float = 1e-3
    seq_len: int = 128
    batch_size: int = 4
    max_delta: float = WSLA_MAX_DELTA
    tolerance: float = 1.25
    lora: LoRAConfig | None = None  # WSLA + LoRA: adapter on x_proj only
    seed: int = 0
    active: bool = False
    optimizer: AdamW | None = None
    trainable: Trainable | None = None
    reports: list[AdaptReport] = field(default_factory=list)

    def _snapshot(self) -> _Snapshot:
        opt, tr = self.optimizer, self.trainable
        return _Snapshot({k: v.copy() for k, v in self.lm.params.items()},
                         deepcopy(opt.state_dict()) if opt is not None else None,
                         deepcopy(tr.state_dict()) if tr is not None else None)

    def _restore(self, snap: _Snapshot) -> None:
        for k, v in snap.params.items():
            self.lm.params[k][...] = v
        if snap.optimizer is None:  # this call created them: start fresh next time
            self.optimizer, self.trainable = None, None
            return
        assert self.optimizer is not None and self.trainable is not None
        self.optimizer.load_state_dict(snap.optimizer)
        if snap.trainable is not None:
            self.trainable.load_state_dict(snap.trainable)

    def adapt(self, text: str, holdout: str | None = None) -> AdaptReport:
        ids = self.lm.tokenizer.encode(text)
        if holdout is not None:
            train_ids, val_ids = ids, self.lm.tokenizer.encode(holdout)
        else:
            train_ids, val_ids = split_holdout(ids, 0.2, self.seq_len)
        if len(val_ids) < 2 or len(train_ids) < 2:
            raise CorpusError("adapt() needs at least a few tokens of text (and of held-out text)")
        seq_len = min(self.seq_len, len(train_ids) - 1)
        t0 = time.perf_counter()
        snap = self._snapshot()
        before = evaluate(self.lm, val_ids, seq_len)
        cfg = TrainConfig(epochs=self.epochs, lr=self.lr, seq_len=seq_len, batch_size=self.batch_size,
                          wsla=True, max_delta=self.max_delta, lora=self.lora, seed=self.seed,
                          warmup_steps=0, min_lr_ratio=1.0, weight_decay=0.0)
        self.active = True
        losses: list[float] = []
        reason: str | None = None
        after_loss = float("nan")
        try:
            trainer = Trainer(self.lm, train_ids, val_ids[:0], cfg, trainable=self.trainable)
            if self.optimizer is None:
                self.optimizer = trainer.optimizer
                self.trainable = trainer.trainable
            else:
                trainer.optimizer = self.optimizer
            losses = [e.train_loss for e in trainer.run()]
            after = evaluate(self.lm, val_ids, seq_len)
            after_loss = after.loss
            if not all(math.isfinite(x) for x in losses) or not math.isfinite(after.loss):
                reason = "non-finite loss"
            elif after.perplexity > self.tolerance * before.perplexity:
                reason = "perplexity regression"
        except Exception as exc:  # roll back on any failure, then re-raise nothing: report it
            reason = f"error: {exc}"
        finally:
            self.active = False
        if reason is not None:
            self._restore(snap)
        report = AdaptReport(
            losses, before.loss, after_loss, before.perplexity,
            math.exp(min(after_loss, 700.0)) if math.isfinite(after_loss) else float("inf"),
            reason is not None, reason, time.perf_counter() - t0,
            int(sum(a.size for a in self.trainable.tensors.values())) if self.trainable else 0,
        )
        self.reports.append(report)
        return report
