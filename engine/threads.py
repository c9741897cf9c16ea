"""How many threads (Numba and BLAS) a training step uses, chosen by measuring steps as they run.

Measured on the 2-core target while other processes kept the cores busy (small preset, one run,
medians, interleaved): Numba 2 + OpenBLAS 2 threads 640 ms a step, 1 + 1 248 ms, Numba 2 +
OpenBLAS 1 261 ms and, with dynamic scheduling of the Numba loops (chunk size 1), 228 ms. The
OpenBLAS threads hand each GEMM to a worker that may be descheduled, so under load two threads
ran 2.6x slower than one; on a quiet machine two BLAS threads are what make the GEMMs fast.

So ``ThreadTuner`` picks, from step times, among (Numba threads, BLAS threads) = (threads,
threads), (threads, 1) and (1, 1), the Numba loops dynamically scheduled: each is tried for a few
steps at the start, the fastest (median) is kept, and every ``probe_every`` steps each other
choice gets ``probe_steps`` steps again (4 % of the steps), so a machine that becomes busy (or
quiet) is followed within about ``probe_every`` steps. (1, 1) is a choice since round 5: with
one core kept busy, (2, 1) ran at 0.93x the speed of (1, 1) (``benchmarks/bench_threads.py``,
small), so keeping two Numba threads could not hold "two threads are never slower than one".
The kernels partition their work and sums into fixed blocks, so the Numba count changes no
result bit. The BLAS count may, by the BLAS build: OpenBLAS 0.3.31's SkylakeX kernel gives the
same bits at 1 and 2 threads, its Haswell kernel (an AVX2 machine) other bits for every product
of a step (up to ~5e-6 of values ~1); there a run's last bits depend on the tuner's choices, i.e.
on timing, and a resumed run equals one run to ~1e-7 relative, not bit for bit
(``blas_bits_depend_on_threads`` tells which).
"""

from __future__ import annotations

import functools
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from threadpoolctl import ThreadpoolController


def default_threads() -> int:
    """CPUs this process may run on (affinity-aware), capped by NUMBA_NUM_THREADS."""
    import numba

    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


Choice = tuple[int, int]  # (Numba threads, BLAS threads)


@functools.cache
def blas_bits_depend_on_threads(threads: int | None = None) -> bool:
    """Whether this process's BLAS gives other bits at ``threads`` threads (default:
    ``default_threads()``) than at 1 for products shaped as a step's (a rank-8 ``dt_proj``, an
    input gradient, a transposed weight gradient); False with one thread. Cached: a few ms once."""
    from threadpoolctl import threadpool_limits

    t = threads or default_threads()
    if t <= 1:
        return False
    rng = np.random.default_rng(0)
    pairs = [(rng.standard_normal((1024, 8), dtype=np.float32),
              rng.standard_normal((256, 8), dtype=np.float32).T),
             (rng.standard_normal((1024, 512), dtype=np.float32),
              rng.standard_normal((512, 128), dtype=np.float32)),
             (rng.standard_normal((1024, 512), dtype=np.float32).T,
              rng.standard_normal((1024, 128), dtype=np.float32))]
    for a, b in pairs:
        with threadpool_limits(1, user_api="blas"):
            one = a @ b
        with threadpool_limits(t, user_api="blas"):
            many = a @ b
        if not np.array_equal(one, many):
            return True
    return False


class ThreadTuner:
    def __init__(self, threads: int | None = None, first_trials: int = 3, probe_every: int = 100,
                 probe_steps: int = 2, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.threads = threads or default_threads()
        t = self.threads
        self.candidates: list[Choice] = [(t, t)] if t == 1 else [(t, t), (t, 1), (1, 1)]
        self.first_trials = first_trials
        self.probe_every = max(probe_every, (len(self.candidates) - 1) * probe_steps + 1)
        self.probe_steps = probe_steps
        self.choice: Choice = self.candidates[0]
        self.current: Choice = self.choice  # the counts of the step in progress (or the last one)
        self.history: dict[Choice, deque[float]] = {c: deque(maxlen=5) for c in self.candidates}
        self.steps = 0
        self._ctl: ThreadpoolController | None = None  # threadpoolctl controller, made on first use

    @property
    def blas(self) -> int:
        """The BLAS thread count chosen so far."""
        return self.choice[1]

    @property
    def numba(self) -> int:
        """The Numba thread count chosen so far."""
        return self.choice[0]

    def _planned(self) -> Choice:
        """The (Numba, BLAS) thread counts for the next step."""
        n = len(self.candidates)
        s = self.steps - 1  # step 0 compiles kernels: not measured against anything
        if n == 1 or s < 0:
            return self.choice
        if s < n * self.first_trials:
            return self.candidates[s % n]
        others = [c for c in self.candidates if c != self.choice]
        k = s % self.probe_every - (self.probe_every - len(others) * self.probe_steps)
        return others[k // self.probe_steps] if k >= 0 else self.choice

    def _decide(self) -> None:
        meds = {c: float(np.median(h)) for c, h in self.history.items() if h}
        if len(meds) == len(self.candidates):
            self.choice = min(meds, key=lambda c: meds[c])

    @contextmanager
    def step(self) -> Iterator[None]:
        """Wrap one training step: sets the thread counts, times the step, updates the choice."""
        import numba
        from threadpoolctl import ThreadpoolController

        if self._ctl is None:
            self._ctl = ThreadpoolController()  # scans the loaded libraries once, not per step
        use = self.current = self._planned()
        numba_before = numba.get_num_threads()
        numba.set_num_threads(min(use[0], numba.config.NUMBA_NUM_THREADS))
        chunk = numba.get_parallel_chunksize()
        numba.set_parallel_chunksize(1)
        t = self.clock()
        try:
            with self._ctl.limit(limits=use[1], user_api="blas"):
                yield
        finally:
            numba.set_parallel_chunksize(chunk)
            numba.set_num_threads(numba_before)
        if self.steps > 0:
            self.history[use].append(self.clock() - t)
            self._decide()
        self.steps += 1
