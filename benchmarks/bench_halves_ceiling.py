"""How close the halves in two threads come to their ceiling: two processes of half a batch each.

    python benchmarks/bench_halves_ceiling.py [--configs small,medium] [--steps 12] [--rounds 3]

The thread tuner's (1, 1, 2) choice runs a micro-batch's two halves at once, each in its own
thread of 1 Numba + 1 BLAS thread (round 17 of docs/performance.md). Their ceiling on two cores
is one half alone: a step can end no sooner than its slower half. Per config and round, each of
these runs ``--steps`` training steps (after 2 warm-up ones), one variant after the other:
* ``solo``    -- a separate process training half a batch (the rows of one half) at 1 + 1 threads;
* ``pair``    -- two such processes at once, started together (what two cores give two halves
                 when nothing is shared but the memory system: no GIL, no Python in common);
* ``halves``  -- this process, the whole batch in two halves at once (``train_step(rows, 2)``);
* ``whole``   -- this process, the whole batch at 1 + 1 threads, halves one after the other.
One JSON line per config: the median over rounds of each variant's median step ms, and
``halves / solo`` (1.0: the halves at their ceiling), ``pair / solo`` (the cost of sharing the
memory system), ``halves / pair`` (the cost of one process: GIL hand-offs, Python in common) and
``whole / halves`` (the halves' speed-up over one thread). The rounds run the variants in turn,
not interleaved step by step: take ratios from quiet runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
from threadpoolctl import ThreadpoolController  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, config_names, cpu_model  # noqa: E402


def steps_ms(config: str, rows_per_step: int, steps: int, workers: int) -> list[float]:
    """Step times (ms) of ``steps`` full-training steps of ``rows_per_step`` rows, after 2 warm-up
    steps, at 1 Numba + 1 BLAS thread (``workers`` 2: each step's halves at once)."""
    tr = _trainer(config, "full", (steps + 3) * rows_per_step)
    numba.set_num_threads(1)
    out = []
    with ThreadpoolController().limit(limits=1, user_api="blas"):
        for i in range(steps + 2):
            rows = np.arange(i * rows_per_step, (i + 1) * rows_per_step)
            t = time.perf_counter()
            tr.train_step(rows, workers)
            out.append((time.perf_counter() - t) * 1e3)
    return out[2:]


def processes(config: str, n: int, steps: int) -> list[float]:
    """Median step ms of each of ``n`` processes training half a batch, started together (each
    builds its trainer, then waits for a go file)."""
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        env = dict(os.environ, NUMBA_NUM_THREADS="1")
        ps = [subprocess.Popen([sys.executable, __file__, "--child", config, "--steps", str(steps),
                                "--go", go], stdout=subprocess.PIPE, text=True, env=env)
              for _ in range(n)]
        ready = [os.path.join(tmp, f"ready{p.pid}") for p in ps]
        deadline = time.monotonic() + 300
        while not all(os.path.exists(r) for r in ready):
            if time.monotonic() > deadline or any(p.poll() is not None for p in ps):
                for p in ps:
                    p.kill()
                raise SystemExit(f"bench_halves_ceiling: a {config} child did not get ready")
            time.sleep(0.01)
        open(go, "w").close()
        return [float(np.median(json.loads(p.communicate()[0]))) for p in ps]


def child(config: str, steps: int, go: str) -> None:
    half = BENCH_CONFIGS[config]["batch"] // 2
    steps_ms(config, half, 1, 1)  # compile and build once before the start
    open(os.path.join(os.path.dirname(go), f"ready{os.getpid()}"), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    print(json.dumps(steps_ms(config, half, steps, 1)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=config_names, default="small,medium")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--go", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 1 or a.rounds < 1:
        ap.error("--steps and --rounds must be 1 or more")
    if a.child:
        child(a.child, a.steps, a.go)
        return
    for name in a.configs:
        batch = BENCH_CONFIGS[name]["batch"]
        got: dict[str, list[float]] = {"solo": [], "pair": [], "halves": [], "whole": []}
        for _ in range(a.rounds):
            got["solo"].append(processes(name, 1, a.steps)[0])
            got["pair"].append(max(processes(name, 2, a.steps)))  # the slower of the two
            got["halves"].append(float(np.median(steps_ms(name, batch, a.steps, 2))))
            got["whole"].append(float(np.median(steps_ms(name, batch, a.steps, 1))))
        med = {k: float(np.median(v)) for k, v in got.items()}
        print(json.dumps({
            "bench": "halves_ceiling", "config": name, "steps": a.steps, "rounds": a.rounds,
            **{f"{k}_ms": round(v, 2) for k, v in med.items()},
            "rounds_ms": {k: [round(x, 1) for x in v] for k, v in got.items()},
            "halves_over_solo": round(med["halves"] / med["solo"], 3),
            "pair_over_solo": round(med["pair"] / med["solo"], 3),
            "halves_over_pair": round(med["halves"] / med["pair"], 3),
            "whole_over_halves": round(med["whole"] / med["halves"], 3),
            "cpu": cpu_model()}), flush=True)


if __name__ == "__main__":
    main()
