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


def reset_mask(reset: np.ndarray | None, b: int, length: int) -> np.ndarray:
    """The kernels' form of an optional document-reset mask: ``reset`` (b, l) bool/integer, True
    at the first position of each document -> contiguous uint8 (b, l); None -> uint8 (b, 0),
    which the kernels read as "no resets"."""
    if reset is None:
        return np.zeros((b, 0), np.uint8)
    reset = np.asarray(reset)
    if reset.shape != (b, length):
        raise ValueError(f"reset: expected shape {(b, length)}, got {reset.shape}")
    if reset.dtype != np.bool_ and not np.issubdtype(reset.dtype, np.integer):
        raise ValueError(f"reset: expected a bool or integer mask, got {reset.dtype}")
    return np.ascontiguousarray(reset != 0, dtype=np.uint8)
