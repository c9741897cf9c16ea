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


def test_bad_weights_at_a_runs_first_step_end_it_diverged_not_in_a_crash(tmp_path, monkeypatch):
    """Step 1's loss is that of the weights the run started from: no rollback point exists yet,
    so the guard ends the run with a one-line TrainingError that says so (rolling back there
    tripped the restore's assertion: a traceback, status left at "running")."""
    monkeypatch.setattr(DivergenceGuard, "loss_problem", lambda *a: "forced")
    out = tmp_path / "r"
    with (start(_spec(), [two_file_corpus(tmp_path, 30)], out=out) as run,
          pytest.raises(TrainingError) as err):
        run.train()
    assert str(err.value).startswith("training diverged at step 1: forced, at the weights it "
                                     "started from (no update of this run had changed them yet)")
    assert rf.read_status(out)["state"] == "diverged" and rf.read_pointer(out)["step"] == 0
    assert [r for r in rf.read_metrics(out) if r["kind"] == "step"] == []


def test_the_held_out_rule_calls_worse_than_guessing_by_the_runs_own_limit():
    """The last step's weights are judged by their held-out loss: NaN/Inf, or above the loss
    rule's limit (2 ln(vocab) + 1, or twice the first step's loss when that is higher). The
    finite case and the first-loss bound had no test: either could be dropped unnoticed."""
    tr = _Trainer()  # vocab 256: 2 ln 256 + 1 = 12.09
    guard = DivergenceGuard()
    guard._first_loss = 5.5
    assert "above 12.1 (worse than guessing)" in (guard.held_out_problem(tr, 20.0) or "")
    assert guard.held_out_problem(tr, 12.0) is None
    assert guard.held_out_problem(tr, float("inf")) == "the held-out loss is NaN/Inf"
    guard._first_loss = 10.0  # an init with large logits: its own start is the bound (20)
    assert guard.held_out_problem(tr, 15.0) is None
    assert "above 20 (worse than guessing)" in (guard.held_out_problem(tr, 21.0) or "")


def test_a_resume_that_trains_no_step_does_not_judge_its_snapshot(tmp_path, monkeypatch):
    """The final held-out judgment rolls back to the guard's rollback point, which only a step
    of this call keeps: a resume of a finished run trains nothing, and its snapshot's held-out
    loss is not judged (there is nothing to roll back to: restore's assertion)."""
    out = tmp_path / "r"
    with start(_spec(max_steps=2), [two_file_corpus(tmp_path, 30)], out=out) as run:
        assert run.train().state == "finished"
    monkeypatch.setattr(DivergenceGuard, "held_out_problem", lambda *a: "forced")
    with resume(out) as again:
        assert again.saved_val is not None and again.train().state == "finished"
    assert rf.read_pointer(out)["step"] == 2


def test_the_samples_of_steps_a_rollback_undid_leave_the_gallery(tmp_path, monkeypatch):
    """The CLI and the window append a sample at reported steps: a rollback past them dropped
    their metric rows, and their samples must go too (the Gallery showed step 4's text, of
    weights found bad, three times: once for each retry)."""
    from engine.samples import read_samples

    monkeypatch.setattr(DivergenceGuard, "update_problem", lambda *a: None)
    out = tmp_path / "r"
    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=10))
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        _ruin_from(4, run.trainer, monkeypatch)

        def sampled(r: StepReport) -> None:
            append_sample(out, {"step": r.step, "epoch": r.epoch, "text": f"at {r.step}"})

        with pytest.raises(TrainingError, match="diverged 3 times"):
            run.train(on_step=sampled)
    assert [s["step"] for s in read_samples(out)] == [1, 2, 3]


