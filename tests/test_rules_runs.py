"""Rules of the run folder, the checkpoint files and the divergence guard that only a mutation of
the code showed untested: the good steps a diverged run keeps, appends that never follow a link,
checksums of files over a mebibyte, tensors a model folder may not add, the best held-out loss a
run tracks, a data manifest's bounds, the hold-out split of a tiny corpus, and the guard's
loss-jump and gradient-spike rules."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from engine import checkpoint as ckpt
from engine import runformat as rf
from engine.data import split_holdout
from engine.errors import CheckpointError, TrainingError
from engine.guard import DivergenceGuard
from engine.run import RunSpec, resume, start
from engine.safeio import UnsafeFileError
from engine.samples import append_sample
from engine.trainer import StepReport, TrainConfig
from tests.helpers import two_file_corpus


def _spec(**train) -> RunSpec:
    kw = {"batch_size": 2, "seq_len": 32, "epochs": 1, "max_steps": 6, **train}
    return RunSpec(preset="tiny", train=TrainConfig(**kw), autosave_minutes=0)


def test_a_run_that_diverges_for_good_keeps_its_good_steps(tmp_path, monkeypatch):
    """The guard gives up after three rollbacks with the trainer back at step 3: the steps since
    the last save are saved, and the error names that snapshot (a mutation that skipped the save
    lost them and still named step-3)."""
    real = DivergenceGuard.update_problem

    def why(self, trainer, report):
        return "forced" if report.step > 3 else real(self, trainer, report)

    monkeypatch.setattr(DivergenceGuard, "update_problem", why)
    out = tmp_path / "r"
    with (start(_spec(max_steps=10), [two_file_corpus(tmp_path, 30)], out=out) as run,
          pytest.raises(TrainingError, match="diverged 3 times") as err):
        run.train()
    assert rf.read_pointer(out)["step"] == 3
    assert str(out / rf.SNAPSHOTS / "step-3") in str(err.value)
    assert (out / rf.SNAPSHOTS / "step-3" / rf.SNAP_MANIFEST).is_file()
    assert rf.read_status(out)["state"] == "diverged"


def _ruin_from(step: int, tr, monkeypatch):  # noqa: ANN001, ANN202
    """Make the update of ``step`` and of every step after it multiply the trained weights by 40
    (the weights stay finite, the loss overflows to NaN); returns the real optimizer step."""
    real = tr.optimizer.step

    def ruin(tensors, grads, lr):  # noqa: ANN001, ANN202
        stats = real(tensors, grads, lr)
        if tr.cursor.step + 1 >= step:
            for a in tensors.values():
                a *= 40.0
        return stats

    monkeypatch.setattr(tr.optimizer, "step", ruin)
    return real


@pytest.mark.parametrize("autosave", [1, 0])
def test_weights_a_step_ruined_are_rolled_back_not_kept_as_the_last_good_state(tmp_path,
                                                                               monkeypatch,
                                                                               autosave):
    """A step's loss is measured before its update, at the weights the step before it left: lr
    0.5 on a resume made step 21's update ruin the model, and step 22's loss (12.3, above 12.2:
    worse than guessing) rolled back step 22's update only. Every retry saw the same loss, and
    after three the run kept step 21's weights as "its last good state" (held-out 12.21 against
    3.28 at step 20), its latest snapshot. The weights that gave the loss are rolled back now."""
    monkeypatch.setattr(DivergenceGuard, "update_problem", lambda *a: None)  # (the ruin stays
    out = tmp_path / "r"  # under the update-size rule, as lr 0.5's did)
    said: list[str] = []
    spec = RunSpec(preset="tiny", autosave_steps=autosave, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=10))
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        tr = run.trainer
        _ruin_from(4, tr, monkeypatch)  # step 4's update, and each retry of it
        steps_said: list[int] = []

        def heard(message: str) -> None:
            said.append(message)
            steps_said.append(rf.read_status(out)["step"])  # (it kept the dropped snapshot's)

        with pytest.raises(TrainingError, match="diverged 3 times") as err:
            run.train(on_notice=heard)
        assert tr.cursor.step == 3 and steps_said[0] == (3 if autosave else 0), steps_said
    assert "last at step 5: the loss" in str(err.value)  # (NaN here: 40x overflows)
    assert "at the weights step 4 left" in str(err.value)
    assert said[0].startswith("step 5 diverged (the loss ") and said[0].endswith(
        "at the weights step 4 left); rolled back to step 3 and halved the learning rate "
        "(scale 0.5)"), said
    assert rf.read_pointer(out)["step"] == 3  # (autosaved: step 4's ruined weights were saved
    assert str(out / rf.SNAPSHOTS / "step-3") in str(err.value)  # before step 5 told them)
    assert max(n for n, _ in rf.snapshots(out)) == 3  # (step-4 deleted, not only passed over)
    from engine.evaluation import evaluate
    from engine.run import load_model

    ids = np.frombuffer(b"the cat sat on the mat and looked at the hat. " * 20, np.uint8)
    lm = load_model(out)  # what generate, eval and export take
    assert lm.source is not None and lm.source.name == "step-3"
    assert evaluate(lm, ids.astype(np.int64), 32, 2).loss < 2 * np.log(264) + 1  # (step 4's:
    assert [r["step"] for r in rf.read_metrics(out) if r["kind"] == "step"] == [1, 2, 3]  # NaN)


@pytest.mark.parametrize("name", [rf.METRICS, "samples.jsonl"])
def test_a_runs_appended_files_never_follow_a_link_out_of_it(tmp_path, name):
    """metrics.csv or samples.jsonl a link to a user's file: a metric row was appended to it."""
    run = tmp_path / "run"
    run.mkdir()
    outside = tmp_path / "notes.txt"
    outside.write_text("mine\n")
    (run / name).symlink_to(outside)
    with pytest.raises(UnsafeFileError):
        if name == rf.METRICS:
            rf.append_metric(run, {"kind": "step", "step": 1, "loss": 2.0})
        else:
            append_sample(run, {"step": 1, "epoch": 0, "text": "x"})
    assert outside.read_text() == "mine\n"


