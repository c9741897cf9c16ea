"""A run keeps its early stopping (run.json): a resume stops as the run was set to, the CLI's
--patience / --target-loss and a settings file go over it setting by setting, and its patience
counts from the run's best held-out loss, not from scratch."""

import json
from dataclasses import replace

import pytest

import engine
from engine.cli import main
from engine.earlystop import EarlyStopping
from engine.run import RunSpec, read_run_spec, resume, start
from engine.trainer import TrainConfig

TINY = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0",
        "--eval-every", "2"]


@pytest.fixture
def corpus(tmp_path):
    c = tmp_path / "c.txt"
    c.write_text("the cat sat on the mat. " * 400)
    return c


def test_fresh_keeps_the_settings_and_counts_from_the_best_given():
    es = EarlyStopping(patience=1, target_loss=0.5, min_delta=0.01)
    es.update(3.0)
    new = es.fresh(2.0)
    assert new.settings() == es.settings() and (new.bad, new.reason) == (0, "")
    assert new.update(2.5) and "not improved on 2.0000" in new.reason  # no better than the best
    assert not EarlyStopping(patience=1).fresh(None).update(2.5)  # nothing to beat yet


def test_a_resumed_run_stops_as_it_was_set_to(tmp_path, corpus):
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=12,
                                                    eval_every=2),
                   early_stopping=EarlyStopping(target_loss=900.0))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        assert run.train().step == 2
    saved = json.loads((tmp_path / "r" / "run.json").read_text())["spec"]["early_stopping"]
    assert saved == {"patience": 0, "target_loss": 900.0, "min_delta": 0.0}
    with resume(tmp_path / "r") as run:  # no settings given: the run's own
        result = run.train()
    assert (result.step, result.state) == (4, "stopped") and "900" in result.reason
    with resume(tmp_path / "r", early_stopping=EarlyStopping()) as run:  # turned off: kept so
        assert run.train().state == "finished" and run.step == 12
    assert not read_run_spec(tmp_path / "r").early_stopping.enabled


