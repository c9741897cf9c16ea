"""Training-step throughput (forward + backward + AdamW) for the issue's reference configs.

Prints one JSON line per config: tokens/s from the median step time, plus the BLAS kernel that
ran (threadpoolctl) and the thread counts. Warm-up steps (incl. Numba compilation) are excluded.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .threads import ThreadTuner, splits, two_workers

BENCH_CONFIGS: dict[str, dict[str, int]] = {
    "small": {"d_model": 128, "n_layer": 4, "batch": 4, "seq_len": 256, "vocab": 256},
    "medium": {"d_model": 256, "n_layer": 6, "batch": 8, "seq_len": 256, "vocab": 256},
    # the product's default: preset small (engine/defaults.py, d 128 x 2, batch 8 x 256), bytes
    "default": {"d_model": 128, "n_layer": 2, "batch": 8, "seq_len": 256, "vocab": 256},
    # the same with the 2,048-token BPE tokenizer that `auto` picks for corpora of 4 MB and more
    "default-bpe": {"d_model": 128, "n_layer": 2, "batch": 8, "seq_len": 256, "vocab": 2048},
    # mamba-130m sized (GPT-NeoX BPE vocabulary): what fine-tuning a 130M model costs on a CPU
    "large": {"d_model": 768, "n_layer": 24, "batch": 1, "seq_len": 256, "vocab": 50280,
              "max_steps": 3},
}


def blas_info() -> dict[str, Any]:
    from threadpoolctl import threadpool_info

    infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    if not infos:
        return {"blas": "unknown"}
    i = infos[0]
    return {
        "blas": f"{i.get('internal_api')} {i.get('version')}",
        "blas_kernel": i.get("architecture"),
        "blas_threads": i.get("num_threads"),
    }


def time_calls(fn: Callable[[int], object], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds taken by ``fn(i)`` for i = warmup .. warmup + repeats - 1, after ``warmup``
    untimed calls (which also pay for Numba compilation)."""
    for i in range(warmup):
        fn(i)
    times = []
    for i in range(warmup, warmup + repeats):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return times


def set_threads(n: int, blas: int | None = None) -> None:
    """``n`` Numba threads (this thread's) and ``blas`` (default ``n``) BLAS threads."""
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    threadpool_limits(n if blas is None else blas, user_api="blas")


def config_names(text: str) -> list[str]:
    """``--configs`` of the benchmark scripts: comma-separated BENCH_CONFIGS names (argparse
    ``type``: an unknown name is a one-line error naming the known ones)."""
    import argparse

    names = text.split(",")
    if unknown := [n for n in names if n not in BENCH_CONFIGS]:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)} (known: "
                                         f"{', '.join(BENCH_CONFIGS)})")
    return names


def _trainer(name: str, mode: str, n_rows: int, threads: int | None = None) -> Any:
    """A trainer of BENCH_CONFIGS[name] on ``n_rows`` random rows; ``threads`` (default: the
    machine's) sizes its thread tuner, and so whether it runs micro-batches as halves."""
    from .config import MambaConfig
    from .lm import MambaLM
    from .lora import LoRAConfig
    from .trainer import TrainConfig, Trainer

    c = BENCH_CONFIGS[name]
    cfg = MambaConfig(vocab_size=c["vocab"], d_model=c["d_model"], n_layer=c["n_layer"])
    lm = MambaLM.create(cfg, seed=0)
    ids = np.random.default_rng(0).integers(0, c["vocab"], size=n_rows * c["seq_len"] + 1)
    tc = TrainConfig(
        batch_size=c["batch"], seq_len=c["seq_len"], epochs=1, shuffle=False,
        lora=LoRAConfig(LORA_BENCH_TARGETS, rank=LORA_BENCH_RANK) if mode == "lora" else None,
        wsla=mode == "wsla",
    )
    tr = Trainer(lm, ids, ids[:0], tc)
    if threads is not None:
        tr.thread_tuner = ThreadTuner(threads)
    return tr


LORA_BENCH_TARGETS = ("in_proj", "x_proj", "dt_proj", "out_proj")
LORA_BENCH_RANK = 8


def _check_workers(threads: int, workers: int) -> None:
    if workers > 1 and not splits(threads):
        raise ValueError(f"bench: --workers {workers} needs --threads 2 or 3 (training offers the "
                         "halves at once there only: with 4 cores or more they were slower)")


