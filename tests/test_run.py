"""Run folders: crash-safe snapshots, resume, locking, divergence, signals, checksums."""

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine import checkpoint as ckpt
from engine import runformat as rf
from engine.cli import main
from engine.control import TrainControl
from engine.errors import CheckpointError, TrainingError
from engine.lora import LoRAConfig
from engine.run import (
    RunSpec,
    list_runs,
    load_model,
    open_run,
    read_metrics,
    read_run_spec,
    resume,
    start,
)
from engine.trainer import TrainConfig
from tests.helpers import (
    train_stopped_while_scoring,
    two_file_corpus,
    write_legacy_checkpoint,
)

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]


def _corpus(tmp_path: Path) -> Path:
    return two_file_corpus(tmp_path, 30)


def _spec(**train) -> RunSpec:
    kw = {"batch_size": 2, "seq_len": 32, "epochs": 1, "max_steps": 6, **train}
    return RunSpec(preset="tiny", train=TrainConfig(**kw), autosave_minutes=0)


def _losses(folder: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(folder) if r["kind"] == "step"]


def _cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "engine", "train", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stderr=subprocess.PIPE, text=True)


def test_resume_without_corpus_and_with_new_max_steps_equals_one_run(tmp_path):
    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=8), [corpus], out=tmp_path / "full") as run:
        run.train()
    with start(_spec(max_steps=4), [corpus], out=tmp_path / "part") as run:
        assert run.train().state == "finished"
    for f in corpus.iterdir():  # the run folder keeps its token ids: no corpus needed
        f.unlink()
    with resume(tmp_path / "part", max_steps=8) as run:
        assert run.step == 4 and run.trainer.total_steps == 8
        res = run.train()
    assert res.step == 8 and res.snapshot.name == "step-8"
    assert _losses(tmp_path / "part") == _losses(tmp_path / "full")
    a, b = load_model(tmp_path / "part"), load_model(tmp_path / "full")
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    ids = rf.read_data(tmp_path / "part").ids
    assert ids.dtype == np.uint16 and len(ids) > 2000  # compact dtype (byte tokenizer: 257 ids)


def test_full_disk_during_a_save_keeps_the_previous_snapshot(tmp_path, monkeypatch):
    run = start(_spec(), [_corpus(tmp_path)], out=tmp_path / "r")
    with run:
        run.train()  # finished: step-6 published
        real = ckpt.atomic_write_tensors

        def enospc(path, tensors, *more):  # noqa: ANN001
            if Path(path).name == rf.SNAP_STATE:
                raise CheckpointError(f"could not write {path}: {os.strerror(errno.ENOSPC)}")
            real(path, tensors, *more)

        monkeypatch.setattr(ckpt, "atomic_write_tensors", enospc)
        run.trainer.cursor.step = 7  # pretend one more step ran
        with pytest.raises(CheckpointError, match="No space left"):
            run.save()
        monkeypatch.setattr(ckpt, "atomic_write_tensors", real)
    snaps = tmp_path / "r" / rf.SNAPSHOTS
    assert not [p for p in snaps.iterdir() if p.name.startswith(rf.TMP_PREFIX)]
    assert rf.read_pointer(tmp_path / "r")["step"] == 6
    with resume(tmp_path / "r") as again:
        assert again.step == 6


def test_two_writers_refused_with_the_holders_pid(tmp_path):
    corpus = _corpus(tmp_path)
    with start(_spec(), [corpus], out=tmp_path / "r"):
        with pytest.raises(CheckpointError, match=f"in use by process {os.getpid()}.*kill -TERM "
                           f"{os.getpid()}"):  # (-INT: ignored by a job started with &)
            resume(tmp_path / "r")
        assert main(["train", "--resume", str(tmp_path / "r"), *TINY[-2:]]) == 2
    with resume(tmp_path / "r") as run:  # released on close (a dead holder's flock goes too)
        assert run.step == 0


