"""Central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numeric_grad(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6,
                 max_points: int | None = None, rng: np.random.Generator | None = None,
                 at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """d f / d x at up to ``max_points`` flat indices of ``x`` (modified in place and restored),
    or at the flat indices ``at`` (a sparse gradient's rows: random points missed them).

    Returns (flat indices, numeric derivatives)."""
    flat = x.reshape(-1)
    idx = np.arange(flat.size) if at is None else np.asarray(at)
    if at is None and max_points is not None and flat.size > max_points:
        idx = (rng or np.random.default_rng(0)).choice(flat.size, max_points, replace=False)
    out = np.empty(len(idx))
    for j, i in enumerate(idx):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        out[j] = (fp - fm) / (2 * eps)
    return idx, out


def assert_grad_close(analytic: np.ndarray, f: Callable[[], float], x: np.ndarray,
                      rtol: float = 1e-5, atol: float = 1e-8, eps: float = 1e-6,
                      max_points: int | None = 64, name: str = "") -> None:
    """Analytic gradient (same shape as x) vs central differences; also rejects all-zero grads.
    ``name`` labels a failure."""
    assert analytic.shape == x.shape, (name, analytic.shape, x.shape)
    idx, num = numeric_grad(f, x, eps, max_points)
    ana = analytic.reshape(-1)[idx]
    assert np.any(np.abs(num) > 1e-10), f"{name}: numeric gradient is zero: the test cannot fail"
    np.testing.assert_allclose(ana, num, rtol=rtol, atol=atol + rtol * np.abs(num).max(),
                               err_msg=name)
