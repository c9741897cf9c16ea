"""Rules of a run's end and its resume that only a mutation of the code showed untested: a
finished run that holds out no text is not "unscored" (it has no held-out loss to measure), and
a score taken on resume at an epoch's end names that epoch."""

from __future__ import annotations

from engine.run import RunSpec, resume, start
from engine.trainer import TrainConfig

from .helpers import two_file_corpus


def test_a_finished_run_that_holds_out_nothing_is_not_waiting_to_be_scored(tmp_path):
    """A finished run with holdout 0, continued: it was taken as stopped before its final
    evaluation ("stopped before its held-out loss at step 2 was measured: measuring it"; the
    window said "finished" again instead of how to train it further)."""
    spec = RunSpec(preset="tiny", holdout=0.0, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, max_steps=2))
    with start(spec, [two_file_corpus(tmp_path)], root=tmp_path / "runs") as run:
        res = run.train()
    assert (res.state, res.val_loss, res.unscored) == ("finished", None, False)
    with resume(run.folder) as again:
        assert again.done and not again.trainer.has_val
        assert not again.unscored


def test_a_run_scored_at_its_epochs_end_on_resume_names_that_epoch(tmp_path):
    """A run stopped during the held-out evaluation at the end of its last epoch, then
    continued: the score's metrics row named the next epoch (1), not the one its step ends
    (0), unlike the step's own row."""
    from engine import runformat as rf
    from engine.control import TrainControl

    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1))
    c = TrainControl()
    with start(spec, [two_file_corpus(tmp_path)], root=tmp_path / "runs") as run:
        scored = run.trainer.held_out

        def stop_while_scoring(should_stop=None):  # type: ignore[no-untyped-def]
            if run.done:  # the final evaluation (not one inside the epoch)
                c.stop()
            return scored(should_stop)

        run.trainer.held_out = stop_while_scoring  # type: ignore[method-assign]
        assert run.train(control=c).unscored
    with resume(run.folder) as again:
        assert again.trainer.cursor.group == 0 and again.unscored  # at its epoch's end
        res = again.train()
    assert res.state == "finished" and res.val_loss is not None
    rows = rf.read_metrics(run.folder)
    last_step = [r for r in rows if r["kind"] == "step"][-1]
    score = [r for r in rows if r["kind"] == "eval"][-1]
    assert (score["step"], score["epoch"]) == (last_step["step"], last_step["epoch"]) == (
        res.step, 0)
