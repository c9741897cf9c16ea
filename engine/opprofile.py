"""Where a training step's time goes: wall time per op, measured by wrapping the op functions that
``engine.model`` calls (and the optimizer step) for the duration of a ``with profile_ops():`` block.

What no op accounts for is the matrix products plus the Python glue between them (slicing,
reshapes, allocation): ``rest_ms`` = step time - sum of ops. Dividing the step's GEMM flops by it
gives a lower bound on the GEMMs' in-step GFLOP/s.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import model, optim

_MODEL_OPS = (
    "rmsnorm_forward", "rmsnorm_backward", "conv1d_forward", "conv1d_backward",
    "softplus_forward", "softplus_backward", "selective_scan_forward", "selective_scan_backward",
    "cross_entropy_forward_backward", "embedding_forward", "embedding_backward",
)


@contextmanager
def profile_ops(clock: Callable[[], float] = time.perf_counter) -> Iterator[dict[str, float]]:
    """Yields a dict op name -> seconds of ``clock`` (wall time; ``time.process_time`` gives CPU
    time, meaningful at 1 thread on a shared machine), filled while the block runs."""
    acc: dict[str, float] = defaultdict(float)
    saved: list[tuple[Any, str, Callable[..., Any]]] = []

    def wrap(owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[label] += clock() - t

        saved.append((owner, name, fn))
        setattr(owner, name, timed)

    for op in _MODEL_OPS:
        wrap(model, op, op)
    wrap(optim.AdamW, "step", "adamw")
    try:
        yield acc
    finally:
        for owner, name, fn in reversed(saved):
            setattr(owner, name, fn)
