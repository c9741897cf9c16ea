"""A run folder's own files turned into links, FIFOs or devices, crafted state files, and
interrupted starts: one line each, never a hang, a traceback or a write outside the folder."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from engine import checkpoint as ckpt
from engine import runformat as rf
from engine.cli import main
from engine.errors import CheckpointError, MambaStudioError, TrainingError
from engine.run import RunSpec, list_runs, start
from engine.runformat import snapshot_dirs, trainer_state
from engine.trainer import TrainConfig
from tests.helpers import two_file_corpus

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    """A finished 4-step run with snapshots at steps 0, 2 and 4."""
    tmp = tmp_path_factory.mktemp("safety")
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=4),
                   autosave_minutes=0, autosave_steps=2)
    with start(spec, [two_file_corpus(tmp)], root=tmp / "runs") as run:
        run.train()
    return run.folder


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    subprocess.run(["cp", "-a", str(run), str(out)], check=True)
    return out


def _resume(folder: Path, capsys, *extra: str) -> tuple[int, str]:
    t0 = time.monotonic()
    rc = main(["train", "--resume", str(folder), "--max-steps", "6", "--sample-tokens", "0",
               "--no-tensorboard", *extra])
    assert time.monotonic() - t0 < 60
    return rc, capsys.readouterr().err


def test_a_lock_that_is_a_link_never_writes_outside_the_run(made_run, tmp_path, capsys):
    run = _copy(made_run, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / rf.LOCK).unlink()
    (run / rf.LOCK).symlink_to(victim)
    rc, err = _resume(run, capsys)
    assert rc == 2 and "lock" in err and "not a plain file" in err and err.count("\n") == 1, err
    assert victim.read_text() == "precious\n"  # it held the pid before


def test_a_lock_that_is_a_fifo_neither_hangs_listing_nor_resume(made_run, tmp_path, capsys):
    run = _copy(made_run, tmp_path)
    (run / rf.LOCK).unlink()
    os.mkfifo(run / rf.LOCK)
    listed = subprocess.run([sys.executable, "-c", "import sys; from engine.run import list_runs; "
                             "print([r.status for r in list_runs(sys.argv[1])])", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listed.stdout.strip() == "['finished']", listed.stderr
    rc, err = _resume(run, capsys)
    assert rc == 2 and "not a plain file" in err


def test_a_lock_that_is_a_folder_says_what_to_do(made_run, tmp_path, capsys):
    """It said only "<run>/lock: Is a directory" (the window: "[Errno 21] Is a directory")."""
    run = _copy(made_run, tmp_path)
    (run / rf.LOCK).unlink()
    (run / rf.LOCK).mkdir()
    rc, err = _resume(run, capsys)
    assert rc == 2 and err.strip() == (f"error: {run / rf.LOCK}: a folder where the run keeps its "
                                       "lock file; move it away, then try again"), err


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_metrics_that_are_a_fifo_or_dev_zero_are_refused(made_run, tmp_path, capsys, kind):
    run = _copy(made_run, tmp_path)
    (run / rf.METRICS).unlink()
    if kind == "fifo":
        os.mkfifo(run / rf.METRICS)
    else:
        (run / rf.METRICS).symlink_to("/dev/zero")
    rc, err = _resume(run, capsys)
    assert rc == 2 and "metrics.csv" in err and "delete or replace" in err, err


def test_token_ids_that_are_a_fifo_say_the_runs_fix_not_a_checkpoints(made_run, tmp_path,
                                                                       capsys):
    """data/ids.npy a FIFO: "give a regular checkpoint file" (the run's token data is no
    checkpoint, and the other damaged-data errors name what can still be done)."""
    run = _copy(made_run, tmp_path)
    (run / rf.IDS).unlink()
    os.mkfifo(run / rf.IDS)
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert "ids.npy: is a FIFO (named pipe); give a regular file; every snapshot shares these " \
        "token ids" in err and "checkpoint" not in err and err.count("\n") == 1, err


def test_a_failed_rewrite_of_metrics_on_resume_says_what_to_do(made_run, tmp_path, capsys,
                                                                monkeypatch):
    """Under a file-size limit a resume said only "could not write <run>/metrics.csv: File too
    large"."""
    run = _copy(made_run, tmp_path)

    def too_large(folder, step):  # noqa: ANN001, ANN202
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), str(folder / rf.METRICS))

    monkeypatch.setattr(rf, "truncate_metrics", too_large)
    rc, err = _resume(run, capsys)
    assert rc == 2 and err.strip() == (
        f"error: {run / rf.METRICS}: File too large; fix that, then resume (nothing was lost: "
        "the run is at its snapshot of step 4)"), err


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b'{"format": "other"}'])
def test_a_damaged_run_json_says_the_snapshots_still_load(made_run, tmp_path, capsys, content):
    """An empty, binary or foreign run.json named the file and nothing more, though every
    snapshot was intact."""
    run = _copy(made_run, tmp_path)
    (run / rf.RUN_JSON).write_bytes(content)
    assert main(["generate", str(run), "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    snap = run / rf.SNAPSHOTS / "step-4"
    assert err.startswith(f"error: {run / rf.RUN_JSON}: ") and err.count("\n") == 1, err
    assert err.rstrip().endswith(f"; its snapshots still load: give {snap} to generate, eval or "
                                 "export, or --init it to a new run"), err
    assert main(["generate", str(snap), "--max-new-tokens", "2"]) == 0


def _rewrite_trainer(snap: Path, change) -> None:  # noqa: ANN001
    """Edit a snapshot's trainer.json and fix its manifest's sha256, as a crafted file would."""
    t = json.loads((snap / rf.SNAP_TRAINER).read_text())
    change(t)
    (snap / rf.SNAP_TRAINER).write_text(json.dumps(t))
    man = json.loads((snap / rf.SNAP_MANIFEST).read_text())
    man[rf.SNAP_TRAINER] = ckpt.sha256_file(snap / rf.SNAP_TRAINER)
    (snap / rf.SNAP_MANIFEST).write_text(json.dumps(man))


@pytest.mark.parametrize("change", [
    lambda t: t.pop("lr_scale"), lambda t: t.pop("cursor"), lambda t: t.pop("optimizer_t"),
    lambda t: t.__setitem__("step", -5), lambda t: t["cursor"].__setitem__("step", -5),
    lambda t: t.__setitem__("lr_scale", "x"), lambda t: t["cursor"].pop("loss_sum"),
    lambda t: t.__setitem__("lr_scale", 0), lambda t: t.__setitem__("lr_scale", 2.0),
    lambda t: t.__setitem__("lr_scale", -1), lambda t: t.__setitem__("lr_scale", True),
], ids=["no_lr_scale", "no_cursor", "no_optimizer_t", "step_-5", "cursor_step_-5",
        "lr_scale_str", "no_loss_sum", "lr_scale_0", "lr_scale_2", "lr_scale_-1", "lr_scale_true"])
def test_a_crafted_trainer_json_is_passed_over_for_an_older_snapshot(made_run, tmp_path, capsys,
                                                                     change):
    """A missing lr_scale was a KeyError traceback (CLI and window); step -5 resumed "at step -5"."""
    run = _copy(made_run, tmp_path)
    _rewrite_trainer(run / rf.SNAPSHOTS / "step-4", change)
    rc, err = _resume(run, capsys)
    assert rc == 0 and "Traceback" not in err, err
    assert "step-4/trainer.json" in err and "using step-2 instead" in err, err
    assert [r["step"] for r in rf.read_metrics(run) if r["kind"] == "step"] == [1, 2, 3, 4, 5, 6]


def test_a_flipped_byte_in_the_optimizer_state_is_passed_over(made_run, tmp_path, capsys):
    """state.safetensors (the AdamW moments, a LoRA base) is in the snapshot's manifest and
    checked like the weights: a resume from damaged moments would train on garbage."""
    run = _copy(made_run, tmp_path)
    snap = run / rf.SNAPSHOTS / "step-4"
    assert rf.SNAP_STATE in json.loads((snap / rf.SNAP_MANIFEST).read_text())
    raw = bytearray((snap / rf.SNAP_STATE).read_bytes())
    raw[-3] ^= 0xFF  # a tensor byte, not the header
    (snap / rf.SNAP_STATE).write_bytes(bytes(raw))
    rc, err = _resume(run, capsys)
    assert rc == 0 and f"{rf.SNAP_STATE}: contents do not match" in err, err
    assert "using step-2 instead" in err, err


def test_a_cursor_past_the_epoch_is_one_line(made_run, tmp_path, capsys):
    run = _copy(made_run, tmp_path)
    _rewrite_trainer(run / rf.SNAPSHOTS / "step-4", lambda t: t["cursor"].__setitem__("group", 10**9))
    rc, err = _resume(run, capsys)
    assert rc == 2 and "cursor.group 1000000000 is past this run's" in err, err


def test_a_snapshot_with_nan_weights_is_not_resumed(made_run, tmp_path, capsys):
    run = _copy(made_run, tmp_path)
    snap = run / rf.SNAPSHOTS / "step-4"
    tensors = ckpt.read_tensors(snap / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = np.full_like(tensors[name], np.nan)
    save_file(tensors, str(snap / "model.safetensors"), metadata={"format": "pt"})
    man = json.loads((snap / rf.SNAP_MANIFEST).read_text())
    man["model.safetensors"] = ckpt.sha256_file(snap / "model.safetensors")
    (snap / rf.SNAP_MANIFEST).write_text(json.dumps(man))
    rc, err = _resume(run, capsys)
    assert rc == 2 and "contains NaN or Inf" in err and str(snap) in err, err


def test_ctrl_c_while_preparing_leaves_no_folder_and_no_traceback(tmp_path, capsys, monkeypatch):
    """Ctrl-C while tokenizing printed a KeyboardInterrupt traceback and left data/ and lock
    behind, so the next run needed --force."""
    import engine.run as run_mod

    def interrupted(*a, **k):  # noqa: ANN002, ANN003
        raise KeyboardInterrupt

    monkeypatch.setattr(run_mod, "_encode", interrupted)
    out = tmp_path / "out"
    rc = main(["train", str(two_file_corpus(tmp_path)), "--preset", "tiny", "--out", str(out),
               "--max-steps", "1", "--sample-tokens", "0"])
    err = capsys.readouterr().err
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
    assert not out.exists()
    monkeypatch.undo()
    assert main(["train", str(tmp_path / "corpus"), "--preset", "tiny", "--out", str(out),
                 "--max-steps", "1", "--sample-tokens", "0", "--seq-len", "32"]) == 0  # no --force


def test_a_nan_init_model_is_refused_before_any_folder(made_run, tmp_path, capsys):
    init = tmp_path / "init"
    subprocess.run(["cp", "-a", str(made_run / rf.SNAPSHOTS / "step-4"), str(init)], check=True)
    tensors = ckpt.read_tensors(init / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name] = np.full_like(tensors[name], np.inf)
    save_file(tensors, str(init / "model.safetensors"), metadata={"format": "pt"})
    (init / rf.SNAP_MANIFEST).unlink()  # a plain model folder, as exported
    out = tmp_path / "out"
    rc = main(["train", str(two_file_corpus(tmp_path)), "--init", str(init), "--out", str(out),
               "--max-steps", "1", "--sample-tokens", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and str(init) in err and "contains NaN or Inf" in err, err
    assert not out.exists()
    assert [r.status for r in list_runs(tmp_path)] == []


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "deep"])
def test_odd_settings_files_are_one_line(tmp_path, kind):
    cfg = tmp_path / "run.toml"
    if kind == "fifo":
        os.mkfifo(cfg)
    elif kind == "dev_zero":
        cfg.symlink_to("/dev/zero")
    else:
        cfg.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    proc = subprocess.run([sys.executable, "-m", "engine", "train", "--config", str(cfg)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr


def test_damaged_token_ids_say_what_can_still_be_done(made_run, tmp_path, capsys):
    """The advice was "use another snapshot of the run", but every snapshot shares data/."""
    run = _copy(made_run, tmp_path)
    ids = run / rf.DATA / "ids.npy"
    raw = bytearray(ids.read_bytes())
    raw[-1] ^= 1
    ids.write_bytes(bytes(raw))
    rc, err = _resume(run, capsys)
    assert rc == 2 and "ids.npy: contents do not match" in err
    assert "every snapshot shares these token ids" in err and "--init" in err, err


def test_a_tiny_held_out_set_is_said(tmp_path):
    """An 8-byte file trained with "held-out ... on 1 tokens" and no word about it."""
    (tmp_path / "tiny.txt").write_text("hello world\n")
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=1),
                   autosave_minutes=0)
    with start(spec, [tmp_path / "tiny.txt"], root=tmp_path / "runs") as run:
        assert any("held-out set is only 2 tokens" in n for n in run.notices), run.notices
    (tmp_path / "one.txt").write_text("hi there")  # one held-out token: "1 token", not "1 tokens"
    with start(spec, [tmp_path / "one.txt"], root=tmp_path / "runs") as run:
        assert any("held-out set is only 1 token," in n for n in run.notices), run.notices
        val = run.trainer.held_out(lambda: False)
        assert val is not None and val.describe() == "1 token"
    with start(spec, [two_file_corpus(tmp_path, 200)], root=tmp_path / "runs") as run:
        assert not any("held-out" in n for n in run.notices), run.notices


@pytest.mark.parametrize("lr, collapses", [(1.0, True), (3e-3, False)])
def test_a_collapsed_model_is_said_once(tmp_path, lr, collapses):
    """lr 1.0: held-out loss flat at 5.58 and grad norm 0.000 every epoch, rc 0, no word."""
    spec = RunSpec(preset="tiny", train=TrainConfig(epochs=15, lr=lr),  # the CLI's defaults
                   autosave_minutes=0)
    said: list[str] = []
    with start(spec, [ROOT / "assets" / "sample_corpus"], root=tmp_path / "runs") as run:
        try:
            run.train(on_notice=said.append)
        except TrainingError:  # the collapsed model's gradient can wake later: a blow-up, then
            assert collapses   # rolled back (it divided by the median norm, 0: a traceback)
    stalled = [m for m in said if "collapsed to one output" in m]
    assert len(stalled) == (1 if collapses else 0), said


@pytest.mark.parametrize("tokenizer, after", [("bytes", 0), ("bpe", 0), ("bpe", 3)])
def test_a_stop_while_preparing_ends_it_and_keeps_nothing(tmp_path, tokenizer, after):
    """Stop during minutes of tokenising waited for all of it, then left a step-0 run."""
    from engine.errors import Stopped

    corpus = two_file_corpus(tmp_path, 3000)
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > after

    spec = RunSpec(preset="tiny", tokenizer=tokenizer,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=1))
    with pytest.raises(Stopped, match="nothing was trained or kept"):
        start(spec, [corpus], root=tmp_path / "runs", should_stop=should_stop)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    with start(spec, [corpus], root=tmp_path / "runs") as run:  # the same, not stopped
        assert run.step == 0


@pytest.mark.parametrize(("err", "advice"), [
    (errno.EACCES, "let this user write to it"),
    (errno.EROFS, "let this user write to it"),
    (errno.ENOSPC, "free some disk space"),
    (errno.ELOOP, "must be a plain file"),  # a link
])
def test_append_failures_give_advice_that_fits_the_error(tmp_path, monkeypatch, err, advice):
    """Every failure to open metrics.csv for appending said "it must be a plain file: delete
    it", also for a read-only folder or a full disk, where deleting it would not help."""
    from engine import safeio

    def fail(*a, **k):  # noqa: ANN002, ANN003
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(safeio.os, "open", fail)
    with pytest.raises(safeio.UnsafeFileError) as info:
        safeio.open_append(tmp_path / "metrics.csv", "metrics file")
    msg = str(info.value)
    assert advice in msg and os.strerror(err) in msg and "metrics.csv" in msg, msg
    assert (err == errno.ELOOP) == ("delete it" in msg)


@pytest.mark.parametrize("damage", ["bom", "header", "quote", "long_tail", "nul_line"])
def test_a_damaged_metrics_file_keeps_its_history_on_resume(made_run, tmp_path, capsys, damage):
    """A byte-order mark (an editor's "CSV UTF-8" save) or a changed header made resume keep only
    the rows after the snapshot (66 lines became 10, no word); a stray quote swallowed every row
    after it; a 140 KB line (a power loss's NUL tail) raised _csv.Error with a traceback."""
    run = _copy(made_run, tmp_path)
    path = run / rf.METRICS
    text = path.read_text()
    before = [(r["kind"], r["step"], r["loss"]) for r in rf.read_metrics(run)]
    assert [s for k, s, _ in before if k == "step"] == [1, 2, 3, 4]
    lines = text.split("\n")
    if damage == "bom":
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    elif damage == "header":
        path.write_text("kimd" + text[4:])
    elif damage == "quote":
        lines[2] = lines[2].replace(",", ',"', 1)
        path.write_text("\n".join(lines))
    elif damage == "long_tail":
        path.write_bytes(text.encode() + b"\0" * 140_000)
    else:
        path.write_text("\n".join([*lines[:2], "\0" * 200_000, *lines[2:]]))
    damaged = [(r["kind"], r["step"], r["loss"]) for r in rf.read_metrics(run)]
    lost = 1 if damage == "quote" else 0  # only the row holding the quote
    assert len(damaged) == len(before) - lost and set(damaged) <= set(before)
    rc, err = _resume(run, capsys)
    assert rc == 0 and "Traceback" not in err, err
    steps = [r["step"] for r in rf.read_metrics(run) if r["kind"] == "step"]
    assert steps == ([1, 3, 4, 5, 6] if damage == "quote" else [1, 2, 3, 4, 5, 6]), steps
    if damage in ("quote", "nul_line"):
        assert "line(s) that are not metric rows kept as they are" in err, err


@pytest.mark.parametrize("damage", ["torn", "missing"])
def test_a_damaged_best_pointer_never_costs_the_best_snapshot(tmp_path, damage):
    """A torn best.json let the next saves prune the best snapshot and point best.json at a
    worse one, without a word: the snapshots' own held-out losses now stand in for it."""
    corpus = two_file_corpus(tmp_path)
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, epochs=1,
                                                    max_steps=4, eval_every=1),
                   autosave_minutes=0, autosave_steps=1)
    with start(spec, [corpus], root=tmp_path / "runs") as run:
        run.train()
        folder = run.folder
    best = json.loads((folder / rf.BEST).read_text())
    worse = best["val_loss"] + 1.0
    for _, snap in rf.snapshots(folder):  # make the step-2 snapshot the clear best
        t = json.loads((snap / rf.SNAP_TRAINER).read_text())
        t["val_loss"] = best["val_loss"] - 1.0 if t["step"] == 2 else worse
        (snap / rf.SNAP_TRAINER).write_text(json.dumps(t))
    if damage == "torn":
        (folder / rf.BEST).write_text('{"snapshot": "step-2", "step": 2, "val_lo')
    else:
        (folder / rf.BEST).unlink()
    assert rf.best_pointer(folder)["snapshot"] == rf.snapshot_name(2)
    rf.prune(folder, keep=1)
    assert (folder / rf.SNAPSHOTS / rf.snapshot_name(2)).is_dir()  # it was deleted
    rf.write_snapshot(folder, 5, lambda p: {}, {}, {"cursor": {}}, worse + 1.0, keep=1)
    assert json.loads((folder / rf.BEST).read_text())["snapshot"] == rf.snapshot_name(2)
    assert (folder / rf.SNAPSHOTS / rf.snapshot_name(2)).is_dir()


