"""float32 GEMM throughput through NumPy's BLAS at 1 and 2 threads, for the model's shapes and
for 2048^3: the ceiling the training-step numbers should be read against.

    python benchmarks/bench_blas.py
"""

import json

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training

import numpy as np
from threadpoolctl import threadpool_limits

from engine.bench import blas_info, time_calls

SHAPES = [(2048, 2048, 2048), (1024, 128, 512), (1024, 256, 128), (2048, 256, 1024),
          (2048, 512, 256)]

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="blas"):
            for m, k, n in SHAPES:
                a = rng.random((m, k), dtype=np.float32)
                b = rng.random((k, n), dtype=np.float32)
                med = float(np.median(time_calls(lambda _, a=a, b=b: a @ b, 20)))
                print(json.dumps({"bench": "sgemm", "threads": threads, "m": m, "k": k, "n": n,
                                  "median_gflops": round(2 * m * k * n / med / 1e9, 1),
                                  **blas_info()}))
