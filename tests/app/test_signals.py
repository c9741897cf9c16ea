"""The window closed by a signal (Ctrl-C in its terminal, SIGTERM, a closed terminal's SIGHUP)
saves a training run first, as its close button does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _steps(runs: Path) -> int:
    rows = list(runs.glob("*/metrics.csv"))
    return max((len(p.read_text().splitlines()) - 1 for p in rows), default=0)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_saves_the_run_then_quits(tmp_path, sig):
    runs = tmp_path / "runs"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MAMBA_STUDIO_NO_MEASURE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "app", "--runs-root", str(runs), "--settings-dir",
                             str(tmp_path / "cfg"), "--preset", "tiny", "--train-steps", "100000"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while _steps(runs) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _steps(runs) >= 3, "training did not start"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err, err
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    status = json.loads((run / "status.json").read_text())
    latest = json.loads((run / "latest.json").read_text())
    assert status["state"] == "stopped" and latest["step"] == status["step"] >= 3, (status, latest)
