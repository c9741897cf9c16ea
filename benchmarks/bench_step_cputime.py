"""CPU time per training step at 1 thread (Numba 1, BLAS 1), modes interleaved step by step.

    python benchmarks/bench_step_cputime.py [--configs small,medium] [--modes full,lora,wsla]

Process CPU time hardly moves when other processes share the cores, so this compares two
checkouts on a busy machine: run it from each, alternating, and compare the medians. Prints one
JSON line per (config, mode): median / min CPU ms per step and tokens per CPU-second.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numpy as np  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, set_threads  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="small")
    ap.add_argument("--modes", default="full,lora,wsla")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--label", default="", help="copied into each line (e.g. the branch)")
    a = ap.parse_args()
    set_threads(1)
    modes = a.modes.split(",")
    for name in a.configs.split(","):
        c = BENCH_CONFIGS[name]
        total = a.steps + 2
        trainers = {m: _trainer(name, m, total * c["batch"]) for m in modes}
        times: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(total):
            rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
            for m in modes:
                t = time.process_time()
                trainers[m].train_step(rows)
                if i >= 2:  # two warm-up steps (compilation, first-touch)
                    times[m].append(time.process_time() - t)
        tokens = c["batch"] * c["seq_len"]
        for m in modes:
            med = float(np.median(times[m]))
            print(json.dumps({
                "bench": "train_step_cputime", "label": a.label, "config": name, "mode": m,
                "threads": 1, "steps": a.steps, "median_cpu_ms": round(med * 1e3, 2),
                "min_cpu_ms": round(min(times[m]) * 1e3, 2),
                "tokens_per_cpu_s": round(tokens / med, 1)}), flush=True)


if __name__ == "__main__":
    main()
