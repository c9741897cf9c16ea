"""A run another process trains, shown in the window: its curves follow it (they stood still at
the steps it had when it was opened, while the command-line run went on)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import engine
from app.main_window import IDLE_FORMAT
from engine.samples import SAMPLES

from .helpers import RUN_TIMEOUT, close_window, small_window

ROOT = Path(__file__).resolve().parents[2]


def _steps_drawn(w) -> int:
    xs, _ = w.plots.step_loss.getData()
    return 0 if xs is None else len(xs)


def _train_elsewhere(qtbot, out: Path, tmp_path: Path) -> subprocess.Popen:
    """A command-line run of 100,000 steps training into ``out``, past its third step."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and looked at the hat. " * 400)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "train", str(corpus), "--preset", "tiny", "--seq-len",
         "32", "--batch", "2", "--epochs", "1000", "--max-steps", "100000", "--sample-tokens", "0",
         "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        qtbot.waitUntil(lambda: (out / "run.json").exists() and engine.RunLock(out).held_elsewhere()
                        and len(engine.read_metrics(out)) >= 3, timeout=RUN_TIMEOUT)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def test_a_run_another_process_trains_is_followed_until_it_ends(win, qtbot, tmp_path):
    out = tmp_path / "runs" / "cli-run"
    proc = _train_elsewhere(qtbot, out, tmp_path)
    try:
        win.follower.interval_ms = 100
        win.open_run_view(str(out))
        assert win.follower.folder == str(out)
        assert "it is training in another process; its curves and samples follow it" in \
            win.statusBar().currentMessage()
        qtbot.waitUntil(lambda: _steps_drawn(win) >= 1)  # (drawn every 100 ms)
        first = _steps_drawn(win)
        qtbot.waitUntil(lambda: _steps_drawn(win) > first + 2, timeout=RUN_TIMEOUT)
        bar = win.progress.format()  # (it said "no run training")
        assert bar.startswith("cli-run trains in another process: step ") and \
            bar.endswith(" of 100,000"), bar
        win.corpus.clear()  # a Start refused ("add a file") leaves the run followed
        win.start_training()
        assert win.worker is None and win.follower.folder == str(out)
        proc.send_signal(signal.SIGTERM)  # it saves and ends
        assert proc.wait(timeout=RUN_TIMEOUT / 1000) == 0
        qtbot.waitUntil(lambda: win.follower.folder is None, timeout=RUN_TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    steps = len([r for r in engine.read_metrics(out) if r["kind"] == "step"])
    qtbot.waitUntil(lambda: _steps_drawn(win) == steps)  # every step, the last ones too
    assert "cli-run is no longer training in another process" in win.statusBar().currentMessage()
    assert win.progress.format() == IDLE_FORMAT


def test_the_idle_line_of_a_launch_beside_a_training_run_says_when_it_ends(qtbot, tmp_path):
    """Launched while a command-line run trained, the window's idle line kept "last run: cli-run
    trains in another process" after that run had ended."""
    out = tmp_path / "runs" / "cli-run"
    proc = _train_elsewhere(qtbot, out, tmp_path)
    w = small_window(qtbot, tmp_path / "runs")
    try:
        assert w.status.full == "idle · last run: cli-run trains in another process", w.status.full
        w.follower.interval_ms = 100
        proc.send_signal(signal.SIGTERM)  # it saves and ends
        assert proc.wait(timeout=RUN_TIMEOUT / 1000) == 0
        qtbot.waitUntil(lambda: w.follower.folder is None, timeout=RUN_TIMEOUT)
        step = engine.list_runs(out.parent)[0].steps
        assert step >= 3
        assert w.status.full == f"idle · last run: cli-run stopped at step {step:,}", w.status.full
    finally:
        proc.kill()
        proc.wait()
        close_window(qtbot, w)


def test_the_idle_line_follows_a_run_another_process_takes_up_again(qtbot, tmp_path):
    """The idle line named how the window's newest run had ended ("stopped at step 5") while
    another process trained it on and after that process ended it further on."""
    out = tmp_path / "runs" / "cli-run"
    proc = _train_elsewhere(qtbot, out, tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=RUN_TIMEOUT / 1000) == 0
    first = engine.list_runs(out.parent)[0].steps
    w = small_window(qtbot, tmp_path / "runs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "train", "--resume", str(out), "--max-steps", "100000",
         "--sample-tokens", "0"], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        assert w.status.full == f"idle · last run: cli-run stopped at step {first:,}"
        qtbot.waitUntil(lambda: engine.RunLock(out).held_elsewhere() and max(
            (r["step"] for r in engine.read_metrics(out) if r["kind"] == "step"),
            default=0) > first + 2, timeout=RUN_TIMEOUT)
        w.follower.interval_ms = 100
        w.open_run_view(str(out))
        qtbot.waitUntil(lambda: w.status.full == "idle · last run: cli-run trains in another "
                                                 "process", timeout=RUN_TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=RUN_TIMEOUT / 1000) == 0
        qtbot.waitUntil(lambda: w.follower.folder is None, timeout=RUN_TIMEOUT)
        step = engine.list_runs(out.parent)[0].steps
        assert step > first
        assert w.status.full == f"idle · last run: cli-run stopped at step {step:,}", w.status.full
    finally:
        proc.kill()
        proc.wait()
        close_window(qtbot, w)


def test_a_run_no_process_trains_is_not_followed(win, tmp_path):
    from engine import run as runapi
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [ROOT / "assets" / "sample_corpus"], root=tmp_path / "runs") as run:
        run.train()
    win.open_run_view(str(run.folder))
    assert win.follower.folder is None and not win.follower.timer.isActive()
    assert win.statusBar().currentMessage() == f"showing {run.folder}"