def test_patience_counts_from_the_runs_best_across_a_resume(tmp_path, corpus):
    """The best a resumed run has (best.json) is what an evaluation must beat: with patience 1
    and a best no evaluation can reach, the first evaluation after the resume stops it."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=12,
                                                    eval_every=2))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        run.train(control=_stop_at(run, 4))
    best = tmp_path / "r" / "best.json"
    d = json.loads(best.read_text())
    best.write_text(json.dumps({**d, "val_loss": 1e-6}))  # a best no evaluation beats
    with resume(tmp_path / "r", early_stopping=EarlyStopping(patience=1)) as run:
        result = run.train()
    assert (result.state, result.step) == ("stopped", 6)
    assert "has not improved on 0.0000 for 1 evaluation (patience 1)" in result.reason


def _stop_at(run, step):
    control = engine.TrainControl()
    tr = run.trainer
    real = tr.train_step

    def step_then_stop(*a, **k):
        out = real(*a, **k)
        if tr.cursor.step >= step:
            control.stop()
        return out
    tr.train_step = step_then_stop
    return control


def test_cli_resume_keeps_the_runs_early_stopping_and_flags_go_over_it(tmp_path, corpus,
                                                                       capsys):
    out = tmp_path / "run"
    assert main(["train", str(corpus), *TINY, "--max-steps", "12", "--target-loss", "900",
                 "--patience", "4", "--out", str(out)]) == 0
    assert "stopped (early stopping" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--sample-tokens", "0"]) == 0  # kept
    err = capsys.readouterr().err
    assert "stopped (early stopping: held-out loss" in err and "at step 4" in err
    assert main(["train", "--resume", str(out), "--sample-tokens", "0", "--target-loss",
                 "0"]) == 0  # the target off; the patience (not reached) kept
    err = capsys.readouterr().err
    assert "finished: saved" in err and "at step 12" in err
    es = read_run_spec(out).early_stopping
    assert (es.patience, es.target_loss) == (4, None)


def test_cli_resume_with_a_settings_file_takes_its_early_stopping_keys(tmp_path, corpus,
                                                                       capsys):
    out = tmp_path / "run"
    assert main(["train", str(corpus), *TINY, "--max-steps", "12", "--patience", "5",
                 "--out", str(out), "--max-steps", "2"]) == 0
    f = tmp_path / "s.toml"
    f.write_text("[early_stopping]\ntarget_loss = 900.0\n")
    assert main(["train", "--resume", str(out), "--config", str(f), "--max-steps", "12",
                 "--sample-tokens", "0"]) == 0
    assert "stopped (early stopping: held-out loss" in capsys.readouterr().err
    es = read_run_spec(out).early_stopping
    assert (es.patience, es.target_loss) == (5, 900.0)  # the file's key over the run's own


def test_an_old_run_json_without_early_stopping_resumes_with_it_off(tmp_path, corpus):
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=2))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        run.train()
    p = tmp_path / "r" / "run.json"
    d = json.loads(p.read_text())
    del d["spec"]["early_stopping"]
    p.write_text(json.dumps(d))
    assert read_run_spec(tmp_path / "r").early_stopping == EarlyStopping()
    with resume(tmp_path / "r", max_steps=4) as run:
        assert run.train().state == "finished" and run.step == 4


@pytest.mark.parametrize("bad, words", [({"patience": "3"}, "early_stopping.patience = '3'; "
                                                          "expected a whole number"),
                                        ({"patience": True}, "early_stopping.patience = True"),
                                        ({"min_delta": "x"}, "early_stopping.min_delta = 'x'"),
                                        ({"target_loss": -1}, "early_stopping.target_loss = -1"),
                                        ({"bogus": 1},
                                         "early_stopping has no setting 'bogus' (it has patience")
                                        ])
def test_a_hand_edited_early_stopping_is_one_line(tmp_path, corpus, capsys, bad, words):
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=2))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        run.train()
    p = tmp_path / "r" / "run.json"
    d = json.loads(p.read_text())
    d["spec"]["early_stopping"] = bad
    p.write_text(json.dumps(d))
    assert main(["train", "--resume", str(tmp_path / "r"), "--max-steps", "4"]) != 0
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_evaluation_at_an_epochs_end_is_counted_once(tmp_path, corpus):
    """A cadence evaluation on an epoch's last step fed early stopping twice: the same loss a
    second time counted as "no improvement", and with patience 1 a run improving at every
    evaluation stopped at its first epoch's end."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64, max_steps=60),
                   early_stopping=EarlyStopping(patience=1))
    with start(spec, [corpus], out=tmp_path / "probe") as run:
        per_epoch = run.trainer.steps_per_epoch
    spec = replace(spec, train=replace(spec.train, eval_every=per_epoch,
                                       max_steps=2 * per_epoch))
    fed: list[float] = []
    real = EarlyStopping.update

    def update(self, val):  # noqa: ANN001
        fed.append(val)
        return real(self, val)

    EarlyStopping.update = update
    try:
        with start(spec, [corpus], out=tmp_path / "r") as run:
            result = run.train()
    finally:
        EarlyStopping.update = real
    evals = [r for r in engine.read_metrics(tmp_path / "r") if r["kind"] == "eval"]
    assert len(fed) == len(set(fed)), fed  # each evaluation once
    if evals[0]["val_loss"] > evals[-1]["val_loss"]:  # it improved: it ran to its end
        assert result.state == "finished" and result.step == 2 * per_epoch


def test_evaluations_without_improvement_count_across_a_resume(tmp_path, corpus):
    """Patience counted from 0 again at every resume (a run stopped and resumed often never
    stopped early); the count since the best is saved with each snapshot."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=2,
                                                    eval_every=1),
                   early_stopping=EarlyStopping(patience=3))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        run.train()
    best = tmp_path / "r" / "best.json"
    best.write_text(json.dumps({**json.loads(best.read_text()), "val_loss": 1e-6}))
    with resume(tmp_path / "r", max_steps=4) as run:  # step 3: one without improvement (the
        assert run.train().state == "finished"  # run's own last step is not fed)
        assert run.early_bad == 1
    with resume(tmp_path / "r", max_steps=20) as run:
        assert run.early_bad == 1
        result = run.train()
    assert (result.state, result.step) == ("stopped", 6)  # steps 5 and 6 make three
    assert "for 3 evaluations (patience 3)" in result.reason


def test_cli_flags_go_over_a_files_early_stopping_new_and_resumed(tmp_path, corpus, capsys):
    """--patience over a file naming patience wins (new run); with --resume, a file's target and
    a flag's patience both apply; an early stop shows a sample of the model it stopped with."""
    f = tmp_path / "s.toml"
    f.write_text("[early_stopping]\npatience = 5\n")
    out = tmp_path / "run"
    assert main(["train", str(corpus), *TINY, "--config", str(f), "--patience", "1",
                 "--max-steps", "2", "--out", str(out)]) == 0
    assert read_run_spec(out).early_stopping.patience == 1
    f.write_text("[early_stopping]\ntarget_loss = 900.0\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--config", str(f), "--patience", "3",
                 "--max-steps", "12", "--sample-tokens", "4"]) == 0
    es = read_run_spec(out).early_stopping
    assert (es.patience, es.target_loss) == (3, 900.0)
    err = capsys.readouterr().err
    assert "stopped (early stopping" in err and "the end of the run ---" in err
    assert err.count("--- sample") == len({
        line for line in err.splitlines() if line.startswith("--- sample")})  # none twice


