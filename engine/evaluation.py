"""Held-out metrics of a model: over a token stream (rows of ``seq_len``) or over packed document
rows (``engine.packing.PackedRows``, whose reset mask keeps documents apart)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import make_rows
from .errors import CorpusError
from .model import logits_forward


@dataclass(frozen=True)
class EvalReport:
    loss: float
    perplexity: float
    bits_per_token: float
    bits_per_byte: float
    accuracy: float
    tokens: int


def evaluate(lm: Any, ids: Any, seq_len: int, batch_size: int = 8) -> EvalReport:
    """Held-out metrics over the whole stream ``ids`` (T,) -- every token after the first scored
    once -- or over every target of packed rows (``ids`` a ``PackedRows``)."""
    packed = hasattr(ids, "batch")
    if not packed and len(ids) < 2:
        raise CorpusError("evaluation text has fewer than 2 tokens")
    if packed:
        n_rows = len(ids)
        def get(s: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # noqa: E306
            return ids.batch(np.arange(s, e))
    else:
        inputs, targets = make_rows(ids, seq_len)
        n_rows = len(inputs)
        def get(s: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # noqa: E306
            return np.asarray(inputs[s:e]), np.asarray(targets[s:e]), None
    total, correct, n, n_bytes = 0.0, 0, 0, 0
    for s in range(0, n_rows, batch_size):
        x, y, reset = get(s, min(s + batch_size, n_rows))
        logits = logits_forward(lm.params, x, lm.config, reset=reset).astype(np.float64)
        keep = y >= 0
        lg = logits[keep]
        tg = y[keep]
        mx = lg.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1))
        total += float((lse - lg[np.arange(len(tg)), tg]).sum())
        correct += int((lg.argmax(axis=1) == tg).sum())
        n += int(keep.sum())
        if packed:
            n_bytes += len(lm.tokenizer.decode(tg).encode("utf-8"))
    if n == 0:
        raise CorpusError("evaluation rows hold no target")
    loss = total / n
    if not packed:
        n_bytes = len(lm.tokenizer.decode(ids[1:]).encode("utf-8"))
    return EvalReport(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bits_per_token=loss / math.log(2),
        bits_per_byte=total / math.log(2) / (n_bytes or 1),
        accuracy=correct / n,
        tokens=n,
    )
