"""Scoring packed rows (held-out documents) with the document resets, for evaluation.

``score_rows`` runs the forward pass over every row of a ``PackedRows`` in order, with its
``reset`` mask, so each held-out document is scored from a zero state exactly as when alone; the
caller turns the sums into loss / perplexity / bits per byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import MambaConfig
from .model import logits_forward
from .packing import PackedRows
from .params import Params


@dataclass(frozen=True)
class RowScore:
    """Sums over all targets: ``loss_sum`` (nats), ``correct`` (top-1 hits), ``tokens`` (targets
    scored), ``n_bytes`` (UTF-8 bytes of the target text, end-of-text ids excluded; 0 without a
    tokenizer)."""

    loss_sum: float
    correct: int
    tokens: int
    n_bytes: int

    @property
    def loss(self) -> float:
        return self.loss_sum / max(1, self.tokens)


def score_rows(params: Params, cfg: MambaConfig, rows: PackedRows, batch_size: int = 8,
               tokenizer: Any = None) -> RowScore:
    """Score every target of ``rows`` (batches of ``batch_size`` rows, float64 log-softmax)."""
    total, correct, n, n_bytes = 0.0, 0, 0, 0
    for s in range(0, len(rows), batch_size):
        x, y, reset = rows.batch(np.arange(s, min(s + batch_size, len(rows))))
        logits = logits_forward(params, x, cfg, reset=reset).astype(np.float64)
        keep = y >= 0
        lg, tg = logits[keep], y[keep]
        mx = lg.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1))
        total += float((lse - lg[np.arange(len(tg)), tg]).sum())
        correct += int((lg.argmax(axis=1) == tg).sum())
        n += len(tg)
        if tokenizer is not None:
            text_ids = tg[tg != tokenizer.eos_id]
            n_bytes += len(tokenizer.decode(text_ids).encode("utf-8"))
    return RowScore(total, correct, n, n_bytes)
