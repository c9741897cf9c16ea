import numpy as np
import pytest

from engine import LoRAConfig, MambaLM, TrainConfig, Trainer
from engine.adapt import FastAdapter
from engine.params import short_name
from engine.tokenizer import ByteTokenizer
from tests.helpers import tiny_config

TEXT = "the quick brown fox jumps over the lazy dog. " * 30


def _lm():
    return MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=0)


def test_wsla_training_changes_only_x_proj_with_trust_region():
    lm = _lm()
    before = {k: v.copy() for k, v in lm.params.items()}
    ids = lm.tokenizer.encode(TEXT)
    tr = Trainer(lm, ids, ids[:0], TrainConfig(batch_size=2, seq_len=32, max_steps=3, wsla=True,
                                               lr=1.0))
    assert tr.optimizer.cfg.max_delta == 0.05
    tr.run()
    for k, v in lm.params.items():
        if short_name(k) == "x_proj":
            assert not np.array_equal(v, before[k])
            assert np.abs(v - before[k]).max() <= 3 * 0.05 + 1e-6
        else:
            np.testing.assert_array_equal(v, before[k], err_msg=k)


def test_adapt_improves_and_keeps_the_result():
    ad = FastAdapter(_lm(), epochs=3, lr=3e-3, seq_len=32)
    rep = ad.adapt(TEXT)
    assert not rep.rolled_back and rep.reason is None
    assert rep.loss_after < rep.loss_before
    assert not ad.active


def test_forced_regression_rolls_back_weights_and_moments_exactly():
    ad = FastAdapter(_lm(), epochs=1, lr=3e-3, seq_len=32)
    ad.adapt(TEXT)  # a first accepted call: the moments are non-zero now
    assert ad.optimizer is not None
    params = {k: v.copy() for k, v in ad.lm.params.items()}
    m = {k: v.copy() for k, v in ad.optimizer.m.items()}
    v_ = {k: v.copy() for k, v in ad.optimizer.v.items()}
    t = ad.optimizer.t
    ad.tolerance = 0.5  # any result that does not halve perplexity counts as a regression
    rep = ad.adapt("completely different text: 0123456789 zyxw " * 20)
    assert rep.rolled_back and rep.reason == "perplexity regression"
    for k in params:
        np.testing.assert_array_equal(ad.lm.params[k], params[k])
    for k in m:
        np.testing.assert_array_equal(ad.optimizer.m[k], m[k])
        np.testing.assert_array_equal(ad.optimizer.v[k], v_[k])
    assert ad.optimizer.t == t


def test_exception_rolls_back_and_leaves_mode_off(monkeypatch):
    ad = FastAdapter(_lm(), epochs=1, seq_len=32)
    params = {k: v.copy() for k, v in ad.lm.params.items()}

    def boom(self, *a, **k):  # noqa: ANN001, ANN002, ANN003
        self.lm.params["backbone.layers.0.mixer.x_proj.weight"][...] = 7.0
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Trainer, "run", boom)
    rep = ad.adapt(TEXT)
    assert rep.rolled_back and "disk on fire" in rep.reason
    assert not ad.active
    for k in params:
        np.testing.assert_array_equal(ad.lm.params[k], params[k])


def test_wsla_with_lora_on_x_proj_only():
    ad = FastAdapter(_lm(), epochs=1, seq_len=32, lora=LoRAConfig(("x_proj",), rank=2))
    before = {k: v.copy() for k, v in ad.lm.params.items()}
    rep = ad.adapt(TEXT)
    assert rep.trainable_params == 2 * 2 * (32 + 9)  # 2 layers x (A (2, 32) + B (9, 2))
    changed = {short_name(k) for k in before if not np.array_equal(ad.lm.params[k], before[k])}
    assert changed == {"x_proj"}  # trained, and nothing else moved
    with pytest.raises(ValueError, match="only the x_proj"):
        lm = _lm()
        ids = lm.tokenizer.encode(TEXT)
        Trainer(lm, ids, ids[:0], TrainConfig(wsla=True, seq_len=32,
                                             lora=LoRAConfig(("in_proj",))))


def test_x_proj_only_gradients_equal_those_of_full_training():
    """WSLA's backward skips frozen weight gradients and stops in the first layer once x_proj's
    gradient is formed: the x_proj gradients are those of full training, bit for bit."""
    from engine.model import loss_and_grad
    from engine.params import short_name, zeros_like
    from tests.helpers import random_batch, random_params, tiny_config

    cfg = tiny_config()
    p = random_params(cfg, seed=3, dtype=np.float32)
    tokens, targets = random_batch(cfg, seed=4)
    full = zeros_like(p)
    loss_and_grad(p, tokens, targets, cfg, full, 1.0 / targets.size)
    sub = {n: np.zeros_like(p[n]) for n in p if short_name(n) == "x_proj"}
    loss_and_grad(p, tokens, targets, cfg, sub, 1.0 / targets.size)
    assert len(sub) == cfg.n_layer
    for n, g in sub.items():
        assert np.abs(g).max() > 0
        np.testing.assert_array_equal(g, full[n], err_msg=n)
