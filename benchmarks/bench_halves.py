"""A micro-batch's halves in two threads (round 17) against the whole batch, in one process.

    python benchmarks/bench_halves.py [--ref 5f67e35] [--configs small,default,medium] [--busy]
                                      [--threads N]

Training steps of the bench configs, interleaved step by step so all see the same machine state:
* ``ref N+N``   -- a git ref's engine (default: the last commit before round 17), imported beside
                   this one, its whole micro-batch at N Numba + N BLAS threads (the tuner's
                   chunk size: 1 with two Numba threads);
* ``this N+N``  -- this engine at the same counts: since round 17 a micro-batch of two rows or
                   more runs as two halves, one after the other with one worker;
* ``this halves`` -- the two halves at once, each in its own thread of N // 2 Numba threads and
                   one BLAS thread (the thread tuner's two-worker choice, ``threads.two_workers``:
                   (1, 1, 2) on two cores).
N is ``--threads`` (default 2; the machine's cores, e.g. under ``taskset``), and the 1 + 1 rows
are timed too. With N of 4 or more this engine runs whole micro-batches (``threads.splits``), so
``this halves`` is left out and ``this N+N`` compares the same work with the engine before.
One JSON line per (config, variant): median and min ms, tokens/s and the speed against
``ref N+N``. ``--busy`` keeps one core busy with a spinning process (as bench_threads.py).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
from bench_ops_ab import load_ref  # noqa: E402
from bench_tuner_replay import SPIN, interleaved  # noqa: E402
from threadpoolctl import ThreadpoolController  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, config_names, cpu_model  # noqa: E402
from engine.threads import splits, two_workers  # noqa: E402

DEFAULT_REF = "5f67e35"  # the engine before the halves


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default=DEFAULT_REF)
    ap.add_argument("--configs", type=config_names, default="small,default,medium")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--threads", type=int, default=2, help="N of the N+N rows (default 2)")
    a = ap.parse_args()
    if a.steps < 1 or a.threads < 2:
        ap.error("--steps must be 1 or more and --threads 2 or more")
    sha, _ = load_ref(a.ref)
    ref_trainer = importlib.import_module(f"engine_{sha}.bench")._trainer
    ctl = ThreadpoolController()  # made once: a bare threadpool_limits scans the libraries
    n = a.threads
    per_worker, blas, _ = two_workers(n)
    for name in a.configs:
        c = BENCH_CONFIGS[name]
        n_rows = (a.steps + 2) * c["batch"]

        def variant(tr: Any, threads: int, workers: int, blas: int | None = None,
                    batch: int = c["batch"]) -> Callable[[], float]:
            cursor = [0]

            def step() -> float:
                numba.set_num_threads(threads)
                numba.set_parallel_chunksize(1 if threads > 1 else 0)  # as the tuner sets it
                rows = np.arange(cursor[0] * batch, (cursor[0] + 1) * batch)
                cursor[0] += 1
                try:
                    with ctl.limit(limits=blas or threads, user_api="blas"):
                        t = time.perf_counter()
                        if workers == 1:
                            tr.train_step(rows)
                        else:
                            tr.train_step(rows, workers)
                        return time.perf_counter() - t
                finally:
                    numba.set_parallel_chunksize(0)
                    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
            return step

        variants = {
            f"ref {n}+{n}": variant(ref_trainer(name, "full", n_rows), n, 1),
            "ref 1+1": variant(ref_trainer(name, "full", n_rows), 1, 1),
            f"this {n}+{n}": variant(_trainer(name, "full", n_rows, n), n, 1),
            "this 1+1": variant(_trainer(name, "full", n_rows, n), 1, 1),
        }
        if splits(n):  # (with more threads training runs whole micro-batches: no halves)
            variants["this halves"] = variant(_trainer(name, "full", n_rows, n), per_worker, 2, blas)
        for fn in variants.values():  # compile, warm up
            fn()
            fn()
        times = interleaved(variants, a.steps, SPIN if a.busy else None)
        base = float(np.median(times[f"ref {n}+{n}"]))
        for k, ts in times.items():
            med = float(np.median(ts))
            print(json.dumps({
                "bench": "halves", "config": name, "variant": k, "busy_core": a.busy,
                "median_ms": round(med * 1e3, 2), "min_ms": round(min(ts) * 1e3, 2),
                "tokens_per_s": round(c["batch"] * c["seq_len"] / med, 1),
                "speed_vs_ref_n_n": round(base / med, 3), "threads": n, "steps": a.steps,
                "ref": a.ref, "ref_sha": sha, "cpu": cpu_model()}), flush=True)


if __name__ == "__main__":
    main()