def test_a_held_out_loss_a_rollback_undid_leaves_early_stopping(tmp_path, monkeypatch):
    """Step 4's weights gave a held-out loss far below the rest (1.0) and were then found bad
    (step 5's loss): rolled back, that loss is no longer early stopping's best. Kept as the best,
    every retrained evaluation counted as one without improvement and patience 2 stopped a run
    that was still improving."""
    import dataclasses

    from engine.earlystop import EarlyStopping

    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   early_stopping=EarlyStopping(patience=2),
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=10,
                                     eval_every=1))
    real = DivergenceGuard.loss_problem
    fired: list[int] = []

    def forced(self, trainer, loss):  # noqa: ANN001, ANN202
        if trainer.cursor.step == 4 and not fired:  # step 5's loss: step 4's weights are bad
            fired.append(1)
            return "forced"
        return real(self, trainer, loss)

    monkeypatch.setattr(DivergenceGuard, "loss_problem", forced)
    with start(spec, [two_file_corpus(tmp_path, 30)], out=tmp_path / "r") as run:
        tr = run.trainer
        measure = tr.held_out
        seen: list[int] = []

        def held_out(*a):  # noqa: ANN002, ANN202  (improving by 0.1 a step; step 4's first: 1.0)
            val = measure(*a)
            step = tr.cursor.step
            loss = 1.0 if step == 4 and step not in seen else 5.0 - 0.1 * step
            seen.append(step)
            return dataclasses.replace(val, loss=loss)

        monkeypatch.setattr(tr, "held_out", held_out)
        said: list[str] = []
        result = run.train(on_notice=said.append)
    assert fired and any("rolled back to step 3" in s for s in said), said
    assert (result.state, run.step) == ("finished", 10), (result.state, result.reason, run.step)
    assert run.early_bad == 0


def test_a_diverged_runs_last_good_state_keeps_its_own_early_stopping_count(tmp_path,
                                                                           monkeypatch):
    """Saved when the guard gives up, the last good state (step 3) carries early stopping's
    count of evaluations without improvement as it was at step 3: the undone step 4's
    evaluation no longer counts (a resume would stop one evaluation early)."""
    import dataclasses

    from engine.earlystop import EarlyStopping

    monkeypatch.setattr(DivergenceGuard, "update_problem", lambda *a: None)
    out = tmp_path / "r"
    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   early_stopping=EarlyStopping(patience=20),
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=10,
                                     eval_every=1))
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        tr = run.trainer
        _ruin_from(4, tr, monkeypatch)
        measure = tr.held_out
        monkeypatch.setattr(tr, "held_out", lambda *a: dataclasses.replace(measure(*a), loss=5.0))
        with pytest.raises(TrainingError, match="diverged 3 times"):
            run.train()  # evaluations at steps 1-3: the first the best, then 2 without
    assert rf.read_pointer(out)["step"] == 3
    with resume(out) as again:
        assert again.step == 3 and again.early_bad == 2


def test_dropping_bad_snapshots_re_points_latest_and_best_at_what_is_left(tmp_path):
    """``drop_after`` (a rollback past saved steps) leaves latest.json naming the newest kept
    snapshot with that snapshot's own held-out loss (the Runs list shows it, and the run's
    saved loss is set from it), and best.json naming the best of those left, not a deleted one."""
    out = tmp_path / "r"
    spec = RunSpec(preset="tiny", autosave_steps=1, autosave_minutes=0, keep=10,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=4,
                                     eval_every=1))
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        run.train()
    vals = {r["step"]: r["val_loss"] for r in rf.read_metrics(out) if r["kind"] == "eval"}
    assert rf.best_pointer(out)["step"] == min(vals, key=vals.get) > 2, vals
    assert rf.drop_after(out, 2) == (2, pytest.approx(vals[2]))
    assert [n for n, _ in rf.snapshots(out)] == [0, 1, 2]
    assert sorted(p.name for p in (out / rf.SNAPSHOTS).iterdir()) == ["step-0", "step-1",
                                                                      "step-2"]  # (none set aside)
    latest = json.loads((out / rf.LATEST).read_text())
    assert (latest["snapshot"], latest["val_loss"]) == ("step-2", pytest.approx(vals[2]))
    best = json.loads((out / rf.BEST).read_text())
    assert best["snapshot"] == f"step-{min((1, 2), key=vals.get)}", (best, vals)


