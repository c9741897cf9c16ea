"""The steps per epoch an estimate shows are the steps the run takes: both come from the packed
rows (``run.plan_epoch`` -> ``trainer.epoch_steps``), not from tokens / (batch x seq_len)."""

from dataclasses import replace
from pathlib import Path

import pytest

from engine.config import preset
from engine.estimate import estimate_run
from engine.run import RunSpec, plan_epoch, start
from engine.trainer import TrainConfig

SAMPLE = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"


@pytest.mark.parametrize("records,seq_len,batch", [("file", 256, 8), ("file", 64, 4),
                                                   ("line", 128, 8), ("blank-line", 256, 3)])
def test_plan_counts_the_rows_the_run_trains_on(tmp_path, records, seq_len, batch):
    spec = RunSpec(preset="tiny", records=records,
                   train=TrainConfig(batch_size=batch, seq_len=seq_len, seed=3))
    plan = plan_epoch(spec, [SAMPLE])
    with start(spec, [SAMPLE], out=tmp_path / "run") as run:
        tr = run.trainer
        assert plan.rows == len(tr.rows)
        assert plan.steps(spec.train) == tr.steps_per_epoch
        assert (plan.train_tokens, plan.held_out_tokens) == tr.token_counts
    est = estimate_run(preset("tiny", 257), spec.train, 0, rows=plan.rows)
    assert est.steps_per_epoch == tr.steps_per_epoch


def test_sample_corpus_estimate_is_not_tokens_over_batch(tmp_path):
    """The known case: 21 KB at 8 x 256 was shown as 10 steps an epoch; packing gives 11."""
    spec = RunSpec()
    tokens = sum(p.stat().st_size for p in SAMPLE.iterdir())
    naive = -(-(int(tokens * 0.9) // 256) // 8)
    with start(spec, [SAMPLE], out=tmp_path / "run") as run:
        steps, rows = run.trainer.steps_per_epoch, len(run.trainer.rows)
    assert steps != naive  # the count the estimate used to show
    plan = plan_epoch(spec, [SAMPLE])
    assert plan.steps(spec.train) == steps
    assert plan.steps(replace(spec.train, grad_accum=2)) == -(-rows // 16)


def test_plan_refuses_an_untrained_bpe():
    with pytest.raises(ValueError, match="trained on the corpus"):
        plan_epoch(RunSpec(tokenizer="bpe"), [SAMPLE])


def test_plan_of_a_run_started_from_a_bpe_model_uses_its_tokenizer(tmp_path):
    """``start`` trains a run with ``init`` on the starting model's tokenizer whatever the spec's
    tokenizer says; the plan counted byte rows for it (360 where the run had 145 on this text)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 400)
    train = TrainConfig(batch_size=2, seq_len=32, max_steps=1)
    with start(RunSpec(preset="tiny", tokenizer="bpe", bpe_vocab=300, train=train), [corpus],
               out=tmp_path / "bpe"):
        pass
    spec = RunSpec(preset="tiny", init=str(tmp_path / "bpe"), train=train)
    plan = plan_epoch(spec, [corpus])
    with start(spec, [corpus], out=tmp_path / "run") as run:
        assert run.lm.tokenizer.kind == "bpe"
        assert plan.rows == len(run.trainer.rows)
        assert plan.steps(spec.train) == run.trainer.steps_per_epoch


def test_an_epoch_under_a_second_is_not_called_0_s():
    """A 0.3 s epoch read "~0 s per epoch"."""
    from engine import MambaConfig, TrainConfig, estimate_run

    cfg = MambaConfig(vocab_size=256, d_model=64, n_layer=2)
    fast = estimate_run(cfg, TrainConfig(), 10_000, rows=8, step_s=0.3)  # 1 step of 8 rows
    assert "under 1 s per epoch (300 ms/step × 1)" in fast.human() and "~" not in fast.human()
    slow = estimate_run(cfg, TrainConfig(), 10_000, rows=800, step_s=0.3)
    assert "~30 s per epoch" in slow.human()


def test_epochs_that_end_a_run_first_name_the_epochs_that_reach_max_steps():
    """``epochs_end_first``: the epochs advised reach max steps (rounded up: 3 epochs of 11
    steps end at 33; max steps 60 needs 6, not 5); an estimate not told the epochs (0) and a
    run without max steps say nothing."""
    from engine.trainer import epochs_end_first

    assert epochs_end_first(11, 3, 60) == ("3 epochs end at step 33, before max steps 60", 6)
    assert epochs_end_first(11, 1, 12) == ("1 epoch ends at step 11, before max steps 12", 2)
    assert epochs_end_first(11, 3, 33) is None  # they end together
    assert epochs_end_first(11, 0, 60) is None  # (RunEstimate's default epochs)
    assert epochs_end_first(11, 3, None) is None and epochs_end_first(11, 3, 0) is None


def test_a_step_timing_stops_when_asked_and_within_its_budget(monkeypatch):
    """The window's background timing of a large setting (65,536-token rows) ran 5.5 minutes
    after the settings changed and beside the run started meanwhile, at half its speed. It is
    asked before each step whether to go on, and begins no step past its time budget."""
    from engine.errors import Stopped
    from engine.estimate import measure_step_seconds
    from engine.trainer import Trainer

    cfg = preset("tiny", vocab_size=256)
    tc = TrainConfig(batch_size=1, seq_len=16)
    ran: list[int] = []
    real = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step",
                        lambda self, idx: (ran.append(1), real(self, idx))[1])
    asked: list[int] = []
    with pytest.raises(Stopped):
        measure_step_seconds(cfg, tc, should_stop=lambda: asked.append(1) or len(asked) > 2)
    assert len(ran) == 2 and len(asked) == 3  # two steps, then stopped before the third
    ran.clear()
    assert measure_step_seconds(cfg, tc, budget_s=0.0) > 0
    assert len(ran) == 2  # the warm-up and one timed step: none begun past the budget
    ran.clear()
    assert measure_step_seconds(cfg, tc, should_stop=lambda: False) > 0
    assert len(ran) == 4  # otherwise the warm-up and three timed