def test_a_run_without_run_json_points_at_its_snapshots(made_run, tmp_path, capsys):
    """A run folder whose run.json was lost said "no config.json (not a model folder)" to
    generate/eval/export and "no run.json, not a run folder" to --resume, with no way on; a
    snapshot given to --resume said the latter too."""
    run = _copy(made_run, tmp_path)
    (run / rf.RUN_JSON).unlink()
    newest = run / rf.SNAPSHOTS / rf.snapshot_name(4)
    assert main(["generate", str(run), "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert f"its snapshots still load: use {newest}" in err, err
    assert main(["generate", str(newest), "--max-new-tokens", "2"]) == 0
    capsys.readouterr()
    rc, err = _resume(run, capsys)
    assert rc == 2 and f"start a new run with --init {newest}" in err, err
    rc, err = _resume(made_run / rf.SNAPSHOTS / rf.snapshot_name(4), capsys)
    assert rc == 2 and f"a snapshot of the run {made_run}: resume that" in err, err


def test_a_folder_another_process_trains_in_is_named_in_use_not_offered_to_force(made_run,
                                                                                  tmp_path):
    """`train --out X` while X trained (or was being made) said "continue it with --resume,
    replace it with --force", and --force was then refused: the advice was wrong."""
    import fcntl

    run = _copy(made_run, tmp_path)
    fd = os.open(run / rf.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a training process holds
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())  # (a live process: a dead pid is not named)
    try:
        spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
        for force in (False, True):
            with pytest.raises(Exception, match=f"the run is in use by process {os.getpid()}"
                               ) as info:
                start(spec, [two_file_corpus(tmp_path)], out=run, force=force)
            assert "--force" not in str(info.value) and "--resume" not in str(info.value)
    finally:
        os.close(fd)
    assert rf.read_pointer(run)["step"] == 4


def test_snapshot_fallbacks_do_not_advise_what_they_already_do(made_run, tmp_path, capsys):
    """Passing over a damaged snapshot said "...(corrupt or modified); use another snapshot of
    the run; using step-2 instead"; with every snapshot damaged, "no complete snapshot: ... use
    another snapshot of the run", with nothing left to use."""
    run = _copy(made_run, tmp_path)
    (run / rf.SNAPSHOTS / "step-4" / "model.safetensors").write_bytes(b"damaged")
    rc, err = _resume(run, capsys)
    assert rc == 0 and "using step-2 instead" in err, err
    assert "use another snapshot" not in err, err
    line = next(x for x in err.splitlines() if "using step-2 instead" in x)
    assert line.startswith("warning: "), line  # as generate / eval / export say it (it was "note:")
    (tmp_path / "all").mkdir()
    run = _copy(made_run, tmp_path / "all")
    for _, snap in rf.snapshots(run):
        (snap / "model.safetensors").write_bytes(b"damaged")
    rc, err = _resume(run, capsys)
    assert rc == 2 and "none of its 3 snapshots is complete" in err, err
    assert "start a new run (--init takes any other model folder)" in err, err
    assert "use another snapshot" not in err and err.count("\n") == 1, err
    for _, snap in rf.snapshots(run):  # none left: it said "none of its 1 snapshot" (the one
        shutil.rmtree(snap)  # latest.json names)
    rc, err = _resume(run, capsys)
    assert rc == 2 and f"{run}: no snapshot in {run / rf.SNAPSHOTS} (" in err, err


def test_crash_corners_of_a_run_folder(made_run, tmp_path, capsys):
    """From a kill/full-disk loop: a crash between the two renames that re-save a step lost both
    copies (the next open deleted both temp folders); a snapshot replaced by a link to elsewhere
    was loaded; latest.json turned into a folder was found only at the first save."""
    run = _copy(made_run, tmp_path)
    snaps = run / rf.SNAPSHOTS
    os.rename(snaps / "step-4", snaps / f"{rf.TMP_PREFIX}old-step-4-4242")  # the first rename
    (snaps / f"{rf.TMP_PREFIX}step-4-4242").mkdir()  # the new copy, never renamed
    rc, err = _resume(run, capsys)
    assert rc == 0, err
    assert [r["step"] for r in rf.read_metrics(run) if r["kind"] == "step"] == [1, 2, 3, 4, 5, 6]
    assert "using step-2 instead" not in err, err  # step-4 was put back, not passed over
    run2 = tmp_path / "two"
    run2.mkdir()
    run2 = _copy(made_run, run2)
    elsewhere = tmp_path / "elsewhere"
    os.rename(run2 / rf.SNAPSHOTS / "step-4", elsewhere)
    (run2 / rf.SNAPSHOTS / "step-4").symlink_to(elsewhere)
    rc, err = _resume(run2, capsys)
    assert rc == 0 and "step-4: a link, not a snapshot folder of the run" in err, err
    assert "using step-2 instead" in err
    run3 = tmp_path / "three"
    run3.mkdir()
    run3 = _copy(made_run, run3)
    (run3 / rf.LATEST).unlink()
    (run3 / rf.LATEST).mkdir()
    rc, err = _resume(run3, capsys)
    assert rc == 2 and "latest.json: a folder where the run keeps a file" in err, err
    assert err.count("\n") == 1 and not [r for r in rf.read_metrics(run3) if r["step"] > 4]


def test_metrics_rows_survive_odd_but_honest_files(tmp_path):
    """A review of the line parser: rows of today's width under an older, shorter header were
    dropped (and one from lost work came back after a resume); a file whose header was lost gave
    up its first row; a header ending in a comma lost every row."""
    header = ",".join(rf.METRIC_FIELDS)
    row = lambda s: f"step,{s},0,{5 - s / 10},1.0,0.001,100.0,,{s / 10}"  # noqa: E731
    old_header = ",".join(rf.METRIC_FIELDS[:-1])
    old_row = lambda s: row(s).rsplit(",", 1)[0]  # noqa: E731
    cases = {
        "older_header": "\n".join([old_header, old_row(1), old_row(2), row(3), row(4), ""]),
        "no_header": "\n".join([row(1), row(2), row(3), row(4), ""]),
        "trailing_comma": "\n".join([header + ",", *(row(s) + "," for s in (1, 2, 3, 4)), ""]),
    }
    for name, text in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / rf.METRICS).write_text(text)
        assert [r["step"] for r in rf.read_metrics(folder)] == [1, 2, 3, 4], name
        assert rf.truncate_metrics(folder, 3) == 0, name
        assert [r["step"] for r in rf.read_metrics(folder)] == [1, 2, 3], name
        assert (folder / rf.METRICS).read_text().splitlines()[0] == header
    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / rf.METRICS).write_text("\n".join([header, row(1), row(2), row(3)[:-2]]))  # no "\n"
    rf.truncate_metrics(torn, 5)
    assert [r["step"] for r in rf.read_metrics(torn)] == [1, 2]  # a cut last line is dropped