def test_out_holding_a_run_needs_resume_or_force(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    out = tmp_path / "r"
    assert main(["train", str(corpus), *TINY, "--max-steps", "2", "--out", str(out)]) == 0
    assert main(["train", str(corpus), *TINY, "--max-steps", "2", "--out", str(out)]) == 2
    assert "holds a run; continue it with --resume" in capsys.readouterr().err
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--force", "--out", str(out)]) == 0
    assert rf.read_pointer(out)["step"] == 1


def test_force_never_deletes_files_a_run_did_not_write(tmp_path, capsys):
    """``--out ~/Documents --force`` once deleted everything in the folder: a folder holding
    anything a run does not write is refused, with or without --force, and nothing is deleted;
    the message offers no --resume (there is no run to continue)."""
    corpus = _corpus(tmp_path)
    out = tmp_path / "docs"
    out.mkdir()
    (out / "thesis.txt").write_text("years of work")
    (out / "photos").mkdir()
    for extra in ([], ["--force"]):
        assert main(["train", str(corpus), *TINY, "--max-steps", "1", *extra, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not a run's (photos, thesis.txt)" in err[0], err
        assert "--resume" not in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["photos", "thesis.txt"]
    # a run folder the user added a file to: --force keeps refusing, the run and the file stay
    run = tmp_path / "r"
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--out", str(run)]) == 0
    (run / "notes.md").write_text("mine")
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--force", "--out", str(run)]) == 2
    assert (run / "notes.md").read_text() == "mine" and rf.read_pointer(run)["step"] == 1


@pytest.mark.parametrize("inside", ["data/my_notes.txt", "snapshots/x.txt", "tb/notes.txt",
                                    "snapshots/step-3/notes.txt", "data/ids.npy/x.txt"])
def test_force_keeps_user_files_under_names_a_run_uses(tmp_path, capsys, inside):
    """A walk-through's ``train proj/data --out proj --force`` deleted the corpus in proj/data:
    a file under data/, snapshots/ or tb/ that a run does not write is the user's."""
    corpus = _corpus(tmp_path)
    out = tmp_path / "proj"
    (out / inside).parent.mkdir(parents=True)
    (out / inside).write_text("mine")
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--force", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not a run's" in err and inside.split("/")[0] in err
    assert (out / inside).read_text() == "mine"


def test_a_corpus_inside_the_run_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "proj"
    (out / "data").mkdir(parents=True)
    text = (out / "data" / "ids.npy")  # even under a name a run writes
    text.write_text((_corpus(tmp_path) / "a.txt").read_text())
    assert main(["train", str(text), *TINY, "--max-steps", "1", "--force", "--out", str(out)]) == 2
    assert "a corpus file inside the run folder" in capsys.readouterr().err
    assert text.exists()


def test_force_replaces_a_run_that_died_before_run_json(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    out = tmp_path / "r"
    (out / rf.DATA).mkdir(parents=True)  # what a start killed while encoding leaves
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--out", str(out)]) == 2
    assert "unfinished run" in capsys.readouterr().err
    assert main(["train", str(corpus), *TINY, "--max-steps", "1", "--force", "--out", str(out)]) == 0
    assert rf.read_pointer(out)["step"] == 1


def test_new_runs_get_unique_folders(tmp_path):
    corpus = _corpus(tmp_path)
    for _ in range(2):
        with start(_spec(max_steps=1), [corpus], root=tmp_path / "runs") as run:
            run.train()
    runs = list_runs(tmp_path / "runs")
    assert len(runs) == 2 and len({r.path for r in runs}) == 2
    assert all(r.status == "finished" and r.steps == 1 and r.preset == "tiny" for r in runs)
    assert runs[0].best_val_loss is not None and math.isfinite(runs[0].best_val_loss)
    tpb = rf.read_tokens_per_byte(runs[0].path)  # bits per byte, which compares tokenizers
    assert tpb and runs[0].bits_per_byte == runs[0].best_val_loss * tpb / math.log(2)
    # a run of its own sizes, and one from another's weights, recorded the default preset and
    # were listed as "small"
    from dataclasses import replace

    base = str(runs[0].path)
    for kind, label in (({"model": {"d_model": 32, "n_layer": 1}}, "custom"),
                        ({"init": base}, "opened weights"),  # LoRA and WSLA runs read alike:
                        ({"init": base, "train": replace(_spec().train, wsla=True)},
                         "opened weights, WSLA"),
                        ({"init": base, "train": replace(_spec().train, lora=LoRAConfig(rank=4))},
                         "opened weights, LoRA r4"),
                        ({"train": replace(_spec().train, lora=LoRAConfig(rank=2))},  # a new
                         "tiny, LoRA r2"),  # model: it was just "tiny"
                        ({"train": replace(_spec().train, wsla=True)}, "tiny, WSLA")):
        start(replace(_spec(), **kind), [corpus], out=tmp_path / "runs" / label).close()
        assert next(r for r in list_runs(tmp_path / "runs") if r.path.name == label).preset == label


def test_a_run_being_opened_lists_as_running_and_status_follows_saves(tmp_path):
    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=4, epochs=9), [corpus], root=tmp_path / "runs") as run:
        # the app lists the runs right after opening one, before its first step
        assert [r.status for r in list_runs(tmp_path / "runs")] == ["running"]
        seen = []
        run.train(on_save=lambda _: seen.append(rf.read_status(run.folder)))
    assert seen and seen[-1]["step"] == 4 and seen[-1]["state"] == "running"  # was step 0
    assert rf.read_status(run.folder)["state"] == "finished"
    assert [r.status for r in list_runs(tmp_path / "runs")] == ["finished"]


def test_a_paused_run_says_paused_in_its_status_and_listing(tmp_path):
    corpus = _corpus(tmp_path)
    control = TrainControl()
    seen: list[tuple[str, str]] = []

    def on_step(r) -> None:  # noqa: ANN001
        if r.step == 2:  # pause here; the loop parks before step 3
            control.pause()
            threading.Thread(target=look_then_resume, daemon=True).start()

    def look_then_resume() -> None:
        try:
            _wait_for(lambda: rf.read_status(run.folder).get("state") == "paused", timeout=20)
            seen.append((rf.read_status(run.folder)["state"], list_runs(tmp_path / "runs")[0].status))
        finally:
            control.resume()

    with start(_spec(max_steps=4), [corpus], root=tmp_path / "runs") as run:
        run.train(on_step=on_step, control=control)
    assert seen == [("paused", "paused")]
    assert rf.read_status(run.folder)["state"] == "finished"
    # a paused run whose process died lists as interrupted, like a running one
    rf.write_status(run.folder, "paused", step=2)
    assert list_runs(tmp_path / "runs")[0].status == "interrupted"


def test_unwritable_out_is_refused_before_step_1(tmp_path, capsys, monkeypatch):
    corpus = _corpus(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", str(corpus), *TINY, "--out", str(blocker / "run")]) == 2
    err = capsys.readouterr().err
    assert "cannot create the run folder" in err and "model:" not in err
    # a folder this user may not write in (root ignores permission bits, and the chmod 555 case
    # was skipped under root: the refusal is made by the write probe, which is refused here)
    real = Path.write_bytes

    def refuse(self, data):  # noqa: ANN001
        if self.name.startswith(".write-test-"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", refuse)
    assert main(["train", str(corpus), *TINY, "--out", str(tmp_path / "ro" / "run")]) == 2
    err = capsys.readouterr().err
    assert "not writable (Permission denied); choose another --out" in err and "model:" not in err


def test_non_finite_and_huge_learning_rates(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    for lr, out in (("nan", "a"), ("1e3", "b")):
        with pytest.raises(SystemExit) as exc:
            main(["train", str(corpus), *TINY, "--lr", lr, "--out", str(tmp_path / out)])
        assert exc.value.code == 2
    assert "out of range" in capsys.readouterr().err
    for lr in (float("nan"), float("inf"), 0.0, -1.0, 1e3):
        with pytest.raises(ValueError):
            _spec(lr=lr).check()
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_divergence_is_rolled_back_and_never_saved(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", str(_corpus(tmp_path)), *TINY, "--lr", "10", "--warmup", "0",
                 "--max-steps", "20", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("rolled back to step 0 and halved the learning rate") == 2
    assert "diverged 3 times" in err and "kept" in err and "step-0" in err
    assert [s for s, _ in rf.snapshots(out)] == [0]
    assert rf.read_status(out)["state"] == "diverged"
    load_model(out).check_finite()


def test_guard_rolls_back_a_nan_step_exactly(tmp_path):
    from engine.guard import DivergenceGuard

    run = start(_spec(max_steps=3), [_corpus(tmp_path)], out=tmp_path / "r")
    with run:
        tr = run.trainer
        tr.run()
        before = {k: v.copy() for k, v in run.lm.params.items()}
        m_before = {k: v.copy() for k, v in tr.optimizer.m.items()}
        guard = DivergenceGuard()
        guard.check_loss(tr, 3.0)  # step 4's loss, before its update: good, kept
        tr.optimizer.step(tr.trainable.tensors, {n: np.full_like(a, 1e6) for n, a in
                                                 tr.trainable.tensors.items()}, 100.0)
        tr.cursor.step += 1
        from engine.errors import StepVoid

        with pytest.raises(StepVoid):  # step 5's loss, at the weights step 4 left: NaN
            guard.check_loss(tr, float("nan"))
        assert tr.cursor.step == 3 and tr.lr_scale == 0.5
        for k in before:
            np.testing.assert_array_equal(run.lm.params[k], before[k])
        for k in m_before:
            np.testing.assert_array_equal(tr.optimizer.m[k], m_before[k])
        run.lm.params["backbone.norm_f.weight"][0] = np.nan
        with pytest.raises(TrainingError, match="not saving"):
            run.save()


def test_flipped_byte_is_refused_by_generate_and_eval(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    out = tmp_path / "r"
    with start(_spec(max_steps=2), [corpus], out=out) as run:
        snap = run.train().snapshot
    weights = snap / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01
    weights.write_bytes(bytes(data))
    assert main(["generate", str(snap), "--max-new-tokens", "2"]) == 2
    assert "do not match manifest.json" in capsys.readouterr().err
    assert main(["eval", str(snap), str(corpus), "--seq-len", "32"]) == 2
    # the run folder itself falls back to the newest snapshot that verifies
    assert load_model(out) is not None and open_run(out).step == 0


def test_stale_temp_folders_are_cleaned_and_format_version_checked(tmp_path):
    out = tmp_path / "r"
    with start(_spec(max_steps=1), [_corpus(tmp_path)], out=out) as run:
        run.train()
    stale = out / rf.SNAPSHOTS / f"{rf.TMP_PREFIX}step-9-12345"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (out / ".metrics.csv.0123456789ab.tmp").write_text("x")  # (create_temp's 12 hex)
    with resume(out):
        pass
    assert not stale.exists() and not (out / ".metrics.csv.0123456789ab.tmp").exists()
    d = json.loads((out / rf.RUN_JSON).read_text())
    (out / rf.RUN_JSON).write_text(json.dumps({**d, "version": rf.VERSION + 1}))
    with pytest.raises(CheckpointError, match="newer Mamba Studio"):
        open_run(out)


def test_a_resume_mid_epoch_keeps_the_epochs_sums_and_the_rate_scale(tmp_path):
    """Resumed inside an epoch, the epoch's mean training loss and grad norm equal an
    uninterrupted run's (the cursor's running sums are restored, not restarted), and a rate
    halved by a divergence rollback stays halved (lr_scale is restored)."""
    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=None, epochs=1), [corpus], out=tmp_path / "full") as run:
        run.train()
        per_epoch = run.trainer.steps_per_epoch
        whole = run.trainer.epochs[-1]
    assert per_epoch >= 4
    control = TrainControl()
    with start(_spec(max_steps=None, epochs=1), [corpus], out=tmp_path / "part") as run:
        run.train(control=control,  # stopped half way: the same schedule as the whole run
                  on_step=lambda r: control.stop() if r.step == per_epoch // 2 else None)
        assert run.step == per_epoch // 2
        run.trainer.lr_scale = 0.5  # as a rollback leaves it
        run.save()
    with resume(tmp_path / "part") as run:
        assert run.trainer.lr_scale == 0.5
        run.trainer.lr_scale = 1.0  # the rest as the uninterrupted run, for the epoch's sums
        run.train()
        again = run.trainer.epochs[-1]
    assert run.step == per_epoch
    assert again.train_loss == pytest.approx(whole.train_loss, rel=1e-12)
    assert again.grad_norm == pytest.approx(whole.grad_norm, rel=1e-12)


def test_keeps_the_last_three_and_the_best(tmp_path, monkeypatch):
    """Held-out losses best at step 3 and worse after: the folder keeps exactly steps 8-10 and
    step 3 (a prune keeping 4 recent, or not protecting the best, passed the old check)."""
    from dataclasses import replace as _replace

    from engine.trainer import Trainer

    real = Trainer.held_out

    def held_out(self, should_stop=None):  # noqa: ANN001
        got = real(self, should_stop)
        step = self.cursor.step
        return None if got is None else _replace(got, loss=1.0 if step == 3 else 2.0 + step)

    monkeypatch.setattr(Trainer, "held_out", held_out)
    out = tmp_path / "r"
    spec = _replace(_spec(max_steps=10, eval_every=1), autosave_steps=1)  # a save every step
    with start(spec, [_corpus(tmp_path)], out=out) as run:
        run.train()
    steps = [s for s, _ in rf.snapshots(out)]
    best = rf.read_pointer(out, rf.BEST)
    assert steps == [3, 8, 9, 10] and best["step"] == 3 and best["val_loss"] == 1.0


def test_old_trainer_state_folder_loads_but_does_not_resume(tmp_path, capsys):
    from engine import MambaLM, Trainer

    ids = np.frombuffer(b"the cat sat on the mat. " * 20, dtype=np.uint8).astype(np.int64)
    lm = MambaLM.create(__import__("engine").preset("tiny", 257))
    write_legacy_checkpoint(Trainer(lm, ids, ids[:0], TrainConfig(seq_len=16, batch_size=2, max_steps=1)),
                            tmp_path / "old")
    assert load_model(tmp_path / "old").n_params == lm.n_params
    assert main(["train", "--resume", str(tmp_path / "old")]) == 2
    assert "old single-folder checkpoint" in capsys.readouterr().err


def _wait_for(pred, timeout=120.0) -> None:  # noqa: ANN001
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.05)


def _steps_done(out: Path) -> int:
    return len([r for r in read_metrics(out) if r["kind"] == "step"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_saves_and_exits_0(tmp_path, sig):
    """SIGHUP (a closed terminal, a dropped SSH session) killed the run: exit 129, 21 steps
    since the last autosave lost, status.json left "running"."""
    out = tmp_path / "r"
    p = _cli(str(_corpus(tmp_path)), *TINY, "--max-steps", "100000", "--epochs", "1000",
             "--out", str(out))
    _wait_for(lambda: _steps_done(out) >= 3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    step = rf.read_pointer(out)["step"]
    name = signal.Signals(sig).name  # a pipe, not a terminal: the output goes on after SIGHUP
    assert name in err and f"saved {out / rf.SNAPSHOTS / f'step-{step}'}" in err
    assert step >= 3 and step == _steps_done(out)  # nothing trained was lost
    assert rf.read_status(out)["state"] == "stopped"
    assert open_run(out).step == step


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_new_run_prepares_leaves_nothing_and_says_so(tmp_path, sig):
    """SIGTERM while the data was being prepared killed the process silently (exit 143) and
    left a folder with data/ and a lock but no run.json, which --resume could not use."""
    out = tmp_path / "r"
    code = ("import os, signal, sys, time\n"
            "import engine.run as r\n"
            "real = r._encode\n"
            "def slow(*a, **k):\n"
            f"    os.kill(os.getpid(), {int(sig)}); time.sleep(5); return real(*a, **k)\n"
            "r._encode = slow\n"
            "from engine.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    p = subprocess.run([sys.executable, "-c", code, "train", str(_corpus(tmp_path)), *TINY,
                        "--max-steps", "2", "--out", str(out)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 128 + int(sig), p.stderr
    assert "Traceback" not in p.stderr
    if sig == signal.SIGTERM:
        assert p.stderr.strip().splitlines()[-1] == "interrupted (SIGTERM)", p.stderr
    assert not out.exists()  # nothing half-made


def _failed_run(tmp_path: Path) -> str:
    """The TrainingError's message of a 6-step run into ``tmp_path / "r"`` that a write fails."""
    with (start(_spec(max_steps=6), [_corpus(tmp_path)], out=tmp_path / "r") as run,
          pytest.raises(TrainingError) as info):
        run.train()
    return str(info.value)


def test_a_latest_pointer_that_fails_after_its_snapshot_is_published_loses_no_step(tmp_path,
                                                                                   monkeypatch):
    """latest.json failing on a full disk after snapshots/step-6 was published said "the steps
    after 0 could not be saved ... it goes on from step 0", while the resume goes on from 6."""
    from engine.runformat import snapshot_dirs

    real = snapshot_dirs.write_json

    def full(path, obj):  # noqa: ANN001, ANN202
        if path.name == rf.LATEST and obj.get("step") == 6:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, obj)

    monkeypatch.setattr(snapshot_dirs, "write_json", full)
    msg = _failed_run(tmp_path)
    assert msg.startswith(f"{tmp_path / 'r' / rf.LATEST}: No space left on device"), msg
    assert "training stopped at step 6 and the last snapshot is step 6: fix that, then " \
           f"resume {tmp_path / 'r'}" in msg, msg
    assert rf.read_pointer(tmp_path / "r")["step"] == 6  # what a resume takes
    assert rf.read_status(tmp_path / "r")["state"] == "stopped"


def test_a_full_disk_at_a_runs_first_status_write_says_the_run_exists_and_how_to_go_on(
        tmp_path, monkeypatch):
    """The first status.json write of a run (before its first step) failing on a full disk said
    "could not write status.json: No space left on device" alone: no fix, nor that the run,
    with its step-0 snapshot, exists (the same command again was refused: "holds a run")."""
    real = rf.write_status
    calls: list[str] = []

    def full(folder, state, **k):  # noqa: ANN001, ANN003, ANN202
        calls.append(state)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(folder / rf.STATUS))
        return real(folder, state, **k)

    monkeypatch.setattr(rf, "write_status", full)
    msg = _failed_run(tmp_path)
    assert msg.startswith(f"{tmp_path / 'r' / rf.STATUS}: No space left on device"), msg
    assert msg.endswith(f"training stopped at step 0 and the last snapshot is step 0: fix "
                        f"that, then resume {tmp_path / 'r'}"), msg


def test_a_failed_last_save_says_what_was_lost_and_how_to_go_on(tmp_path, monkeypatch):
    """The save at a run's end failing on a full disk said only "could not write
    snapshots/.tmp-step-37-PID/state.safetensors" and left status.json "running"."""
    real = rf.write_snapshot

    def full(folder, step, *a, **k):  # noqa: ANN001, ANN002, ANN003
        if step == 6:
            tmp = folder / rf.SNAPSHOTS / f"{rf.TMP_PREFIX}step-6-{os.getpid()}"
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "state.safetensors"))
        return real(folder, step, *a, **k)

    monkeypatch.setattr(rf, "write_snapshot", full)
    msg = _failed_run(tmp_path)
    assert "snapshots/step-6/state.safetensors: No space left on device" in msg, msg
    assert "training stopped at step 6 and the steps after 0 could not be saved" in msg
    assert f"resume {tmp_path / 'r'} (it goes on from step 0)" in msg
    status = rf.read_status(tmp_path / "r")  # its step is the saved one (it said 6, where
    assert (status["state"], status["step"]) == ("stopped", 0)  # latest.json said 0)
    assert rf.read_pointer(tmp_path / "r")["step"] == 0


def test_second_sigint_during_the_save_corrupts_nothing(tmp_path):
    out = tmp_path / "r"
    p = _cli(str(_corpus(tmp_path)), *TINY, "--max-steps", "100000", "--epochs", "1000",
             "--autosave-minutes", "0", "--out", str(out), env={rf.SLOW_SAVE_ENV: "0.5"})
    _wait_for(lambda: _steps_done(out) >= 2)
    p.send_signal(signal.SIGINT)
    snaps = out / rf.SNAPSHOTS
    _wait_for(lambda: any(x.name.startswith(rf.TMP_PREFIX) for x in snaps.iterdir()))
    p.send_signal(signal.SIGINT)  # lands inside the save
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "again: still saving" in err and "Traceback" not in err  # (steps were done)
    step = rf.read_pointer(out)["step"]
    assert step >= 2 and open_run(out).step == step
    with resume(out) as run:
        assert run.step == step


def test_a_signal_after_the_stop_and_save_is_ignored_not_fatal():
    """A second Ctrl-C just after the save (the handlers restored) killed the CLI by SIGINT:
    exit status 130 and nothing said (about 1 run in 6 of a double Ctrl-C)."""
    from engine import signals
    from engine.signals import STOP_SIGNALS, ignore_after_stop, stop_on_signals

    said: list[str] = []
    control = TrainControl()
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        for s in STOP_SIGNALS:  # as a terminal gives them (pytest in the background or under
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT  # nohup: ignored,
                          else signal.SIG_DFL)  # and an ignored signal stays ignored)
        with stop_on_signals(control, notify=said.append, lasting=True):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert control.stopped and "finishing the current step" in said[-1]
        os.kill(os.getpid(), signal.SIGINT)  # after the block: no KeyboardInterrupt
        time.sleep(0.05)
        assert "the run is saved; finishing" in said[-1]
        ignore_after_stop()  # as the process exits: a handler would be reset to the default
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in STOP_SIGNALS)
    finally:  # all of them: SIGTERM and SIGHUP ignored would outlive this test
        for s, h in before.items():
            signal.signal(s, h)
        signals._STOPPED[0] = False  # nor may a later in-process CLI exit ignore them
    with stop_on_signals(TrainControl(), notify=said.append, lasting=True):
        pass  # no signal came: the handlers before it come back
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_a_large_corpus_says_it_is_being_tokenized(tmp_path, monkeypatch):
    """A 200 MB corpus sat on "preparing" for over a minute with nothing said."""
    import engine.run as run_mod

    said: list[str] = []
    monkeypatch.setattr(run_mod, "BPE_MIN_BYTES", 100)  # "large" for this test
    with start(_spec(max_steps=1), [_corpus(tmp_path)], out=tmp_path / "r",
               progress=said.append):
        pass
    assert any(s.startswith("tokenizing 2,") and s.endswith("of text...") for s in said), said


def test_a_failed_metrics_write_keeps_the_steps_trained_since_the_last_save(tmp_path, monkeypatch):
    """A full disk while appending a metrics row ended the run without saving: the steps since
    the last autosave were lost although the snapshot may still fit."""
    real = rf.append_metric

    def full_at_step_5(folder, row):  # noqa: ANN001
        if row.get("step") == 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(folder, row)

    monkeypatch.setattr(rf, "append_metric", full_at_step_5)
    with (start(_spec(max_steps=8), [_corpus(tmp_path)], out=tmp_path / "r") as run,
          pytest.raises(TrainingError, match="No space left") as info):
        run.train()  # autosave_steps is far away: only step 0 was saved before
    assert "stopped at step 5" in str(info.value) and "last snapshot is step 5" in str(info.value)
    assert rf.read_pointer(tmp_path / "r")["step"] == 5
    assert rf.read_status(tmp_path / "r")["state"] == "stopped"
    with resume(tmp_path / "r") as again:
        assert again.step == 5


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_a_run_folder_moved_or_deleted_while_training_is_not_made_again(tmp_path, how):
    """The next status write made the vanished folder again, holding only status.json, and the
    error said "fix that, then resume <the old path>", which was then no run folder."""

    folder, moved = tmp_path / "r", tmp_path / "moved"

    def move_at_step_3(r):  # noqa: ANN001
        if r.step == 3:
            os.rename(folder, moved) if how == "moved" else shutil.rmtree(folder)

    with (start(_spec(max_steps=8), [_corpus(tmp_path)], out=folder) as run,
          pytest.raises(TrainingError) as info):
        run.train(on_step=move_at_step_3)
    msg = str(info.value)
    assert "the run folder was moved or deleted while training" in msg, msg
    assert "stopped at step 4" in msg and "resume it where it is now" in msg  # its metrics row
    assert not folder.exists()  # not made again
    if how == "moved":
        with resume(moved) as again:
            assert again.step == 0  # its last snapshot (step 0: autosave is far away)


@pytest.mark.parametrize("how", ["swapped", "relinked"])
def test_another_run_put_at_a_training_runs_path_is_never_written(tmp_path, how):
    """`mv A A-old && mv B A` (or a link re-pointed from A to B) while A trained: the trainer
    went on writing by path into B, saved its snapshots there, rewrote B's latest.json, best.json
    and metrics.csv, and pruned every snapshot of B's own, its best one too."""
    other, real = tmp_path / "other", tmp_path / "a-real"
    for out in (other, real):
        with start(replace(_spec(max_steps=2), autosave_steps=1), [_corpus(tmp_path)],
                   out=out) as run:
            run.train()
    before = {p.relative_to(other): p.read_bytes() for p in other.rglob("*") if p.is_file()
              and p.name != "lock"}
    folder = tmp_path / "a"  # the path it is resumed by: the folder, or a link to it
    os.symlink(real, folder) if how == "relinked" else os.rename(real, folder)

    def swap_at_step_3(r):  # noqa: ANN001
        if r.step == 3:
            if how == "swapped":
                os.rename(folder, tmp_path / "a-old")
                os.rename(other, folder)
            else:
                os.unlink(folder)
                os.symlink(other, folder)

    with resume(folder, max_steps=8) as run, pytest.raises(TrainingError) as info:
        run.train(on_step=swap_at_step_3)
    msg = str(info.value)
    assert "the run folder was moved or deleted while training (another folder is at its path " \
        "now: nothing was written there)" in msg, msg
    now = folder.resolve()
    after = {p.relative_to(now): p.read_bytes() for p in now.rglob("*") if p.is_file()
             and p.name != "lock"}
    assert after == before  # not one file of the other run written, added or removed
    kept = real if how == "relinked" else tmp_path / "a-old"
    assert "stopped at step 3, and its steps after 2 were not saved" in msg, msg  # (the swap
    with resume(kept) as again:  # came before step 3's save) the trained run, where it is now
        assert again.step == 2


def test_a_run_folder_moved_during_the_last_save_says_nothing_was_lost(tmp_path):
    """Moved between the last save and the final status write: a raw "could not create a
    temporary file … status.json" after a run whose every step was saved."""
    folder, moved = tmp_path / "r", tmp_path / "moved"

    def move_after_the_last_save(path):  # noqa: ANN001
        if path.name == "step-4":
            os.rename(folder, moved)

    with (start(_spec(max_steps=4), [_corpus(tmp_path)], out=folder) as run,
          pytest.raises(TrainingError) as info):
        run.train(on_save=move_after_the_last_save)
    msg = str(info.value)
    assert "moved or deleted while training" in msg and "its last snapshot is step 4" in msg, msg
    assert not folder.exists() and rf.read_pointer(moved)["step"] == 4


def test_a_failed_status_write_while_paused_does_not_end_the_run(tmp_path, monkeypatch):
    """The "paused" status write on a full disk ended the run from inside the pause."""
    control = TrainControl()
    real = rf.write_status

    def full_when_paused(folder, state, **kw):  # noqa: ANN001
        if state in ("paused", "running") and control.paused:
            raise CheckpointError(f"could not write status.json: {os.strerror(errno.ENOSPC)}")
        real(folder, state, **kw)

    monkeypatch.setattr(rf, "write_status", full_when_paused)

    def on_step(r) -> None:  # noqa: ANN001
        if r.step == 2:
            control.pause()
            threading.Timer(0.3, control.resume).start()

    with start(_spec(max_steps=4), [_corpus(tmp_path)], root=tmp_path / "runs") as run:
        result = run.train(on_step=on_step, control=control)
    assert result.state == "finished" and result.step == 4


def test_a_run_refused_for_disk_space_leaves_no_empty_folder(tmp_path, monkeypatch):
    """The free-space check before step 1 refused the run but left the empty folder it made."""
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda p: real(p)._replace(free=1 << 20))  # 1 MiB free
    out = tmp_path / "r"
    with pytest.raises(CheckpointError, match="MiB free"):
        start(_spec(), [_corpus(tmp_path)], out=out)
    assert not out.exists()
    out.mkdir()  # a folder the user made stays
    with pytest.raises(CheckpointError, match="MiB free"):
        start(_spec(), [_corpus(tmp_path)], out=out)
    assert out.is_dir()


@pytest.fixture
def evaluations(monkeypatch) -> list[int]:
    """The steps at which the trainer evaluates its held-out set, in order."""
    from engine.trainer import Trainer

    calls: list[int] = []
    real = Trainer.evaluate

    def counted(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        calls.append(self.cursor.step)
        return real(self, *a, **k)

    monkeypatch.setattr(Trainer, "evaluate", counted)
    return calls


def test_an_epoch_end_at_an_eval_step_is_evaluated_saved_and_logged_once(tmp_path, evaluations):
    """At a step that both evaluates (eval_every) and ends an epoch, the held-out set was
    evaluated twice, the snapshot written twice (the first without the epoch's report) and two
    eval rows logged."""
    calls = evaluations
    saves: list[str] = []
    spec = _spec(max_steps=None, epochs=2, eval_every=1)
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "r") as run:
        per_epoch = run.trainer.steps_per_epoch
        run.train(on_save=lambda p: saves.append(p.name))
    assert per_epoch >= 2
    assert calls == list(range(1, 2 * per_epoch + 1))  # once per step, none extra at epoch ends
    assert len(saves) == len(set(saves)), saves  # no snapshot written twice
    assert rf.snapshot_name(per_epoch) in saves and rf.snapshot_name(2 * per_epoch) in saves
    evals = [r["step"] for r in read_metrics(tmp_path / "r") if r["kind"] == "eval"]
    assert evals == list(range(1, 2 * per_epoch + 1))
    assert rf.read_epochs_done(tmp_path / "r") == 2


def test_a_run_ending_mid_epoch_logs_its_last_held_out_loss_once(tmp_path, evaluations):
    """A run that ends on max_steps inside an epoch evaluated its held-out set for the last
    save, but the loss reached neither metrics.csv (so no plot or TensorBoard) nor the step's
    report (the window and the CLI never showed it)."""
    calls = evaluations
    reports = []
    with start(_spec(max_steps=3, epochs=2), [_corpus(tmp_path)], out=tmp_path / "r") as run:
        assert run.trainer.steps_per_epoch > 3  # the end is inside the first epoch
        run.train(on_step=reports.append)
    assert calls == [3]  # evaluated once, at the last step, and not again for the save
    assert [r.val_loss is not None for r in reports] == [False, False, True]
    rows = read_metrics(tmp_path / "r")
    evals = [(r["step"], r["val_loss"]) for r in rows if r["kind"] == "eval"]
    assert len(evals) == 1 and evals[0][0] == 3
    assert evals[0][1] == pytest.approx(reports[-1].val_loss)
    assert rf.read_pointer(tmp_path / "r")["val_loss"] == pytest.approx(reports[-1].val_loss)


def test_a_disk_out_of_files_at_the_first_save_says_so_and_leaves_nothing(tmp_path, monkeypatch):
    """A disk out of inodes (bytes free, so the space check passed) failed the step-0 save with
    "snapshots/.tmp-step-0-PID/.generation_config.json.<hex>.tmp: No space left on device": a
    temporary file's name and no fix."""
    real = ckpt.create_temp

    def no_files(path):  # noqa: ANN001
        if path.name == "generation_config.json":
            raise OSError(errno.ENOSPC, "No space left on device",
                          str(path.parent / f".{path.name}.0123456789ab.tmp"))
        return real(path)

    monkeypatch.setattr(ckpt, "create_temp", no_files)
    out = tmp_path / "r"
    with pytest.raises(CheckpointError) as info:
        start(_spec(), [_corpus(tmp_path)], out=out)
    msg = str(info.value)
    assert msg.startswith(f"could not write {out / 'snapshots' / 'step-0' / 'generation_config.json'}"
                          ": No space left on device (the disk is full: out of space or out of "
                          "files)"), msg
    assert "the new run was not made" in msg and ".tmp" not in msg and "\n" not in msg
    assert not out.exists()
    monkeypatch.setattr(ckpt, "create_temp", real)
    start(_spec(), [_corpus(tmp_path)], out=out).close()
    monkeypatch.setattr(ckpt, "create_temp", no_files)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(CheckpointError) as info:  # --force: the new run is made beside the old
        start(_spec(), [_corpus(tmp_path)], out=out, force=True)  # one, which stays (it went
    assert f"the run it was to replace is kept in {out})" in str(info.value)  # first)
    assert sorted(p.name for p in out.iterdir()) == before  # no stage left behind
    load_model(out)


@pytest.mark.parametrize("records", ["file", "line", "stream"])
def test_a_runs_epoch_rows_are_read_as_its_trainer_counts_them(tmp_path, records):
    """What the window's Continue estimate shows (engine.read_epoch_rows) is the resumed run's
    own row count, whatever the corpus shown."""
    from dataclasses import replace

    from engine.run import read_epoch_rows

    spec = replace(_spec(seq_len=16), records=records)
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "r") as run:
        pass
    with resume(tmp_path / "r") as run:
        assert read_epoch_rows(tmp_path / "r") == len(run.trainer.rows) > 1


def test_continuing_a_finished_run_says_its_rate_goes_back_up_not_warmup(tmp_path):
    """A finished run continued with more steps: its rate jumped from the end of its decay back
    to the full rate, unsaid, while a note spoke of a warmup cut to a fifth (long past)."""
    spec = _spec(max_steps=30, epochs=1000, warmup_steps=100)
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
        low = run.trainer.current_lr()
    with resume(tmp_path / "r", max_steps=60) as run:
        tr = run.trainer
        assert tr.current_lr() > 3 * low
        assert any("the learning rate goes back up from" in n and "now spans 60 steps" in n
                   for n in run.notices), run.notices
        assert tr.warmup_notice("Max steps") is None  # step 30: past the 6-step warmup
    with resume(tmp_path / "r", max_steps=30) as run:  # the same totals: nothing to say
        assert not any("goes back up" in n for n in run.notices)
    with resume(tmp_path / "r", max_steps=60, lr=1e-4) as run:  # a rate given: as asked
        assert not any("goes back up" in n for n in run.notices)
        assert run.spec.train.lr == 1e-4 and 0 < run.trainer.current_lr() <= 1e-4
    assert read_run_spec(tmp_path / "r").train.lr == 1e-4  # kept for the next resume
    control = TrainControl()  # stopped at step 1, in its warmup: the same totals given again
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "w") as run:  # are no change (it
        run.train(control=control, on_step=lambda r: control.stop())  # said the decay starts
    with resume(tmp_path / "w", max_steps=30, epochs=1000) as run:  # again: warmup's rise)
        assert run.step == 1 and not any("goes back up" in n for n in run.notices), run.notices


