"""One training step, two versions of the scan and conv1d ops: this checkout's and a git ref's.

    python benchmarks/bench_ops_ab.py --ref main [--configs small,medium] [--modes full,lora,wsla]

The ref's ``engine/ops/selective_scan.py`` and ``conv1d.py`` are loaded beside this checkout's (as
``engine.ops._ab_*`` modules from a temporary folder); the same trainer then alternates steps
between the two (ABBA order), so both see the same machine state, data and parameters. 1 thread
(Numba 1, BLAS 1), process CPU time: usable on a busy machine. One JSON line per (config, mode),
with each swapped op's CPU ms per step inside the step for both versions.
"""

import argparse
import importlib.util
import inspect
import json
import os
import subprocess
import sys
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

from engine import model  # noqa: E402
from engine.bench import BENCH_CONFIGS, _trainer, set_threads  # noqa: E402

OPS = {"selective_scan": ("selective_scan_forward", "selective_scan_backward"),
       "conv1d": ("conv1d_forward", "conv1d_backward")}


def load_ref(ref: str, folder: str) -> dict[str, object]:
    """The op functions of ``OPS`` as they are at git ``ref``."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    funcs: dict[str, object] = {}
    for mod, names in OPS.items():
        src = subprocess.run(["git", "-C", root, "show", f"{ref}:engine/ops/{mod}.py"],
                             check=True, capture_output=True, text=True).stdout
        path = os.path.join(folder, f"_ab_{mod}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        spec = importlib.util.spec_from_file_location(f"engine.ops._ab_{mod}", path)
        assert spec is not None and spec.loader is not None
        m: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = m
        spec.loader.exec_module(m)
        funcs.update({n: _known_kwargs(getattr(m, n)) for n in names})
    return funcs


def _known_kwargs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` dropping keyword arguments it does not take (an older ref's op has no
    ``need_dA`` / ``need_dw``: it then computes that gradient, which the model ignores)."""
    params = inspect.signature(fn).parameters

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{k: v for k, v in kwargs.items() if k in params})

    return call


def timed(fn: Callable[..., Any], acc: dict[str, float], key: str) -> Callable[..., Any]:
    """``fn`` adding its CPU seconds to ``acc[key]``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[key] += time.process_time() - t

    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="main")
    ap.add_argument("--configs", default="small,medium")
    ap.add_argument("--modes", default="full,lora,wsla")
    ap.add_argument("--steps", type=int, default=12, help="timed steps per version")
    a = ap.parse_args()
    set_threads(1)
    ours = {n: getattr(model, n) for names in OPS.values() for n in names}
    with tempfile.TemporaryDirectory() as folder:
        theirs = load_ref(a.ref, folder)
        for name in a.configs.split(","):
            c = BENCH_CONFIGS[name]
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
                            setattr(model, n, timed(f, op_s, f"{label} {n}"))
                        rows = np.arange(i * c["batch"], (i + 1) * c["batch"])
                        i += 1
                        t = time.process_time()
                        tr.train_step(rows)
                        if k >= 2:  # one warm-up step each (compilation)
                            times[label].append(time.process_time() - t)
                for n, f in ours.items():
                    setattr(model, n, f)
                before, after = (float(np.median(times[x])) for x in ("ref", "this"))
                print(json.dumps({
                    "bench": "ops_ab", "ref": a.ref, "config": name, "mode": mode, "threads": 1,
                    "clock": "process_time", "steps_each": a.steps,
                    "ref_median_cpu_ms": round(before * 1e3, 2),
                    "this_median_cpu_ms": round(after * 1e3, 2),
                    "ref_min_cpu_ms": round(min(times["ref"]) * 1e3, 2),
                    "this_min_cpu_ms": round(min(times["this"]) * 1e3, 2),
                    "speedup": round(before / after, 3),
                    "this_tokens_per_cpu_s": round(c["batch"] * c["seq_len"] / after, 1),
                    "in_step_op_cpu_ms": {k: round(v * 1e3 / a.steps, 2)
                                          for k, v in sorted(op_s.items())}}),
                    flush=True)


if __name__ == "__main__":
    main()
