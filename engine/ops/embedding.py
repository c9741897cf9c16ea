"""Embedding lookup: y[t] = weight[tokens[t]].

Shapes: tokens (b, l) int, weight (v, d) -> y (b, l, d). Backward scatter-adds into dweight (v, d).
Reference: engine/reference.py::mamba_forward (first line).
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel


@kernel
def _embedding_backward_kernel(tokens, dy, dweight):  # type: ignore[no-untyped-def]
    """tokens (m,), dy (m, d) -> dweight (v, d) += scatter. Sequential: deterministic order."""
    m, d = dy.shape
    for i in range(m):
        row = dweight[tokens[i]]
        g = dy[i]
        for j in range(d):
            row[j] += g[j]


def embedding_forward(tokens: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """tokens (b, l) -> (b, l, d)."""
    if tokens.size and (tokens.min() < 0 or tokens.max() >= weight.shape[0]):
        raise ValueError(f"token id out of range [0, {weight.shape[0]})")
    return weight[tokens]


def embedding_backward(tokens: np.ndarray, dy: np.ndarray, dweight: np.ndarray) -> None:
    """Accumulate dy (b, l, d) into dweight (v, d) in place."""
    d = dy.shape[-1]
    _embedding_backward_kernel(
        np.ascontiguousarray(tokens).reshape(-1).astype(np.int64),
        np.ascontiguousarray(dy).reshape(-1, d),
        dweight,
    )
