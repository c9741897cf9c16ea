"""Crash test: kill -9 a training process at random moments and check that nothing is lost.

    python scripts/crash_test.py --trials 50 [--seed 0] [--slow-save 0.15]

1. After a warm-up run (fills the Numba cache), one uninterrupted reference run (tiny model,
   autosave every 2 steps) records its per-step losses.
2. Each trial starts the same run with ``MAMBA_STUDIO_SLOW_SAVE`` set (every save sleeps between its
   files, so many kills land inside a save), sends SIGKILL at a random moment, then asserts that
   the folder opens read-only (checksums verified), resumes without the corpus, finishes, and that
   its metrics.csv losses for every step equal the reference run's. A kill that lands before the
   run folder is complete (no run.json yet) must leave a folder that ``--force`` replaces.
Prints one line per trial and a summary; exit status 1 if any trial failed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine  # noqa: E402,F401  (sets the runtime defaults before NumPy loads)
from engine import runformat as rf  # noqa: E402
from engine.run import open_run  # noqa: E402

TRAIN = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--max-steps", "24",
         "--autosave-steps", "2", "--sample-tokens", "0", "--holdout", "0.1"]


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "engine", "train", *args]


def _losses(folder: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in rf.read_metrics(folder) if r["kind"] == "step"}


def _corpus(base: Path) -> Path:
    d = base / "corpus"
    d.mkdir()
    rng = random.Random(1)
    words = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "away",
             "from", "home", "and", "back", "again"]
    for i in range(3):
        (d / f"doc{i}.txt").write_text(" ".join(rng.choice(words) for _ in range(900)) + "\n")
    return d


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slow-save", type=float, default=0.15, help="seconds slept per save stage")
    a = p.parse_args()
    rng = random.Random(a.seed)
    base = Path(tempfile.mkdtemp(prefix="crash-test-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        corpus = _corpus(base)
        # warm the Numba cache first: a process that JIT-compiles the kernels gives losses that
        # differ (~1e-8 relative) from one that loads them from the cache
        subprocess.run(_cmd(str(corpus), *TRAIN, "--max-steps", "1", "--out", str(base / "warm")),
                       check=True, env=env, stderr=subprocess.DEVNULL, cwd=base)
        ref = base / "ref"
        subprocess.run(_cmd(str(corpus), *TRAIN, "--out", str(ref)), check=True, env=env,
                       stderr=subprocess.DEVNULL, cwd=base)
        ref_losses = _losses(ref)
        assert sorted(ref_losses) == list(range(1, 25)), sorted(ref_losses)
        slow_env = {**env, rf.SLOW_SAVE_ENV: str(a.slow_save)}
        # the slow run lasts longer than the reference; measure it once to spread the kills
        t0 = time.monotonic()
        subprocess.run(_cmd(str(corpus), *TRAIN, "--out", str(base / "slow")), check=True,
                       env=slow_env, stderr=subprocess.DEVNULL, cwd=base)
        span = time.monotonic() - t0
        print(f"reference: 24 steps; slow-save run takes {span:.1f} s", flush=True)
        stats = {"ok": 0, "failed": 0, "in_save": 0, "before_run": 0, "finished_before_kill": 0}
        for trial in range(a.trials):
            out = base / f"t{trial}"
            at = rng.uniform(0.3, span)
            proc = subprocess.Popen(_cmd(str(corpus), *TRAIN, "--out", str(out)), env=slow_env,
                                    stderr=subprocess.DEVNULL, cwd=base)
            time.sleep(at)
            finished = proc.poll() is not None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            in_save = any(p.name.startswith(rf.TMP_PREFIX) for p in (out / rf.SNAPSHOTS).glob("*")) \
                if (out / rf.SNAPSHOTS).is_dir() else False
            try:
                if not rf.is_run(out):  # killed while the folder was being created
                    stats["before_run"] += 1
                    subprocess.run(_cmd(str(corpus), *TRAIN, "--out", str(out), "--force"),
                                   check=True, env=env, stderr=subprocess.DEVNULL, cwd=base)
                    how = "before run.json; --force restarted it"
                else:
                    view = open_run(out)  # read-only open, checksums verified
                    res = subprocess.run(_cmd("--resume", str(out), "--sample-tokens", "0"),
                                         env=env, stderr=subprocess.PIPE, text=True, cwd=base)
                    if res.returncode != 0:
                        raise AssertionError(f"resume failed: {res.stderr.strip()[-300:]}")
                    how = f"opened at step {view.step}, resumed"
                got = _losses(out)
                if got != ref_losses:
                    diff = [s for s in ref_losses if got.get(s) != ref_losses[s]]
                    raise AssertionError(f"losses differ at steps {diff[:5]}: "
                                         f"{[(got.get(s), ref_losses[s]) for s in diff[:2]]}")
                open_run(out)
                stats["ok"] += 1
                stats["in_save"] += in_save
                stats["finished_before_kill"] += finished
                print(f"trial {trial:2d}: kill at {at:5.2f} s{' (inside a save)' if in_save else ''}"
                      f": {how}; 24 losses equal", flush=True)
            except Exception as exc:  # noqa: BLE001  (a failed trial is reported, the rest go on)
                stats["failed"] += 1
                print(f"trial {trial:2d}: kill at {at:5.2f} s: FAILED: {exc}", flush=True)
            shutil.rmtree(out, ignore_errors=True)
        print(f"summary: {stats['ok']}/{a.trials} trials passed, {stats['failed']} failed; "
              f"{stats['in_save']} kills inside a save, {stats['before_run']} before the run folder "
              f"was complete, {stats['finished_before_kill']} after the run had finished", flush=True)
        return 1 if stats["failed"] else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
