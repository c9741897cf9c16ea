"""How many BLAS threads a training step uses, chosen by measuring steps as they run.

Measured on the 2-core target while other processes kept the cores busy (small preset, one run,
medians, interleaved): Numba 2 + OpenBLAS 2 threads 640 ms a step, 1 + 1 248 ms, Numba 2 +
OpenBLAS 1 261 ms and, with dynamic scheduling of the Numba loops (chunk size 1), 228 ms. The
OpenBLAS threads hand each GEMM to a worker that may be descheduled, so under load two threads
ran 2.6x slower than one; on a quiet machine two BLAS threads are what make the GEMMs fast.

So ``ThreadTuner`` keeps Numba at ``threads`` with dynamic scheduling and picks the BLAS thread
count, ``threads`` or 1, from step times: each is tried for a few steps at the start, the faster
(median) is kept, and every ``probe_every`` steps the other gets ``probe_steps`` steps again, so a
machine that becomes busy (or quiet) is followed within about ``probe_every`` steps.
"""

from __future__ import annotations

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


class ThreadTuner:
    def __init__(self, threads: int | None = None, first_trials: int = 3, probe_every: int = 50,
                 probe_steps: int = 2, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.threads = threads or default_threads()
        self.candidates = [self.threads] if self.threads == 1 else [self.threads, 1]
        self.first_trials = first_trials
        self.probe_every = probe_every
        self.probe_steps = probe_steps
        self.blas = self.candidates[0]
        self.history: dict[int, deque[float]] = {c: deque(maxlen=5) for c in self.candidates}
        self.steps = 0
        self._ctl: ThreadpoolController | None = None  # threadpoolctl controller, made on first use

    def _planned(self) -> int:
        """The BLAS thread count for the next step."""
        if len(self.candidates) == 1:
            return self.blas
        s = self.steps - 1  # step 0 compiles kernels: not measured against anything
        if s < 0:
            return self.blas
        if s < 2 * self.first_trials:
            return self.candidates[s % 2]
        other = self.candidates[1] if self.blas == self.candidates[0] else self.candidates[0]
        return other if s % self.probe_every >= self.probe_every - self.probe_steps else self.blas

    def _decide(self) -> None:
        meds = {c: float(np.median(h)) for c, h in self.history.items() if h}
        if len(meds) == len(self.candidates):
            self.blas = min(meds, key=lambda c: meds[c])

    @contextmanager
    def step(self) -> Iterator[None]:
        """Wrap one training step: sets the thread counts, times the step, updates the choice."""
        import numba
        from threadpoolctl import ThreadpoolController

        if self._ctl is None:
            self._ctl = ThreadpoolController()  # scans the loaded libraries once, not per step
        use = self._planned()
        numba.set_num_threads(min(self.threads, numba.config.NUMBA_NUM_THREADS))
        chunk = numba.get_parallel_chunksize()
        numba.set_parallel_chunksize(1)
        t = self.clock()
        try:
            with self._ctl.limit(limits=use, user_api="blas"):
                yield
        finally:
            numba.set_parallel_chunksize(chunk)
        if self.steps > 0:
            self.history[use].append(self.clock() - t)
            self._decide()
        self.steps += 1
