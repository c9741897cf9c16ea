"""Fused softmax + cross-entropy (llm.c style): loss and dlogits in one pass over the logits.

    loss_i = logsumexp(logits_i) - logits_i[target_i];   dlogits_i = scale * (softmax_i - onehot_i)
Rows with target < 0 are ignored (loss 0, zero gradient).
Shapes: logits (m, v), targets (m,) int -> losses (m,), dlogits (m, v) (may overwrite logits).
Reference: engine/reference.py::cross_entropy.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import fast_exp, parallel_kernel
from ._common import check, check_index


@parallel_kernel
def _cross_entropy_kernel(logits, targets, scale, losses, dlogits, inplace):
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
        # the row's max in 8 independent chains: a single running max is a serial chain of
        # compares that LLVM does not vectorise without the nnan flag (never enabled here);
        # the max is exact in any order, so the results keep their bits
        m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = row[0]
        for j in range(0, v - 7, 8):
            x = row[j]
            m0 = x if x > m0 else m0
            x = row[j + 1]
            m1 = x if x > m1 else m1
            x = row[j + 2]
            m2 = x if x > m2 else m2
            x = row[j + 3]
            m3 = x if x > m3 else m3
            x = row[j + 4]
            m4 = x if x > m4 else m4
            x = row[j + 5]
            m5 = x if x > m5 else m5
            x = row[j + 6]
            m6 = x if x > m6 else m6
            x = row[j + 7]
            m7 = x if x > m7 else m7
        for j in range(v - v % 8, v):
            x = row[j]
            m0 = x if x > m0 else m0
        mx = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
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
    _cross_entropy_kernel(logits, targets, logits.dtype.type(scale), losses, dlogits, inplace)
    return losses, dlogits
