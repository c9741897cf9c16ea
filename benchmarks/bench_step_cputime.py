"""CPU time per training step at 1 thread (Numba 1, BLAS 1), modes interleaved step by step.

    python benchmarks/bench_step_cputime.py [--configs small,medium] [--modes full,lora,wsla]
                                            [--profile]

Process CPU time hardly moves when other processes share the cores, so this compares two
checkouts on a busy machine: run it from each, alternating, and compare the medians. Prints one
JSON line per (config, mode): median / min CPU ms per step and tokens per CPU-second; with
``--profile`` also one line per config with each op's CPU ms in a full step (``opprofile``), the
step's GEMMs timed alone (best of 5) and step / GEMM-only.
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
from engine.opprofile import profile_ops  # noqa: E402
from engine.stepgemms import standalone_ms, step_gemms  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="small")
    ap.add_argument("--modes", default="full,lora,wsla")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--label", default="", help="copied into each line (e.g. the branch)")
    ap.add_argument("--profile", action="store_true", help="per-op CPU profile of full steps")
    a = ap.parse_args()
    set_threads(1)
    modes = a.modes.split(",")
    for name in a.configs.split(","):
        c = BENCH_CONFIGS[name]
        total = a.steps + 2 + (a.steps if a.profile else 0)
        trainers = {m: _trainer(name, m, total * c["batch"]) for m in modes}
        times: dict[str, list[float]] = {m: [] for m in modes}
        for i in range(a.steps + 2):
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
        if a.profile and "full" in trainers:
            profile(name, trainers["full"], a.steps, a.label)


def profile(name: str, tr: object, steps: int, label: str) -> None:
    """Per-op CPU ms of ``steps`` full training steps (rows after the timed ones)."""
    c = BENCH_CONFIGS[name]
    first = steps + 2
    with profile_ops(time.process_time) as ops:
        t = time.process_time()
        for i in range(first, first + steps):
            tr.train_step(np.arange(i * c["batch"], (i + 1) * c["batch"]))  # type: ignore[attr-defined]
        step_ms = (time.process_time() - t) * 1e3 / steps
    ops_ms = {k: round(v * 1e3 / steps, 2) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])}
    gemms = step_gemms(tr.lm.config, c["batch"], c["seq_len"], "full")  # type: ignore[attr-defined]
    gflop = sum(g.flops for g in gemms) / 1e9
    gemm_ms = standalone_ms(gemms)
    rest = step_ms - sum(ops_ms.values())
    print(json.dumps({
        "bench": "profile_cputime", "label": label, "config": name, "threads": 1,
        "clock": "process_time", "step_cpu_ms": round(step_ms, 2), "ops_ms": ops_ms,
        "gemm_and_glue_ms": round(rest, 2), "gemm_gflop": round(gflop, 3),
        "gemm_only_ms": round(gemm_ms, 2), "sgemm_alone_gflops": round(gflop / gemm_ms * 1e3, 1),
        "in_step_gemm_gflops_lb": round(gflop / rest * 1e3, 1),
        "step_over_gemm_only": round(step_ms / gemm_ms, 2)}), flush=True)


if __name__ == "__main__":
    main()