def test_best_is_offered_against_the_live_step_too(made_run, tmp_path):
    """While a run trains past its last save, that save being the best still left newer
    weights: the export question compares the best with the live step."""
    run = _copy(made_run, tmp_path)
    best = rf.best_pointer(run)
    latest = rf.read_pointer(run)
    if best is None or best["step"] != latest["step"]:
        (run / rf.BEST).write_text(json.dumps({**latest, "val_loss": 1.0}))
    assert rf.best_if_not_latest(run) is None
    snap, ptr = rf.best_if_not_latest(run, now=latest["step"] + 3)
    assert ptr["step"] == latest["step"] and snap.name == latest["snapshot"]


def test_the_runs_list_names_the_step_resume_will_take(made_run, tmp_path):
    """kill -9 between publishing step-4 and re-pointing latest.json: the Runs list, Continue's
    "from step" and the export dialog said step 2 while resume took step 4. Every reader of
    the latest pointer now sees the newer complete snapshot; a first save killed before its
    pointer counts too, and a link named like a snapshot is not taken."""
    run = _copy(made_run, tmp_path)
    latest = rf.read_pointer(run)
    assert latest is not None and latest["step"] == 4
    (run / rf.LATEST).write_text(json.dumps({"snapshot": "step-2", "step": 2, "val_loss": None}))
    published = (run / rf.SNAPSHOTS / "step-4" / rf.SNAP_TRAINER).stat().st_mtime_ns
    os.utime(run / rf.LATEST, ns=(published - 10**9, published - 10**9))  # written before it
    assert rf.read_pointer(run) == latest  # step-4's own step and held-out loss
    assert [(r.path, r.steps) for r in rf.list_runs(run.parent)] == [(run, 4)]
    (run / rf.LATEST).unlink()
    assert rf.read_pointer(run)["step"] == 4
    (run / rf.SNAPSHOTS / "step-9").symlink_to(run / rf.SNAPSHOTS / "step-4")
    assert rf.read_pointer(run)["step"] == 4


def test_a_damaged_snapshot_a_resume_passed_over_is_not_the_latest(made_run, tmp_path, capsys):
    """step-4 damaged, the run resumed from step-2 and saved step 3: the Runs list said 4 (the
    newer snapshot left behind) where latest.json and every resume say 3."""
    run = _copy(made_run, tmp_path)
    state = run / rf.SNAPSHOTS / "step-4" / rf.SNAP_STATE
    raw = bytearray(state.read_bytes())
    raw[-3] ^= 0xFF
    state.write_bytes(bytes(raw))
    assert main(["train", "--resume", str(run), "--max-steps", "3", "--sample-tokens", "0",
                 "--no-tensorboard"]) == 0
    assert "using step-2 instead" in capsys.readouterr().err
    assert rf.read_pointer(run)["step"] == 3 and rf.find_snapshot(run)[0].name == "step-3"
    assert [r.steps for r in rf.list_runs(run.parent)] == [3]


@pytest.mark.parametrize("name", ["../../other/snapshots/step-4", "{other}/snapshots/step-4",
                                  "step-4/../../../other/snapshots/step-4", "step-\u00b2"])
def test_a_pointer_naming_a_snapshot_outside_the_run_is_not_followed(made_run, tmp_path, name):
    """A hand-edited latest.json / best.json naming another run's snapshot by a path was
    followed: eval and generate used the other run's weights, and a resume trained on them and
    pruned the run's own snapshots. A pointer names a step-N folder of the run, nothing else."""
    (tmp_path / "x").mkdir()
    run = _copy(made_run, tmp_path / "x")
    other = tmp_path / "x" / "other"
    subprocess.run(["cp", "-a", str(made_run), str(other)], check=True)
    for which in (rf.LATEST, rf.BEST):
        (run / which).write_text(json.dumps({"snapshot": name.format(other=other), "step": 4,
                                             "val_loss": 0.5}))
    assert all(snapshot_dirs._pointer_file(run, w) is None for w in (rf.LATEST, rf.BEST))
    for which in (rf.LATEST, rf.BEST):
        snap, trainer, _ = rf.find_snapshot(run, which)
        assert snap.parent == run / rf.SNAPSHOTS and trainer["step"] == 4
    assert rf.read_pointer(run)["snapshot"] == "step-4"
    assert rf.best_pointer(run)["val_loss"] != 0.5  # rebuilt from the run's own snapshots
    (run / rf.LATEST).write_text(json.dumps({"snapshot": "step-4", "step": 2}))  # name != step
    assert snapshot_dirs._pointer_file(run, rf.LATEST) is None


def test_a_snapshot_published_just_before_a_crash_is_resumed_from(made_run, tmp_path, capsys):
    """A crash between publishing step-4 and re-pointing latest.json at it resumed from step 2
    without a word (the complete step-4 was passed over and its steps trained again)."""
    run = _copy(made_run, tmp_path)
    (run / rf.LATEST).write_text(json.dumps({"snapshot": "step-2", "step": 2, "val_loss": None}))
    rc, err = _resume(run, capsys)
    assert rc == 0, err
    assert "names step-2, but step-4 is newer and complete" in err and "using step-4" in err, err
    assert "at step 4 of 6" in err
    assert [r["step"] for r in rf.read_metrics(run) if r["kind"] == "step"] == [1, 2, 3, 4, 5, 6]


