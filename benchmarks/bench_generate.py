"""Decode throughput of the recurrent step: NumPy CPU step vs the wgpu/WGSL step.

    python benchmarks/bench_generate.py [cpu,wgpu]
Prints one JSON line per (config, backend) with median ms/token, tokens/s and the adapter used.
"""

import json
import sys

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training
from engine.bench import bench_generate

if __name__ == "__main__":
    backends = (sys.argv[1] if len(sys.argv) > 1 else "cpu,wgpu").split(",")
    for name in ("small", "medium"):
        for backend in backends:
            print(json.dumps(bench_generate(name, backend)), flush=True)