def test_checksums_cover_a_whole_file_past_its_first_mebibyte(tmp_path):
    """Every test model was under 1 MiB: hashing only the first one went unnoticed."""
    p = tmp_path / "f.bin"
    data = bytearray(np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes())
    p.write_bytes(bytes(data))
    digest = ckpt.sha256_file(p)
    assert digest == hashlib.sha256(bytes(data)).hexdigest()
    ckpt.verify_files(tmp_path, {"f.bin": digest}, "manifest.json", "use another")
    data[2 << 20] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="do not match"):
        ckpt.verify_files(tmp_path, {"f.bin": digest}, "manifest.json", "use another")


def test_a_model_folder_with_tensors_of_another_model_is_refused(tmp_path):
    """A checkpoint whose tensors are a superset of ours (another variant) loaded with the extra
    ones dropped."""
    from engine import MambaLM
    from tests.helpers import tiny_config

    folder = tmp_path / "m"
    MambaLM.create(tiny_config(vocab_size=264)).save(folder)
    weights = load_file(str(folder / "model.safetensors"))
    weights["backbone.layers.0.mixer.extra.weight"] = np.zeros(3, np.float32)
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected tensors"):
        ckpt.load_model_files(folder)


def test_the_best_held_out_loss_a_run_tracks_is_its_lowest(tmp_path):
    """status.json's best_val_loss and best.json agree with the lowest evaluation in
    metrics.csv (tracked the wrong way round, status showed the worst and every evaluation
    saved a snapshot)."""
    out = tmp_path / "r"
    with start(_spec(max_steps=8, eval_every=2), [two_file_corpus(tmp_path, 30)], out=out) as run:
        run.train()
    evals = [r["val_loss"] for r in rf.read_metrics(out) if r["kind"] == "eval"]
    assert len(evals) >= 3
    assert rf.read_status(out)["best_val_loss"] == pytest.approx(min(evals))
    assert rf.best_pointer(out)["val_loss"] == pytest.approx(min(evals))


def test_a_data_manifest_that_holds_out_past_its_ids_is_refused(tmp_path):
    """n_train larger than the token ids (the manifest is not hashed): a stream run trained on
    its held-out text and measured no held-out loss, with no error."""
    spec = RunSpec(preset="tiny", records="stream", train=TrainConfig(batch_size=2, seq_len=32,
                                                                      max_steps=1),
                   autosave_minutes=0)
    with start(spec, [two_file_corpus(tmp_path, 30)], out=tmp_path / "r") as run:
        folder = run.folder
    manifest = folder / rf.DATA_MANIFEST
    m = json.loads(manifest.read_text())
    m["n_train"] = len(np.load(folder / rf.IDS)) + 5
    manifest.write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="not a token id array matching the manifest"):
        rf.read_data(folder)


def test_a_tiny_corpus_is_not_held_out_down_to_one_training_token():
    for n in (2, 5, 10):  # 90 % held out would leave 0 or 1 token to train on: none is
        train, val = split_holdout(np.arange(n), 0.9, 32)
        assert len(train) == n and len(val) == 0
    train, val = split_holdout(np.arange(100), 0.5, 8)
    assert len(train) == 50 and len(val) == 50


class _Trainer:
    """What the guard reads of a trainer: the trained tensors and the vocabulary size."""

    def __init__(self) -> None:
        self.trainable = type("T", (), {"tensors": {"w": np.ones(4, np.float32)}})()
        self.lm = type("L", (), {"config": type("C", (), {"vocab_size": 256})()})()