def test_a_read_only_run_folder_says_what_to_do(made_run, tmp_path, capsys, monkeypatch):
    """A run on a read-only mount: resume said only "<run>/lock: Read-only file system"."""
    run = _copy(made_run, tmp_path)
    real = os.open

    def read_only(path, flags, *rest):  # noqa: ANN001
        if str(path).endswith(rf.LOCK) and flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *rest)

    monkeypatch.setattr(os, "open", read_only)
    rc, err = _resume(run, capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{run}: cannot write into the run folder (Read-only file system)" in err
    assert f"cp -a {run} NEW" in err


def test_the_runs_list_names_a_run_by_its_folder(made_run, tmp_path):
    """Renamed or copied on disk, a run kept the name in its run.json: a renamed run showed its
    old name, a copy two identical rows."""
    import shutil

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copytree(made_run, runs / "renamed")
    shutil.copytree(made_run, runs / "copy-of-it")
    assert sorted(r.name for r in rf.list_runs(runs)) == ["copy-of-it", "renamed"]


@pytest.mark.parametrize("val", ["abc", True, None, "nan"])
def test_a_best_json_with_a_loss_that_is_not_a_number_is_read_as_unknown(made_run, tmp_path,
                                                                         capsys, val):
    """best.json's val_loss "abc": the Runs list formatted it and the window could not open;
    a resume raised TypeError at its first save. The pointer stays, its loss unknown."""
    run = _copy(made_run, tmp_path)
    d = json.loads((run / rf.BEST).read_text())
    (run / rf.BEST).write_text(json.dumps({**d, "val_loss": float(val) if val == "nan" else val}))
    ptr = rf.read_pointer(run, rf.BEST)
    assert ptr is not None and ptr["step"] == d["step"] and ptr["val_loss"] is None
    info = next(r for r in list_runs(run.parent) if r.path == run)
    assert info.best_val_loss is None
    rc, err = _resume(run, capsys, "--eval-every", "1")
    assert rc == 0 and "Traceback" not in err, err


def test_a_data_manifest_naming_no_files_is_refused_before_any_read(made_run, tmp_path, capsys):
    """An empty checksum map skipped every checksum and the regular-file check with them: a
    FIFO put among the data files hung `eval RUN` in np.load."""
    run = _copy(made_run, tmp_path)
    m = json.loads((run / rf.DATA_MANIFEST).read_text())
    (run / rf.DATA_MANIFEST).write_text(json.dumps({**m, "sha256": {}}))
    val = next(run / n for n in rf.DATA_FILES.values() if "val" in n)
    val.unlink()
    os.mkfifo(val)

    with _no_hang("eval on the FIFO"):  # a read of the FIFO blocks: fail, do not hang CI
        assert main(["eval", str(run)]) != 0
    err = capsys.readouterr().err
    assert "checksums do not name the run's data files" in err and "Traceback" not in err


@pytest.mark.parametrize("es, words", [({"patience": "3"}, "early_stopping.patience = '3'"),
                                       ([3], "early_stopping must be"),
                                       ({"target_loss": float("inf")}, "target_loss = inf")])
def test_a_hand_edited_run_spec_is_one_line_wherever_it_is_read(made_run, tmp_path, capsys,
                                                               es, words):
    """read_run_spec trusted run.json: the window's Continue raised out of QSpinBox.setValue and
    `train --resume --patience 2` printed a traceback."""
    from engine.errors import CheckpointError
    from engine.run import read_run_spec

    run = _copy(made_run, tmp_path)
    d = json.loads((run / rf.RUN_JSON).read_text())
    d["spec"]["early_stopping"] = es
    (run / rf.RUN_JSON).write_text(json.dumps(d))
    with pytest.raises(CheckpointError, match="run.json"):
        read_run_spec(run)
    rc, err = _resume(run, capsys, "--patience", "2")
    assert rc != 0 and words in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_eval_of_a_snapshot_reads_that_snapshot_only(made_run, tmp_path, capsys):
    """`eval RUN/snapshots/step-2` loaded the latest weights too (twice the memory), and a
    damaged latest snapshot gave warnings about a snapshot not asked for."""
    run = _copy(made_run, tmp_path)
    latest = rf.read_pointer(run)["snapshot"]
    (run / rf.SNAPSHOTS / latest / "model.safetensors").write_bytes(b"damaged")
    assert main(["eval", str(run / rf.SNAPSHOTS / "step-2")]) == 0
    err = capsys.readouterr()
    assert "at step 2" in err.out + err.err and latest not in err.err, err


def test_the_rows_a_crash_lost_are_not_shown_as_the_runs_history(made_run, tmp_path):
    """A window showed steps 1-28 of a killed run it said continues from step 16: the rows after
    the latest snapshot are work a resume trains again. Kept while a process trains the run."""
    from engine.run import resume

    run = _copy(made_run, tmp_path)
    latest = rf.read_pointer(run)["step"]
    for step in range(latest + 1, latest + 4):  # logged by a process killed before its save
        rf.append_metric(run, {"kind": "step", "step": step, "epoch": 0, "loss": 1.0})
    assert max(r["step"] for r in rf.read_metrics(run)) == latest + 3
    assert max(r["step"] for r in rf.read_kept_metrics(run)) == latest
    assert len(rf.read_kept_metrics(run)) == len(rf.read_metrics(run)) - 3
    with resume(run) as r:  # held: a live run's rows are all its own
        rf.append_metric(run, {"kind": "step", "step": latest + 1, "epoch": 0, "loss": 1.0})
        out = subprocess.run([sys.executable, "-c", "import sys; from engine import runformat as rf; "
                      "print(max(x['step'] for x in rf.read_kept_metrics(sys.argv[1])))",
                      str(run)], capture_output=True, text=True, cwd=ROOT, check=True).stdout
        assert int(out) == latest + 1 and r.step == latest


class _Hung(BaseException):
    """Raised by ``_no_hang``'s alarm: no ``except OSError`` / ``except Exception`` of the code
    under test swallows it (a TimeoutError, an OSError, was, and the next read hung again)."""


@contextlib.contextmanager
def _no_hang(what: str, seconds: int = 30):
    """Fail instead of hanging CI when ``what`` blocks, e.g. on a FIFO."""
    def hung(signum, frame):  # noqa: ANN001
        raise _Hung(f"{what} blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fifo_in_place_of(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def test_a_fifo_in_place_of_the_token_ids_hangs_neither_the_window_nor_an_export(made_run,
                                                                                  tmp_path):
    """data/ids.npy replaced by a FIFO: the window's Open (its bits/byte axis, read on the GUI
    thread) and `export` (the card's corpus line) waited in np.load's open() forever."""
    from engine.export.card import corpus_summary

    run = _copy(made_run, tmp_path)
    assert rf.read_tokens_per_byte(run) is not None and "tokens" in corpus_summary(run)
    _fifo_in_place_of(run / rf.IDS)
    with _no_hang("reading the token ids"):
        assert rf.read_tokens_per_byte(run) is None
        assert corpus_summary(run) == ""
        assert main(["export", "--merged", str(run), str(tmp_path / "out")]) == 0  # (its card
    assert (tmp_path / "out" / "model.safetensors").is_file()  # has no corpus line, that's all)


def test_a_fifo_in_place_of_the_samples_file_does_not_hang_training(made_run, tmp_path, capsys):
    """samples.jsonl replaced by a FIFO: the torn-line check opened it with a plain open()
    before the guarded append, and `train --resume` hung after its first sample."""
    from engine.samples import SAMPLES, append_sample, read_samples

    run = _copy(made_run, tmp_path)
    (run / SAMPLES).touch()
    _fifo_in_place_of(run / SAMPLES)
    with _no_hang("the samples file"):
        with pytest.raises(MambaStudioError, match="not a link or pipe"):
            append_sample(run, {"text": "x", "step": 1, "epoch": 0})
        assert read_samples(run) == []
        rc = main(["train", "--resume", str(run), "--max-steps", "6", "--sample-tokens", "8",
                   "--no-tensorboard"])
    err = capsys.readouterr().err
    assert rc == 2 and "samples.jsonl" in err and "Traceback" not in err, err


def test_a_fifo_among_a_snapshots_files_is_passed_over_not_waited_on(made_run, tmp_path, capsys):
    """A snapshot file its manifest names, replaced by a FIFO: it is refused before anything
    waits on it (the regular-file check, and the hash's own non-blocking open behind it), and
    `eval` uses the older snapshot."""
    run = _copy(made_run, tmp_path)
    _fifo_in_place_of(run / rf.SNAPSHOTS / "step-4" / ckpt.SINGLE)  # (eval reads the model's
    with _no_hang("eval"):  # files alone: a FIFO as its optimizer state is never opened by it)
        assert main(["eval", str(run)]) == 0
        with pytest.raises(CheckpointError, match="FIFO"):
            ckpt.sha256_file(run / rf.SNAPSHOTS / "step-4" / ckpt.SINGLE)
    err = capsys.readouterr().err
    assert "is a FIFO (named pipe)" in err and "using step-2 instead" in err, err


@pytest.mark.parametrize("left_out", [rf.SNAP_STATE, "config.json", "tokenizer_config.json"])
def test_a_snapshot_manifest_that_leaves_out_a_file_it_holds_is_refused(made_run, tmp_path,
                                                                         left_out):
    """A manifest naming only model.safetensors and trainer.json got the snapshot's optimizer
    state, config and tokenizer read unverified."""
    snap = _copy(made_run, tmp_path) / rf.SNAPSHOTS / "step-4"
    assert (snap / left_out).is_file()
    files = json.loads((snap / rf.SNAP_MANIFEST).read_text())
    rf.verify_snapshot(snap)
    del files[left_out]
    (snap / rf.SNAP_MANIFEST).write_text(json.dumps(files))
    with pytest.raises(CheckpointError, match=rf.SNAP_MANIFEST):
        rf.verify_snapshot(snap)


def test_a_data_manifest_with_a_wrong_byte_count_reads_as_unknown(made_run, tmp_path):
    """A hand-edited data manifest ("bytes": "abc") raised ValueError out of the window's Open
    (after run.json had passed its checks)."""
    run = _copy(made_run, tmp_path)
    m = json.loads((run / rf.DATA_MANIFEST).read_text())
    assert m.pop("heldout_tokens_per_byte") > 0  # (a run made before it was recorded: the
    (run / rf.DATA_MANIFEST).write_text(json.dumps(m))  # scale comes from the corpus's bytes)
    assert len(m["sources"]) == 2 and rf.read_tokens_per_byte(run) is not None
    for bad in ("abc", None, True, [1], 1.5, -3):  # unknown, not the others' sum: the bits/byte
        sources = [{**m["sources"][0], "bytes": bad}, *m["sources"][1:]]  # axis read ~2x
        (run / rf.DATA_MANIFEST).write_text(json.dumps({**m, "sources": sources}))
        assert rf.read_tokens_per_byte(run) is None, bad
    (run / rf.DATA_MANIFEST).write_text(json.dumps({**m, "sources": "abc"}))
    assert rf.read_tokens_per_byte(run) is None


def test_delete_run_keeps_a_users_files_and_says_which(made_run, tmp_path):
    """The Runs tab's Delete removed the whole folder, a user's notes in it too (what --force
    never deletes); it is refused, naming them, and the run stays whole."""
    from engine.run import open_run
    from engine.runformat import delete_run, why_not_delete

    run = _copy(made_run, tmp_path)
    (run / "notes.md").write_text("mine")
    (run / rf.SNAPSHOTS / "keep.txt").write_text("mine too")
    why = why_not_delete(run)
    assert why is not None and "notes.md" in why and "snapshots/keep.txt" in why
    with pytest.raises(CheckpointError, match="notes.md"):
        delete_run(run)
    assert (run / "notes.md").read_text() == "mine" and open_run(run).step == 4
    (run / "notes.md").unlink()
    (run / rf.SNAPSHOTS / "keep.txt").unlink()
    (run / ".latest.json.00cb6e9ccd23.tmp").write_text("{")  # a save cut short by a kill
    from engine.samples import append_sample

    append_sample(run, {"text": "a sample", "step": 4, "epoch": 0})  # a run's own file
    assert why_not_delete(run) is None
    delete_run(run)
    assert not run.exists()


def test_force_over_a_run_leaves_no_temp_file_of_the_old_one(made_run, tmp_path):
    """`train --force` into a run a kill had cut short kept its `.latest.json.<hex>.tmp`; and a
    run with samples (every CLI run has them) was refused as holding a user's samples.jsonl."""
    from engine.samples import SAMPLES, append_sample

    run = _copy(made_run, tmp_path)
    stale = run / ".latest.json.00cb6e9ccd23.tmp"
    stale.write_text("{")
    append_sample(run, {"text": "old", "step": 4, "epoch": 0})
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    start(spec, [two_file_corpus(tmp_path)], out=run, force=True).close()
    assert not stale.exists() and rf.read_pointer(run)["step"] == 0
    assert not (run / SAMPLES).exists()  # the old run's samples went with it


def test_delete_run_is_refused_while_another_process_trains_it(made_run, tmp_path):
    import fcntl

    from engine.runformat import delete_run, why_not_delete

    run = _copy(made_run, tmp_path)
    fd = os.open(run / rf.LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # what a training process holds
    try:
        assert "training in another process" in str(why_not_delete(run))
        with pytest.raises(CheckpointError, match="training in another process"):
            delete_run(run)
    finally:
        os.close(fd)
    assert rf.read_pointer(run)["step"] == 4 and (run / rf.RUN_JSON).is_file()


def test_a_delete_that_fails_half_way_leaves_a_run_that_is_still_listed(made_run, tmp_path,
                                                                        monkeypatch):
    """run.json goes last: a delete stopped by a file it may not remove left a folder the Runs
    list no longer showed (nor could delete again)."""
    import shutil

    from engine.runformat import delete_run

    run = _copy(made_run, tmp_path)

    def refuse(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with pytest.raises(PermissionError):
        delete_run(run)
    assert [r.path for r in list_runs(run.parent)] == [run]
    monkeypatch.undo()
    delete_run(run)
    assert list_runs(run.parent) == []


def test_init_from_a_run_whose_latest_snapshot_is_corrupt_says_which_it_used(made_run,
                                                                             tmp_path, capsys):
    """`train --init RUN` with RUN's newest snapshot damaged started from an older one (even
    the untrained step 0) without a word, where generate, eval and export say so."""
    run = _copy(made_run, tmp_path)
    weights = run / rf.SNAPSHOTS / "step-4" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1
    weights.write_bytes(bytes(data))
    corpus = two_file_corpus(tmp_path)
    assert main(["train", str(corpus), "--init", str(run), "--max-steps", "1", "--seq-len", "32",
                 "--batch", "2", "--sample-tokens", "0", "--no-tensorboard",
                 "--out", str(tmp_path / "from")]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "step-4" in err and "using step-2 instead" in err, err


def test_a_file_written_into_a_run_while_it_is_being_deleted_keeps_it(made_run, tmp_path,
                                                                      monkeypatch):
    """A user's file that appears between the check and the lock: refused under the lock,
    named, the run whole (not "training in another process": the lock is our own)."""
    from engine.runformat import delete_run

    run = _copy(made_run, tmp_path)
    real = rf.RunLock.acquire

    def acquire(self):  # noqa: ANN001
        held = real(self)
        (run / "late.md").write_text("mine")
        return held

    monkeypatch.setattr(rf.RunLock, "acquire", acquire)
    with pytest.raises(CheckpointError) as info:
        delete_run(run)
    assert "late.md" in str(info.value) and "another process" not in str(info.value)
    assert (run / rf.RUN_JSON).is_file() and rf.read_pointer(run)["step"] == 4
    assert not rf.RunLock(run).held_elsewhere()  # the lock went with the refusal



def test_delete_run_removes_run_json_last_and_holds_the_lock_throughout(made_run, tmp_path,
                                                                        monkeypatch):
    """run.json first, a delete that failed half-way left a folder the Runs list no longer
    showed; without the lock, a resume could start in a half-deleted run."""
    import shutil

    run = _copy(made_run, tmp_path)
    order: list[str] = []
    real_rmtree, real_unlink = shutil.rmtree, Path.unlink

    def rmtree(path, *a, **k):  # noqa: ANN001, ANN002, ANN003
        assert rf.RunLock(run).held_elsewhere(), "deleting without the run's lock"
        order.append(Path(path).name)
        return real_rmtree(path, *a, **k)

    def unlink(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        if self.parent == run:
            order.append(self.name)
        return real_unlink(self, *a, **k)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(Path, "unlink", unlink)
    rf.delete_run(run)
    assert not run.exists()
    assert order.index(rf.RUN_JSON) == len(order) - 2 and order[-1] == rf.LOCK, order
    assert {rf.SNAPSHOTS, rf.DATA} <= set(order)


def test_delete_run_of_a_link_to_a_run_deletes_nothing(made_run, tmp_path):
    """Through a link, the run it points to was emptied."""
    from engine.runformat import delete_run

    run = _copy(made_run, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(run)
    with pytest.raises(CheckpointError, match="not a run folder"):
        delete_run(link)
    assert rf.read_pointer(run)["step"] == 4 and link.is_symlink()


def test_delete_names_at_most_three_files_of_yours(made_run, tmp_path):
    from engine.runformat import why_not_delete

    run = _copy(made_run, tmp_path)
    for i in range(5):
        (run / f"mine{i}.md").write_text("x")
    why = why_not_delete(run)
    assert why is not None and "mine0.md, mine1.md, mine2.md and 2 more" in why, why


def test_a_file_of_yours_in_a_snapshots_folder_written_during_a_delete_is_kept(
        made_run, tmp_path, monkeypatch):
    from engine.runformat import delete_run

    run = _copy(made_run, tmp_path)
    real = rf.RunLock.acquire

    def acquire(self):  # noqa: ANN001
        held = real(self)
        (run / rf.SNAPSHOTS / "x.txt").write_text("mine")
        return held

    monkeypatch.setattr(rf.RunLock, "acquire", acquire)
    with pytest.raises(CheckpointError, match="snapshots/x.txt"):
        delete_run(run)
    assert (run / rf.SNAPSHOTS / "x.txt").read_text() == "mine"
    assert rf.read_pointer(run)["step"] == 4


def test_file_checks_name_what_is_wrong(made_run, tmp_path):
    """A manifest naming no files verified nothing; a missing file had no advice; a device or
    socket in a hashed file's place was "not a regular file"."""
    snap = _copy(made_run, tmp_path) / rf.SNAPSHOTS / "step-4"
    with pytest.raises(CheckpointError, match="lists no files"):
        ckpt.verify_hashes(snap, {})
    (snap / rf.SNAP_STATE).unlink()
    with pytest.raises(CheckpointError, match=f"missing .*; {rf.ANOTHER_SNAPSHOT}"):
        rf.verify_snapshot(snap)
    with pytest.raises(CheckpointError, match="is a device"):
        ckpt.sha256_file(Path("/dev/zero"))


def test_a_fifo_in_place_of_the_held_out_spans_does_not_hang_an_export(made_run, tmp_path):
    from engine.export.card import corpus_summary

    run = _copy(made_run, tmp_path)
    _fifo_in_place_of(run / rf.DATA_FILES["val_spans"])
    with _no_hang("reading the held-out spans"):
        assert corpus_summary(run) == ""
        assert main(["export", "--merged", str(run), str(tmp_path / "out")]) == 0


def test_a_scalar_token_file_reads_as_unknown_not_a_traceback(made_run, tmp_path):
    from engine.export.card import corpus_summary

    run = _copy(made_run, tmp_path)
    np.save(run / rf.IDS, np.int32(5))
    assert rf.read_tokens_per_byte(run) is None and corpus_summary(run) == ""


def test_a_spans_file_whose_header_asks_for_terabytes_leaves_the_card_line_out(made_run,
                                                                               tmp_path):
    """A damaged .npy header ("shape": (2 ** 40, 2)) raised MemoryError from the card's corpus
    line, outside its handling: the export failed over a line of its model card."""
    from engine.export.card import corpus_summary

    run = _copy(made_run, tmp_path)
    path = run / rf.DATA_FILES["train_spans"]
    spans = np.load(path)
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(
            spans.dtype), "fortran_order": False, "shape": (2 ** 40, 2)})
        f.write(spans.tobytes())
    with pytest.raises(MemoryError), open(path, "rb") as f:  # (what the card met)
        np.load(f)
    assert corpus_summary(run) == ""


def test_a_fifo_at_a_gguf_export_name_is_not_waited_on(tmp_path):
    from engine.export.source import is_gguf

    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)
    with _no_hang("looking at a GGUF name"):
        assert not is_gguf(fifo)
    real = tmp_path / "r.gguf"
    real.write_bytes(b"GGUF" + bytes(8))
    assert is_gguf(real) and not is_gguf(tmp_path / "none.gguf")


def test_save_documents_never_follows_a_link_at_a_temp_name(tmp_path):
    """Its fixed temp name `.ids.npy.tmp` was opened through a link (and two writers shared it)."""
    from engine.docstore import IDS, load_documents, save_documents
    from engine.documents import Documents

    outside = tmp_path / "outside"
    outside.write_text("keep")
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / f".{IDS}.tmp").symlink_to(outside)
    save_documents(folder, Documents(np.array([256, 97, 256], np.uint16), np.array([0, 2])))
    assert outside.read_text() == "keep"
    assert list(load_documents(folder).ids) == [256, 97, 256]


def test_a_run_from_a_run_records_the_snapshot_it_started_from(made_run, tmp_path, capsys):
    """run.json named `--init RUN` alone, and RUN's latest snapshot moves on as RUN trains: the
    new run records (and says) the snapshot its weights came from, keeps it through a resume,
    and the Runs list has it; a run from a plain model folder records that folder."""
    run = _copy(made_run, tmp_path)
    corpus = two_file_corpus(tmp_path)
    args = ["--max-steps", "1", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0",
            "--no-tensorboard"]
    new = tmp_path / "from"
    assert main(["train", str(corpus), "--init", str(run), *args, "--out", str(new)]) == 0
    snap = (run / rf.SNAPSHOTS / "step-4").resolve()
    assert f"starting from {snap} (step 4)" in capsys.readouterr().err
    assert rf.read_run_json(new)["init_from"] == {"path": str(snap), "step": 4}
    assert main(["train", "--resume", str(new), "--max-steps", "2", "--sample-tokens", "0"]) == 0
    d = rf.read_run_json(new)
    assert d["init_from"] == {"path": str(snap), "step": 4} and d["spec"]["train"]["max_steps"] == 2
    listed = next(r for r in rf.list_runs(tmp_path) if r.path == new)
    assert listed.source == f"from {snap} (step 4)"
    plain = tmp_path / "plain"
    assert main(["export", "--merged", str(run), str(plain)]) == 0
    other = tmp_path / "from-plain"
    assert main(["train", str(corpus), "--init", str(plain), *args, "--out", str(other)]) == 0
    assert rf.read_run_json(other)["init_from"] == {"path": str(plain.resolve()), "step": None}
    assert "init_from" not in rf.read_run_json(run)  # a new model's run has none


def test_delete_keeping_a_users_files_removes_the_run_and_leaves_them(made_run, tmp_path):
    """Delete a run and keep the files of the user's that are in its folder: the run's own
    entries go (it is no run any more), theirs stay untouched; a folder with none is removed."""
    from engine.runformat import delete_run, others_in_run, why_not_delete

    run = _copy(made_run, tmp_path)
    (run / "notes.md").write_text("mine")
    (run / "plots").mkdir()
    (run / "plots" / "a.png").write_bytes(b"png")
    assert others_in_run(run) == ["notes.md", "plots"]
    assert why_not_delete(run) is not None and why_not_delete(run, keep_others=True) is None
    delete_run(run, keep_others=True)
    assert sorted(p.name for p in run.iterdir()) == ["notes.md", "plots"]
    assert (run / "notes.md").read_text() == "mine" and (run / "plots" / "a.png").is_file()
    assert not rf.is_run(run)
    (tmp_path / "2").mkdir()
    plain = _copy(made_run, tmp_path / "2")
    delete_run(plain, keep_others=True)
    assert not plain.exists()


def test_delete_keeping_a_users_files_keeps_those_inside_the_runs_own_folders(made_run,
                                                                             tmp_path):
    """Notes put in snapshots/, in a snapshot and in data/ were listed as kept, then deleted
    with those folders; a snapshots/ that is a link was removed though the question kept it."""
    from engine.runformat import delete_run, others_in_run

    run = _copy(made_run, tmp_path)
    (run / rf.SNAPSHOTS / "notes.txt").write_text("a")
    (run / rf.SNAPSHOTS / "step-2" / "mine.txt").write_text("b")
    (run / rf.DATA / "more.txt").write_text("c")
    assert others_in_run(run) == ["data/more.txt", "snapshots/notes.txt",
                                  "snapshots/step-2/mine.txt"]
    delete_run(run, keep_others=True)
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) == [
        "data/more.txt", "snapshots/notes.txt", "snapshots/step-2/mine.txt"]
    assert not rf.is_run(run)
    (tmp_path / "2").mkdir()
    linked = _copy(made_run, tmp_path / "2")
    target = tmp_path / "elsewhere"
    (linked / rf.SNAPSHOTS).rename(target)
    (linked / rf.SNAPSHOTS).symlink_to(target)
    assert others_in_run(linked) == ["snapshots"]
    delete_run(linked, keep_others=True)
    assert (linked / rf.SNAPSHOTS).is_symlink() and sorted(p.name for p in target.iterdir()) \
        == ["step-0", "step-2", "step-4"]


def test_a_missing_latest_snapshot_is_said_where_the_run_will_go_on_from(made_run, tmp_path):
    """latest.json names step-4, whose folder was deleted by hand: the Runs list, the model a
    Continue's estimate reads, the kept metrics and samples all follow the snapshot a resume
    takes (step 2), not the pointer (the window said "from step 4", its estimate failed with
    "step-4: no such file or folder" for a whole run, the Gallery kept step 4's lost sample)."""
    from engine import read_model_config
    from engine.samples import append_sample

    run = _copy(made_run, tmp_path)
    assert rf.expected_snapshot(run) == (run / rf.SNAPSHOTS / "step-4", 4, "")
    for step, prompt, text in ((2, "a", "old two"), (4, "a", "four"), (2, "a", "new two"),
                               (2, "b", "b two")):
        append_sample(run, {"step": step, "epoch": 0, "prompt": prompt, "text": text})
    assert [r["text"] for r in rf.read_kept_samples(run)] == ["four", "new two", "b two"]
    shutil.rmtree(run / rf.SNAPSHOTS / "step-4")
    assert rf.expected_snapshot(run) == (run / rf.SNAPSHOTS / "step-2", 2, "step-4 is missing")
    assert rf.find_snapshot(run)[0].name == "step-2"  # what a load takes
    assert [r.steps for r in rf.list_runs(run.parent)] == [2]
    assert read_model_config(run).vocab_size > 0
    assert max(r["step"] for r in rf.read_kept_metrics(run)) == 2
    assert [r["text"] for r in rf.read_kept_samples(run)] == ["new two", "b two"]
    (run / rf.SNAPSHOTS / "step-2" / rf.SNAP_MANIFEST).unlink()  # half-written: passed over
    assert rf.expected_snapshot(run) == (run / rf.SNAPSHOTS / "step-0", 0, "step-4 is missing")
    for p in (run / rf.SNAPSHOTS).iterdir():
        shutil.rmtree(p)
    assert rf.expected_snapshot(run) is None
    with pytest.raises(CheckpointError, match="no snapshot to read the model from"):
        read_model_config(run)


def test_a_linked_snapshots_folder_is_refused_not_written_or_pruned_through(made_run, tmp_path,
                                                                           capsys):
    """snapshots/ moved elsewhere and linked back: a resume wrote through the link, then pruning
    and the stale-file clean-up deleted a user's step-1/ and .tmp files in its target."""
    run = _copy(made_run, tmp_path)
    target = tmp_path / "elsewhere"
    (run / rf.SNAPSHOTS).rename(target)
    (run / rf.SNAPSHOTS).symlink_to(target)
    (target / "step-1").mkdir()
    (target / "step-1" / "important.txt").write_text("user data")
    (target / ".tmp-mine").mkdir()
    (target / ".notes.tmp").write_text("y")
    before = sorted(p.name for p in target.iterdir())
    rc, err = _resume(run, capsys, "--autosave-steps", "1")
    assert rc != 0 and err.count("\n") == 1 and "Traceback" not in err
    assert f"{run / rf.SNAPSHOTS}: a link where the run keeps its snapshots folder" in err
    assert sorted(p.name for p in target.iterdir()) == before
    assert (target / "step-1" / "important.txt").read_text() == "user data"
    with pytest.raises(CheckpointError, match="a link where the run keeps"):
        rf.write_snapshot(run, 9, lambda p: {}, {}, {}, None)  # a link put there mid-run
    rf.prune(run, keep=1)
    assert rf.clean_stale(run) == [] and sorted(p.name for p in target.iterdir()) == before
    (run / rf.SNAPSHOTS).unlink()
    (run / rf.SNAPSHOTS).write_text("x")  # a file in its place: said as a file, not a link
    with pytest.raises(CheckpointError, match="a file where the run keeps its snapshots folder; "
                       ".*move the file away"):
        rf.check_own_folders(run)


def test_a_resume_past_a_damaged_snapshot_keeps_it(made_run, tmp_path, capsys):
    """step-4's trainer.json damaged: the resume goes on from step 2 (as before) but step-4,
    whose weights are intact, was later pruned or saved over: it is kept as step-4.damaged,
    said, never pruned, and Delete takes it with the run (it is not a file of the user's)."""
    from engine.runformat import delete_run, others_in_run

    run = _copy(made_run, tmp_path)
    (run / rf.SNAPSHOTS / "step-4" / rf.SNAP_TRAINER).write_text("{")
    weights = (run / rf.SNAPSHOTS / "step-4" / "model.safetensors").read_bytes()
    rc, err = _resume(run, capsys, "--autosave-steps", "1")
    assert rc == 0, err
    assert "using step-2 instead" in err
    assert f"kept step-4.damaged in {run / rf.SNAPSHOTS} as it was: its weights may be intact " \
           "(the run goes on from step-2)" in err
    kept = run / rf.SNAPSHOTS / "step-4.damaged"
    assert (kept / "model.safetensors").read_bytes() == weights
    assert rf.read_pointer(run)["step"] == 6 and (run / rf.SNAPSHOTS / "step-4").is_dir()
    assert others_in_run(run) == []
    delete_run(run)
    assert not run.exists()


def test_a_resume_refuses_to_go_back_past_a_snapshot_it_may_not_read(made_run, tmp_path, capsys,
                                                                   monkeypatch):
    """step-4's weights unreadable (a chmod, another user's files): the resume set step-4 aside
    as damaged and trained again from step 2, losing every step since, for a permission a chmod
    fixes. It refuses, names the file and changes nothing; readers (generate) still fall back.
    (The permission is faked: the tests may run as root.)"""
    import os

    from engine import checkpoint as ckpt

    run = _copy(made_run, tmp_path)
    locked = run / rf.SNAPSHOTS / "step-4" / "model.safetensors"
    real_access, real_sha = os.access, ckpt.sha256_file
    monkeypatch.setattr(os, "access", lambda p, m: Path(p) != locked and real_access(p, m))

    def sha(path, *what):  # noqa: ANN001, ANN002, ANN202
        if Path(path) == locked:
            raise CheckpointError(f"{path}: cannot read (Permission denied)")
        return real_sha(path, *what)

    monkeypatch.setattr(ckpt, "sha256_file", sha)
    rc, err = _resume(run, capsys)
    assert rc == 2
    assert f"error: {locked}: cannot read it (permission denied); fix its permissions, then " \
           "resume" in err
    assert (run / rf.SNAPSHOTS / "step-4").is_dir() and rf.read_pointer(run)["step"] == 4
    assert not (run / rf.SNAPSHOTS / "step-4.damaged").exists()
    assert main(["generate", str(run), "--prompt", "a", "--max-new-tokens", "2"]) == 0
    assert "using step-2 instead" in capsys.readouterr().err


def test_a_resume_drops_the_samples_of_the_lost_work_and_names_a_damaged_latest(made_run,
                                                                              tmp_path, capsys):
    """samples.jsonl kept the samples of steps a crash lost: once the resumed run passed them
    they came back in the Gallery (metrics.csv was cut back, the samples were not). And a
    latest snapshot whose trainer.json is damaged was said as the step Continue goes on from."""
    from engine.samples import append_sample, read_samples

    run = _copy(made_run, tmp_path)
    for step in (2, 4, 5):  # step 5: after the last snapshot, lost
        append_sample(run, {"step": step, "epoch": 0, "prompt": "a", "text": f"s{step}"})
    with (run / "samples.jsonl").open("a") as f:
        f.write("not a record\n")
    assert main(["train", "--resume", str(run), "--max-steps", "6", "--sample-tokens", "0",
                 "--no-tensorboard"]) == 0
    capsys.readouterr()
    assert [r["text"] for r in read_samples(run)] == ["s2", "s4"]
    assert "not a record" in (run / "samples.jsonl").read_text()
    assert not list(run.glob(".*.tmp"))
    (run / rf.SNAPSHOTS / "step-6" / rf.SNAP_TRAINER).write_text('{"cursor": {"epoch": 2, x')
    assert rf.expected_snapshot(run) == (run / rf.SNAPSHOTS / "step-4", 4, "step-6 is damaged")
    assert [r.steps for r in rf.list_runs(run.parent)] == [4]


def test_odd_sample_lines_and_a_set_aside_best_snapshot(made_run, tmp_path, capsys):
    """A review of the change: a sample whose prompt was a list made the Gallery (and the
    window's launch) raise TypeError; a line nested 100,000 deep made a resume's truncation
    raise RecursionError; a refused resume renamed step-4 without a word; best.json kept naming
    step-4 once it was set aside (the run's own new step-4 would be exported as the old best);
    a folder named step-4-damaged counted as the run's own; a snapshot whose weights file was
    deleted was said as the one Continue takes."""
    from engine.run import resume
    from engine.runformat import others_in_run
    from engine.samples import append_sample

    run = _copy(made_run, tmp_path)
    append_sample(run, {"step": 2, "epoch": 0, "prompt": ["a"], "text": "x"})
    with (run / "samples.jsonl").open("a") as f:
        f.write("[" * 100_000 + "\n")
    assert rf.read_kept_samples(run) == []
    (run / rf.SNAPSHOTS / "step-4" / rf.SNAP_TRAINER).write_text("{")
    (run / rf.BEST).write_text(json.dumps({"snapshot": "step-4", "step": 4, "val_loss": 0.5}))
    with pytest.raises(ValueError, match="is already at step 2, and max steps 1 would end it"):
        resume(run, max_steps=1)  # refused: nothing renamed
    assert (run / rf.SNAPSHOTS / "step-4").is_dir()
    with resume(run) as r:
        assert (run / rf.SNAPSHOTS / "step-4.damaged").is_dir()
        assert any("kept step-4.damaged" in w for w in r.warnings)
    assert not (run / rf.BEST).exists() or rf.read_pointer(run, rf.BEST)["snapshot"] != "step-4"
    assert not list(run.glob(".*.tmp"))
    assert rf.expected_snapshot(run) == (run / rf.SNAPSHOTS / "step-2", 2,
                                         "step-4 is damaged (kept as step-4.damaged)")
    (run / rf.SNAPSHOTS / "step-4-damaged").mkdir()
    assert others_in_run(run) == ["snapshots/step-4-damaged"]
    (run / rf.SNAPSHOTS / "step-2" / "model.safetensors").unlink()
    assert rf.expected_snapshot(run)[:2] == (run / rf.SNAPSHOTS / "step-0", 0)


def test_a_resume_into_a_read_only_folder_or_a_full_disk_says_so_before_training(
        made_run, tmp_path, capsys, monkeypatch):
    """A read-only run folder failed later naming a hidden temporary file
    (".samples.jsonl.<hex>.tmp: Permission denied"), a full disk as "could not write
    metrics.csv: No space left on device", neither with a fix. Both are said before step 1,
    and nothing is changed. (Faked: the tests may run as root.)"""
    run = _copy(made_run, tmp_path)
    (run / ".samples.jsonl.b7da5760727d.tmp").write_text("")  # a killed run's temp file
    before = sorted(p.name for p in run.iterdir())
    monkeypatch.setattr(shutil, "disk_usage", lambda p: type("U", (), {"free": 1 << 10})())
    assert main(["train", "--resume", str(run), "--sample-tokens", "0"]) == 0  # finished: it
    assert "is already at step 4 of 4" in capsys.readouterr().err  # says so, as before
    (run / ".samples.jsonl.b7da5760727d.tmp").write_text("")
    rc, err = _resume(run, capsys)
    assert rc == 2 and f"error: {run}: only 0.0 MiB free, the next snapshot needs " in err, err
    assert "free some space, then resume (nothing was lost" in err
    monkeypatch.undo()
    (run / ".samples.jsonl.b7da5760727d.tmp").write_text("")
    real_write, real_unlink = Path.write_bytes, Path.unlink

    def read_only(self, data):  # noqa: ANN001, ANN202
        if self.parent == run:
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, data)

    def no_unlink(self, missing_ok=False):  # noqa: ANN001, ANN202
        if self.parent == run:
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "write_bytes", read_only)
    monkeypatch.setattr(Path, "unlink", no_unlink)  # (the temp file's removal failed first)
    rc, err = _resume(run, capsys)
    assert rc == 2 and f"error: {run}: cannot write into the run folder (Permission denied); " \
                       "make it writable (chmod u+w)" in err, err
    assert sorted(p.name for p in run.iterdir()) == before and rf.read_pointer(run)["step"] == 4