def test_auto_eval_cadence_follows_the_held_out_size_and_the_step(tmp_path, corpus):
    """eval_every 0: under 10 % of training time from the held-out size (capped at the sample
    evaluated), the rows of an optimizer step (batch x accumulation) and the sequence length."""
    from engine.evaluation import HELDOUT_SAMPLE_TOKENS, auto_eval_every

    assert auto_eval_every(3000, 8, 256) == 8  # ceil(3000 / (0.3 * 2048) * 1.5)
    assert auto_eval_every(10**9, 8, 256) == auto_eval_every(HELDOUT_SAMPLE_TOKENS, 8, 256)
    assert auto_eval_every(10, 8, 256) == 1
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, grad_accum=2,
                                                    max_steps=1))
    with start(spec, [corpus], out=tmp_path / "r") as run:
        tr = run.trainer
        assert tr.eval_every == auto_eval_every(tr.token_counts[1], 4, 32)
    explicit = replace(spec, train=replace(spec.train, eval_every=7))
    with start(explicit, [corpus], out=tmp_path / "e") as run:
        assert run.trainer.eval_every == 7


def test_the_resumed_measurement_feeds_early_stopping_and_is_saved(tmp_path):
    """The held-out loss a resume measures first (its run was stopped during that evaluation)
    counts for early stopping as in the uninterrupted run, and is saved into its snapshot
    (a second kill would have measured it again)."""
    import json

    from engine import runformat as rf
    from engine.earlystop import EarlyStopping
    from engine.run import RunSpec, resume, start
    from tests.helpers import train_stopped_while_scoring
    from tests.test_cli import _corpus

    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   early_stopping=EarlyStopping(patience=100, min_delta=10.0),
                   train=TrainConfig(batch_size=2, seq_len=32, max_steps=6, eval_every=2))
    corpus = _corpus(tmp_path)
    with start(spec, [corpus], out=tmp_path / "plain") as run:
        run.train()
    with start(spec, [corpus], out=tmp_path / "stopped") as run:
        train_stopped_while_scoring(run)
    with resume(tmp_path / "stopped") as run:
        seen = []
        run.train(on_step=lambda r: seen.append(
            json.loads((tmp_path / "stopped" / rf.SNAPSHOTS / "step-2" / "trainer.json").read_text())
            if r.step == 3 else None))

    def bad(folder):
        return json.loads((folder / rf.SNAPSHOTS / "step-6" / "trainer.json").read_text())["early_bad"]

    assert bad(tmp_path / "stopped") == bad(tmp_path / "plain") == 1
    meta = seen[0]  # step-2 re-saved with its measured loss, no longer marked
    assert meta.get("val_loss") is not None and "eval_stopped" not in meta


def test_a_run_its_early_stopping_ended_is_listed_as_such(tmp_path, corpus):
    """The Runs list said "stopped" of a run early stopping ended, as of one stopped by hand,
    and its Continue stopped again after a few steps without a word before. status.json keeps
    the reason; the list says "early-stopped"; a run stopped by hand stays "stopped"."""
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=12,
                                                    eval_every=2),
                   early_stopping=EarlyStopping(target_loss=900.0))
    with start(spec, [corpus], out=tmp_path / "runs" / "early") as run:
        reason = run.train().reason
    assert engine.read_status(tmp_path / "runs" / "early")["reason"] == reason
    with start(replace(spec, early_stopping=EarlyStopping()), [corpus],
               out=tmp_path / "runs" / "hand") as run:
        control = engine.TrainControl()
        run.train(control=control, on_step=lambda r: control.stop())
    states = {r.name: r.status for r in engine.list_runs(tmp_path / "runs")}
    assert states == {"early": "early-stopped", "hand": "stopped"}, states
    assert "reason" not in engine.read_status(tmp_path / "runs" / "hand")


def test_a_resume_of_a_run_its_early_stopping_ended_says_it_stops_again(tmp_path, corpus, capsys):
    """``train --resume`` of such a run stopped again after two steps without a word (only the
    window warned): the engine's note, printed by the CLI; not when early stopping changes."""
    out = tmp_path / "r"
    assert main(["train", str(corpus), *TINY, "--max-steps", "12", "--target-loss", "900",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("note: r was ended by its early stopping: held-out loss" in err
            and "it stops again at its next held-out check unless --patience or --target-loss "
            "change" in err), err
    assert main(["train", "--resume", str(out), "--target-loss", "0"]) == 0
    assert "was ended by its early stopping" not in capsys.readouterr().err
