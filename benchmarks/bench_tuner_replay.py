"""What the thread tuner costs against the best fixed choice, from step times measured here.

    python benchmarks/bench_tuner_replay.py [--config default] [--rounds 100] [--busy]
                                            [--save FILE | --load FILE] [--runs 400]

1. Record: training steps of ``--config`` with each of the tuner's choices (Numba, BLAS threads,
   workers) fixed, interleaved step by step, ``--rounds`` of each (``--busy``: one core kept busy by a
   spinning child, as in ``bench_threads.py``). ``--save`` writes them as JSON, ``--load`` reads
   a recording instead of measuring (one made before round 17, without the two-worker choice, is
   replayed without it).
2. Replay: ``engine.threads.ThreadTuner`` (its own ``step()``, with a clock that advances by the
   step time drawn at random from the recording of the choice it set) runs ``--runs`` simulated
   trainings of 110 steps (a first Start in the app on the bundled corpus) and of 2,000 steps.

One JSON line per rule and run length (the tuner as it is, and ``previous``: the tuner before
round 17, without the two-worker choice): the tuner's mean total time over the best
fixed choice's (its mean step time x steps), and the share of runs holding a choice other than the
best after the first trials (step 30) and at the end. A recording is noisy data, so the replay
shows what the tuner's rule (first trials, medians, probes every 100 steps) does with this
machine's noise; it does not re-measure the machine.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import ThreadpoolController  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, cpu_model  # noqa: E402
from engine.threads import ThreadTuner  # noqa: E402

SPIN = ("import os\ntry:\n    os.sched_setaffinity(0, {1})\nexcept Exception:\n    pass\n"
        "while True:\n    pass\n")
Choice = tuple[int, int, int]
PREVIOUS = {"split": False}  # the tuner before round 17: no two-worker choice
K = TypeVar("K")


def interleaved(variants: dict[K, Callable[[], float]], steps: int, spin: str | None = None,
                before: Callable[[], object] | None = None) -> dict[K, list[float]]:
    """Seconds of each variant's calls, the variants taking turns ``steps`` times; ``spin``: a
    child process running that code (a busy core) meanwhile, after which ``before`` runs
    first (untimed)."""
    child = subprocess.Popen([sys.executable, "-c", spin]) if spin else None
    try:
        if before is not None:
            before()
        times: dict[K, list[float]] = {k: [] for k in variants}
        for _ in range(steps):
            for k, fn in variants.items():
                times[k].append(fn())
        return times
    finally:
        if child is not None:
            child.kill()
            child.wait()


def record(config: str, rounds: int, busy: bool) -> dict[Choice, list[float]]:
    """Step seconds per (Numba, BLAS, workers) choice, the choices interleaved step by step."""
    c = BENCH_CONFIGS[config]
    choices = ThreadTuner(threads=2).candidates
    tr = _trainer(config, "full", c["batch"] * (len(choices) * rounds + 8))
    i = [0]
    ctl = ThreadpoolController()  # made once: a bare threadpool_limits scans the libraries

    def step(choice: Choice) -> float:
        numba.set_num_threads(choice[0])
        numba.set_parallel_chunksize(1 if choice[0] > 1 else 0)  # as ThreadTuner.step sets it
        with ctl.limit(limits=choice[1], user_api="blas"):
            rows = np.arange(i[0] * c["batch"], (i[0] + 1) * c["batch"])
            i[0] += 1
            t = time.perf_counter()
            tr.train_step(rows, choice[2])
            return time.perf_counter() - t

    for _ in range(3):  # compile, warm up
        step(choices[0])
    return interleaved({ch: partial(step, ch) for ch in choices}, rounds, SPIN if busy else None)


def replay(times: dict[Choice, list[float]], steps: int, runs: int,
           seed: int = 0, **rule: float) -> dict[str, float]:
    """Simulated trainings of ``steps`` steps under the tuner (see the module docstring);
    ``rule`` overrides ``ThreadTuner``'s settings (``PREVIOUS``: the tuner before round 17)."""
    rng = np.random.default_rng(seed)
    data = {ch: np.asarray(v) for ch, v in times.items()}
    if all(ch[2] == 1 for ch in data):  # a recording made before the two-worker choice
        rule = {**rule, "split": False}
    best = min(data, key=lambda ch: float(data[ch].mean()))
    totals, wrong_30, wrong_end = [], 0, 0
    for _ in range(runs):
        now = [0.0]
        tuner = ThreadTuner(threads=2, clock=lambda now=now: now[0], **rule)  # type: ignore[arg-type]
        total = 0.0
        for s in range(steps):
            with tuner.step():
                dt = float(rng.choice(data[tuner.current]))
                now[0] += dt
            total += dt
            if s == 30:
                wrong_30 += tuner.choice != best
        wrong_end += tuner.choice != best
        totals.append(total)
    return {"steps": steps, "runs": runs,
            "tuner_over_best_fixed": round(float(np.mean(totals)) / (float(data[best].mean())
                                                                     * steps), 3),
            "wrong_choice_at_step_30": round(wrong_30 / runs, 3),
            "wrong_choice_at_end": round(wrong_end / runs, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="default", choices=sorted(BENCH_CONFIGS))
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--busy", action="store_true")
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--save")
    ap.add_argument("--load")
    a = ap.parse_args()
    if a.load:
        with open(a.load) as f:
            rec = json.load(f)
        times = {(*(int(x) for x in k.split(",")), 1)[:3]: v  # type: ignore[misc]
                 for k, v in rec["times"].items()}  # ("n,b" before round 17: 1 worker)
        meta = {k: rec[k] for k in ("config", "busy_core", "cpu")}
    else:
        times = record(a.config, a.rounds, a.busy)
        meta = {"config": a.config, "busy_core": a.busy, "cpu": cpu_model()}
        if a.save:
            with open(a.save, "w") as f:
                json.dump({**meta, "times": {f"{n},{b},{w}": v
                                             for (n, b, w), v in times.items()}}, f)
    per_choice = {f"numba{n}_blas{b}" + (f"_workers{w}" if w > 1 else ""):
                  {"median_ms": round(float(np.median(v)) * 1e3, 1),
                   "mean_ms": round(float(np.mean(v)) * 1e3, 1)}
                  for (n, b, w), v in times.items()}
    for rule, settings in (("tuner", {}), ("previous", PREVIOUS)):
        for steps, runs in ((110, a.runs), (2000, max(1, a.runs // 4))):
            print(json.dumps({"bench": "tuner_replay", "rule": rule, **meta,
                              "choices": per_choice, **replay(times, steps, runs, **settings)}),
                  flush=True)


if __name__ == "__main__":
    main()
