"""The scan backward's two compiled copies on this machine: the reverse step's loop for 16 vector
registers (one position a pass) against the one for 32 (two positions a pass).

    python benchmarks/bench_scan_copies.py [--threads 2] [--configs small,default,medium]
                                           [--repeats 30] [--steps 20]

``engine.ops.selective_scan`` runs the copy for ``VECTOR_REGS`` (``engine._jit.vector_registers``:
16 on an x86-64 CPU without AVX-512, else 32); this compares both here, interleaved, so a machine
of the other kind can check the choice. Prints one JSON line per config for the kernel alone
(the layer's (b, l, e, n) of ``bench_scan``: median ms of each copy, their ratio, and whether
their gradients are bit-identical) and one per config for a full training step (two trainers
with the same data, steps alternating ABBA; median ms and tokens/s of each). 1 thread measures
process CPU time, more threads wall time.
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
from bench_scan import inputs  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, set_threads  # noqa: E402
from engine.ops import selective_scan as scan  # noqa: E402

COPIES = (16, 32)


def kernel_line(name: str, repeats: int, clock) -> dict[str, object]:
    c = BENCH_CONFIGS[name]
    shape = (c["batch"], c["seq_len"], 2 * c["d_model"], 16)
    args = inputs(*shape)
    dout = np.random.default_rng(1).standard_normal(args[0].shape).astype(np.float32)
    grads = {}
    for r in COPIES:  # compile / warm up
        scan.VECTOR_REGS = r
        grads[r] = scan.selective_scan_backward(dout, *args)
    same = all(np.array_equal(a, b) for a, b in zip(grads[16], grads[32], strict=True))
    times: dict[int, list[float]] = {r: [] for r in COPIES}
    for i in range(repeats):
        for r in COPIES if i % 2 == 0 else COPIES[::-1]:
            scan.VECTOR_REGS = r
            t = clock()
            scan.selective_scan_backward(dout, *args)
            times[r].append(clock() - t)
    med = {r: float(np.median(times[r])) * 1e3 for r in COPIES}
    return {"bench": "scan_backward_copies", "config": name, "shape_blen": list(shape),
            "median_ms_16": round(med[16], 3), "median_ms_32": round(med[32], 3),
            "ratio_16_over_32": round(med[16] / med[32], 3), "bit_identical": same}


def step_line(name: str, steps: int, clock) -> dict[str, object]:
    c = BENCH_CONFIGS[name]
    trainers = {r: _trainer(name, "full", (steps + 2) * c["batch"]) for r in COPIES}
    times: dict[int, list[float]] = {r: [] for r in COPIES}
    for i in range(steps + 2):
        rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
        for r in COPIES if i % 2 == 0 else COPIES[::-1]:
            scan.VECTOR_REGS = r
            t = clock()
            trainers[r].train_step(rows)
            if i >= 2:  # two warm-up steps (compilation, first-touch)
                times[r].append(clock() - t)
    med = {r: float(np.median(times[r])) for r in COPIES}
    tokens = c["batch"] * c["seq_len"]
    return {"bench": "train_step_scan_copies", "config": name, "mode": "full", "steps": steps,
            "median_ms_16": round(med[16] * 1e3, 2), "median_ms_32": round(med[32] * 1e3, 2),
            "tokens_per_s_16": round(tokens / med[16], 1),
            "tokens_per_s_32": round(tokens / med[32], 1),
            "ratio_16_over_32": round(med[16] / med[32], 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="small,default,medium")
    ap.add_argument("--repeats", type=int, default=30, help="kernel calls per copy")
    ap.add_argument("--steps", type=int, default=20, help="training steps per copy")
    a = ap.parse_args()
    set_threads(a.threads)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    head = {"threads": a.threads, "clock": clock.__name__, "machine_copy": scan.VECTOR_REGS}
    for name in a.configs.split(","):
        print(json.dumps({**kernel_line(name, a.repeats, clock), **head}), flush=True)
    for name in a.configs.split(","):
        print(json.dumps({**step_line(name, a.steps, clock), **head}), flush=True)


if __name__ == "__main__":
    main()
