"""Embedding lookup: y[t] = weight[tokens[t]].

Shapes: tokens (b, l) int, weight (v, d) -> y (b, l, d). Backward scatter-adds into dweight (v, d).
Reference: engine/reference.py::mamba_forward (first line).
"""

from __future__ import annotations

import numpy as np

from .._jit import kernel
from ._common import check, check_index


@kernel
def _embedding_backward_kernel(tokens, dy, dweight):
    """tokens (m,), dy (m, d) -> dweight (v, d) += scatter. Sequential: deterministic order."""
    m, d = dy.shape
    for i in range(m):
        row = dweight[tokens[i]]
        g = dy[i]
        for j in range(d):
            row[j] += g[j]


def embedding_forward(tokens: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """tokens (...) int, weight (v, d) -> (..., d) (a fresh contiguous array)."""
    check("weight", weight, (None, None))
    tokens = check_index("tokens", tokens, (...,))
    if tokens.size and (tokens.min() < 0 or tokens.max() >= weight.shape[0]):
        raise ValueError(f"token id out of range [0, {weight.shape[0]})")
    return weight[tokens]


def embedding_backward(tokens: np.ndarray, dy: np.ndarray, dweight: np.ndarray) -> None:
    """Accumulate dy (..., d) into dweight (v, d) in place; tokens (...) int."""
    dt = check("dweight", dweight, (None, None))
    v, d = dweight.shape
    idx = check_index("tokens", tokens, (...,))
    check("dy", dy, (*idx.shape, d), dt)
    if idx.size and (idx.min() < 0 or idx.max() >= v):
        raise ValueError(f"token id out of range [0, {v})")
    _embedding_backward_kernel(idx.reshape(-1), dy.reshape(-1, d), dweight)
