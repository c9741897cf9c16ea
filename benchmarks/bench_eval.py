"""Held-out scoring: what a batch of evaluation costs, its forward pass and its scoring of the
logits, with the fused kernel (``engine.ops.cross_entropy.cross_entropy_scores``: float32 exp,
float64 sum, argmax in the same pass) beside the float64 NumPy log-softmax it replaced,
interleaved batch by batch on the same logits. Fraction of the limit: the scoring's exps at the
``fast_exp`` time measured in the same run (``engine.roofline.exp_ns``) over its measured time.

    python benchmarks/bench_eval.py [--batches 8] [--threads 2] [--json]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # the process settings of training, before NumPy loads

import numpy as np  # noqa: E402
from roofline import exp_ns  # noqa: E402

from engine.bench import cpu_model, set_threads  # noqa: E402
from engine.config import MambaConfig  # noqa: E402
from engine.lm import MambaLM  # noqa: E402
from engine.model import logits_forward  # noqa: E402
from engine.ops.cross_entropy import cross_entropy_scores  # noqa: E402

# name: (vocab, d_model, n_layer); 8 x 256 tokens a batch, as evaluation reads them
CONFIGS = {"small-bytes": (259, 128, 4), "small-bpe2k": (2048, 128, 4),
           "medium-bpe8k": (8192, 256, 6), "small-bpe50k": (50280, 128, 4)}
BATCH, SEQ = 8, 256


def numpy_scores(logits: np.ndarray, targets: np.ndarray) -> tuple[float, int]:
    """The float64 NumPy scoring that held-out evaluation ran before the fused kernel."""
    lg = logits.astype(np.float64)
    keep = targets >= 0
    lg, tg = lg[keep], targets[keep]
    mx = lg.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1))
    return float((lse - lg[np.arange(len(tg)), tg]).sum()), int((lg.argmax(axis=1) == tg).sum())


def bench(name: str, batches: int, threads: int) -> dict:
    v, d, n_layer = CONFIGS[name]
    lm = MambaLM.create(MambaConfig(vocab_size=v, d_model=d, n_layer=n_layer))
    rng = np.random.default_rng(0)
    fwd, old, new = [], [], []
    diff = 0.0
    for i in range(batches + 1):  # the first batch compiles and warms up
        x = rng.integers(0, v, (BATCH, SEQ))
        y = rng.integers(0, v, BATCH * SEQ)
        t = time.perf_counter()
        logits = logits_forward(lm.params, x, lm.config)
        t_fwd = time.perf_counter() - t
        lg = logits.reshape(-1, logits.shape[-1])
        t = time.perf_counter()
        total_old, _ = numpy_scores(lg, y)
        t_old = time.perf_counter() - t
        t = time.perf_counter()
        losses, hits = cross_entropy_scores(lg, y)
        total_new = float(losses.sum())
        t_new = time.perf_counter() - t
        diff = max(diff, abs(total_new - total_old) / abs(total_old))
        if i:
            fwd.append(t_fwd)
            old.append(t_old)
            new.append(t_new)
    tokens = BATCH * SEQ
    f, o, n = (statistics.median(s) for s in (fwd, old, new))
    ideal = tokens * lm.config.vocab_size * exp_ns(threads) * 1e-9
    return {"config": name, "vocab": lm.config.vocab_size, "threads": threads,
            "forward_ms": f * 1e3, "numpy_scoring_ms": o * 1e3, "fused_scoring_ms": n * 1e3,
            "eval_tok_s_numpy": tokens / (f + o), "eval_tok_s_fused": tokens / (f + n),
            "eval_speedup": (f + o) / (f + n), "scoring_speedup": o / n,
            "scoring_exp_roofline_fraction": ideal / n, "max_rel_diff": diff,
            "cpu": cpu_model(), "batches": batches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=8, help="timed batches per config (default 8)")
    ap.add_argument("--threads", type=int, default=2, help="Numba and BLAS threads (default 2)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, of {', '.join(CONFIGS)} (default: all)")
    ap.add_argument("--json", action="store_true", help="one JSON line per config")
    a = ap.parse_args()
    set_threads(a.threads)
    for name in a.configs.split(","):
        r = bench(name.strip(), a.batches, a.threads)
        if a.json:
            print(json.dumps(r), flush=True)
            continue
        print(f"{r['config']} (vocab {r['vocab']:,}, {r['threads']} threads, medians of "
              f"{r['batches']} batches of {BATCH}x{SEQ}): forward {r['forward_ms']:.1f} ms, "
              f"scoring {r['numpy_scoring_ms']:.1f} -> {r['fused_scoring_ms']:.1f} ms "
              f"({r['scoring_speedup']:.1f}x, {r['scoring_exp_roofline_fraction']:.2f} of its "
              f"exp limit); evaluation {r['eval_tok_s_numpy']:,.0f} -> "
              f"{r['eval_tok_s_fused']:,.0f} tok/s ({r['eval_speedup']:.2f}x); "
              f"loss sums within {r['max_rel_diff']:.1e}", flush=True)


if __name__ == "__main__":
    main()