def test_a_deleted_runs_name_is_not_given_to_the_next_run(tmp_path):
    """After the newest run was deleted the next run got its name (2026-12-04-small-3 again),
    so its exports and samples could be taken for the deleted run's."""
    root = tmp_path / "runs"
    spec = _spec(max_steps=1)
    names = []
    for _ in range(2):
        with start(spec, [_corpus(tmp_path)], root=root) as run:
            names.append(run.folder.name)
    shutil.rmtree(root / names[-1])
    with start(spec, [_corpus(tmp_path)], root=root) as run:
        names.append(run.folder.name)
    assert [n.rsplit("-", 1)[1] for n in names] == ["1", "2", "3"], names
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted([names[0], names[2]])
    (root / rf.RUN_NUMBERS).write_text("{not json")  # a damaged book: the first free number
    with start(spec, [_corpus(tmp_path)], root=root) as run:
        assert run.folder.name.rsplit("-", 1)[1] == "2"


def test_resume_with_a_settings_file_applies_what_it_changes_or_refuses_first(tmp_path, capsys):
    """`--resume RUN --config FILE` ignored FILE's max_steps ("already at step 60 of 60") and
    reported a bad FILE only after the run had been opened."""
    out = tmp_path / "r"
    assert main(["train", str(_corpus(tmp_path)), *TINY, "--max-steps", "2", "--out", str(out),
                 "--no-tensorboard"]) == 0
    toml = tmp_path / "more.toml"
    toml.write_text('[run]\npreset = "tiny"\ncorpus = ["elsewhere.txt"]\n[train]\nmax_steps = 3\n'
                    "seq_len = 32\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--config", str(toml), "--no-tensorboard"]) == 0
    assert rf.read_pointer(out)["step"] == 3
    toml.write_text("[train]\nseq_len = 64\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "settings; seq_len cannot change" in err and "resumed" not in err, err
    toml.write_text("[train]\nmax_stepz = 9\n")
    assert main(["train", "--resume", str(out), "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "did you mean train.max_steps" in err and "resumed" not in err, err
    assert rf.read_pointer(out)["step"] == 3


def test_resume_with_fewer_epochs_than_done_is_refused_and_changes_nothing(tmp_path, capsys):
    """`--resume RUN --epochs 1` on a run at step 6 wrote epochs 1 into run.json and said
    "resumed ... at step 6 of 3"."""
    out = tmp_path / "r"
    with start(_spec(max_steps=None, epochs=2), [_corpus(tmp_path)], out=out) as run:
        run.train()
        per_epoch, done = run.trainer.steps_per_epoch, run.step
    assert done == 2 * per_epoch
    before = (out / rf.RUN_JSON).read_text()
    assert main(["train", "--resume", str(out), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert f"is already at step {done}, and 1 epoch of {per_epoch} steps would end it at step " \
           f"{per_epoch}:" in err, err
    assert "give at least 3 epochs to train on" in err and err.count("\n") == 1, err  # 2 end
    # at its step; max steps (no limit) is not named: only what cuts the run short is
    assert (out / rf.RUN_JSON).read_text() == before
    assert main(["train", "--resume", str(out), "--max-steps", str(done - 1)]) == 2
    err = capsys.readouterr().err
    assert f"is already at step {done}, and 2 epochs (kept from the run) of {per_epoch} steps " \
           f"and max steps {done - 1} would end it" in err and err.count("\n") == 1, err  # (an
    # epochs value kept from the run read as if given now)
    assert (out / rf.RUN_JSON).read_text() == before
    with resume(out) as run:  # still resumable, unchanged
        assert run.step == done and run.spec.train.epochs == 2


def test_a_run_started_with_nohup_goes_on_when_the_terminal_closes(tmp_path):
    """SIGHUP ignored by nohup was taken over: closing the terminal stopped the run."""
    out = tmp_path / "r"
    p = subprocess.Popen(["nohup", sys.executable, "-m", "engine", "train", str(_corpus(tmp_path)),
                          *TINY, "--max-steps", "100000", "--epochs", "1000", "--out", str(out)],
                         cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         text=True)  # (nohup ignores SIGHUP)
    try:
        _wait_for(lambda: _steps_done(out) >= 3)
        p.send_signal(signal.SIGHUP)
        at = _steps_done(out)
        _wait_for(lambda: _steps_done(out) >= at + 5)  # still training
        assert p.poll() is None
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 0 and "SIGHUP" not in err and "SIGTERM" in err, err


@pytest.mark.parametrize("tokenizer", ["auto", "bpe"])
def test_resume_with_the_file_that_started_the_run(tmp_path, capsys, tokenizer):
    """`--resume RUN --config FILE` with the very file that started RUN: "auto" was refused as
    changing the tokenizer (run.json keeps the one chosen), and a BPE run's doubled default rate
    was halved back to the file's."""
    from engine.defaults import PRESET_DEFAULTS

    lr = PRESET_DEFAULTS["tiny"].lr
    toml = tmp_path / "run.toml"
    text = (f'[run]\npreset = "tiny"\ntokenizer = "{tokenizer}"\nbpe_vocab = 300\n[train]\n'
            f"lr = {lr}\nbatch_size = 2\nseq_len = 32\nepochs = 1000\nmax_steps = {{}}\n")
    toml.write_text(text.format(2))
    out = tmp_path / "r"
    assert main(["train", str(_corpus(tmp_path)), "--config", str(toml), "--out", str(out),
                 "--sample-tokens", "0", "--no-tensorboard"]) == 0
    started = read_run_spec(out).train.lr
    toml.write_text(text.format(3))
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--config", str(toml), "--sample-tokens", "0",
                 "--no-tensorboard"]) == 0, capsys.readouterr().err
    assert rf.read_pointer(out)["step"] == 3 and read_run_spec(out).train.lr == started
    assert started == (2 * lr if tokenizer == "bpe" else lr)


@pytest.mark.parametrize("mode", ["lora", "wsla"])
def test_a_lora_or_wsla_run_resumed_equals_one_run(tmp_path, mode):
    """Exact resume of an adapted run through engine.run (its adapter tensors and the frozen
    base in run snapshots): only the old single-folder format had an exact-resume test."""
    from engine import LoRAConfig

    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=2), [corpus], out=tmp_path / "base") as run:
        run.train()
    adapt = ({"lora": LoRAConfig(("in_proj", "x_proj"), rank=2, dropout=0.1)} if mode == "lora"
             else {"wsla": True})

    def spec(steps: int) -> RunSpec:
        return replace(_spec(max_steps=steps, **adapt), init=str(tmp_path / "base"))

    with start(spec(8), [corpus], out=tmp_path / "full") as run:
        run.train()
    with start(spec(4), [corpus], out=tmp_path / "part") as run:
        run.train()
    with resume(tmp_path / "part", max_steps=8) as run:
        assert run.step == 4
        run.train()
    assert _losses(tmp_path / "part") == _losses(tmp_path / "full")
    a, b = load_model(tmp_path / "part"), load_model(tmp_path / "full")
    base = load_model(tmp_path / "base")
    moved = [k for k in a.params if not np.array_equal(a.params[k], base.params[k])]
    assert moved  # the adapted weights trained (merged into the saved model)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])


def test_a_stop_during_the_final_held_out_evaluation_is_not_finished(tmp_path):
    """SIGTERM / Stop while the run's last held-out evaluation ran: "finished", status.json
    "finished", no held-out loss, and nothing said the evaluation was cut short."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, epochs=1,
                                                    max_steps=3), autosave_minutes=0)
    with start(spec, [two_file_corpus(tmp_path)], root=tmp_path / "runs") as run:
        res = train_stopped_while_scoring(run)  # the stop comes while the evaluation runs
    assert (res.state, res.step, res.val_loss, res.unscored) == ("stopped", 3, None, True)
    assert res.reason == ""  # (no early stopping)
    assert rf.read_status(run.folder)["state"] == "stopped"
    c2 = TrainControl()
    with start(spec, [two_file_corpus(tmp_path)], root=tmp_path / "runs") as run2:
        res2 = run2.train(control=c2)  # no stop: finished, scored
    assert res2.state == "finished" and res2.val_loss is not None and not res2.unscored


def test_continuing_a_run_stopped_during_its_final_evaluation_scores_it(tmp_path):
    """A run stopped while its last held-out evaluation ran, then continued: nothing is left to
    train, and the resume said "finished" with no held-out loss (status.json, latest.json and
    metrics.csv had none; best.json named an earlier step). It scores the step and keeps it."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, epochs=1,
                                                    max_steps=3), autosave_minutes=0)
    with start(spec, [two_file_corpus(tmp_path)], root=tmp_path / "runs") as run:
        assert train_stopped_while_scoring(run).unscored
    folder = run.folder
    with resume(folder) as again:
        assert again.step == 3
        res = again.train()
    assert (res.state, res.step, res.unscored) == ("finished", 3, False)
    assert res.val_loss is not None and math.isfinite(res.val_loss)
    assert rf.read_status(folder)["state"] == "finished"
    assert rf.read_pointer(folder)["val_loss"] == res.val_loss
    assert rf.read_pointer(folder, rf.BEST)["step"] == 3
    evals = [r for r in rf.read_metrics(folder) if r["kind"] == "eval"]
    steps = [r for r in rf.read_metrics(folder) if r["kind"] == "step"]
    assert [(r["step"], r["epoch"], r["val_loss"]) for r in evals][-1] == (
        3, steps[-1]["epoch"], res.val_loss)  # (the epoch of its step's row)
    with resume(folder) as third:  # scored now: not again, and no second metrics row
        res3 = third.train()
    assert (res3.state, res3.val_loss) == ("finished", res.val_loss)
    assert [r for r in rf.read_metrics(folder) if r["kind"] == "eval"] == evals


