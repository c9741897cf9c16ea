"""The door check shared by every op wrapper (kernels themselves never check anything).

Numba kernels do no bounds checking and compile a new specialisation for every dtype/layout mix,
so each public op function validates its arguments here first:

* float arrays: a NumPy ndarray, float32 or float64, C-contiguous, of the expected shape, and all of
  the one dtype of the call (the first array checked sets it);
* index arrays (tokens, targets): any integer ndarray of the expected shape, returned as a
  contiguous int64 copy (a (b, l) conversion, cheap next to the op itself).

A bad argument raises ``ValueError`` naming it, e.g. ``weight: expected shape (8,), got (4,)``.
"""

from __future__ import annotations

from types import EllipsisType

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

# An expected shape: ints are exact sizes, None is any size, a leading ... is any leading dims.
Shape = tuple[int | None | EllipsisType, ...]


def _fits(shape: tuple[int, ...], expected: Shape) -> bool:
    pattern = expected
    if pattern and pattern[0] is Ellipsis:
        pattern = pattern[1:]
        if len(shape) < len(pattern):
            return False
        shape = shape[len(shape) - len(pattern) :]
    if len(shape) != len(pattern):
        return False
    return all(p is None or p == s for p, s in zip(pattern, shape, strict=True))


def _show(expected: Shape) -> str:
    parts = ["..." if p is Ellipsis else "any" if p is None else str(p) for p in expected]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def check(name: str, a: object, shape: Shape, dtype: np.dtype | None = None) -> np.dtype:
    """Validate one float argument; ``dtype`` None accepts float32 or float64. Returns its dtype,
    to pass to the checks of the other arguments of the same call."""
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{name}: expected a NumPy array of shape {_show(shape)}, "
                         f"got {type(a).__name__}")
    if not _fits(a.shape, shape):
        raise ValueError(f"{name}: expected shape {_show(shape)}, got {a.shape}")
    if dtype is None:
        if a.dtype not in FLOAT_DTYPES:
            raise ValueError(f"{name}: expected float32 or float64, got {a.dtype}")
    elif a.dtype != dtype:
        raise ValueError(f"{name}: expected {dtype} like the other arguments, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array (use np.ascontiguousarray)")
    return a.dtype


def check_wider(name: str, a: object, width: int, dtype: np.dtype) -> None:
    """A (b, l, c) float argument read (or written) at its first ``width`` columns: c >= width."""
    check(name, a, (None, None, None), dtype)
    assert isinstance(a, np.ndarray)
    if a.shape[2] < width:
        raise ValueError(f"{name}: expected shape (b, l, >= {width}), got {a.shape}")


def check_index(name: str, a: object, shape: Shape) -> np.ndarray:
    """Validate an integer index array; returns it as contiguous int64."""
    if not isinstance(a, np.ndarray) or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer NumPy array of shape {_show(shape)}")
    if not _fits(a.shape, shape):
        raise ValueError(f"{name}: expected shape {_show(shape)}, got {a.shape}")
    return np.ascontiguousarray(a, dtype=np.int64)


def reset_mask(reset: np.ndarray | None, b: int, length: int) -> np.ndarray:
    """The kernels' form of an optional document-reset mask: ``reset`` (b, l) bool/integer, True
    at the first position of each document -> contiguous uint8 (b, l); None -> uint8 (b, 0),
    which the kernels read as "no resets"."""
    if reset is None:
        return np.zeros((b, 0), np.uint8)
    if not isinstance(reset, np.ndarray) or reset.shape != (b, length):
        got = reset.shape if isinstance(reset, np.ndarray) else type(reset).__name__
        raise ValueError(f"reset: expected shape {(b, length)}, got {got}")
    if reset.dtype != np.bool_ and not np.issubdtype(reset.dtype, np.integer):
        raise ValueError(f"reset: expected a bool or integer mask, got {reset.dtype}")
    return np.ascontiguousarray(reset != 0, dtype=np.uint8)


def n_blocks(rows: int, block: int) -> int:
    return max(1, -(-rows // block))
