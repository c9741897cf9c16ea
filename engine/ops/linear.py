"""Linear without bias, through BLAS: y = x @ weight.T.

Shapes: x (..., i), weight (o, i) -> y (..., o). Backward: dx = dy @ weight, dweight = dy.T @ x.
Reference: engine/reference.py (every ``@ W.T``).
"""

from __future__ import annotations

import numpy as np


def linear_forward(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """x (..., i) -> (..., o)."""
    return x @ weight.T


def linear_backward(
    dy: np.ndarray, x: np.ndarray, weight: np.ndarray, dweight: np.ndarray | None
) -> np.ndarray:
    """dy (..., o), x (..., i) -> dx (..., i); adds dy.T @ x into dweight (o, i) when given."""
    if dweight is not None:
        dy2 = dy.reshape(-1, dy.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        dweight += dy2.T @ x2
    return dy @ weight