@pytest.mark.parametrize("recorded", [0.0, -0.5, float("nan"), float("inf")])
def test_a_held_out_tokens_per_byte_that_is_no_ratio_falls_back_to_the_corpuss(tmp_path,
                                                                              recorded):
    """The data manifest is not hashed: a hand-edited or damaged held-out tokens per byte (0,
    negative, NaN, Inf) would give the Runs list and the plots a bits/byte of 0, below 0 or
    NaN; the corpus's ratio is taken instead, as for a run made before it was recorded."""
    out = tmp_path / "r"
    with start(_spec(max_steps=1), [two_file_corpus(tmp_path, 30)], out=out) as run:
        corpus_tpb = run.data.tokens_per_byte
    manifest = out / rf.DATA_MANIFEST
    m = json.loads(manifest.read_text())
    assert type(m["heldout_tokens_per_byte"]) is float
    m["heldout_tokens_per_byte"] = recorded
    manifest.write_text(json.dumps(m))
    assert corpus_tpb and rf.read_tokens_per_byte(out) == pytest.approx(corpus_tpb)


def test_dropping_snapshots_never_deletes_through_a_linked_snapshots_folder(tmp_path):
    """A snapshots folder that is a link (to a user's folder) is never deleted in: the guard's
    drop after a rollback is refused there as every other write into it is."""
    run, theirs = tmp_path / "run", tmp_path / "theirs"
    (theirs / "step-5").mkdir(parents=True)
    (theirs / "step-5" / "notes.txt").write_text("mine")
    run.mkdir()
    (run / rf.SNAPSHOTS).symlink_to(theirs)
    assert rf.drop_after(run, 2) is None
    assert (theirs / "step-5" / "notes.txt").read_text() == "mine"


def _rolled_back_run(tmp_path, monkeypatch, losses: dict[int, float]):  # noqa: ANN001, ANN202
    """A run whose step 4 first measures a held-out loss of 1.0, then is found bad by the guard
    at step 5 and rolled back; its other evaluations (and the retrained step 4's) are
    ``losses``. Returns the closed run, its folder and whether the rollback happened."""
    import dataclasses

    spec = RunSpec(preset="tiny", autosave_steps=0, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=10,
                                     eval_every=1))
    real = DivergenceGuard.loss_problem
    fired: list[int] = []

    def step_5_finds_step_4s_weights_bad(self, trainer, loss):  # noqa: ANN001, ANN202
        if trainer.cursor.step == 4 and not fired:
            fired.append(1)
            return "forced"
        return real(self, trainer, loss)

    monkeypatch.setattr(DivergenceGuard, "loss_problem", step_5_finds_step_4s_weights_bad)
    out = tmp_path / "r"
    with start(spec, [two_file_corpus(tmp_path, 30)], out=out) as run:
        tr, seen = run.trainer, []
        measure = tr.held_out

        def held_out(*a):  # noqa: ANN002, ANN202
            val, step = measure(*a), tr.cursor.step
            loss = 1.0 if step == 4 and step not in seen else losses.get(step, 4.9)
            seen.append(step)
            return dataclasses.replace(val, loss=loss)

        monkeypatch.setattr(tr, "held_out", held_out)
        run.train()
    return run, out, bool(fired)


def test_a_best_held_out_loss_a_rollback_undid_is_no_longer_the_runs_best(tmp_path, monkeypatch):
    """A rollback past a snapshot saved as best kept its held-out loss (1.0) as the run's best:
    the better steps after it (4.5, 4.4) were never saved as best, best.json named step 3 and
    status.json said a best of 1.0 from weights the guard threw away."""
    run, out, fired = _rolled_back_run(tmp_path, monkeypatch, {1: 4.8, 2: 4.7, 3: 4.6, 4: 4.5,
                                                               5: 4.4})
    assert fired and run.best_val == pytest.approx(4.4)
    assert rf.best_pointer(out)["step"] == 5  # the retrained run's best, saved
    assert rf.read_status(out)["best_val_loss"] == pytest.approx(4.4)


