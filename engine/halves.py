"""A micro-batch's two halves in two threads: the thread tuner's ``workers = 2`` choice.

The kernels release the GIL (``engine._jit``: ``nogil``) and so do NumPy's GEMMs and ufuncs, so two
Python threads, each with half of the rows, keep two cores busy without the hand-offs of one step's
threads (the thread tuner gives each worker threads // 2 Numba threads and the process one BLAS
thread): every parallel loop and GEMM of a step with two threads ends in a barrier, and the step's
many small ops scale poorly (round 17 of docs/performance.md: on a quiet 2-core VM the halves in
two threads made a training step 1.10-1.20x faster than 2 Numba + 2 BLAS threads over the whole
batch, small to medium).

``HalfWorker.both(here, there)`` runs ``there`` in a worker thread (made on first use, kept until
``close``: the trainer closes it as ``Trainer.run`` returns) and ``here`` in the caller, each with
the caller's Numba thread count and chunk size (both are per thread in Numba), and returns both
results once both ended: when ``here`` raises, the worker is still waited for, so no half is left
writing into buffers the next step reuses.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

A = TypeVar("A")
B = TypeVar("B")


class HalfWorker:
    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def both(self, here: Callable[[], A], there: Callable[[], B]) -> tuple[A, B]:
        """(here(), there()), run at once: ``there`` in the worker thread."""
        import numba

        threads, chunk = numba.get_num_threads(), numba.get_parallel_chunksize()

        def run() -> B:
            numba.set_num_threads(threads)
            numba.set_parallel_chunksize(chunk)
            return there()

        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="mamba-half")
        done: Future[B] = self._pool.submit(run)
        try:
            mine = here()
        except BaseException:
            wait([done])  # ours is raised; an error of the worker's half then is dropped
            raise
        return mine, done.result()  # (waits; raises the worker's error, if any)

    def close(self) -> None:
        """Ends the worker thread (a later ``both`` makes a new one)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
