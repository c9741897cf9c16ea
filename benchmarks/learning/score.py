"""Answer accuracy for the synthetic tasks: the fraction of answer characters (the last
``answer_len`` characters of every complete line) that the model's next-token argmax predicts,
with the earlier characters of the line given (teacher forcing)."""

from __future__ import annotations

import numpy as np


def answer_positions(text: str, answer_len: int) -> np.ndarray:
    """Character offsets (k,) of every answer character in ``text`` (complete lines only)."""
    ends = [i for i, ch in enumerate(text) if ch == "\n"]
    out = [end - answer_len + j for end in ends for j in range(answer_len)]
    return np.asarray([p for p in out if p >= 1], dtype=np.int64)


def answer_accuracy(text: str, predicted: np.ndarray, answer_len: int) -> float:
    """``predicted`` (T,) holds the model's guess for each character of ``text`` (ids; entry
    i comes from the logits at i - 1; entry 0 is ignored). Returns the answer accuracy."""
    pos = answer_positions(text, answer_len)
    if len(pos) == 0:
        raise ValueError("the text has no complete line to score")
    truth = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
    return float(np.mean(np.asarray(predicted)[pos] == truth[pos]))
