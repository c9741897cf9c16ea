"""What the hardware allows, measured in the same run as the thing it is compared with.

* ``fma_peak_gflops`` -- float32 multiply-add throughput that Numba-compiled code reaches on
  L1-resident data (independent Horner chains, vectorised): the ceiling of our kernels.
* ``exp_ns`` -- nanoseconds per float32 ``fast_exp`` (or, with ``decay=True``, per
  ``scan_decay``, the scan's decays) on L1-resident data, the scan's other cost.
* ``sgemm_gflops`` -- NumPy's BLAS on a given GEMM shape.
* ``scan_counts`` -- flops, decays and other exps of the scan kernels per call, as the kernels
  do them.

A kernel's roofline fraction is (flops / fma peak + decays * decay time + exps * exp time) /
measured time: 1.0 would mean every cycle went to counted arithmetic. Thread counts are the
caller's (``bench.set_threads``).
"""

from __future__ import annotations

import time

import numpy as np
from numba import prange

from engine._jit import LOG2E, fast_exp, parallel_kernel, scan_decay

_LANES = 4096  # per thread block: 16 KiB of float32, L1-resident
_REPS = 200


@parallel_kernel
def _fma_kernel(x, out, reps):
    """Each of the (blocks, _LANES) elements runs 2 independent chains of 16 multiply-adds,
    ``reps`` times: 64 flops per element per rep."""
    nb = x.shape[0]
    for blk in prange(nb):
        xb = x[blk]
        ob = out[blk]
        for _ in range(reps):
            for k in range(_LANES):
                v = xb[k]
                a = v * np.float32(0.5) + np.float32(0.25)
                c = v * np.float32(0.25) + np.float32(0.5)
                for _j in range(15):
                    a = a * v + np.float32(0.125)
                    c = c * v + np.float32(0.0625)
                ob[k] = a + c


@parallel_kernel
def _exp_kernel(x, out, reps, decay):
    """out = fast_exp(x), or scan_decay(x) when ``decay`` (a loop invariant: LLVM takes the
    branch out of the loop), ``reps`` times per L1-resident block."""
    nb = x.shape[0]
    for blk in prange(nb):
        xb = x[blk]
        ob = out[blk]
        for _ in range(reps):
            for k in range(_LANES):
                ob[k] = scan_decay(xb[k]) if decay else fast_exp(xb[k])
            xb[0] = ob[1] * np.float32(-1e-30)  # keep the loop from being hoisted


def _best(fn, repeats: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def fma_peak_gflops(threads: int) -> float:
    """Best float32 FMA GFLOP/s over a few runs, one L1-resident block per thread."""
    x = np.random.default_rng(0).uniform(-0.9, 0.9, (max(threads, 1), _LANES)).astype(np.float32)
    out = np.empty_like(x)
    sec = _best(lambda: _fma_kernel(x, out, _REPS))
    return 64.0 * x.size * _REPS / sec / 1e9


def exp_ns(threads: int, decay: bool = False) -> float:
    """Best wall nanoseconds per float32 fast_exp (``decay``: scan_decay, on the same values in
    its base-2 units) with ``threads`` threads busy (so 2 threads give about half the
    single-thread time)."""
    x = np.random.default_rng(0).uniform(-10, 0, (max(threads, 1), _LANES)).astype(np.float32)
    out = np.empty_like(x)
    if decay:
        x *= np.float32(LOG2E)
    sec = _best(lambda: _exp_kernel(x, out, _REPS, decay))
    return sec / (x.size * _REPS) * 1e9


def sgemm_gflops(m: int, k: int, n: int, repeats: int = 10) -> float:
    """Best GFLOP/s of a (m, k) @ (k, n) float32 product through NumPy's BLAS."""
    rng = np.random.default_rng(0)
    a = rng.random((m, k), dtype=np.float32)
    b = rng.random((k, n), dtype=np.float32)
    sec = _best(lambda: a @ b, repeats)
    return 2.0 * m * k * n / sec / 1e9


def scan_counts(b: int, length: int, e: int, n: int) -> dict[str, tuple[float, float, float]]:
    """(flops, decays, other exps) of the forward and backward scan kernels per call, as
    implemented in engine/ops/selective_scan.py (a multiply-add counts 2). Per (b, t, e, n)
    element: forward 6 flops + 1 decay; backward = the forward recomputed, keeping each decay
    (6 + 1 decay) + the reverse step (16, no exp: it reads the kept decay); per (b, t, e):
    forward ~8 + a sigmoid (1 exp), backward ~24 + a sigmoid."""
    el = float(b * length * e * n)
    bte = float(b * length * e)
    return {
        "forward": (6 * el + 8 * bte, el, bte),
        "backward": (22 * el + 24 * bte, el, bte),
    }
