"""Plot learning curves (JSON lines from ``run``) to a PNG with matplotlib: one panel per task,
answer accuracy or held-out bits per byte against training time (top) and tokens (bottom); the
n-gram baselines and the 15 %-below-5-gram target are dashed lines.

    python -m benchmarks.learning.plot benchmarks/results/learning/*.jsonl --out docs/learning.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TASK_ORDER = ("copy", "induction", "text")


def read_run(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(s) for s in path.read_text().splitlines() if s.strip()]
    return lines[0], lines[1:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/learning.png"))
    a = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [read_run(p) for p in a.runs]
    tasks = [t for t in TASK_ORDER if any(h["task"] == t for h, _ in runs)]
    fig, axes = plt.subplots(2, len(tasks), figsize=(5.2 * len(tasks), 7.5), squeeze=False)
    for col, task in enumerate(tasks):
        metric = "bpb" if task == "text" else "accuracy"
        for row, x in enumerate(("train_s", "tokens")):
            ax = axes[row][col]
            for head, points in runs:
                if head["task"] != task or not points:
                    continue
                ax.plot([p[x] for p in points], [p[metric] for p in points], marker=".",
                        label=head["run"].removeprefix(task + "_"))
                if task == "text":
                    base = head["baselines"]
            if task == "text":
                for k in ("kn3", "kn4", "kn5"):
                    ax.axhline(base[k], ls="--", lw=0.8, color="gray")
                    ax.text(ax.get_xlim()[1], base[k], f" {k}", va="center", fontsize=7)
                ax.axhline(0.85 * base["kn5"], ls=":", color="red", lw=1)
                ax.set_ylim(1.2, 3.5)
            else:
                ax.axhline(0.95, ls=":", color="red", lw=1)
                ax.axhline(1 / 16, ls="--", color="gray", lw=0.8)
                ax.set_ylim(0, 1.02)
            ax.set_xlabel("training time (s)" if x == "train_s" else "tokens")
            ax.set_ylabel("held-out bits per byte" if task == "text" else "answer accuracy")
            ax.set_title(task if row == 0 else "")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