def bench_config(name: str, modes: list[str], steps: int = 10, warmup: int = 2,
                 threads: int = 2, profile_steps: int = 2,
                 workers: int = 1) -> list[dict[str, Any]]:
    """Median training-step time of BENCH_CONFIGS[name] for each of ``modes`` (full | lora |
    wsla), with the modes' steps interleaved so all see the same machine state; then, per mode,
    a per-op profile (``opprofile``), the peak NumPy memory of one step (tracemalloc), and the
    step's GEMMs timed standalone (``stepgemms``, at ``threads``). ``workers`` 2 (threads 2 or 3):
    the timed steps run each micro-batch's halves in two threads of threads // 2 Numba threads
    each and one BLAS thread (the thread tuner's two-worker choice); the profile runs them one
    after the other (the op wrappers time one thread)."""
    _check_workers(threads, workers)
    import tracemalloc

    import numba

    from .opprofile import profile_ops
    from .stepgemms import standalone_ms, step_gemms

    if workers > 1:  # the tuner's two-worker choice
        set_threads(*two_workers(threads)[:2])
    else:
        set_threads(threads)
    timed_workers = [workers]  # the profiled steps below run with 1
    c = BENCH_CONFIGS[name]
    steps = min(steps, c.get("max_steps", steps))
    warmup = min(warmup, c.get("max_steps", warmup))
    total = warmup + steps + profile_steps + 1
    trainers = {m: _trainer(name, m, total * c["batch"], threads) for m in modes}
    cursor = dict.fromkeys(modes, 0)

    def step(m: str) -> float:
        i = cursor[m]
        cursor[m] += 1
        rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
        t = time.perf_counter()
        trainers[m].train_step(rows, timed_workers[0])
        return time.perf_counter() - t

    for _ in range(warmup):
        for m in modes:
            step(m)
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(steps):
        for m in modes:
            times[m].append(step(m))
    tokens = c["batch"] * c["seq_len"]
    out = []
    med_full = float(np.median(times["full"])) if "full" in times else None
    set_threads(threads)
    timed_workers[0] = 1
    for m in modes:
        with profile_ops() as ops:
            prof = [step(m) for _ in range(profile_steps)]
        ops_ms = {k: round(v * 1e3 / profile_steps, 2) for k, v in sorted(ops.items())}
        prof_ms = float(np.median(prof)) * 1e3
        rest_ms = max(prof_ms - sum(ops_ms.values()), 1e-3)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        step(m)
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        tr = trainers[m]
        gemms = step_gemms(tr.lm.config, c["batch"], c["seq_len"], m, LORA_BENCH_RANK)
        gflop = sum(g.flops for g in gemms) / 1e9
        gemm_ms = standalone_ms(gemms)
        med = float(np.median(times[m]))
        out.append({
            "bench": "train_step", "config": name, "mode": m, **c,
            "params": tr.lm.n_params, "trainable_params": tr.trainable_count(),
            "optimizer_state_bytes": tr.optimizer.state_bytes(), "tokens_per_step": tokens,
            "median_ms": round(med * 1e3, 2), "min_ms": round(min(times[m]) * 1e3, 2),
            "max_ms": round(max(times[m]) * 1e3, 2), "tokens_per_s": round(tokens / med, 1),
            "speedup_vs_full": round(med_full / med, 3) if med_full else None,
            "steps": steps,
            "gemm_gflop": round(gflop, 3),
            "gemm_only_ms": round(gemm_ms, 2),
            "sgemm_standalone_gflops": round(gflop / gemm_ms * 1e3, 1),
            "step_over_gemm_only": round(med * 1e3 / gemm_ms, 2),
            "profiled_step_ms": round(prof_ms, 2),
            "ops_ms": ops_ms,
            "gemm_and_glue_ms": round(rest_ms, 2),
            "in_step_gemm_gflops_lower_bound": round(gflop / rest_ms * 1e3, 1),
            "numpy_peak_mb_one_step": round(peak / 2**20, 1),
            "threads": threads, "workers": workers, "numba_threads": numba.get_num_threads(),
            "threading_layer": numba.threading_layer(), **blas_info(),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), "cpu": cpu_model(),
        })
    return out


def bench_train_step(name: str, steps: int = 10, warmup: int = 3, mode: str = "full",
                     threads: int = 2, workers: int = 1) -> dict[str, Any]:
    """One mode of ``bench_config``."""
    return bench_config(name, [mode], steps, warmup, threads, workers=workers)[0]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 16).splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


NOISY = 1.5  # a config's slowest timed step over its fastest beyond which the text says so


