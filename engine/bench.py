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

BENCH_CONFIGS: dict[str, dict[str, int]] = {
    "small": {"d_model": 128, "n_layer": 4, "batch": 4, "seq_len": 256, "vocab": 256},
    "medium": {"d_model": 256, "n_layer": 6, "batch": 8, "seq_len": 256, "vocab": 256},
    # generation only: a mamba-130m-sized stack (vocab kept at 256), where GPUs start to pay off
    "large": {"d_model": 768, "n_layer": 24, "batch": 1, "seq_len": 256, "vocab": 256},
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


def set_threads(n: int) -> None:
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    threadpool_limits(n, user_api="blas")


def bench_train_step(name: str, steps: int = 10, warmup: int = 3, mode: str = "full",
                     threads: int = 2) -> dict[str, Any]:
    """Median training-step time for BENCH_CONFIGS[name]; ``mode`` in full | lora | wsla."""
    import numba

    from .config import MambaConfig
    from .lm import MambaLM
    from .lora import LoRAConfig
    from .trainer import TrainConfig, Trainer

    set_threads(threads)
    c = BENCH_CONFIGS[name]
    cfg = MambaConfig(vocab_size=c["vocab"], d_model=c["d_model"], n_layer=c["n_layer"])
    lm = MambaLM.create(cfg, seed=0)
    rng = np.random.default_rng(0)
    n_tok = c["batch"] * c["seq_len"] * (steps + warmup) + 1
    ids = rng.integers(0, c["vocab"], size=n_tok)
    tc = TrainConfig(
        batch_size=c["batch"], seq_len=c["seq_len"], epochs=1, shuffle=False,
        lora=LoRAConfig(("in_proj", "x_proj", "dt_proj", "out_proj"), rank=8) if mode == "lora" else None,
        wsla=mode == "wsla",
    )
    tr = Trainer(lm, ids, ids[:0], tc)
    times = time_calls(lambda s: tr.train_step(np.arange(s * c["batch"], (s + 1) * c["batch"])),
                       steps, warmup)
    med = float(np.median(times))
    tokens = c["batch"] * c["seq_len"]
    return {
        "bench": "train_step",
        "config": name,
        "mode": mode,
        **c,
        "params": lm.n_params,
        "trainable_params": tr.trainable_count(),
        "optimizer_state_bytes": tr.optimizer.state_bytes(),
        "tokens_per_step": tokens,
        "median_ms": round(med * 1e3, 2),
        "min_ms": round(min(times) * 1e3, 2),
        "max_ms": round(max(times) * 1e3, 2),
        "tokens_per_s": round(tokens / med, 1),
        "steps": steps,
        "threads": threads,
        "numba_threads": numba.get_num_threads(),
        "threading_layer": numba.threading_layer(),
        **blas_info(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "cpu": platform.processor() or platform.machine(),
    }


def run(configs: list[str], as_json: bool, steps: int, modes: list[str], threads: int) -> None:
    for name in configs:
        for mode in modes:
            res = bench_train_step(name, steps=steps, mode=mode, threads=threads)
            if as_json:
                print(json.dumps(res), flush=True)  # noqa: T201
            else:
                print(  # noqa: T201
                    f"{name:7s} {mode:5s} {res['tokens_per_s']:>10,.0f} tok/s  median "
                    f"{res['median_ms']:.1f} ms  (trainable {res['trainable_params']:,}, optimizer "
                    f"{res['optimizer_state_bytes']:,} B, BLAS {res.get('blas_kernel')})",
                    flush=True,
                )


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
