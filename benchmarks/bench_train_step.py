"""Training-step throughput (forward + backward + AdamW), median of timed steps.

    python benchmarks/bench_train_step.py            # small and medium, full / LoRA r=8 / WSLA
Equivalent to ``python -m engine bench --json --modes full,lora,wsla``.
"""

from engine.runtime import configure

configure(tune_allocator=True)  # same process settings as training
from engine.bench import run

if __name__ == "__main__":
    run(["small", "medium"], as_json=True, steps=10, modes=["full", "lora", "wsla"], threads=2)
