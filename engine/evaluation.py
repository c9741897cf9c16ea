"""Held-out metrics of a model: over a token stream (rows of ``seq_len``) or over packed document
rows (``engine.packing.PackedRows``, whose reset mask keeps documents apart).

A held-out set can be huge (a corpus folder of a gigabyte holds out ~100 M tokens), so training
evaluates a fixed sample of it: ``HELDOUT_SAMPLE_TOKENS`` target positions at most, taken as rows
evenly spaced over the whole set (rows follow corpus order, so the sample spans the held-out
documents). The same rows are taken every time, so successive evaluations of a run compare.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import make_rows
from .errors import CorpusError
from .units import bits_per_byte
from .words import plural

HELDOUT_SAMPLE_TOKENS = 1 << 18  # 262,144 targets: a bounded evaluation (~5-30 s on 2 cores)
EVAL_BUDGET = 0.1  # "auto" (eval_every 0): held-out evaluation takes under this share of training
EVAL_TOKEN_COST = 1 / 3  # a scored token's time over a trained one's: a forward pass of the three
# passes (forward, backward, update); measured 0.26-0.6 on small and medium, 2 threads


def eval_guess_s(val_tokens: int, step_s: float, step_tokens: int) -> float:
    """Seconds one held-out evaluation should take, from a training step's time ``step_s`` over
    ``step_tokens`` (batch x seq_len) positions, before one was measured."""
    return min(val_tokens, HELDOUT_SAMPLE_TOKENS) * EVAL_TOKEN_COST * step_s / max(1, step_tokens)


def auto_eval_every(val_tokens: int, batch_size: int, seq_len: int,
                    budget: float = EVAL_BUDGET) -> int:
    """Held-out evaluation cadence (optimizer steps) that keeps its cost under ``budget`` of training
    time: an evaluation is a forward pass over ``min(val_tokens, HELDOUT_SAMPLE_TOKENS)``
    (``EVAL_TOKEN_COST``, about a third of a training step's cost per token), so every N steps
    costs val/(3·N·batch·seq) of training. The cadence of ``eval_every = 0`` in the CLI, a
    settings file and the window alike (the CLI evaluated only at epoch ends: none for hours on
    a large corpus, where the window's same settings gave a curve)."""
    per_step = max(1, batch_size * seq_len)
    val = min(val_tokens, HELDOUT_SAMPLE_TOKENS)
    return max(1, math.ceil(val * EVAL_TOKEN_COST / (budget * per_step) * 1.5))  # 1.5: margin


class EvalStopped(Exception):
    """``evaluate`` was asked to stop (``should_stop()`` was True between two batches)."""


@dataclass(frozen=True)
class EvalReport:
    loss: float
    perplexity: float
    bits_per_token: float
    bits_per_byte: float
    accuracy: float
    tokens: int  # targets scored
    of_tokens: int = 0  # targets in the whole set (> tokens when a sample was scored; 0: unknown)

    @property
    def sampled(self) -> bool:
        return self.of_tokens > self.tokens

    def describe(self) -> str:
        """"262,144 of 9,876,543 tokens (sample)" or "12,345 tokens"."""
        if self.sampled:
            return f"a sample of {self.tokens:,} of {self.of_tokens:,} tokens"
        return plural(self.tokens, "token")


def sample_rows(n_rows: int, width: int, max_tokens: int | None) -> np.ndarray:
    """(k,) int64 row indices: all rows, or ``max_tokens // width`` (>= 1) rows evenly spaced
    over ``0 .. n_rows - 1`` when the rows hold more than ``max_tokens`` positions."""
    if max_tokens is None or max_tokens <= 0 or n_rows * width <= max_tokens:
        return np.arange(n_rows, dtype=np.int64)
    k = max(1, max_tokens // max(width, 1))
    return np.unique(np.linspace(0, n_rows - 1, k).round().astype(np.int64))


def evaluate(lm: Any, ids: Any, seq_len: int, batch_size: int = 8, max_tokens: int | None = None,
             should_stop: Callable[[], bool] | None = None) -> EvalReport:
    """Held-out metrics over the whole stream ``ids`` (T,) -- every token after the first scored
    once -- or over every target of packed rows (``ids`` a ``PackedRows``).

    ``max_tokens``: score only rows evenly spaced over the set holding at most that many target
    positions (``sample_rows``; None or 0: all). ``should_stop`` is asked between batches; when it
    answers True, ``EvalStopped`` is raised (a stop request must not wait for a long evaluation)."""
    from .model import logits_forward  # here: the CLI's parser reads this module's constant
    from .ops.cross_entropy import cross_entropy_scores

    packed = hasattr(ids, "batch")
    if not packed and len(ids) < 2:
        raise CorpusError("evaluation text has fewer than 2 tokens")
    if packed:
        of = int(ids.n_targets)
        rows = sample_rows(len(ids), int(ids.width), max_tokens)
        def get(s: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # noqa: E306
            return ids.batch(rows[s:e])
    else:
        inputs, targets = make_rows(ids, seq_len)
        of = len(ids) - 1
        rows = sample_rows(len(inputs), inputs.shape[1], max_tokens)
        def get(s: int, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # noqa: E306
            return np.asarray(inputs[rows[s:e]]), np.asarray(targets[rows[s:e]]), None
    n_rows = len(rows)
    whole = n_rows == (len(ids) if packed else len(inputs))
    total, correct, n, n_bytes = 0.0, 0, 0, 0
    for s in range(0, n_rows, batch_size):
        if should_stop is not None and should_stop():
            raise EvalStopped()
        x, y, reset = get(s, min(s + batch_size, n_rows))
        logits = logits_forward(lm.params, x, lm.config, reset=reset)
        keep = y >= 0
        tg = y[keep]
        losses, hits = cross_entropy_scores(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        total += float(losses.sum())
        correct += int(hits.sum())
        n += int(keep.sum())
        if packed or not whole:
            n_bytes += len(lm.tokenizer.decode(tg).encode("utf-8"))
    if n == 0:
        raise CorpusError("evaluation rows hold no target")
    loss = total / n
    if not packed and whole:
        n_bytes = len(lm.tokenizer.decode(ids[1:]).encode("utf-8"))
    return EvalReport(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bits_per_token=loss / math.log(2),
        bits_per_byte=bits_per_byte(loss, n / (n_bytes or 1)),
        accuracy=correct / n,
        tokens=n,
        of_tokens=of,
    )
