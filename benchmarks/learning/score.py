"""Answer accuracy for the synthetic tasks: the fraction of answer characters (the last
``answer_len`` characters of every complete line) whose token the model's next-token argmax
predicts, with the earlier tokens of the line given (teacher forcing). With bytes a token is a
character; with BPE a character counts as right when the whole token holding it was predicted."""

from __future__ import annotations

import numpy as np


def answer_positions(text: str, answer_len: int) -> np.ndarray:
    """Character offsets (k,) of every answer character in ``text`` (complete lines only)."""
    ends = [i for i, ch in enumerate(text) if ch == "\n"]
    out = [end - answer_len + j for end in ends for j in range(answer_len)]
    return np.asarray([p for p in out if p >= 1], dtype=np.int64)


def answer_accuracy(text: str, predicted: np.ndarray, answer_len: int,
                    ids: np.ndarray | None = None, token_chars: np.ndarray | None = None) -> float:
    """``predicted`` (T,) holds the model's guess for each token of ``text`` (entry i comes from
    the logits at i - 1; entry 0 is ignored). ``ids`` (T,) are the text's token ids and
    ``token_chars`` (vocab,) the characters each id decodes to; both default to bytes (one
    character per token, ids = the ASCII codes). Returns the answer accuracy."""
    pos = answer_positions(text, answer_len)
    if len(pos) == 0:
        raise ValueError("the text has no complete line to score")
    if ids is None:
        ids = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
    if token_chars is None:
        token_chars = np.ones(max(int(ids.max()) + 1, 257), dtype=np.int64)
    ends = np.cumsum(token_chars[ids])  # (T,) one past each token's last character
    if ends[-1] != len(text):
        raise ValueError(f"the ids cover {ends[-1]} characters, the text has {len(text)}")
    token_of = np.searchsorted(ends, pos, side="right")  # (k,) the token holding each answer char
    right = np.asarray(predicted)[token_of] == ids[token_of]
    return float(np.mean(right))


def token_chars(tok, vocab: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    """(vocab,) how many characters each id of ``tok`` decodes to (0 for specials/padding)."""
    return np.asarray([len(tok.decode([i])) if i != tok.eos_id else 0 for i in range(vocab)],
                      dtype=np.int64)
