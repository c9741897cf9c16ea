"""Training-step throughput (forward + backward + AdamW), median of timed steps.

    python benchmarks/bench_train_step.py            # small and medium, full / LoRA r=8 / WSLA
Equivalent to ``python -m engine bench --json --modes full,lora,wsla``.
"""

import engine  # noqa: F401  (thread/cache defaults before NumPy loads)
from engine.bench import run

if __name__ == "__main__":
    run(["small", "medium"], as_json=True, steps=10, modes=["full", "lora", "wsla"], threads=2)