def test_a_folder_with_only_a_data_subfolder_is_not_a_killed_run(tmp_path):
    """A folder holding only data/ (no lock) is no run killed while it was prepared."""
    from engine.checkpoint import read_config
    from engine.errors import CheckpointError

    (tmp_path / "x" / "data").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"no config.json \(not a model folder\)"):
        read_config(tmp_path / "x")


def test_clean_stale_leaves_a_users_tmp_files(tmp_path):
    """The stale-file cleanup deletes the temporary files of our writes, not a user's
    notes.tmp or .notes.tmp (any hidden *.tmp was deleted)."""
    from engine import runformat as rf

    (tmp_path / "notes.tmp").write_text("mine")
    (tmp_path / ".metrics.csv.0123456789ab.tmp").write_text("x")
    assert rf.clean_stale(tmp_path) == [".metrics.csv.0123456789ab.tmp"]
    assert (tmp_path / "notes.tmp").exists()
    (tmp_path / ".notes.tmp").write_text("mine, hidden")  # not ".<name>.<12 hex>.tmp" either
    assert rf.clean_stale(tmp_path) == [] and (tmp_path / ".notes.tmp").exists()



def test_only_exact_temp_names_are_ours_to_delete(tmp_path):
    """A temporary file is exactly ".<name>.<12 lowercase hex>.tmp" or the writability probe's
    ".write-test-<pid>.tmp". The cleanup tests tried two user names only, so a match of the
    name's start (".x.0123456789ab.tmp.keep" deleted), any run of hex (".notes.cafe.tmp"), any
    letters (".m.ABCDEF012345.tmp"), any probe suffix (".write-test-mine.tmp") passed, and so
    did never cleaning a killed probe's file."""
    from engine import runformat as rf

    assert rf.is_temp(".metrics.csv.0123456789ab.tmp") and rf.is_temp(".write-test-123.tmp")
    for name in (".notes.cafe.tmp", ".v.1.tmp", ".m.ABCDEF012345.tmp", ".write-test-mine.tmp",
                 ".write-test-.tmp", ".x.0123456789ab.tmp.keep", "x.0123456789ab.tmp"):
        assert not rf.is_temp(name), name
    mine = (".x.0123456789ab.tmp.keep", ".notes.cafe.tmp", ".write-test-mine.tmp",
            ".m.ABCDEF012345.tmp")
    for name in (*mine, ".write-test-123.tmp", ".config.json.abcdef012345.tmp"):
        (tmp_path / name).write_text("x")
    assert sorted(rf.clean_stale(tmp_path)) == [".config.json.abcdef012345.tmp",
                                                ".write-test-123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(mine)


def test_a_resume_with_only_a_measurement_to_do_checks_the_disk_first(made_run, tmp_path,
                                                                      capsys, monkeypatch):
    """A run stopped during its final evaluation has no step left to train, only its held-out
    loss to measure (and save): a full disk is said before that, with the fix, as for a run
    with steps to train."""
    from engine.run import resume
    from tests.helpers import train_stopped_while_scoring

    run = _copy(made_run, tmp_path)
    with resume(run, max_steps=5) as r:
        assert train_stopped_while_scoring(r).unscored
    monkeypatch.setattr(shutil, "disk_usage", lambda p: type("U", (), {"free": 1 << 10})())
    rc = main(["train", "--resume", str(run), "--sample-tokens", "0", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert rc == 2 and f"error: {run}: only 0.0 MiB free, the next snapshot needs " in err, err
    assert "could not write" not in err


def test_a_collapsed_models_waking_gradient_is_no_divergence():
    """lr 1: the gradient norm ~1e-12 for 20 steps (the model collapsed), then 1.09: the guard
    called it "1090579304178x its median", rolled back three times and ended the run
    "diverged", keeping the collapsed weights. After a collapse a spike is above the first
    step's norm; a real blow-up still is one, and a healthy run's rule is unchanged."""
    from types import SimpleNamespace

    from engine.guard import DivergenceGuard

    trainer = SimpleNamespace(lm=SimpleNamespace(config=SimpleNamespace(vocab_size=256)),
                              trainable=SimpleNamespace(tensors={}))
    guard = DivergenceGuard()
    guard._norms = [10.0] + [1e-12] * 25
    guard._losses = [5.5] * 26
    guard._first_loss = 5.6
    assert guard.why(trainer, SimpleNamespace(step=1, loss=5.5, grad_norm=1.09)) is None
    why = guard.why(trainer, SimpleNamespace(step=1, loss=5.5, grad_norm=5000.0))
    assert why == ("the gradient norm 5e+03 is 500x the first step's (its median is ~0: the "
                   "model had collapsed)")
    guard._norms = [10.0] + [0.5] * 25  # a healthy run: 100x its median is the rule, as before
    assert guard.why(trainer, SimpleNamespace(step=1, loss=5.5, grad_norm=49.0)) is None
    assert guard.why(trainer, SimpleNamespace(step=1, loss=5.5, grad_norm=51.0)) is not None


def test_a_collapsed_model_waking_up_over_several_steps_trains_on():
    """The collapse rule above held for the first step after the gradient woke only: the
    median of the last 20 norms was still ~0 at the next one, a norm of 1.0 was
    "1000000000000x its median", and the run ended "diverged" a step later. Steps through
    ``after`` (the guard's own history) until the median is back."""
    from types import SimpleNamespace

    from engine.guard import DivergenceGuard

    trainer = SimpleNamespace(lm=SimpleNamespace(config=SimpleNamespace(vocab_size=256)),
                              trainable=SimpleNamespace(tensors={}))
    guard = DivergenceGuard()
    guard.restore = lambda _t: None  # type: ignore[method-assign]
    norms = [10.0] + [1e-12] * 25 + [1.09, 1.0, 0.9, 1.1, 0.8] * 6
    for step, g in enumerate(norms, 1):
        guard._weights = {}
        assert guard.after(trainer, SimpleNamespace(loss=5.5, grad_norm=g, step=step)) is False, (
            step, g)
    assert guard.rollbacks == 0
    assert guard.why(trainer, SimpleNamespace(step=1, loss=5.5, grad_norm=5000.0)) is not None


def test_the_collapse_rule_is_relative_to_the_first_steps_norm():
    """Mutations of the collapse rule that no test saw: the spike bound raised to 100x the
    first step's norm, the "collapsed" test made absolute (1e-12), and the first norm taken as
    the largest one."""
    from types import SimpleNamespace

    from engine.guard import DivergenceGuard

    trainer = SimpleNamespace(lm=SimpleNamespace(config=SimpleNamespace(vocab_size=256)),
                              trainable=SimpleNamespace(tensors={}))
    guard = DivergenceGuard()
    guard._losses = [5.5] * 27
    report = SimpleNamespace(step=1, loss=5.5, grad_norm=0.0)
    guard._norms = [10.0] + [1e-12] * 25
    report.grad_norm = 50.0  # 5x the first step's: a spike out of a collapse
    assert guard.why(trainer, report) is not None
    guard._norms = [10.0] + [1e-8] * 25  # a millionth of the first and less: collapsed
    report.grad_norm = 1.09
    assert guard.why(trainer, report) is None
    guard._norms = [1.0, 50.0] + [1e-12] * 25  # the first step's norm, not the largest
    report.grad_norm = 20.0
    assert guard.why(trainer, report) is not None


def test_the_guards_rollback_point_reuses_its_arrays_and_restores_exactly(tmp_path):
    """The rollback point is kept in the same arrays every step (new ones each step held two
    copies of the moments at once); a rollback after several keeps restores the last one."""
    from engine.errors import StepVoid
    from engine.guard import DivergenceGuard

    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, max_steps=3))
    with start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "r") as run:
        tr = run.trainer
        tr.run()
        guard = DivergenceGuard()
        guard.check_loss(tr, 3.0)
        first = dict(guard._weights)
        moments = guard._state["optimizer"]["tensors"]
        arrays = {k: id(v) for k, v in moments.items()}
        tr.optimizer.step(tr.trainable.tensors, {n: np.full_like(a, 0.01) for n, a in
                                                 tr.trainable.tensors.items()}, 1e-3)
        tr.cursor.step += 1
        guard.check_loss(tr, 3.0)  # the next step's: kept again, in the same arrays
        assert all(guard._weights[n] is a for n, a in first.items())
        assert {k: id(v) for k, v in guard._state["optimizer"]["tensors"].items()} == arrays
        kept_w = {n: a.copy() for n, a in tr.trainable.tensors.items()}
        kept_m = {n: a.copy() for n, a in tr.optimizer.m.items()}
        tr.optimizer.step(tr.trainable.tensors, {n: np.full_like(a, 1e6) for n, a in
                                                 tr.trainable.tensors.items()}, 100.0)
        tr.cursor.step += 1
        guard._losses, guard._norms = [3.0] * 6, [1.0] * 6  # (the kept step's own came last)
        with pytest.raises(StepVoid):
            guard.check_loss(tr, float("nan"))
        assert tr.cursor.step == 4 and len(guard._losses) == len(guard._norms) == 5
        for n, a in kept_w.items():
            np.testing.assert_array_equal(tr.trainable.tensors[n], a)
        for n, a in kept_m.items():
            np.testing.assert_array_equal(tr.optimizer.m[n], a)