def test_held_out_bits_per_byte_use_the_held_out_texts_own_tokens_per_byte(tmp_path):
    """A BPE run whose held-out file was other text: eval said 1.2507 bits/byte, TensorBoard's
    bpb/heldout and the Runs list 1.700 for the same loss (they took the whole corpus's tokens
    per byte, the list's ranking and Compare's scale with it)."""
    import random

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from engine.tblog import TB_DIR

    rng = random.Random(1)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    prose = "the quick brown fox jumps over the lazy dog while the cat sleeps. "
    for i in range(9):  # nine files of prose BPE learns well, one of hex it cannot
        (corpus / f"a{i}.txt").write_text(prose * 60)
    (corpus / "z.txt").write_text("".join(rng.choice("0123456789abcdef") for _ in range(4000)))
    assert main(["train", str(corpus), "--preset", "tiny", "--tokenizer", "bpe", "--bpe-vocab",
                 "400", "--batch", "2", "--seq-len", "32", "--max-steps", "2", "--sample-tokens",
                 "0", "--out", str(tmp_path / "r")]) == 0
    with resume(tmp_path / "r") as run:
        data = run.data
        r = run.trainer.evaluate(max_tokens=None)  # eval's own bits/byte: held-out bytes
        corpus_tpb, heldout_tpb = data.tokens_per_byte, data.heldout_tokens_per_byte
    assert corpus_tpb and heldout_tpb and abs(heldout_tpb / corpus_tpb - 1) > 0.1, (
        corpus_tpb, heldout_tpb)  # (the case: held-out text unlike the rest)
    listed = list_runs(tmp_path)[0]
    assert listed.bits_per_byte == pytest.approx(r.bits_per_byte, rel=0.03), (
        listed.bits_per_byte, r.bits_per_byte)
    acc = EventAccumulator(str(tmp_path / "r" / TB_DIR))
    acc.Reload()
    assert acc.Scalars("bpb/heldout")[-1].value == pytest.approx(r.bits_per_byte, rel=0.03)


