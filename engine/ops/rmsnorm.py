"""RMSNorm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x**2, -1) + eps). (Zhang & Sennrich 2019)

Shapes: x (..., d), weight (d,) -> y (..., d); cache rstd (...,).
Reference: engine/reference.py::rmsnorm.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import parallel_kernel
from ._common import check, n_blocks

_ROWS_PER_BLOCK = 64


@parallel_kernel
def _rmsnorm_forward_kernel(x, w, eps, y, rstd):
    """x (m, d), w (d,) -> y (m, d), rstd (m,)."""
    m, d = x.shape
    for i in prange(m):
        xi = x[i]
        ss = 0.0
        for j in range(d):
            ss += xi[j] * xi[j]
        r = 1.0 / math.sqrt(ss / d + eps)
        rstd[i] = r
        yi = y[i]
        for j in range(d):
            yi[j] = xi[j] * r * w[j]


@parallel_kernel
def _rmsnorm_backward_kernel(dy, x, w, rstd, dx, dw_part):
    """dy, x (m, d), rstd (m,) -> dx (m, d); dw_part (blocks, d) partial sums over rows."""
    m, d = x.shape
    nblk = dw_part.shape[0]
    for blk in prange(nblk):
        acc = dw_part[blk]
        for i in range(blk * _ROWS_PER_BLOCK, min(m, (blk + 1) * _ROWS_PER_BLOCK)):
            xi = x[i]
            gi = dy[i]
            r = rstd[i]
            dot = 0.0
            for j in range(d):
                dot += gi[j] * w[j] * xi[j]
            c = dot * r * r / d
            dxi = dx[i]
            for j in range(d):
                dxi[j] = r * (gi[j] * w[j] - xi[j] * c)
                acc[j] += gi[j] * xi[j] * r


def rmsnorm_forward(x: np.ndarray, weight: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """x (..., d), weight (d,) -> (y (..., d), rstd (...,))."""
    dt = check("x", x, (..., None))
    d = x.shape[-1]
    check("weight", weight, (d,), dt)
    x2 = x.reshape(-1, d)
    y = np.empty_like(x2)
    rstd = np.empty(x2.shape[0], dtype=x.dtype)
    _rmsnorm_forward_kernel(x2, weight, eps, y, rstd)
    return y.reshape(x.shape), rstd.reshape(x.shape[:-1])


def rmsnorm_backward(
    dy: np.ndarray, x: np.ndarray, weight: np.ndarray, rstd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """dy, x (..., d), rstd (...,) -> (dx (..., d), dweight (d,))."""
    dt = check("x", x, (..., None))
    d = x.shape[-1]
    check("dy", dy, x.shape, dt)
    check("weight", weight, (d,), dt)
    check("rstd", rstd, x.shape[:-1], dt)
    x2 = x.reshape(-1, d)
    dx = np.empty_like(x2)
    part = np.zeros((n_blocks(x2.shape[0], _ROWS_PER_BLOCK), d), dtype=x.dtype)
    _rmsnorm_backward_kernel(dy.reshape(-1, d), x2, weight, rstd.reshape(-1), dx, part)
    return dx.reshape(x.shape), part.sum(axis=0)