def test_a_full_disk_during_a_resumes_first_measurement_keeps_the_run_resumable(tmp_path,
                                                                                 monkeypatch):
    """A resume first measures the held-out loss a stop cut short; a failed write there (its
    metrics row on a full disk) must go through training's own handling: a one-line error that
    names the folder and the fix, and status.json not left at "running" (which lists the run as
    training in another process, and the window would not Continue it)."""
    from engine.run import resume
    from tests.helpers import train_stopped_while_scoring

    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, max_steps=6, eval_every=2))
    with start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "run") as run:
        train_stopped_while_scoring(run)
        assert run.interrupted_eval
    real_append = rf.append_metric

    def full_disk(folder, row):  # noqa: ANN001, ANN202
        if row["kind"] == "eval":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / rf.METRICS))
        return real_append(folder, row)

    monkeypatch.setattr(rf, "append_metric", full_disk)
    with resume(tmp_path / "run") as run, pytest.raises(TrainingError) as info:
        run.train()
    msg = str(info.value)
    assert os.strerror(errno.ENOSPC) in msg and "then resume" in msg and str(tmp_path / "run") in msg
    assert "\n" not in msg, msg
    assert rf.read_status(tmp_path / "run")["state"] == "stopped"
    monkeypatch.setattr(rf, "append_metric", real_append)
    with resume(tmp_path / "run") as run:  # the disk freed: it measures, then trains on
        assert run.interrupted_eval
        assert run.train().state == "finished"
    assert [r["step"] for r in rf.read_metrics(tmp_path / "run") if r["kind"] == "eval"] == [2, 4, 6]