def test_the_held_out_tokens_per_byte_are_measured_over_all_of_a_long_held_out_set(monkeypatch):
    """Past the decode budget, a stream run's one long held-out span was measured on its first
    window only (1.0 tokens a byte where the set holds 0.4); many short documents were decoded
    one by one (seconds)."""
    from engine import run as runmod

    class Tok:
        calls = 0

        def decode(self, ids):  # noqa: ANN001, ANN202  (ids below 15,000: 1 byte, else 4)
            Tok.calls += 1
            return "a" * int((ids < 15_000).sum()) + "abcd" * int((ids >= 15_000).sum())

    monkeypatch.setattr(runmod, "HELDOUT_RATIO_IDS", 1 << 12)
    monkeypatch.setattr(runmod, "HELDOUT_RATIO_SPANS", 64)
    ids = np.arange(20_000, dtype=np.int64)
    stream = {"ids": ids, "val_spans": np.zeros((0, 2), np.int64)}
    assert runmod._measure_heldout_per_byte(Tok(), stream, 10_000) == pytest.approx(0.4, rel=0.05)
    small = {"ids": ids, "val_spans": np.array([[10_000, 1000], [16_000, 1000]], np.int64)}
    assert runmod._measure_heldout_per_byte(Tok(), small, 0) == pytest.approx(2000 / 5000)
    docs = {"ids": ids, "val_spans": np.stack([np.arange(0, 3000, 3), np.full(1000, 3)], 1)}
    Tok.calls = 0
    assert runmod._measure_heldout_per_byte(Tok(), docs, 0) == 1.0 and Tok.calls <= 64
    assert runmod._measure_heldout_per_byte(Tok(), {"ids": ids, "val_spans": stream[
        "val_spans"]}, 20_000) is None


