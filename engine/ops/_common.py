"""Helpers shared by the op wrappers (not kernels)."""

from __future__ import annotations

import numpy as np


def as_rows(x: np.ndarray) -> np.ndarray:
    """(..., c) -> (m, c) contiguous view or copy."""
    return np.ascontiguousarray(x.reshape(-1, x.shape[-1]))


def check_shape(name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")


def n_blocks(rows: int, block: int) -> int:
    return max(1, -(-rows // block))
