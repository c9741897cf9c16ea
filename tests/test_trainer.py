from dataclasses import replace

import numpy as np
import pytest

from engine import MambaLM, TrainConfig, TrainControl, Trainer
from engine.data import make_rows
from engine.errors import CorpusError, TrainingError
from engine.tokenizer import ByteTokenizer
from tests.helpers import tiny_config


def _lm(seed=0):
    return MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=seed)


def _ids(n=400, seed=0):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 16, size=8)
    return np.tile(base, n // 8 + 1)[:n] + rng.integers(0, 2, size=n)  # learnable pattern


@pytest.mark.parametrize("n", [17, 33, 40, 41])
def test_rows_cover_every_target_exactly_once(n):
    ids = np.arange(n)
    inputs, targets = make_rows(ids, 8)
    got = np.sort(targets[targets >= 0])
    np.testing.assert_array_equal(got, ids[1:])
    keep = targets >= 0
    np.testing.assert_array_equal(targets[keep], inputs[keep] + 1)  # target = next token


def test_grad_accumulation_equals_big_batch():
    ids = _ids(600)
    a = Trainer(_lm(), ids, ids[:0], TrainConfig(batch_size=4, grad_accum=1, seq_len=16,
                                                  shuffle=False, epochs=1, max_steps=3))
    b = Trainer(_lm(), ids, ids[:0], TrainConfig(batch_size=2, grad_accum=2, seq_len=16,
                                                  shuffle=False, epochs=1, max_steps=3))
    a.run()
    b.run()
    for x, y in zip(a.history, b.history, strict=True):
        assert x.loss == pytest.approx(y.loss, rel=1e-6)
        assert x.grad_norm == pytest.approx(y.grad_norm, rel=1e-5)
    for name in a.lm.params:
        np.testing.assert_allclose(a.lm.params[name], b.lm.params[name], rtol=1e-4, atol=1e-6)


def test_training_lowers_heldout_loss():
    ids = _ids(2000)
    tr = Trainer(_lm(), ids[:1600], ids[1600:], TrainConfig(batch_size=4, seq_len=32, epochs=3,
                                                             lr=1e-2, eval_every=5, warmup_steps=5))
    epochs = tr.run()
    vals = [r.val_loss for r in tr.history if r.val_loss is not None]
    assert len(vals) == len(tr.history) // 5 and vals[-1] < vals[0]
    assert epochs[-1].val is not None
    first = tr.history[0].loss
    assert epochs[-1].val.loss < 0.7 * first, (first, epochs[-1].val.loss)
    assert 0 <= epochs[-1].val.accuracy <= 1
    assert epochs[-1].val.perplexity == pytest.approx(np.exp(epochs[-1].val.loss))


def test_pause_and_stop_between_steps():
    import threading
    import time

    ids = _ids(3000)
    tr = Trainer(_lm(), ids, ids[:0], TrainConfig(batch_size=2, seq_len=16, epochs=50))
    control = TrainControl()
    seen = []
    t = threading.Thread(target=tr.run, kwargs={"on_step": seen.append, "control": control})
    t.start()
    while len(seen) < 2:
        time.sleep(0.01)
    control.pause()
    time.sleep(0.3)
    n_paused = len(seen)
    time.sleep(0.3)
    assert len(seen) <= n_paused + 1
    control.resume()
    time.sleep(0.3)
    control.stop()
    t.join(10)
    assert not t.is_alive()
    assert tr.cursor.step == len(seen) and len(seen) > n_paused


def test_nan_loss_is_reported_and_aborts_after_limit():
    ids = _ids(400)
    lm = _lm()
    lm.params["backbone.norm_f.weight"][0] = np.nan
    tr = Trainer(lm, ids, ids[:0], TrainConfig(batch_size=2, seq_len=16, max_bad_steps=3))
    seen = []
    with pytest.raises(TrainingError, match="NaN"):
        tr.run(on_step=seen.append)
    assert len(seen) == 3 and all(r.nonfinite for r in seen)


def test_corpus_shorter_than_one_sequence_is_a_clear_error():
    with pytest.raises(CorpusError, match="shorter than one sequence"):
        Trainer(_lm(), np.arange(10), np.arange(0), TrainConfig(seq_len=16))


def test_format_duration():
    from engine import format_duration

    assert format_duration(65.9) == "01:05"
    assert format_duration(3725) == "1:02:05"
    assert format_duration(float("inf")) == format_duration(float("nan")) == "--:--"


@pytest.mark.parametrize("max_steps,little", [(3, True), (49, True), (110, False), (330, False)])
def test_warmup_note_says_learns_little_only_for_a_short_run(max_steps, little):
    """run.sh's 110 steps on the sample corpus learn word-like text: its note no longer says the
    run learns little (it did on every default run); 33 steps still do learn little."""
    tr = Trainer(_lm(), _ids(4000), _ids(40), TrainConfig(batch_size=1, seq_len=8, epochs=1000,
                                                          max_steps=max_steps))
    note = tr.warmup_notice("--max-steps")
    assert note is not None and note.startswith(f"the 100-step warmup is cut to {max_steps // 5} ")
    assert ("learns little: raise --max-steps" in note) == little


def test_limited_by_names_the_total_that_ends_the_run():
    """The CLI said "--epochs" and the window "Epochs" from the same rule written in each: the
    setting to raise is the one whose total ends the run (epochs when both end it together)."""
    ids = _ids(800)
    base = TrainConfig(batch_size=3, seq_len=16, epochs=2)
    per_epoch = Trainer(_lm(), ids, ids[:100], base).steps_per_epoch
    assert per_epoch > 2
    for max_steps, want in ((None, "epochs"), (0, "epochs"), (2 * per_epoch, "epochs"),
                            (2 * per_epoch + 5, "epochs"), (per_epoch + 1, "max_steps")):
        tr = Trainer(_lm(), ids, ids[:100], replace(base, max_steps=max_steps))
        assert tr.limited_by == want, (max_steps, tr.total_steps)
