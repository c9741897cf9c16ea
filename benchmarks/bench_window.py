"""Training in the window against the command line: the same run (the `small` preset on the
bundled corpus, ``--steps`` steps), the window (``python -m app --train-steps``, its curves drawn
live) and ``python -m engine train`` in turns, each a fresh process. Prints one JSON line per
run: the median step time and tokens/s from its metrics.csv (the first 20 steps left out: the
thread tuner's probes), and the window's ratio to the command line of the same round.

    DISPLAY=:1 python benchmarks/bench_window.py [--steps 200] [--rounds 2]

It needs a display (an X server such as Xvfb; Qt's offscreen platform paints nothing on screen
and so costs less than a user's window). The window keeps its settings in a temporary folder.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from engine import read_metrics  # noqa: E402


def step_times(folder: Path) -> tuple[float, float]:
    """(median ms a step, median tokens/s) of a run folder's steps after its 20th."""
    rows = [r for r in read_metrics(folder) if r["kind"] == "step"]
    t = [r["elapsed_s"] for r in rows]
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)][20:]
    if not gaps:
        raise SystemExit(f"error: {folder}: fewer than 22 steps; pass a larger --steps")
    return 1000 * statistics.median(gaps), statistics.median(r["tokens_per_s"] for r in rows[20:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    if a.steps < 22 or a.rounds < 1:
        ap.error("--steps must be at least 22 and --rounds at least 1")
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        ap.error("no display: start one (e.g. Xvfb :1 &) and set DISPLAY")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            gui, cli = Path(tmp, f"gui{i}"), Path(tmp, f"cli{i}", "run")
            subprocess.run([sys.executable, "-m", "app", "--runs-root", str(gui), "--settings-dir",
                            str(Path(tmp, f"set{i}")), "--preset", "small",
                            "--train-steps", str(a.steps)], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1800)
            subprocess.run([sys.executable, "-m", "engine", "train", "--preset", "small",
                            "--max-steps", str(a.steps), "--epochs", "50", "--out", str(cli)],
                           cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=1800)
            (g_ms, g_tok), (c_ms, c_tok) = (step_times(next(gui.glob("*/metrics.csv")).parent),
                                            step_times(cli))
            for where, ms, tok in (("window", g_ms, g_tok), ("cli", c_ms, c_tok)):
                print(json.dumps({"bench": "window", "round": i, "where": where,  # noqa: T201
                                  "median_step_ms": round(ms, 1), "tokens_per_s": round(tok),
                                  "window_over_cli_speed": round(c_ms / g_ms, 2),
                                  "steps": a.steps}), flush=True)


if __name__ == "__main__":
    main()
