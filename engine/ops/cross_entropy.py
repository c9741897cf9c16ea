"""Fused softmax + cross-entropy (llm.c style): loss and dlogits in one pass over the logits.

    loss_i = logsumexp(logits_i) - logits_i[target_i];   dlogits_i = scale * (softmax_i - onehot_i)
Rows with target < 0 are ignored (loss 0, zero gradient).
Shapes: logits (m, v), targets (m,) int -> losses (m,), dlogits (m, v) (may overwrite logits).
``cross_entropy_scores`` is the forward alone, for held-out scoring: losses (m,) and whether each
row's argmax is its target (m,), the logits left untouched.
Reference: engine/reference.py::cross_entropy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange
from numba.extending import register_jitable

from .._jit import fast_exp, parallel_kernel
from ._common import check, check_index


@register_jitable(inline="always")
def _row_max(row, acc):  # pragma: no cover - compiled
    """max of ``row`` (v,) in 8 independent lanes (``acc`` (8,): scratch): a single running max
    is a serial chain of compares that LLVM does not vectorise without the nnan flag (never
    enabled here); the max is exact in any order, so no bit changes. NaNs are skipped (the exp
    pass turns them into a NaN loss)."""
    v = row.shape[0]
    for k in range(8):
        acc[k] = row[0]
    for j in range(0, v - 7, 8):
        for k in range(8):
            x = row[j + k]
            acc[k] = x if x > acc[k] else acc[k]
    mx = acc[0]
    for k in range(1, 8):
        mx = acc[k] if acc[k] > mx else mx
    for j in range(v - v % 8, v):
        mx = row[j] if row[j] > mx else mx
    return mx


@parallel_kernel
def _scores_kernel(logits, targets, losses, hits, lanes):
    """Per row: loss = max + log(sum exp(x - max)) - x[target], the sum in float64 (a float32
    running sum over a 50k vocabulary would drift); hit = the first index of the max is the
    target (NumPy's argmax). Rows with target < 0: loss 0, no hit."""
    m, v = logits.shape
    for i in prange(m):
        t = targets[i]
        if t < 0:
            losses[i] = 0.0
            hits[i] = False
            continue
        row = logits[i]
        mx = _row_max(row, lanes[i])
        s = 0.0
        for j in range(v):
            s += np.float64(fast_exp(row[j] - mx))
        lt = row[t]
        losses[i] = np.float64(mx) + math.log(s) - np.float64(lt)
        hit = lt == mx
        if hit:
            for j in range(t):
                if row[j] == mx:
                    hit = False
                    break
        hits[i] = hit


@parallel_kernel
def _cross_entropy_kernel(logits, targets, scale, losses, dlogits, inplace, lanes):
    """``inplace``: dlogits is logits. The exp pass reads and writes through one array reference
    (dlogits' row, after a copy when not in place): through two, LLVM's run-time overlap check
    finds them overlapping in place and runs the scalar copy of the loop, 3-4x slower on
    (2048, 2048) logits (measured)."""
    m, v = logits.shape
    zero = np.zeros(1, logits.dtype)[0]
    for i in prange(m):
        row = logits[i]
        drow = dlogits[i]
        t = targets[i]
        if t < 0:
            losses[i] = 0
            for j in range(v):
                drow[j] = zero
            continue
        lt = row[t]
        mx = _row_max(row, lanes[i])  # ``lanes`` (m, 8): each row's scratch
        if not inplace:
            for j in range(v):
                drow[j] = row[j]
        s = zero
        for j in range(v):  # one array: no run-time overlap check to fail when in place
            ex = fast_exp(drow[j] - mx)
            drow[j] = ex
            s += ex
        losses[i] = mx + math.log(s) - lt
        inv = scale / s
        for j in range(v):
            drow[j] *= inv
        drow[t] -= scale


def cross_entropy_forward_backward(
    logits: np.ndarray, targets: np.ndarray, scale: float, inplace: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """logits (m, v), targets (m,) -> (losses (m,) float64, dlogits (m, v) = scale * dloss/dlogits).

    With ``inplace`` the gradient overwrites ``logits`` (saves one (m, v) buffer)."""
    check("logits", logits, (None, None))
    targets = check_index("targets", targets, logits.shape[:1])
    if targets.size and targets.max() >= logits.shape[1]:
        raise ValueError(f"target id {int(targets.max())} >= vocab size {logits.shape[1]}")
    losses = np.empty(logits.shape[0], dtype=np.float64)
    dlogits = logits if inplace else np.empty_like(logits)
    lanes = np.empty((logits.shape[0], 8), dtype=logits.dtype)
    _cross_entropy_kernel(logits, targets, logits.dtype.type(scale), losses, dlogits, inplace, lanes)
    return losses, dlogits


def cross_entropy_scores(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """logits (m, v), targets (m,) -> (losses (m,) float64, hits (m,) bool): each row's
    cross-entropy (0 where target < 0) and whether its argmax (the first, as NumPy's) is the
    target. The logits are read only. float32 logits: exp in float32, summed in float64
    (within ~1e-6 of a float64 log-softmax; float64 logits: ~1e-15)."""
    check("logits", logits, (None, None))
    targets = check_index("targets", targets, logits.shape[:1])
    if targets.size and targets.max() >= logits.shape[1]:
        raise ValueError(f"target id {int(targets.max())} >= vocab size {logits.shape[1]}")
    if logits.shape[1] == 0:
        raise ValueError("logits: expected at least one column")
    losses = np.empty(logits.shape[0], dtype=np.float64)
    hits = np.empty(logits.shape[0], dtype=np.bool_)
    lanes = np.empty((logits.shape[0], 8), dtype=logits.dtype)
    _scores_kernel(logits, targets, losses, hits, lanes)
    return losses, hits