def test_the_held_out_tokens_per_byte_of_many_documents_past_the_budget_stay_in_them(monkeypatch):
    """Past the decode budget, a documents run's 64 windows fall in many spans: each window is
    read from where it falls in its own span (its offset past the spans before it) and cut at
    that span's end, never reading on into the ids after it (other text: the training set's)."""
    from engine import run as runmod

    class Tok:
        calls = 0

        def decode(self, ids):  # noqa: ANN001, ANN202  (ids of odd hundreds: 4 bytes, else 1)
            Tok.calls += 1
            wide = (ids // 100) % 2 == 1
            return "a" * int((~wide).sum()) + "abcd" * int(wide.sum())

    monkeypatch.setattr(runmod, "HELDOUT_RATIO_IDS", 1 << 12)
    ids = np.arange(20_000, dtype=np.int64)
    narrow = np.stack([np.arange(0, 16_000, 200), np.full(80, 100)], 1)  # 8,000 ids: 1 byte,
    wide = narrow + [100, 0]  # each document followed by 4-byte ids; and the other way round
    assert runmod._measure_heldout_per_byte(Tok(), {"ids": ids, "val_spans": narrow}, 0) == 1.0
    assert runmod._measure_heldout_per_byte(Tok(), {"ids": ids, "val_spans": wide}, 0) == 0.25
    assert Tok.calls == 2 * 64  # (64 windows each)


def test_a_run_json_with_a_setting_it_does_not_know_names_it(tmp_path, capsys):
    """A hand-edited run.json with a key its spec has no field for: "unusable spec
    (RunSpec.__init__() got an unexpected keyword argument 'seed')", Python's words."""
    import json

    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
    path = tmp_path / "r" / "run.json"
    d = json.loads(path.read_text())
    d["spec"]["seed"] = 10**30
    path.write_text(json.dumps(d))
    assert main(["eval", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {path}: its spec has no setting 'seed' (edited by hand?); remove it "
                   "from the file"), err


@pytest.mark.parametrize(("key", "value", "said"), [
    ("keep", 1.5, "keep = 1.5: a run keeps a whole number of its latest snapshots, at least 1"),
    ("keep", "3", "keep = '3': a run keeps a whole number of its latest snapshots, at least 1"),
    ("holdout", "0.1", "held-out fraction must be a number in [0, 0.9], not '0.1'"),
    ("autosave_steps", 2.5, "autosave_steps must be a whole number from 0 (off) or more, not "
                            "2.5"),
])
def test_a_hand_edited_run_json_value_of_the_wrong_kind_is_named_before_training(
        tmp_path, capsys, key, value, said):
    """keep = 1.5 passed the resume's checks, and the run trained, saved, then died in a
    TypeError pruning its snapshots; keep = "3" said "'>=' not supported between instances of
    'str' and 'int'", naming neither the setting nor the fix."""
    import json

    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
    path = tmp_path / "r" / "run.json"
    d = json.loads(path.read_text())
    d["spec"][key] = value
    path.write_text(json.dumps(d))
    assert main(["train", "--resume", str(tmp_path / "r"), "--max-steps", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {path}: {said}", err
    assert json.loads((tmp_path / "r" / "latest.json").read_text())["step"] == 1


def test_export_of_a_run_json_with_a_damaged_train_table_is_one_line(tmp_path, capsys):
    """``export`` read run.json's train table as a dict unchecked: ``train = true`` gave an
    AttributeError traceback where eval and --resume said "unusable spec" in one line."""
    import json

    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=1))
    with start(spec, [two_file_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
    path = tmp_path / "r" / "run.json"
    d = json.loads(path.read_text())
    for bad in (True, -1, {**d["spec"]["train"], "lora": 1.5}):
        d["spec"]["train"] = bad
        path.write_text(json.dumps(d))
        for args in (["export", "--gguf", str(tmp_path / "r"), str(tmp_path / "m.gguf")],
                     ["export", "--merged", str(tmp_path / "r"), str(tmp_path / "merged")]):
            assert main(args) == 2, (bad, args)
            err = capsys.readouterr().err.strip()
            assert err.startswith(f"error: {path}: ") and "\n" not in err, (bad, err)
            assert "Traceback" not in err and "unusable spec" in err, (bad, err)
        assert not (tmp_path / "m.gguf").exists() and not (tmp_path / "merged").exists()


def test_a_run_name_taken_while_the_corpus_was_read_is_not_shared(tmp_path, monkeypatch):
    """Two Starts of one runs folder: the name was picked before the corpus was read (minutes
    with BPE) and used after, so a second Start meanwhile got the same name and wrote into the
    first's folder (or was refused as 'in use by process N')."""
    from engine import run as runapi

    root = tmp_path / "runs"
    real = runapi.load_corpus
    taken: list[Path] = []

    def meanwhile(paths, **kw):  # noqa: ANN001, ANN003, ANN202
        corpus = real(paths, **kw)
        other = rf.unique_run_folder(root, "tiny")  # the name this start picked: another
        other.mkdir(parents=True)                   # start makes it first
        (other / "theirs.txt").write_text("another run's file")
        taken.append(other)
        return corpus
    monkeypatch.setattr(runapi, "load_corpus", meanwhile)
    with start(_spec(max_steps=1), [_corpus(tmp_path)], root=root) as run:
        run.train()
    assert run.folder != taken[0] and run.folder.name.endswith("-2"), run.folder
    assert [p.name for p in taken[0].iterdir()] == ["theirs.txt"]
    assert rf.is_run(run.folder)


def test_a_new_run_whose_lock_cannot_be_taken_leaves_no_folder(tmp_path, monkeypatch):
    """The name reserved for a new run, then a full disk at its lock: a raw OSError, and the
    empty folder stayed in the runs folder."""
    import errno

    root = tmp_path / "runs"

    def full(self):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(rf.RunLock, "acquire", full)
    with pytest.raises(CheckpointError, match="No space left on device.*the new run was not "
                                              "made"):
        start(_spec(max_steps=1), [_corpus(tmp_path)], root=root)
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize("fails", [KeyboardInterrupt, OSError])
def test_force_keeps_the_run_it_replaces_until_the_new_one_is_encoded(tmp_path, monkeypatch,
                                                                       fails):
    """--force removed the run there before tokenizing the corpus: a kill -9, Ctrl-C or a
    failure while tokenizing (minutes for hundreds of MB) left neither run. It is removed only
    once the new run's ids are made, just before they are written."""
    from engine import run as runapi

    out = tmp_path / "r"
    first = start(_spec(), [_corpus(tmp_path)], out=out)
    first.train()
    first.close()
    before = sorted(p.name for p in (out / "snapshots").iterdir())

    def tokenizing(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise fails("interrupted while tokenizing")

    monkeypatch.setattr(runapi, "_encode", tokenizing)
    with pytest.raises((KeyboardInterrupt, CheckpointError)) as info:
        start(_spec(), [_corpus(tmp_path)], out=out, force=True)
    if fails is OSError:
        assert "the run it was to replace is kept" in str(info.value), info.value
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == before
    assert (out / "run.json").is_file()
    runapi.load_model(out)  # its latest snapshot still loads


def test_a_kill_while_force_writes_the_new_run_keeps_the_old_one(tmp_path):
    """--force removed the run there, then wrote the new run's data and step-0 snapshot: a kill
    -9 in those seconds (a large model's snapshot) left neither run. The new run is written
    beside the old one (``.replacing``) and swapped in by renames once it is complete; a stage
    a kill left behind is the run's own (Delete is not refused) and the next --force clears it."""
    out = tmp_path / "r"
    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=2), [corpus], out=out) as run:
        run.train()
    old = rf.read_pointer(out)["step"]
    p = _cli(str(corpus), *TINY, "--max-steps", "3", "--out", str(out), "--force",
             env={rf.SLOW_SAVE_ENV: "0.5"})
    _wait_for(lambda: (out / rf.REPLACING / rf.SNAPSHOTS).is_dir())
    p.kill()
    p.communicate(timeout=60)
    assert rf.read_pointer(out)["step"] == old == 2  # the old run, whole
    load_model(out)
    assert rf.why_not_delete(out) is None, rf.why_not_delete(out)
    assert rf.foreign_entries(out) == [], rf.foreign_entries(out)
    assert (out / rf.REPLACING).is_dir()
    with resume(out) as run:  # a resume clears it (it may be as big as the run)
        assert run.step == old and not (out / rf.REPLACING).exists()
    (out / rf.REPLACING / "data").mkdir(parents=True)  # as another kill leaves it
    start(_spec(max_steps=1), [corpus], out=out, force=True).close()
    assert not (out / rf.REPLACING).exists() and not (out / rf.REPLACED).exists()
    assert rf.read_pointer(out)["step"] == 0 and resume(out).step == 0


def test_a_swap_cut_short_at_any_rename_is_finished_by_a_resume(tmp_path, monkeypatch):
    """A kill during --force's renames left both runs on disk, and every tool called the folder
    a run "killed while it was being prepared": Delete, or the --force it advised, deleted both.
    Cut short at each rename, the folder is listed as a swap cut short, Delete refuses it, and
    a resume finishes the swap: the new run, whole."""
    from pathlib import Path as P

    corpus = _corpus(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "o.txt").write_text("an entirely different text for the new run. " * 80)
    real = P.rename
    for cut in range(1, 40):
        out = tmp_path / f"r{cut}"
        with start(_spec(max_steps=2), [corpus], out=out) as run:
            run.train()
        done = [0]

        def rename(self, target, _cut=cut, _done=done, _out=out):  # noqa: ANN001, ANN202
            if _out in (P(self).parent, P(target).parent):  # the swap's renames (the stage's
                _done[0] += 1  # own writes are inside it)
                if _done[0] == _cut:
                    raise KeyboardInterrupt("killed")
            return real(self, target)

        monkeypatch.setattr(P, "rename", rename)
        try:
            start(_spec(max_steps=1), [other], out=out, force=True).close()
            swapped = True
        except KeyboardInterrupt:
            swapped = False
        finally:
            monkeypatch.setattr(P, "rename", real)
        if swapped:
            break
        if rf.swap_cut_short(out):
            info = next(r for r in rf.list_runs(tmp_path) if r.path == out)
            assert info.status == "broken" and "train --force was cut short" in info.error
            assert "resume it first" in rf.why_not_delete(out)
        with resume(out) as run:
            assert run.step in (0, 2)
        if run.step == 0:  # the new run: its corpus
            assert rf.read_data(out).manifest["sources"][0]["path"].endswith("o.txt")
        assert not any((out / n).exists() for n in (rf.REPLACING, rf.REPLACING_IN, rf.REPLACED))
    else:
        raise AssertionError("the swap was never reached")


def test_force_refuses_to_start_from_a_model_inside_the_run_it_replaces(tmp_path):
    """`train --init X --out X --force` deleted X's snapshots, the model it started from among
    them, and its run.json named the new run's own snapshot as the source."""
    out = tmp_path / "r"
    corpus = _corpus(tmp_path)
    with start(_spec(max_steps=1), [corpus], out=out) as run:
        run.train()
    before = sorted(p.name for p in (out / rf.SNAPSHOTS).iterdir())
    for init in (out, out / rf.SNAPSHOTS / "step-1"):
        with pytest.raises(CheckpointError, match="the model to start from is inside .* which "
                                                  "--force would replace; copy it out first"):
            start(replace(_spec(max_steps=1), init=str(init)), [corpus], out=out, force=True)
    assert sorted(p.name for p in (out / rf.SNAPSHOTS).iterdir()) == before
    with start(replace(_spec(max_steps=1), init=str(out)), [corpus], out=tmp_path / "b") as run:
        assert run.step == 0  # from it into another folder: as before


def test_force_into_a_new_folder_that_fails_names_no_replaced_run(tmp_path, monkeypatch):
    """--force where no run was: a failure said "the run it was to replace was removed
    first"."""
    from engine import run as runapi

    def full(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runapi.rf, "write_data", full)
    with pytest.raises(CheckpointError) as info:
        start(_spec(), [_corpus(tmp_path)], out=tmp_path / "fresh", force=True)
    assert "the new run was not made" in str(info.value)
    assert "replace" not in str(info.value), info.value