def test_a_slow_redraw_makes_the_follower_look_less_often(qtbot):
    """A run of 100,000 steps takes ~1 s to read and draw: every 2 s it held the window half the
    time. The follower looks again no sooner than ten times the last redraw's time."""
    from app.follow import FOLLOW_MS, RunFollower

    f = RunFollower()
    f.redrawn_in(1.0)
    assert f.timer.interval() == 10_000
    f.redrawn_in(0.01)
    assert f.timer.interval() == FOLLOW_MS


def test_a_followed_run_reads_again_only_what_grew(win, tmp_path, monkeypatch):
    """Each new metrics row of a followed run read its samples.jsonl again, twice (the
    Preview's and the Gallery's): rows redraw the curves, samples the Preview and the Gallery
    from one read."""
    from engine import run as runapi
    from engine.samples import append_sample
    from engine.trainer import TrainConfig

    spec = runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with runapi.start(spec, [ROOT / "assets" / "sample_corpus"], root=tmp_path / "runs") as run:
        run.train()
    folder = str(run.folder)
    append_sample(run.folder, {"step": 1, "epoch": 0, "tag": "step 1", "prompt": "a",
                               "text": "a sample"})
    win.open_run_view(folder)
    assert win.gallery.folder == folder
    reads, draws = [], []
    real_read, real_draw = engine.read_kept_samples, win.plots.show_run
    monkeypatch.setattr(engine, "read_kept_samples", lambda f: reads.append(f) or real_read(f))
    monkeypatch.setattr(win.plots, "show_run", lambda f: draws.append(f) or real_draw(f))
    win.follower.changed = (True, False)  # metrics.csv grew
    win._followed_grew(folder)
    assert draws == [folder] and reads == []
    win.follower.changed = (False, True)  # samples.jsonl grew
    win._followed_grew(folder)
    assert draws == [folder] and reads == [folder]  # one read for the Gallery and the Preview
    assert win.preview.output.toPlainText() == "a sample" and win.gallery.samples
    other = tmp_path / "elsewhere"  # the Gallery turned to another run: the Preview follows still
    other.mkdir()
    win.gallery.show_run(str(other))
    append_sample(run.folder, {"step": 1, "epoch": 0, "tag": "step 1", "prompt": "a",
                               "text": "a second sample"})
    win._followed_grew(folder)
    assert win.preview.output.toPlainText() == "a second sample"
    assert win.gallery.folder == str(other)


def test_the_follower_says_which_file_grew(tmp_path, qtbot):
    """``changed`` names (metrics.csv, samples.jsonl) in that order (swapped, a followed run's
    samples redrew its curves: only a 190 s timeout caught it)."""
    from app.follow import RunFollower
    from engine import runformat as rf

    f = RunFollower()
    f.folder = str(tmp_path)
    (tmp_path / rf.METRICS).write_text("")
    (tmp_path / SAMPLES).write_text("")
    f._mark = engine.progress_mark(str(tmp_path))
    (tmp_path / SAMPLES).write_text("{}\n")
    f._poll()
    assert f.changed == (False, True)
    f.folder = str(tmp_path)  # (no process holds it: each poll ends the following)
    (tmp_path / rf.METRICS).write_text("kind\n")
    f._poll()
    assert f.changed == (True, False)


def test_a_continue_after_a_kill_says_once_which_steps_were_lost(win, qtbot, tmp_path):
    """Relaunched after a kill -9, the window said "interrupted at step 0" and its Continue
    went on from step 0 without a word of the steps trained after that snapshot."""
    from tests.test_lost_steps import killed_run

    from .helpers import train_until_idle

    out, last = killed_run(tmp_path)
    said = f"note: killed trained to step {last:,}, but its last snapshot is step 0: "
    win.open_run_view(str(out))  # shown (as a relaunch shows the newest run): said there too
    assert win.log.toPlainText().count(said) == 1, win.log.toPlainText()[-800:]
    win.log.clear()
    win.choose_continue(str(out))
    assert win.log.toPlainText().count(said) == 1, win.log.toPlainText()[-800:]
    train_until_idle(qtbot, win, max_steps=2)
    log = win.log.toPlainText()
    assert log.count(said) == 1, log[-1500:]  # (not again at its Start)
    assert "finished at step 2 (held-out loss" in log, log[-800:]
