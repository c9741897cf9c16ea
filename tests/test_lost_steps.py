"""Steps a run trained after its last snapshot, lost to a kill -9: a resume says so (the window
said "interrupted at step 0", hid the curves of 137 steps and went on from step 0 unsaid)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import engine
from engine.cli import main

ROOT = Path(__file__).resolve().parents[1]


def killed_run(tmp_path: Path) -> tuple[Path, int]:
    """A command-line run killed (SIGKILL) after a few steps past its step-0 snapshot; returns
    its folder and the last step its metrics.csv holds."""
    out = tmp_path / "runs" / "killed"
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and looked at the hat. " * 400)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "train", str(corpus), "--preset", "tiny", "--seq-len",
         "32", "--batch", "2", "--max-steps", "100000", "--sample-tokens", "0", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if (out / "run.json").exists() and sum(
                    r["kind"] == "step" for r in engine.read_metrics(out)) >= 4:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    steps = [r["step"] for r in engine.read_metrics(out) if r["kind"] == "step"]
    assert engine.list_runs(out.parent)[0].steps == 0 and len(steps) >= 4, steps
    return out, max(steps)


def test_a_resume_after_a_kill_names_the_steps_lost_after_the_last_snapshot(tmp_path, capsys):
    out, last = killed_run(tmp_path)
    note = engine.lost_steps_note(out)
    assert note == (f"killed trained to step {last:,}, but its last snapshot is step 0: {last:,} "
                    "steps after it were lost when it ended without saving (a kill or a crash) "
                    "and are trained again from step 0 (a run saves at each epoch's end, on its "
                    "autosave settings, and when it is stopped)")
    assert main(["train", "--resume", str(out), "--max-steps", "2", "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"killed trained to step {last:,}, but its last snapshot is step 0") == 1, err
    assert engine.lost_steps_note(out) is None  # said once: the resume trained them again


def saved_run(tmp_path: Path) -> Path:
    """A 2-step command-line run (its last snapshot: step 2)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and looked at the hat. " * 200)
    out = tmp_path / "runs" / "long"
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "2", "--sample-tokens", "0", "--out", str(out)]) == 0
    assert engine.list_runs(out.parent)[0].steps == 2
    return out


def test_the_lost_steps_of_a_long_run_are_read_from_the_end_of_its_metrics(tmp_path, monkeypatch):
    # a Continue of a 100,000-step run read its whole metrics.csv a second time for this note
    out = saved_run(tmp_path)
    with (out / "metrics.csv").open("a") as f:
        for step in range(3, 5003):
            f.write(f"step,{step},0,1.5,0.5,0.001,1000.0,,{step}.0\n")
            if step % 1000 == 0:
                f.write(f"eval,{step},0,,,,,1.4,{step}.0\n")
    assert (out / "metrics.csv").stat().st_size > 150_000  # > 2 x the 64 KB tail
    from engine.runformat import metrics_file

    def whole(folder):
        raise AssertionError("metrics.csv read whole")
    monkeypatch.setattr(metrics_file, "read_metrics", whole)
    note = engine.lost_steps_note(out)
    assert note is not None and note.startswith(
        "long trained to step 5,002, but its last snapshot is step 2: 5,000 steps after it")
    monkeypatch.undo()
    with (out / "metrics.csv").open("a") as f:  # a tail of eval rows only: the whole file is read
        for step in range(5003, 8003):
            f.write(f"eval,{step},0,,,,,1.4,{step}.0\n")
    assert engine.lost_steps_note(out).startswith("long trained to step 5,002, but")


def test_a_damaged_latest_snapshot_is_not_blamed_on_a_kill(tmp_path, capsys):
    """A run that saved step 4 and whose step-4 snapshot was damaged later goes on from step 2:
    its note blamed "a kill or a crash" for the 2 steps trained again."""
    out = saved_run(tmp_path)
    assert main(["train", "--resume", str(out), "--max-steps", "4", "--sample-tokens", "0"]) == 0
    weights = out / "snapshots" / "step-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert ("long trained to step 4 and goes on from its snapshot of step 2 (a newer one could "
            "not be used, as said above): 2 steps after it are trained again") in err, err
    assert "a kill or a crash" not in err, err


def test_a_damaged_latest_pointer_alone_still_names_the_steps_a_kill_lost(tmp_path, capsys):
    """A damaged latest.json passes over no snapshot: the steps after the newest one were lost
    to a kill, and the note (told 'a newer one could not be used') must say so."""
    out = saved_run(tmp_path)
    with (out / "metrics.csv").open("a") as f:  # trained on to step 4, then killed
        for step in (3, 4):
            f.write(f"step,{step},0,1.5,0.5,0.001,1000.0,,{step}.0\n")
    (out / "latest.json").write_text("garbage{")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "long trained to step 4, but its last snapshot is step 2: 2 steps after it were " \
           "lost when it ended without saving (a kill or a crash)" in err, err
