"""How many threads (Numba and BLAS) a training step uses, chosen by measuring steps as they run.

Measured on the 2-core target while other processes kept the cores busy (small preset, one run,
medians, interleaved): Numba 2 + OpenBLAS 2 threads 640 ms a step, 1 + 1 248 ms, Numba 2 +
OpenBLAS 1 261 ms and, with dynamic scheduling of the Numba loops (chunk size 1), 228 ms. The
OpenBLAS threads hand each GEMM to a worker that may be descheduled, so under load two threads
ran 2.6x slower than one; on a quiet machine two BLAS threads are what make the GEMMs fast.

So ``ThreadTuner`` picks, from step times, among (Numba threads, BLAS threads, workers) = (threads,
threads, 1), (threads, 1, 1), (1, 1, 1) and, since round 17, with 2 or 3 threads (``splits``),
(threads // 2, 1, 2): two workers, each half of a micro-batch's rows in its own thread
(``engine.halves``; on a quiet 2-core VM a step 1.10-1.20x faster than 2 + 2 threads over the
whole batch, small to medium; with 4 and 8 cores slower than N + N, so not offered there).
The workers' BLAS runs one thread: its count is one for the whole process, and threaded
OpenBLAS GEMMs called from two threads at once are serialised by a lock (in OpenBLAS
0.3.28-0.3.29 they could mix their results).
The Numba loops are dynamically scheduled when a worker has several Numba threads. Each choice is
tried for a few steps at the start, the fastest (median of the last 9 steps) is kept, and every
``probe_every`` steps each other choice gets ``probe_steps`` steps again, so a machine that becomes
busy (or quiet) is followed within about ``probe_every`` steps. A choice 1.25x slower than the best
or more (``far``: on a quiet 2-core EPYC VM 1 + 1 ran at 1.36-1.41x and 2 + 1 at 1.21-1.23x the
step time of 2 + 2) gets two first trials instead of three and is probed every fourth time only,
its history then started afresh (one fast probe step suffices to take it). Replayed over step times
recorded there (``benchmarks/bench_tuner_replay.py``, docs/performance.md rounds 16-17), the
tuner's cost against the best fixed choice fell from 2.6-7.2 % to 1.8-3.2 % of a 110-step run and
from 1.4-7.6 % to 0.6-2.9 % of a 2,000-step one (medians of 9 instead of 5 are most of the gain
where a choice's times are spread, the far rule where the choices are far apart), at the price of
following a machine that becomes quiet again within four probe intervals instead of one; with the
fourth choice it is 3.7-4.0 % and 1.1-1.7 % (quiet recordings).

(1, 1) is a choice since round 5: with one core kept busy, (2, 1) ran at 0.93x the speed of (1, 1)
(``benchmarks/bench_threads.py``, small), so keeping two Numba threads could not hold "two threads
are never slower than one". The kernels partition their work and sums into fixed blocks, so the
Numba count changes no result bit; where two workers are among the choices the trainer runs every
micro-batch in the same two halves whatever the worker count (one after the other with one
worker), so that changes none either (a tuner of one thread has no two-worker choice: its trainer
runs whole micro-batches, and so other last bits than a machine with two cores; likewise one
of 4 threads or more). The BLAS count
may, by the BLAS build: OpenBLAS 0.3.31's SkylakeX kernel gives the same bits at 1 and 2 threads,
its Haswell kernel (an AVX2 machine) other bits for every product of a step (up to ~5e-6 of values
~1); there a run's last bits depend on the tuner's choices, i.e. on timing, and a resumed run
equals one run to ~1e-7 relative, not bit for bit (``blas_bits_depend_on_threads`` tells which).
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


Choice = tuple[int, int, int]  # (Numba threads, BLAS threads) per worker, workers


SPLIT_MAX_THREADS = 3  # the most threads a tuner offers the two-worker choice at (see splits)


def splits(threads: int) -> bool:
    """Whether a tuner of ``threads`` threads offers the two-worker choice (and so its trainer
    runs every micro-batch as two halves): 2 or 3 threads. Measured on an Intel Xeon (round 18
    of docs/performance.md, cores pinned, against the engine before the halves): with 2 cores the
    halves at once made a step 1.11-1.15x faster than 2 + 2 threads (1.10-1.20x on an AVX2 EPYC);
    with 4 and 8 they ran at 0.49-0.81x of N + N threads over the whole batch (one BLAS thread a
    worker), and the halves one after the other at N + N at 0.82-0.98x, i.e. a cost with no
    choice to gain it back. 3 threads were not measured."""
    return 2 <= threads <= SPLIT_MAX_THREADS


def two_workers(threads: int) -> Choice:
    """The two-worker choice for ``threads`` cores: threads // 2 Numba threads a worker and one
    BLAS thread (its count is one for the whole process; see the module docstring)."""
    return (max(1, threads // 2), 1, 2)


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
                 probe_steps: int = 2, clock: Callable[[], float] = time.perf_counter,
                 far: float = 1.25, far_every: int = 4, history: int = 9,
                 split: bool = True) -> None:
        """``first_trials`` turns of every choice at the start, then ``probe_steps`` steps of each
        other choice at the end of every ``probe_every`` steps; a choice whose median step is
        ``far`` times the best median or more (a far choice) skips its later first trials (once it
        has two) and is probed only every ``far_every``-th time, its history started afresh
        (``far=inf``: every choice probed every time, the rule before round 16). Choices are
        compared by the medians of their last ``history`` step times (5 before then). ``split``
        adds the choice of two workers (each half of a micro-batch's rows in its own thread, with
        threads // 2 Numba threads each and one BLAS thread) where ``splits(threads)``: 2 or 3."""
        self.clock = clock
        self.threads = threads or default_threads()
        t = self.threads
        self.candidates: list[Choice] = ([(1, 1, 1)] if t == 1 else
                                         [(t, t, 1), (t, 1, 1), (1, 1, 1)])
        if split and splits(t):
            self.candidates.append(two_workers(t))
        self.first_trials = first_trials
        self.probe_every = max(probe_every, (len(self.candidates) - 1) * probe_steps + 1)
        self.probe_steps = probe_steps
        self.far = far
        self.far_every = max(1, far_every)
        self.choice: Choice = self.candidates[0]
        self.current: Choice = self.choice  # the counts of the step in progress (or the last one)
        self.history: dict[Choice, deque[float]] = {c: deque(maxlen=history)
                                                      for c in self.candidates}
        self.steps = 0
        self._fresh_window: dict[Choice, int] = {}  # the probe window a far choice restarted in
        self._ctl: ThreadpoolController | None = None  # threadpoolctl controller, made on first use

    @property
    def blas(self) -> int:
        """The BLAS thread count chosen so far."""
        return self.choice[1]

    @property
    def numba(self) -> int:
        """The Numba thread count chosen so far (of each worker)."""
        return self.choice[0]

    @property
    def max_workers(self) -> int:
        """2 when two workers are among the choices (a trainer then runs every micro-batch of two
        rows or more as two halves, whichever is chosen), else 1."""
        return max(c[2] for c in self.candidates)

    @property
    def workers(self) -> int:
        """The worker count chosen so far: 2 when each half of a micro-batch runs in its own
        thread (``Trainer.accumulate``), else 1."""
        return self.choice[2]

    def _medians(self) -> dict[Choice, float]:
        return {c: float(np.median(h)) for c, h in self.history.items() if h}

    def _is_far(self, c: Choice) -> bool:
        """Whether ``c``'s median step is ``far`` times the best median or more."""
        meds = self._medians()
        return c in meds and meds[c] >= self.far * min(meds.values())

    def _planned(self) -> tuple[Choice, int | None]:
        """The (Numba, BLAS, workers) counts for the next step, and the probe window when the step
        begins a far choice's probe in it, else None (its history then starts afresh, so a
        machine that changed is seen at once rather than after several probes)."""
        n = len(self.candidates)
        s = self.steps - 1  # step 0 compiles kernels: not measured against anything
        if n == 1 or s < 0:
            return self.choice, None
        if s < n * self.first_trials:
            c = self.candidates[s % n]  # a far choice's later trials skipped once it has two
            skip = len(self.history[c]) >= 2 and self._is_far(c)  # (one slow step is no verdict)
            return (self.choice if skip else c), None
        others = [c for c in self.candidates if c != self.choice]
        window, k = divmod(s, self.probe_every)
        k -= self.probe_every - len(others) * self.probe_steps
        if k < 0:
            return self.choice, None
        c = others[k // self.probe_steps]
        if not self._is_far(c):
            return c, None
        if window % self.far_every != self.far_every - 1:  # the first far probe after far_every
            return self.choice, None
        # its first step in this window starts its history afresh (the choice, and so the order
        # of the others, may change within the window: the window is remembered, not the slot)
        return c, (window if self._fresh_window.get(c) != window else None)

    def _decide(self) -> None:
        meds = self._medians()
        if len(meds) == len(self.candidates):
            self.choice = min(meds, key=lambda c: meds[c])

    @contextmanager
    def step(self) -> Iterator[None]:
        """Wrap one training step: sets the thread counts, times the step, updates the choice."""
        import numba
        from threadpoolctl import ThreadpoolController

        if self._ctl is None:
            self._ctl = ThreadpoolController()  # scans the loaded libraries once, not per step
        use, fresh = self._planned()
        self.current = use
        if fresh is not None:
            self.history[use].clear()
            self._fresh_window[use] = fresh
        numba_before = numba.get_num_threads()
        numba.set_num_threads(min(use[0], numba.config.NUMBA_NUM_THREADS))
        chunk = numba.get_parallel_chunksize()
        if use[0] > 1:  # dynamic scheduling; with one thread it only costs (2.6-3.1 % CPU time)
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
