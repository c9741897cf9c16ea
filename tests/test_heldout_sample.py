"""Held-out evaluation is bounded (a fixed, evenly spread sample of HELDOUT_SAMPLE_TOKENS) and
gives up between batches when a stop is asked (Stop / SIGTERM must not wait for it)."""

from pathlib import Path

import numpy as np
import pytest

import engine.model
from engine import MambaLM, TrainControl
from engine.documents import encode_documents
from engine.evaluation import EvalStopped, evaluate, sample_rows
from engine.packing import pack_spans
from engine.run import RunSpec, start
from engine.tokenizer import ByteTokenizer
from engine.trainer import TrainConfig
from tests.helpers import tiny_config


def _lm() -> MambaLM:
    return MambaLM.create(tiny_config(vocab_size=257), ByteTokenizer(), seed=0)


def _ids(n: int = 3000) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, n).astype(np.uint16)


def test_sample_rows_are_all_rows_or_evenly_spread():
    assert sample_rows(10, 32, None).tolist() == list(range(10))
    assert sample_rows(10, 32, 320).tolist() == list(range(10))
    picked = sample_rows(1000, 32, 32 * 50)
    assert len(picked) == 50 and picked[0] == 0 and picked[-1] == 999
    gaps = np.diff(picked)
    assert gaps.min() >= 19 and gaps.max() <= 21  # spread over the whole set, not its start


def test_stream_eval_scores_a_bounded_deterministic_sample():
    lm, ids = _lm(), _ids()
    full = evaluate(lm, ids, 16)
    assert full.tokens == full.of_tokens == len(ids) - 1 and not full.sampled
    a = evaluate(lm, ids, 16, max_tokens=320)
    b = evaluate(lm, ids, 16, max_tokens=320)
    assert a == b and a.sampled and a.tokens <= 320 and a.of_tokens == len(ids) - 1
    assert "sample of" in a.describe() and f"{a.of_tokens:,}" in a.describe()
    assert abs(a.loss - full.loss) < 0.5  # an estimate of the same quantity


def test_packed_eval_samples_rows_spread_over_the_documents(tmp_path: Path):
    (tmp_path / "a.txt").write_text("".join(f"line {i} of many lines\n" for i in range(600)))
    from engine.data import load_corpus

    docs = encode_documents(load_corpus([tmp_path]), ByteTokenizer(), "line")
    rows = pack_spans(docs.ids, docs.spans(), 32)
    lm = _lm()
    r = evaluate(lm, rows, 32, max_tokens=32 * 10)
    assert r.sampled and r.tokens <= 320 and r.of_tokens == rows.n_targets
    assert evaluate(lm, rows, 32).tokens == rows.n_targets


def test_stop_between_batches_raises_eval_stopped():
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 1  # stop after the first batch

    with pytest.raises(EvalStopped):
        evaluate(_lm(), _ids(), 16, batch_size=2, should_stop=stop)
    assert len(calls) == 2


@pytest.mark.parametrize("eval_every", [1, 0])  # the periodic eval; the final one (max steps)
def test_stop_during_heldout_eval_ends_the_run_promptly_and_saves(tmp_path, monkeypatch,
                                                                  eval_every):
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("".join(f"example number {i} is here\n" for i in range(400)))
    spec = RunSpec(preset="tiny", records="line", holdout=0.5, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=1,
                                     eval_every=eval_every))
    control = TrainControl()
    forward = engine.model.logits_forward
    evals = []

    def counting(*a, **k):  # only evaluation calls logits_forward (training uses loss_and_grad)
        evals.append(1)
        control.stop()  # Stop pressed while the held-out set is being scored
        return forward(*a, **k)

    with start(spec, [corpus], out=tmp_path / "r") as run:
        assert len(run.trainer.val_rows) > 16  # the held-out set is several batches long
        monkeypatch.setattr(engine.model, "logits_forward", counting)
        result = run.train(control=control)
    assert len(evals) == 1  # one batch, then the stop was seen; no final evaluation either
    assert result.step == 1 and result.snapshot.name == "step-1" and result.snapshot.is_dir()



def test_the_run_says_when_its_held_out_loss_is_a_sample(tmp_path, monkeypatch, capsys):
    """One note from the run (the CLI and the window each phrased their own), printed by both
    among the run's notices."""
    import engine.run as runmod
    from engine.cli import main

    monkeypatch.setattr(runmod, "HELDOUT_SAMPLE_TOKENS", 64)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    spec = runmod.RunSpec(preset="tiny", train=runmod.TrainConfig(batch_size=2, seq_len=32,
                                                                  max_steps=1))
    with runmod.start(spec, [corpus], out=tmp_path / "r") as run:
        held = run.trainer.token_counts[1]
        assert any(n.startswith(f"held-out loss is measured on a fixed sample of about 64 of "
                                f"the {held:,} held-out tokens") for n in run.notices)
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--max-steps", "2",
                 "--sample-tokens", "0"]) == 0
    assert "note: held-out loss is measured on a fixed sample of about 64" in capsys.readouterr().err


def test_eval_metrics_equal_a_float64_log_softmax_of_the_logits():
    """The held-out loss and accuracy are the float64 log-softmax's and NumPy argmax's over the
    model's own logits (the fused scoring kernel sums float32 exps in float64)."""
    from engine.data import make_rows
    from engine.model import logits_forward

    lm, ids = _lm(), _ids(700)
    x, y = make_rows(ids, 16)
    lg = logits_forward(lm.params, np.asarray(x), lm.config).astype(np.float64)
    lg = lg.reshape(-1, lg.shape[-1])
    tg = np.asarray(y).reshape(-1)
    lg, tg = lg[tg >= 0], tg[tg >= 0]  # the last row's padding
    mx = lg.max(axis=1)
    lse = mx + np.log(np.exp(lg - mx[:, None]).sum(axis=1))
    loss = float((lse - lg[np.arange(len(tg)), tg]).mean())
    acc = float((lg.argmax(axis=1) == tg).mean())
    r = evaluate(lm, ids, 16, batch_size=4)
    assert r.tokens == len(tg)
    assert r.loss == pytest.approx(loss, rel=1e-6) and r.accuracy == acc