def test_a_full_disk_before_a_resume_says_free_space_and_leaves_no_probe(tmp_path, monkeypatch):
    """A resume on a full disk said "make it writable (chmod u+w)", and the probe file its
    write failed on stayed in the run folder."""
    real = Path.write_bytes

    def full(self, data):  # noqa: ANN001, ANN202
        if self.name.startswith(".write-test-"):
            real(self, b"")  # created, then the write fails, as on a full disk
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    for check in (rf.check_resume_dir, rf.check_out_dir):
        with pytest.raises(CheckpointError) as exc:
            check(tmp_path, 0)
        assert "free" in str(exc.value) and "chmod" not in str(exc.value), exc.value
        assert not list(tmp_path.glob(".write-test-*")), list(tmp_path.iterdir())


def test_a_lock_just_taken_is_not_blamed_on_the_pid_it_held_before(tmp_path):
    """Two resumes started at once: the one refused read the lock file before the winner wrote
    its pid, and told the user to "kill -TERM" the pid of an earlier run, long ended."""
    import fcntl

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = int(gone.stdout)  # a pid that ended
    (tmp_path / rf.LOCK).write_text(f"{stale}\n")
    fd = os.open(tmp_path / rf.LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, its pid not written yet
        with pytest.raises(CheckpointError) as exc:
            rf.RunLock(tmp_path).acquire()
        assert "another process" in str(exc.value) and str(stale) not in str(exc.value)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # the winner's own pid, written
        with pytest.raises(CheckpointError) as exc:
            rf.RunLock(tmp_path).acquire()
        assert f"kill -TERM {os.getpid()}" in str(exc.value)
    finally:
        os.close(fd)


def test_a_lock_taken_just_before_waits_for_the_winners_pid(tmp_path):
    """The refused one waits (up to 0.5 s) for the holder to write its pid, then names it: a
    winner that writes its pid 0.1 s after taking the lock is named, with the kill advice."""
    import fcntl
    import threading

    (tmp_path / rf.LOCK).write_text("")
    fd = os.open(tmp_path / rf.LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, its pid written a moment later
        writer = threading.Timer(0.1, lambda: os.pwrite(fd, f"{os.getpid()}\n".encode(), 0))
        writer.start()
        with pytest.raises(CheckpointError) as exc:
            rf.RunLock(tmp_path).acquire()
        writer.join()
        assert f"in use by process {os.getpid()}" in str(exc.value), exc.value
        assert f"kill -TERM {os.getpid()}" in str(exc.value), exc.value
    finally:
        os.close(fd)


def test_a_lock_held_by_another_users_process_names_it(monkeypatch):
    """A pid the kill probe may not signal (another user's process) is alive: it is named."""
    from engine.runformat import run_lock

    def denied(pid: int, sig: int) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(run_lock.os, "kill", denied)
    assert run_lock._alive(4242)


def test_a_failed_rewrite_of_the_samples_names_the_file(tmp_path, monkeypatch):
    """Under a file-size limit a resume said only "error: File too large; fix that, then
    resume": the samples' rewrite failed on a write that names no file."""
    import json as _json

    path = tmp_path / "samples.jsonl"
    path.write_text("".join(_json.dumps({"step": s, "text": "x"}) + "\n" for s in (1, 9)))
    before = path.read_bytes()

    def too_large(fd):  # noqa: ANN001, ANN202
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))  # (no file name, as os.write's)

    monkeypatch.setattr(os, "fsync", too_large)
    with pytest.raises(CheckpointError, match=f"could not write {path}: File too large"):
        rf.truncate_samples(tmp_path, 5)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "samples.jsonl"]


