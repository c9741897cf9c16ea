"""Data-parallel training throughput: 1 rank x 2 threads vs 2 ranks x 1 thread, same global batch.

    python benchmarks/bench_distributed.py                       # small and medium, 8 timed steps
    python benchmarks/bench_distributed.py --configs small --steps 4

Each side is this file re-run with ``--worker`` (the 2-rank side under the MPI launcher). One JSON
line per config: tokens/s of both sides and their ratio, the median step time, the share of the
2-rank step spent in communication (gradient all-reduce + weight all-gather + waiting for the
other rank), and the all-reduce bandwidth measured on a buffer of the gradient's size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import engine  # noqa: E402,F401  (thread/cache defaults before NumPy loads)
from engine.bench import BENCH_CONFIGS, set_threads  # noqa: E402


def worker(name: str, steps: int, threads: int) -> None:
    from engine.config import MambaConfig
    from engine.dataparallel import DataParallel
    from engine.distributed import Comm, threads_per_rank
    from engine.lm import MambaLM
    from engine.trainer import TrainConfig, Trainer

    comm = Comm() if threads == 0 else None
    threads = threads_per_rank(comm.comm) if comm is not None else threads
    set_threads(threads)
    c = BENCH_CONFIGS[name]
    lm = MambaLM.create(MambaConfig(vocab_size=c["vocab"], d_model=c["d_model"], n_layer=c["n_layer"]),
                        seed=0)
    warmup = 2
    n_tok = c["batch"] * c["seq_len"] * (steps + warmup) + 1
    ids = np.random.default_rng(0).integers(0, c["vocab"], size=n_tok)
    tr = Trainer(lm, ids, ids[:1000], TrainConfig(batch_size=c["batch"], seq_len=c["seq_len"],
                                                  epochs=1, shuffle=False, warmup_steps=0))
    dp = DataParallel(tr, comm) if comm is not None else None
    times, comm_s = [], []
    for i in range(steps + warmup):
        rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
        before = dp.comm_s if dp is not None else 0.0
        t = time.perf_counter()
        tr.train_step(rows)
        tr.cursor.step += 1
        if i >= warmup:
            times.append(time.perf_counter() - t)
            comm_s.append((dp.comm_s if dp is not None else 0.0) - before)
    out = {"config": name, "ranks": comm.size if comm else 1, "threads": threads,
           "step_s": statistics.median(times),
           "tokens_per_s": c["batch"] * c["seq_len"] / statistics.median(times),
           "comm_fraction": sum(comm_s) / sum(times)}
    if dp is not None:
        buf = dp.grads.flat.copy()
        reps = 10
        t = time.perf_counter()
        for _ in range(reps):
            comm.allreduce_sum(buf)
        dt = (time.perf_counter() - t) / reps
        out.update(grad_bytes=int(buf.nbytes), allreduce_s=dt, allreduce_GBps=buf.nbytes / dt / 1e9)
        out["overlap_hidden"] = overlap_hidden(tr, comm, buf)
    if comm is None or comm.rank == 0:
        print(json.dumps(out), flush=True)


def overlap_hidden(tr, comm, buf: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    """Does a non-blocking all-reduce progress while this rank computes? One micro-batch's
    forward/backward (c), a blocking all-reduce of the gradient-sized ``buf`` (a), and the two
    together (``Iallreduce``, compute, ``Wait``: o). Returns (c + a - o) / a, the share of the
    all-reduce hidden behind compute (1: fully, 0: none, < 0: overlapping made it slower);
    the median of 5 tries each."""
    from engine.model import loss_and_grad

    tokens, targets, _ = tr.rows.batch(np.arange(min(2, len(tr.rows))))

    def compute() -> None:
        loss_and_grad(tr.trainable.effective(), tokens, targets, tr.lm.config, tr._grads, 1.0)

    def timed(fn) -> float:  # type: ignore[no-untyped-def]
        comm.comm.Barrier()
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    def both() -> None:
        req = comm.comm.Iallreduce(comm.MPI.IN_PLACE, buf, op=comm.MPI.SUM)
        compute()
        req.Wait()

    c = statistics.median(timed(compute) for _ in range(5))
    a = statistics.median(timed(lambda: comm.allreduce_sum(buf)) for _ in range(5))
    o = statistics.median(timed(both) for _ in range(5))
    return round((c + a - o) / a, 3)


def side(cmd: list[str]) -> dict[str, float]:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark worker failed: {proc.stderr[-2000:]}")
    lines = [line[line.index("{"):] for line in proc.stdout.splitlines() if "{" in line]
    if not lines:
        raise SystemExit(f"benchmark worker printed no result: {proc.stdout[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="small,medium")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.steps, a.threads)
        return
    from engine.distributed import mpirun_command

    me = [sys.executable, str(Path(__file__).resolve())]
    for name in a.configs.split(","):
        one = side([*me, "--worker", name, "--steps", str(a.steps), "--threads", "2"])
        two = side([*mpirun_command(2), *me, "--worker", name, "--steps", str(a.steps)])
        print(json.dumps({
            "config": name, "global_batch_rows": BENCH_CONFIGS[name]["batch"],
            "seq_len": BENCH_CONFIGS[name]["seq_len"],
            "1x2_tokens_per_s": round(one["tokens_per_s"]), "2x1_tokens_per_s": round(two["tokens_per_s"]),
            "ratio_2x1_over_1x2": round(two["tokens_per_s"] / one["tokens_per_s"], 3),
            "2x1_comm_fraction": round(two["comm_fraction"], 4),
            "grad_bytes": two["grad_bytes"], "allreduce_ms": round(1e3 * two["allreduce_s"], 3),
            "allreduce_GBps": round(two["allreduce_GBps"], 3),
            "iallreduce_hidden_by_compute": two["overlap_hidden"],
        }), flush=True)


if __name__ == "__main__":
    main()
