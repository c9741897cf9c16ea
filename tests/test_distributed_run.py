"""``python -m engine train --distributed`` through the run folder: rank 0 writes the snapshots,
and a snapshot of 2 ranks resumes with 1 process and vice versa, continuing the same run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.runformat import read_metrics
from tests.test_distributed import ROOT, _launcher

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * i}.\n" for i in range(300))
FLAGS = ["--preset", "tiny", "--seq-len", "32", "--batch", "4", "--accum", "2", "--sample-tokens",
         "0", "--warmup", "2", "--autosave-steps", "2"]


def cli(args: list[str], ranks: int = 0) -> subprocess.CompletedProcess[str]:
    """``python -m engine train ARGS``; under the MPI launcher with ``--distributed`` if ranks."""
    cmd = [sys.executable, "-m", "engine", "train", *args]
    if ranks:
        launcher = _launcher()
        assert launcher is not None
        launcher[launcher.index("-n") + 1] = str(ranks)
        cmd = [*launcher, *cmd, "--distributed"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def losses(folder: Path) -> list[float]:
    rows = [r for r in read_metrics(folder) if r.get("kind") == "step"]
    return [float(r["loss"]) for r in sorted(rows, key=lambda r: int(r["step"]))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "fox.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture(scope="module")
def whole(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """One process: 4 steps, then resumed to 8 (a resume recomputes the schedule over the new
    total, so this, not an 8-step run, is what the mixed runs must equal)."""
    out = tmp_path_factory.mktemp("runs") / "whole"
    cli([str(corpus), "--out", str(out), "--max-steps", "4", *FLAGS])
    cli(["--resume", str(out), "--max-steps", "8", "--sample-tokens", "0"])
    return losses(out)


@pytest.mark.parametrize(("first", "second"), [(2, 0), (0, 2)])
def test_snapshot_resumes_with_another_number_of_ranks(first: int, second: int, corpus: Path,
                                                       tmp_path: Path, whole: list[float]) -> None:
    out = tmp_path / "run"
    proc = cli([str(corpus), "--out", str(out), "--max-steps", "4", *FLAGS], ranks=first)
    if first:
        assert "distributed: 2 ranks" in proc.stderr
        assert proc.stderr.count("run folder:") == 1  # rank 0 alone reports
        # the model line's optimizer state is the whole run's (it said rank 0's shard)
        whole_state = re.search(r"optimizer state ([\d,]+) bytes;", proc.stderr)
        shards = re.search(r"optimizer state per rank ([\d, ]+) bytes", proc.stderr)
        assert whole_state is not None and shards is not None, proc.stderr[-2000:]
        parts = [int(p.replace(",", "")) for p in shards.group(1).split(", ")]
        assert len(parts) == 2 and min(parts) > 0
        assert int(whole_state.group(1).replace(",", "")) == sum(parts)
    cli(["--resume", str(out), "--max-steps", "8", "--sample-tokens", "0"], ranks=second)
    got = losses(out)
    assert len(got) == len(whole) == 8
    # the same global batches; the float32 sums differ in order only (2 ranks vs 1)
    np.testing.assert_allclose(got, whole, rtol=1e-4)
    assert got[-1] < got[0]