def run(configs: list[str], as_json: bool, steps: int, modes: list[str], threads: int,
        workers: int = 1) -> None:
    """Bench ``configs`` x ``modes``: JSON lines, or text with a header naming each config's
    shapes (the bench's "small" is not the preset's), the spread of the timed steps, and what
    the columns mean (they were unexplained, and a busy machine went unsaid)."""
    _check_workers(threads, workers)  # (before the header)
    if not as_json:
        how = (f"{workers} workers (a micro-batch's halves at once) of {two_workers(threads)[0]} "
               "Numba thread(s), 1 BLAS thread" if workers > 1 else f"{threads} thread(s)")
        print(f"training steps (forward + backward + AdamW), {how}, {steps} "  # noqa: T201
              "timed steps after 2 warm-up ones, the modes interleaved; tok/s from the median "
              "step", flush=True)
    for name in configs:
        c = BENCH_CONFIGS[name]
        if not as_json:
            print(f"{name}: d {c['d_model']} x {c['n_layer']} layers, batch {c['batch']} x "  # noqa: T201
                  f"{c['seq_len']} tokens, vocab {c['vocab']:,}", flush=True)
        results = bench_config(name, modes, steps=steps, threads=threads, workers=workers)
        for res in results:
            if as_json:
                print(json.dumps(res), flush=True)  # noqa: T201
                continue
            vs = f"; {_vs_full(res)}" if len(modes) > 1 else ""
            print(  # noqa: T201
                f"  {res['mode']:5s} {res['tokens_per_s']:>10,.0f} tok/s  median "
                f"{res['median_ms']:.1f} ms (min {res['min_ms']:.1f}, max {res['max_ms']:.1f}"
                f"{vs}); step / GEMM-only {res['step_over_gemm_only']:.1f}; trainable "
                f"{res['trainable_params']:,}; NumPy peak {res['numpy_peak_mb_one_step']} MB",
                flush=True,
            )
        if not as_json and results:
            slowest = max(r["max_ms"] / r["min_ms"] for r in results)
            if slowest > NOISY:
                print(f"  note: steps varied {slowest:.1f}x: another process is likely using "  # noqa: T201
                      "the cores; compare modes within one run, or bench again when quiet",
                      flush=True)
    if not as_json:
        print(f"step / GEMM-only: the step's time over its matrix products timed alone (1 would "  # noqa: T201
              f"be the GEMMs at full speed and everything else free); NumPy peak: memory one "
              f"step allocates; BLAS {blas_info().get('blas_kernel')}", flush=True)


def bench_generate(name: str, backend: str, tokens: int = 64, prompt_len: int = 32,
                   threads: int = 2) -> dict[str, Any]:
    """Decode throughput of the recurrent step: ``backend`` in cpu | wgpu (batch 1)."""
    from .config import MambaConfig
    from .inference import CpuStepper
    from .lm import MambaLM

    set_threads(threads)
    c = BENCH_CONFIGS[name]
    lm = MambaLM.create(MambaConfig(vocab_size=c["vocab"], d_model=c["d_model"],
                                    n_layer=c["n_layer"]), seed=0)
    ids = np.random.default_rng(0).integers(0, c["vocab"], size=prompt_len)
    out: dict[str, Any] = {"bench": "generate", "config": name, "backend": backend}
    if backend == "cpu":
        st: Any = CpuStepper(lm.params, lm.config)
    else:
        from .gpu import open_stepper

        st, reason = open_stepper(lm)
        if st is None:
            return {**out, "error": reason}
    st.prefill(ids)  # warm-up: compilation, pipelines
    st.step(1)
    t_pre = time_calls(lambda _: st.prefill(ids), 1, warmup=0)[0]
    times = time_calls(lambda i: st.step(int(ids[i % prompt_len])), tokens, warmup=0)
    out["device"] = st.description
    med = float(np.median(times))
    return {**out, "median_ms_per_token": round(med * 1e3, 3), "tokens_per_s": round(1 / med, 1),
            "prefill_ms": round(t_pre * 1e3, 2), "prompt_len": prompt_len, "tokens": tokens,
            "params": lm.n_params}


def _vs_full(res: dict) -> str:
    """The mode's speed against full training's, when that was measured in the same run (it
    printed "x1.00 vs full" for a LoRA-only bench)."""
    x = res.get("speedup_vs_full")
    return f"x{x:.2f} vs full" if x is not None else (
        "full" if res.get("mode") == "full" else "full not measured")
