"""Thread counts on a busy machine: one core kept busy by a spinning child process (pinned to the
last CPU this process may use, when the affinity call is available), training steps of the small
preset timed with Numba/BLAS threads fixed at 1/1 and 2/2, with two workers of 1/1 (a
micro-batch's halves at once, round 17), and with engine.threads.ThreadTuner choosing (after its
first trials, run untimed under the same load), and a second tuner as it was before round 17
(without the two-worker choice), interleaved; medians and means (the probes show in the means).
``--work prompt``: the reading of a --prompt-tokens prompt by a small model instead (engine.lm's
pieces), each variant a whole prompt, at fixed counts only (a tuner for prompts was measured and
not kept: docs/performance.md, round 13).

    python benchmarks/bench_threads.py [--steps 30] [--quiet]   (--quiet: no busy child)
    python benchmarks/bench_threads.py --work prompt --steps 5 [--prompt-tokens 65536]
"""

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
from bench_tuner_replay import PREVIOUS, interleaved  # noqa: E402
from threadpoolctl import ThreadpoolController  # noqa: E402

from engine.bench import _trainer, cpu_model  # noqa: E402
from engine.threads import ThreadTuner  # noqa: E402

SPIN = ("import os\ntry:\n    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})\n"
        "except Exception:\n    pass\nwhile True:\n    pass\n")  # on the last of our CPUs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--work", choices=["train", "prompt"], default="train")
    ap.add_argument("--prompt-tokens", type=int, default=65536)
    a = ap.parse_args()
    step = _prompt_reader(a.prompt_tokens) if a.work == "prompt" else _train_step(a.steps)
    tuner = ThreadTuner(threads=2)  # the trainer's settings (probes every 100 steps)
    every = ThreadTuner(threads=2, **PREVIOUS)  # the tuner before round 17
    ctl = ThreadpoolController()  # made once: a bare threadpool_limits scans the libraries

    def fixed(n: int, workers: int = 1) -> float:
        numba.set_num_threads(n)
        with ctl.limit(limits=n, user_api="blas"):
            return step(workers)

    def tuned(t: ThreadTuner = tuner) -> float:
        with t.step():
            return step(t.current[2])

    variants = {"numba1_blas1": lambda: fixed(1), "numba2_blas2": lambda: fixed(2)}
    if a.work == "train":
        variants["halves_numba1_blas1"] = lambda: fixed(1, 2)
    if a.work == "train":
        variants["tuner"] = tuned
        variants["tuner_previous_rule"] = lambda: tuned(every)
    for fn in variants.values():
        fn()
    def first_trials() -> None:
        # the tuner's first trials (each choice first_trials times) under the same load, untimed:
        # the timed steps show the choice it settles on, with its periodic probes
        for _ in range(tuner.first_trials * len(tuner.candidates) if a.work == "train" else 0):
            tuned()
            tuned(every)

    times = interleaved(variants, a.steps, None if a.quiet else SPIN, first_trials)
    base = float(np.median(times["numba1_blas1"]))
    base_mean = float(np.mean(times["numba1_blas1"]))
    tuners = {"tuner": tuner, "tuner_previous_rule": every}
    for k, ts in times.items():
        med = float(np.median(ts))
        t = tuners.get(k)
        print(json.dumps({"bench": "threads", "work": a.work, "busy_core": not a.quiet,
                          "variant": k,
                          "median_ms": round(med * 1e3, 1), "min_ms": round(min(ts) * 1e3, 1),
                          "mean_ms": round(float(np.mean(ts)) * 1e3, 1),
                          "speed_vs_1_thread": round(base / med, 2),
                          "mean_speed_vs_1_thread": round(base_mean / float(np.mean(ts)), 2),
                          "tuner_blas_threads": t.blas if t else None,
                          "tuner_numba_threads": t.numba if t else None,
                          "tuner_workers": t.workers if t else None,
                          "cpu": cpu_model()}), flush=True)


def _train_step(steps: int) -> Callable[[], float]:
    """One training step of the small preset, timed."""
    tr = _trainer("small", "full", 4 * (5 * steps + 40))  # 5 variants, 2 tuners' trials
    i = [0]

    def step(workers: int = 1) -> float:
        rows = np.arange(i[0] * 4, i[0] * 4 + 4)
        i[0] += 1
        t = time.perf_counter()
        tr.train_step(rows, workers)
        return time.perf_counter() - t

    return step


def _prompt_reader(tokens: int) -> Callable[[], float]:
    """Reading a ``tokens``-long prompt with a small model (byte vocabulary), timed."""
    from engine import ByteTokenizer, MambaConfig, MambaLM, SamplingConfig
    from engine.bench import BENCH_CONFIGS

    c = BENCH_CONFIGS["small"]
    lm = MambaLM.create(MambaConfig(vocab_size=260, d_model=c["d_model"], n_layer=c["n_layer"]),
                        ByteTokenizer())
    ids = np.random.default_rng(0).integers(0, 256, size=tokens)
    none = SamplingConfig(max_new_tokens=0)

    def step(workers: int = 1) -> float:  # (one worker: prompts have no halves)
        t = time.perf_counter()
        list(lm.generate_ids(ids, none))
        return time.perf_counter() - t

    return step


if __name__ == "__main__":
    main()