def _report(loss: float, grad_norm: float) -> StepReport:
    return StepReport(1, 0, 10, loss, grad_norm, 1e-3, 0, 0, 0)


def test_the_guard_calls_a_loss_jump_and_a_gradient_spike_divergence():
    """Two of the guard's five rules had no test: a loss above twice its median (+1 nat) and a
    gradient norm 100x its median; either could be removed unnoticed."""
    tr = _Trainer()
    guard = DivergenceGuard()
    guard._weights = {"w": tr.trainable.tensors["w"].copy()}  # what before() copies
    for _ in range(6):
        assert guard.why(tr, _report(3.0, 1.0)) is None
        guard._norms.append(1.0)
        guard._losses.append(3.0)
    assert "gradient norm 500" in (guard.why(tr, _report(3.0, 500.0)) or "")
    assert guard.why(tr, _report(3.0, 90.0)) is None  # under 100x
    assert "jumped above 7" in (guard.why(tr, _report(8.0, 1.0)) or "")
    assert guard.why(tr, _report(6.9, 1.0)) is None  # under 2 x 3 + 1


def test_a_rollback_across_an_epochs_end_retrains_that_epochs_rows_and_measures_it_again(
        tmp_path, monkeypatch):
    """Rolled back from the next epoch's second step to the last step of the one before, the
    retrained step took the next epoch's rows (its row order was taken once an epoch), and the
    epoch's held-out row was gone from metrics.csv (the undone evaluation still counted as the
    step's)."""
    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=3, shuffle=True,
                                     eval_every=1000))
    real = DivergenceGuard.loss_problem
    fired: list[int] = []
    with start(spec, [two_file_corpus(tmp_path, 6)], out=tmp_path / "r") as run:
        tr = run.trainer
        last = tr.steps_per_epoch  # the first epoch's last step

        def forced(self, trainer, loss):  # noqa: ANN001, ANN202
            if trainer.cursor.step == last and trainer.cursor.epoch == 1 and not fired:
                fired.append(1)  # step last + 1's loss: the weights step `last` left are bad
                return "forced"
            return real(self, trainer, loss)

        monkeypatch.setattr(DivergenceGuard, "loss_problem", forced)
        used: list[tuple[int, int, tuple[int, ...]]] = []
        step = tr.train_step

        def recorded(rows):  # noqa: ANN001, ANN202
            used.append((tr.cursor.step + 1, tr.cursor.epoch, tuple(int(r) for r in rows)))
            return step(rows)

        monkeypatch.setattr(tr, "train_step", recorded)
        said: list[str] = []
        run.train(on_notice=said.append)
        g, k = tr.steps_per_epoch, tr.rows_per_step
        epoch0_last = tuple(int(r) for r in tr._order(0)[(g - 1) * k : g * k])
    assert said and f"rolled back to step {last - 1}" in said[0], said
    retrained = [u for u in used if u[0] == last]
    assert len(retrained) == 2 and all(u[1:] == (0, epoch0_last) for u in retrained), retrained
    evals = [(r["step"], r["epoch"]) for r in rf.read_metrics(tmp_path / "r")
             if r["kind"] == "eval"]
    assert evals == [(last, 0), (2 * last, 1), (3 * last, 2)], evals
    steps = [r["step"] for r in rf.read_metrics(tmp_path / "r") if r["kind"] == "step"]
    assert steps == list(range(1, 3 * last + 1))


def test_a_ruinous_last_step_is_rolled_back_by_its_held_out_loss(tmp_path, monkeypatch):
    """No step's loss judges the last step's weights: a run whose last update ruined the model
    ended "finished" with a NaN held-out loss, those weights its latest snapshot. The final
    held-out loss judges them now (NaN/Inf, or worse than guessing)."""
    monkeypatch.setattr(DivergenceGuard, "update_problem", lambda *a: None)
    out = tmp_path / "r"
    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=4))
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        tr = run.trainer
        real = _ruin_from(4, tr, monkeypatch)  # the last step's update
        with pytest.raises(TrainingError) as err:
            run.train()
    assert str(err.value) == (
        "training diverged at its last step, 4 (the held-out loss is NaN/Inf); the model was "
        f"rolled back to step 3: lower the learning rate; kept {out / rf.SNAPSHOTS / 'step-3'}")
    assert rf.read_pointer(out)["step"] == 3 and rf.read_status(out)["state"] == "diverged"
    assert max(n for n, _ in rf.snapshots(out)) == 3
    assert [r["step"] for r in rf.read_metrics(out) if r["kind"] == "step"] == [1, 2, 3]
    from engine.run import load_model

    assert load_model(out).source.name == "step-3"
    monkeypatch.setattr(tr.optimizer, "step", real)
    with resume(out) as again:  # it goes on from step 3
        assert again.step == 3 and again.train().state == "finished"
