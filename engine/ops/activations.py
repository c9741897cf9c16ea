"""Softplus with a bias (delta = softplus(dt + b_dt)), forward and backward, numerically stable.

softplus(x) = max(x, 0) + log1p(exp(-|x|));  d/dx = sigmoid(x).
Shapes: x (..., e), bias (e,) -> (..., e); the recurrent step calls the same forward on (b, e).
SiLU, x * sigmoid(x), has no op of its own: it is fused into conv1d and the scan's gate, from the
same scalar helpers (``engine._jit``). Reference: engine/reference.py::softplus.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._jit import parallel_kernel, sigmoid
from .._jit import softplus as _softplus
from ._common import check


@parallel_kernel
def _softplus_forward_kernel(x, bias, y):
    """x (m, e), bias (e,) -> y = softplus(x + bias) (m, e)."""
    m, e = x.shape
    for i in prange(m):
        xi = x[i]
        yi = y[i]
        for c in range(e):
            yi[c] = _softplus(xi[c] + bias[c])


@parallel_kernel
def _softplus_backward_kernel(dy, x, bias, dx, db_part):
    """dy, x (m, e) -> dx (m, e) = dy * sigmoid(x + bias); db_part (blocks, e)."""
    m, e = x.shape
    nblk = db_part.shape[0]
    rows = (m + nblk - 1) // nblk
    for blk in prange(nblk):
        acc = db_part[blk]
        for i in range(blk * rows, min(m, (blk + 1) * rows)):
            xi = x[i]
            gi = dy[i]
            di = dx[i]
            for c in range(e):
                g = gi[c] * sigmoid(xi[c] + bias[c])
                di[c] = g
                acc[c] += g


def softplus_forward(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """softplus(x + bias): x (..., e), bias (e,) -> (..., e)."""
    dt = check("x", x, (..., None))
    e = x.shape[-1]
    check("bias", bias, (e,), dt)
    x2 = x.reshape(-1, e)
    y = np.empty_like(x2)
    _softplus_forward_kernel(x2, bias, y)
    return y.reshape(x.shape)


def softplus_backward(
    dy: np.ndarray, x: np.ndarray, bias: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """dy, x (..., e), bias (e,) -> (dx (..., e), dbias (e,))."""
    dt = check("x", x, (..., None))
    e = x.shape[-1]
    check("dy", dy, x.shape, dt)
    check("bias", bias, (e,), dt)
    x2 = x.reshape(-1, e)
    dx = np.empty_like(x2)
    part = np.zeros((min(8, x2.shape[0]) or 1, e), dtype=x.dtype)
    _softplus_backward_kernel(dy.reshape(-1, e), x2, bias, dx, part)
    return dx.reshape(x.shape), part.sum(axis=0)
