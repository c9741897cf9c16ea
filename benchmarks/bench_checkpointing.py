"""Peak memory (tracemalloc, NumPy allocations) and step time of one forward+backward with and
without activation checkpointing, preset medium (batch 8 x 256). Gradients are identical
(tests/test_model.py); this measures what checkpointing saves and costs.

    python benchmarks/bench_checkpointing.py
"""

import json
import tracemalloc

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training

import numpy as np

from engine.bench import time_calls
from engine.config import preset
from engine.model import loss_and_grad
from engine.params import init_params, zeros_like

if __name__ == "__main__":
    cfg = preset("medium", 256)
    p = init_params(cfg)
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 256, (8, 256))
    tg = rng.integers(0, 256, (8, 256))
    for ck in (False, True):
        g = zeros_like(p)
        times = time_calls(lambda _, g=g, ck=ck: loss_and_grad(p, tok, tg, cfg, g, 1 / tg.size,
                                                               checkpoint=ck), 5)
        tracemalloc.start()
        loss_and_grad(p, tok, tg, cfg, g, 1 / tg.size, checkpoint=ck)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(json.dumps({"bench": "activation_checkpointing", "config": "medium", "checkpoint": ck,
                          "peak_MB": round(peak / 1e6, 1),
                          "median_ms": round(float(np.median(times)) * 1e3, 1)}))