def test_after_a_rollback_the_best_kept_from_before_it_stays_the_runs_best(tmp_path, monkeypatch):
    """After the rollback the run's best is best.json's again (step 3's 4.6), not none: the
    retrained steps' worse losses (4.65, 4.7) must not replace it as best."""
    run, out, fired = _rolled_back_run(tmp_path, monkeypatch, {1: 4.8, 2: 4.7, 3: 4.6, 4: 4.65,
                                                               5: 4.7})
    assert fired and run.best_val == pytest.approx(4.6)
    assert rf.best_pointer(out)["step"] == 3
    assert rf.read_status(out)["best_val_loss"] == pytest.approx(4.6)


def _text_then_other_text(tmp_path):  # noqa: ANN202
    """A file of one line repeated (its loss falls to ~0), then a file of random symbols."""
    import random

    rng = random.Random(0)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the cat sat on the mat.\n" * 700)
    b.write_text("".join(rng.choice("qwxzjkv0123456789QWXZJKV!@#$%^&*") for _ in range(3000)))
    return [a, b]


def test_a_batch_of_other_text_is_kept_not_called_a_divergence(tmp_path):
    """Near-duplicate text, then a file of other text, in order: the new text's first batches
    jumped above twice the median loss and spiked the gradient norm; each retry (rolled back, the
    rate halved) scored the same, three rollbacks ended the healthy run "diverged" with "lower
    the learning rate", which could not help. A retry that shows the same is the batch's: the
    step is kept, said, and the rate goes back."""
    said: list[str] = []
    spec = RunSpec(preset="tiny", tokenizer="bytes", holdout=0.0, autosave_steps=0,
                   autosave_minutes=0, train=TrainConfig(batch_size=2, seq_len=64, epochs=1,
                                                         shuffle=False))
    with start(spec, _text_then_other_text(tmp_path), out=tmp_path / "r") as run:
        result = run.train(on_notice=said.append)
        assert result.state == "finished" and run.trainer.lr_scale == 1.0, (result, said)
    rolled = [m for m in said if "diverged" in m]
    kept = [m for m in said if "unlike the text before it" in m]
    assert rolled and kept and len(rolled) <= 3, said  # (once for the new text, not each step)
    assert any(m.endswith("so it is the text's, not a divergence: kept, and the learning rate "
                          "is back to scale 1") for m in kept), kept


def test_a_jump_whose_retry_scores_otherwise_is_still_the_weights():
    """The retry's rule keeps only a loss that comes back within 5 % of the one before: one
    that moved with the weights (lower at the halved rate) is theirs, and NaN never the batch's."""
    guard = DivergenceGuard()
    tr = _Trainer()
    guard._losses = [0.1] * 5
    tr.lr_scale, guard.rollbacks = 1.0, 0
    assert not guard._jump_is_the_batchs(tr, 6, 3.0)  # the first: remembered
    tr.lr_scale, guard.rollbacks = 0.5, 1
    assert not guard._jump_is_the_batchs(tr, 6, 2.0)  # 33 % lower at the retry: the weights'
    tr.lr_scale, guard.rollbacks = 0.25, 2  # (2.0 remembered in its place, at scale 0.5)
    assert guard._jump_is_the_batchs(tr, 6, 2.05)  # within 5 % of the one before: the batch's
    assert (tr.lr_scale, guard.rollbacks) == (0.5, 1)  # the rate and count before that retry
    assert guard._losses == []  # the medians start again from the new text
    assert guard._jump_is_the_batchs(tr, 6, 2.0) and not guard._jump_is_the_batchs(tr, 6, 2.5)
    assert not guard._jump_is_the_batchs(tr, 7, float("nan"))
