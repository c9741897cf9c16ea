"""One training step, two versions of the scan and conv1d ops: this checkout's and a git ref's.

    python benchmarks/bench_ops_ab.py --ref main [--configs small,medium] [--modes full,lora,wsla]
                                      [--threads 1] [--steps 12] [--kernels 20]

The ref's whole ``engine/`` (``git archive``) is imported beside this checkout's as the package
``engine_<sha>`` from a folder of the system's temp dir (kept, so Numba's cache serves the next
run; the engine's imports are relative), so a change to a shared helper (``engine/_jit.py``)
is compared too; its scan and conv1d op functions replace ours in the model for the ref's
steps. The same trainer then alternates steps between the two (ABBA order), so both see the
same machine state, data and parameters. One JSON line per (config, mode), with each swapped
op's ms per step inside the step for both versions; first, per config, one line for the scan
kernels called alone (the layer's (b, l, e, n) of ``bench_scan``, ``--kernels`` calls of each
version in turns; 0 skips). 1 thread (the default: Numba 1, BLAS 1) measures process CPU time,
usable on a busy machine; more threads wall time.
"""

import argparse
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numpy as np  # noqa: E402
from bench_scan import inputs  # noqa: E402

from engine import model  # noqa: E402
from engine.bench import BENCH_CONFIGS, _trainer, set_threads  # noqa: E402
from engine.ops import selective_scan  # noqa: E402

OPS = {"selective_scan": ("selective_scan_forward", "selective_scan_backward"),
       "conv1d": ("conv1d_forward", "conv1d_backward")}


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def load_ref(ref: str) -> tuple[str, dict[str, ModuleType]]:
    """(the ref's short sha, its modules of ``OPS`` by name), imported from its whole engine."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=10", ref], check=True,
                         capture_output=True, text=True).stdout.strip()
    package = f"engine_{sha}"
    base = os.path.join(tempfile.gettempdir(), f"mamba-studio-ref-{sha}")
    if not os.path.isdir(os.path.join(base, package)):
        tar = subprocess.run(["git", "-C", ROOT, "archive", sha, "engine"], check=True,
                             capture_output=True).stdout
        staging = tempfile.mkdtemp(dir=tempfile.gettempdir())
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(staging, filter="data")
        os.makedirs(base, exist_ok=True)
        os.replace(os.path.join(staging, "engine"), os.path.join(base, package))
        os.rmdir(staging)
    sys.path.insert(0, base)
    return sha, {mod: importlib.import_module(f"{package}.ops.{mod}") for mod in OPS}


def _known_kwargs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` dropping keyword arguments it does not take (an older ref's op has no
    ``need_dA`` / ``need_dw``: it then computes that gradient, which the model ignores)."""
    params = inspect.signature(fn).parameters

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{k: v for k, v in kwargs.items() if k in params})

    return call


def timed(fn: Callable[..., Any], acc: dict[str, float], key: str,
          clock: Callable[[], float]) -> Callable[..., Any]:
    """``fn`` adding its seconds on ``clock`` to ``acc[key]``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[key] += clock() - t

    return call


def kernel_line(name: str, ref_scan: ModuleType, ours: ModuleType, calls: int,
                clock: Callable[[], float]) -> dict[str, object]:
    """The scan forward and backward called alone, ref and this in turns (ABBA)."""
    c = BENCH_CONFIGS[name]
    shape = (c["batch"], c["seq_len"], 2 * c["d_model"], 16)
    args = inputs(*shape)
    dout = np.random.default_rng(1).standard_normal(args[0].shape).astype(np.float32)
    mods = {"ref": ref_scan, "this": ours}
    for m in mods.values():  # compile / warm up
        m.selective_scan_forward(*args)
        m.selective_scan_backward(dout, *args)
    times: dict[str, list[float]] = defaultdict(list)
    for i in range(calls):
        for k in ("ref", "this") if i % 2 == 0 else ("this", "ref"):
            t = clock()
            mods[k].selective_scan_forward(*args)
            times[f"{k}_forward"].append(clock() - t)
            t = clock()
            mods[k].selective_scan_backward(dout, *args)
            times[f"{k}_backward"].append(clock() - t)
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return {"bench": "ops_ab_scan_kernels", "config": name, "shape_blen": list(shape),
            **{f"{k}_median_ms": round(v, 3) for k, v in sorted(med.items())},
            "forward_speedup": round(med["ref_forward"] / med["this_forward"], 3),
            "backward_speedup": round(med["ref_backward"] / med["this_backward"], 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="main")
    ap.add_argument("--configs", default="small,medium")
    ap.add_argument("--modes", default="full,lora,wsla")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per version")
    ap.add_argument("--threads", type=int, default=1, help="1: process CPU time; more: wall")
    ap.add_argument("--kernels", type=int, default=20, help="scan kernel calls per version")
    a = ap.parse_args()
    set_threads(a.threads)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    ours = {n: getattr(model, n) for names in OPS.values() for n in names}
    sha, ref_mods = load_ref(a.ref)
    theirs = {n: _known_kwargs(getattr(ref_mods[mod], n)) for mod, names in OPS.items()
              for n in names}
    for name in a.configs.split(","):
        c = BENCH_CONFIGS[name]
        if a.kernels > 0:
            line = kernel_line(name, ref_mods["selective_scan"], selective_scan, a.kernels, clock)
            print(json.dumps({**line, "ref": a.ref, "ref_sha": sha, "threads": a.threads,
                              "clock": clock.__name__}), flush=True)
        for mode in a.modes.split(","):
            tr = _trainer(name, mode, (2 * a.steps + 4) * c["batch"])
            times: dict[str, list[float]] = {"ref": [], "this": []}
            op_s: dict[str, float] = defaultdict(float)
            i = 0
            for k in range(a.steps + 2):
                if k == 2:
                    op_s.clear()  # warm-up steps done
                order = (("ref", theirs), ("this", ours))
                for label, fns in order if k % 2 == 0 else order[::-1]:
                    for n, f in fns.items():
                        setattr(model, n, timed(f, op_s, f"{label} {n}", clock))
                    rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
                    i += 1
                    t = clock()
                    tr.train_step(rows)
                    if k >= 2:  # one warm-up step each (compilation)
                        times[label].append(clock() - t)
            for n, f in ours.items():
                setattr(model, n, f)
            before, after = (float(np.median(times[x])) for x in ("ref", "this"))
            unit = "cpu_ms" if a.threads == 1 else "ms"  # process CPU time or wall time
            print(json.dumps({
                "bench": "ops_ab", "ref": a.ref, "ref_sha": sha, "config": name,
                "mode": mode, "threads": a.threads, "clock": clock.__name__,
                "steps_each": a.steps,
                f"ref_median_{unit}": round(before * 1e3, 2),
                f"this_median_{unit}": round(after * 1e3, 2),
                f"ref_min_{unit}": round(min(times["ref"]) * 1e3, 2),
                f"this_min_{unit}": round(min(times["this"]) * 1e3, 2),
                "speedup": round(before / after, 3),
                f"this_tokens_per_{unit[:-2]}s": round(c["batch"] * c["seq_len"] / after, 1),
                f"in_step_op_{unit}": {k: round(v * 1e3 / a.steps, 2)
                                       for k, v in sorted(op_s.items())}}),
                flush=True)


if __name__ == "__main__":
    main()