@pytest.mark.parametrize("damage", ["state", "trainer"])
def test_intact_weights_load_when_only_the_training_state_is_damaged(made_run, tmp_path, capsys,
                                                                     damage):
    """Every snapshot's state.safetensors cut to 100 bytes (or trainer.json replaced) locked
    out weights whose own checksums were fine: generate, eval and --init said "none of its 3
    snapshots is complete; start a new run". A load of the weights needs only the model's
    files; a resume, which needs the state, still refuses."""
    from engine.lm import MambaLM
    from engine.run import load_model, resume

    run = _copy(made_run, tmp_path)
    for _, snap in rf.snapshots(run):
        if damage == "state":
            with open(snap / rf.SNAP_STATE, "r+b") as f:
                f.truncate(100)
        else:
            (snap / rf.SNAP_TRAINER).write_text('"nope"')
    latest = run / rf.SNAPSHOTS / "step-4"
    lm = load_model(run)
    want = MambaLM.load(latest)
    assert all(np.array_equal(lm.params[k], want.params[k]) for k in want.params)
    load_model(latest)  # one snapshot given by name too
    assert main(["generate", str(run), "--max-new-tokens", "4", "--no-stream"]) == 0
    assert main(["eval", str(run)]) == 0 and main(["eval", str(latest)]) == 0  # held-out split
    assert "at step 4)" in capsys.readouterr().out
    out = tmp_path / "merged"
    assert main(["export", "--merged", str(run), str(out)]) == 0  # the exports too
    assert "its training state is damaged" in capsys.readouterr().err
    exported = MambaLM.load(out)
    assert all(np.array_equal(exported.params[k], want.params[k]) for k in want.params)
    assert main(["export", "--gguf", str(run), str(tmp_path / "m.gguf")]) == 0
    with pytest.raises(CheckpointError, match="none of its 3 snapshots is complete") as exc:
        resume(run, max_steps=6)
    assert str(exc.value).endswith(f"its weights (step-4) still load: generate, or start a new "
                                   f"run with --init {run} to keep them"), exc.value
    (latest / ckpt.SINGLE).write_bytes(b"x" * 64)  # damaged weights are still refused
    with pytest.raises(CheckpointError, match="do not match|is complete"):
        load_model(latest)


def test_a_run_whose_data_folder_was_deleted_says_how_to_go_on(made_run, tmp_path, capsys):
    """``train --resume`` of a run without data/ said "no such data manifest" and no fix."""
    run = _copy(made_run, tmp_path)
    shutil.rmtree(run / rf.DATA)
    assert main(["train", "--resume", str(run), "--max-steps", "6"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: {run / rf.DATA_MANIFEST}: no such data manifest; every snapshot "
                   "shares these token ids, so the run cannot go on: start a new run on the "
                   f"corpus with --init {run / rf.SNAPSHOTS}/step-N to keep its weights"), err


def test_a_run_killed_before_its_first_save_is_listed_and_can_be_deleted(tmp_path):
    """A kill -9 during a new run's first save left its folder (the lock, data/ with the
    corpus's ids, a hidden snapshots/.tmp-step-0-*) without run.json: the Runs list skipped
    it, so a window user could neither see nor delete it. It is listed as broken, saying what
    happened, and Delete removes it; one being prepared by a live process is not listed."""
    from engine.runformat.listing import UNFINISHED
    from engine.runformat.removal import delete_run

    root = tmp_path / "runs"
    killed = root / "killed"
    (killed / rf.DATA).mkdir(parents=True)
    (killed / rf.DATA / "ids.npy").write_bytes(b"x" * 100)
    (killed / rf.SNAPSHOTS / ".tmp-step-0-123").mkdir(parents=True)
    (killed / rf.LOCK).write_text("")
    runs = list_runs(root)
    assert [(r.name, r.status, r.error) for r in runs] == [("killed", "broken", UNFINISHED)]
    delete_run(killed)
    assert not killed.exists()
    busy = root / "busy"
    busy.mkdir()
    lock = rf.RunLock(busy).acquire()
    try:
        assert list_runs(root) == []
    finally:
        lock.release()


def test_the_snapshot_check_knows_every_field_of_the_trainers_cursor():
    """A snapshot's trainer.json is checked field by field before a resume trusts it; a cursor
    field added to the trainer and not to the check would refuse every new snapshot (or a
    removed one pass unchecked)."""
    from dataclasses import fields

    from engine.trainer import _Cursor

    assert {f.name for f in fields(_Cursor)} == {*trainer_state.CURSOR_COUNTS,
                                                 *trainer_state.CURSOR_SUMS}


def test_a_trainers_state_comes_back_whole_from_a_snapshots_packing():
    """``trainer_state.pack`` / ``unpack``, the one writer and reader of a snapshot's training
    state: every cursor field, the schedule, the epochs, the optimizer's and a LoRA's tensors."""
    from engine import Trainer
    from engine.lm import MambaLM
    from engine.lora import LoRAConfig
    from engine.tokenizer import ByteTokenizer
    from tests.helpers import tiny_config

    ids = np.arange(400) % 50
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    tr = Trainer(lm, ids, ids[:0], TrainConfig(seq_len=16, batch_size=2, max_steps=3,
                                               lora=LoRAConfig(("in_proj",))))
    tr.train_step(np.arange(2))
    state = tr.state_dict()
    tensors, meta = trainer_state.pack(state, early_bad=2, eval_stopped=True)
    assert (meta["early_bad"], meta["eval_stopped"]) == (2, True)
    back = trainer_state.unpack(meta, tensors)
    assert {k: back[k] for k in ("cursor", "lr_scale", "epochs")} == {
        k: state[k] for k in ("cursor", "lr_scale", "epochs")}
    assert back["optimizer"]["t"] == state["optimizer"]["t"] > 0
    for part in ("optimizer", "trainable"):
        got, want = back[part]["tensors"], state[part]["tensors"]
        assert got.keys() == want.keys() and len(want) > 0, part
        assert all(np.array_equal(got[k], want[k]) for k in want), part
    assert "eval_stopped" not in trainer_state.pack(state, 0, eval_stopped=False)[1]


def test_snapshots_unreadable_for_their_mode_say_chmod_not_start_again(made_run, tmp_path,
                                                                       monkeypatch):
    """Weights a file mode kept from this user: "none of its 3 snapshots is complete (...
    Permission denied); start a new run", advice that led to deleting a run a chmod mends."""
    def denied(p, **_kw):  # noqa: ANN001, ANN202
        raise CheckpointError(f"{p / ckpt.SINGLE}: cannot read (Permission denied)")

    monkeypatch.setattr(snapshot_dirs, "verify_snapshot", denied)
    monkeypatch.setattr(snapshot_dirs, "_pointer_file", lambda *a: None)  # latest.json unread
    # too: its reason comes first, and the advice looked at the first reason only
    with pytest.raises(CheckpointError) as exc:
        snapshot_dirs.find_snapshot(made_run)
    assert str(exc.value).endswith(f"make its files readable (chmod -R u+rX {made_run}) and try "
                                   "again"), exc.value


@pytest.mark.parametrize("text", ["garbage", '{"snapshot": "../../x/snapshots/step-6", "step": 6}'])
def test_a_damaged_latest_pointer_is_said_when_the_newest_snapshot_is_taken(made_run, tmp_path,
                                                                             capsys, text):
    """latest.json replaced by garbage, or naming a snapshot outside the run, was passed over
    for the newest snapshot without a word."""
    run = _copy(made_run, tmp_path)
    (run / rf.LATEST).write_text(text)
    assert main(["generate", str(run), "--max-new-tokens", "2", "--no-stream"]) == 0
    err = capsys.readouterr().err
    assert (f"warning: {run / rf.LATEST}: unreadable, damaged or naming no snapshot of this "
            "run; using step-4 instead") in err, err


def test_the_window_says_the_weights_still_load_in_its_own_words(made_run, tmp_path):
    """The resume's refusal of a run whose training state is damaged says the weights still
    load with the CLI's "generate" and "--init": the window says where it does those."""
    from app.words import in_window_terms

    run = _copy(made_run, tmp_path)
    for _, snap in rf.snapshots(run):
        (snap / rf.SNAP_TRAINER).write_text('"nope"')
    (run / rf.LATEST).write_text("garbage")  # first among the reasons, now
    with pytest.raises(CheckpointError) as exc:
        snapshot_dirs.find_snapshot(run)
    said = in_window_terms(str(exc.value))
    assert said.endswith(f"its weights (step-4) still load: open {run} with File > Open model… "
                         "(the Playground generates from it) and Start a new run to keep them"), said


def test_a_run_killed_between_its_first_save_and_its_first_step_is_listed_interrupted(tmp_path):
    """A kill -9 just after a new run's step-0 save, before training wrote status.json, left it
    listed "stopped" (as if stopped by hand) where a kill later says "interrupted"."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=2))
    start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "runs" / "r").close()  # as killed
    assert not (tmp_path / "runs" / "r" / rf.STATUS).exists()
    assert [r.status for r in list_runs(tmp_path / "runs")] == ["interrupted"]
