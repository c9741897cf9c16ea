"""Rules a user's numbers depend on that only a mutation of the code showed untested: the rate
each step gets, which tensors decay, where clipping starts, when early stopping stops, what
temperature and the repetition penalty do, bits per byte, LoRA's scale and dropout, and where
long documents are cut and rows filled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine import ByteTokenizer, LoRAConfig, LoRATrainable, MambaLM, TrainConfig, Trainer
from engine.earlystop import EarlyStopping
from engine.evaluation import evaluate
from engine.lora import count_trainable, load_adapter
from engine.optim import AdamW, AdamWConfig, lr_at
from engine.packing import line_end_table, pack_spans
from engine.params import short_name
from engine.sampling import SamplingConfig, sample
from tests.helpers import random_params, tiny_config

PROJECTIONS = {"in_proj", "conv1d", "x_proj", "dt_proj", "out_proj"}


def _lm() -> MambaLM:
    return MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer(), seed=4)


def _ids(n: int = 900) -> np.ndarray:
    text = b"the cat sat on the mat and looked at the hat. "
    return np.tile(np.frombuffer(text, np.uint8).astype(np.int64), n // len(text) + 1)[:n]


def test_each_step_trains_at_the_scheduled_rate():
    """The optimizer was only ever tested with ``lr_at`` alone: a trainer stepping at the
    constant peak rate (no warmup, no decay) passed every test."""
    cfg = TrainConfig(batch_size=2, seq_len=16, max_steps=10, warmup_steps=20,
                      decay_fraction=0.5, min_lr_ratio=0.1, lr=1e-3)
    tr = Trainer(_lm(), _ids(), _ids()[:0], cfg)
    got: list[float] = []
    real = tr.optimizer.step

    def step(params, grads, lr=None):  # noqa: ANN001, ANN202
        got.append(lr)
        return real(params, grads, lr)

    tr.optimizer.step = step  # type: ignore[method-assign]
    tr.run()
    want = [lr_at(k, 10, 1e-3, 20, 0.1, 0.5) for k in range(10)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert want[0] < want[1] == pytest.approx(1e-3) and want[-1] < 1e-3  # warmup cut, decay


def test_weight_decay_reaches_the_projection_weights_only():
    """A trainer decaying every tensor (A_log, D, norms, embeddings, biases) or none of
    conv1d / dt_proj / out_proj passed: only the name rule was tested, not what AdamW gets."""
    tr = Trainer(_lm(), _ids(), _ids()[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=1))
    decayed = {n for n, d in tr.optimizer.decay.items() if d}
    assert {short_name(n) for n in decayed} == PROJECTIONS
    assert all(n.endswith(".weight") for n in decayed)
    kept = {short_name(n) for n, d in tr.optimizer.decay.items() if not d}
    assert {"A_log", "D", "embeddings", "conv1d.bias", "dt_proj.bias"} <= kept
    assert any("norm" in n for n in kept)
    lora = Trainer(_lm(), _ids(), _ids()[:0], TrainConfig(
        batch_size=2, seq_len=16, max_steps=1, lora=LoRAConfig(("in_proj", "x_proj"), 4)))
    assert lora.optimizer.decay and all(lora.optimizer.decay.values())  # adapters decay


def test_clipping_starts_at_the_limit():
    """A clip that began only at twice the limit passed: no test had a norm between them."""
    p = {"w": np.zeros(4, np.float32)}
    for norm, scale in ((1.2, 1 / 1.2), (0.9, 1.0)):
        opt = AdamW(p, ["w"], AdamWConfig(lr=1e-3, max_grad_norm=1.0))
        g = {"w": np.array([norm, 0, 0, 0], np.float32)}
        stats = opt.step(p, g)
        assert stats.grad_norm == pytest.approx(norm, rel=1e-6)
        assert stats.clip_scale == pytest.approx(scale, rel=1e-6), norm


def test_early_stopping_needs_an_improvement_beyond_min_delta_and_resets_on_one():
    """Ignoring min_delta (or its sign), never resetting the count of evaluations without
    improvement, or counting a NaN as one: each passed."""
    e = EarlyStopping(patience=2, min_delta=0.1)
    assert not e.update(2.0)
    assert not e.update(1.95) and e.bad == 1  # better, but by less than min_delta
    assert e.update(1.92) and e.bad == 2 and "2 evaluations" in e.reason
    e = EarlyStopping(patience=2)
    for loss in (3.0, 3.1, 2.9, 3.0):  # the 2.9 resets the count: never two bad in a row
        assert not e.update(loss)
    assert e.bad == 1 and e.best == 2.9
    e = EarlyStopping(patience=1)
    assert not e.update(1.0) and not e.update(math.nan) and e.bad == 0


def _frequency_of_1(temperature: float, n: int = 6000) -> float:
    cfg = SamplingConfig(temperature=temperature, top_k=0, top_p=1.0)
    rng = np.random.default_rng(0)
    return float(np.mean([sample(np.array([0.0, 1.0]), cfg, rng) for _ in range(n)]))


def test_temperature_divides_the_logits():
    """Multiplying by the temperature (a cold sampler made hot) passed: only seeded repeats
    were tested."""
    for t in (0.5, 2.0):
        want = 1 / (1 + math.exp(-1 / t))  # softmax of [0, 1] / t
        assert _frequency_of_1(t) == pytest.approx(want, abs=0.025), t


def test_top_k_of_one_less_than_the_vocabulary_drops_the_least_likely():
    cfg = SamplingConfig(temperature=5.0, top_k=3, top_p=1.0)
    rng = np.random.default_rng(1)
    drawn = {sample(np.array([0.0, 0.1, 0.2, -0.1]), cfg, rng) for _ in range(2000)}
    assert drawn == {0, 1, 2}


def test_the_repetition_penalty_makes_seen_tokens_less_likely_within_its_window():
    """A penalty that raised a negative logit towards 0 (more likely), or that ignored its
    window, passed: only one positive logit was tested."""
    greedy = SamplingConfig(temperature=0.0, repetition_penalty=2.0, repetition_window=2)
    logits = np.array([-1.0, -1.5, -3.0])
    assert sample(logits, greedy, np.random.default_rng(0), np.array([2])) == 0
    assert sample(logits, greedy, np.random.default_rng(0), np.array([0])) == 1  # -2 < -1.5
    assert sample(logits, greedy, np.random.default_rng(0), np.array([0, 2, 2])) == 0  # out of
    # the 2-token window: not penalised


class _Fixed:
    """A stepper whose logits never change: token 5 first, token 6 a close second."""

    def __init__(self) -> None:
        self.logits = np.zeros(264)
        self.logits[5], self.logits[6] = 2.0, 1.9

    def prefill(self, ids: np.ndarray) -> np.ndarray:  # noqa: ARG002
        return self.logits

    def step(self, tok: int) -> np.ndarray:  # noqa: ARG002
        return self.logits


def test_generated_tokens_join_the_repetition_history():
    """Generated tokens never entering the history (the penalty on the prompt alone) passed."""
    cfg = SamplingConfig(temperature=0.0, repetition_penalty=1.5, max_new_tokens=4)
    out = list(_lm().generate_ids(np.array([0]), cfg, _Fixed()))  # type: ignore[arg-type]
    assert out == [5, 6, 5, 5]  # (penalised once a token: 5 -> 1.33 beats 6 -> 1.27 again)


def test_bits_per_byte_of_a_byte_model_equal_its_bits_per_token():
    """Nats reported as bits, no bytes counted when the held-out set is sampled (bits/byte then
    the total), or the unscored first token's bytes counted: each passed."""
    lm, ids = _lm(), _ids(2000)
    for max_tokens in (None, 300):
        r = evaluate(lm, ids, 32, max_tokens=max_tokens)
        assert r.bits_per_token == pytest.approx(r.loss / math.log(2), rel=1e-12)
        assert r.bits_per_byte == pytest.approx(r.bits_per_token, rel=1e-12), max_tokens
    assert evaluate(lm, ids, 32, max_tokens=300).tokens < len(ids) - 1


def test_lora_scale_is_alpha_over_the_clamped_rank_in_training_and_in_a_loaded_adapter(
        tmp_path):
    """alpha over the asked rank instead of the clamped one (training, or load_adapter)
    passed; so did the live count of trainable parameters ignoring the clamp."""
    cfg = tiny_config()
    p = random_params(cfg, seed=3, dtype=np.float32)
    lora = LoRAConfig(("x_proj",), rank=64, alpha=16.0)
    lt = LoRATrainable(p, lora)
    rng = np.random.default_rng(4)
    for ad in lt.adapters.values():
        ad.B[...] = rng.standard_normal(ad.B.shape)
    lt.merge()
    name, ad = next(iter(lt.adapters.items()))
    r = ad.A.shape[0]
    assert r < 64  # clamped to the matrix
    want = lt.base[name] + (16.0 / r) * (ad.B @ ad.A).reshape(lt.base[name].shape)
    np.testing.assert_allclose(p[name], want, rtol=1e-5, atol=1e-6)
    assert count_trainable(cfg, lora) == lt.n_trainable
    lt.save_adapter(tmp_path)
    fresh = random_params(cfg, seed=3, dtype=np.float32)
    load_adapter(fresh, tmp_path)
    np.testing.assert_allclose(fresh[name], p[name], rtol=1e-6, atol=1e-6)
    bound = 1 / math.sqrt(ad.A.shape[1])  # A's init: uniform in +-1/sqrt(fan-in)
    assert np.abs(ad.A).max() <= bound and np.abs(ad.A).max() > 0.5 * bound


def test_lora_dropout_keeps_the_adapter_input_unbiased():
    """Dropout without the 1/(1-p) rescale (PEFT rescales) passed: the finite-difference test
    checks that the gradient matches the loss, not what the loss is."""
    cfg = tiny_config()
    p = random_params(cfg, seed=1, dtype=np.float32)
    lt = LoRATrainable(p, LoRAConfig(("in_proj",), rank=2, dropout=0.3, seed=2))
    name, ad = next(iter(lt.adapters.items()))
    ad.A[...] = 1.0
    ad.B[...] = 1.0
    hooks = lt.dropout_hooks(0, 0)
    assert hooks is not None
    x = np.ones((4000, ad.A.shape[1]), np.float32)
    extra = hooks.forward(name, x)  # the dropped input's term beyond the plain adapter's
    plain = ad.scale * (x @ ad.A.T @ ad.B.T)
    assert abs(float(extra.mean()) / float(plain.mean())) < 0.02


def test_a_long_document_is_cut_after_the_last_line_break_that_fits():
    """Cutting after the first line break of the window (pieces shorter than needed) passed."""
    ids = np.full(200, ord("a"), np.int64)
    ids[[20, 40, 60, 90, 130]] = ord("\n")
    rows = pack_spans(ids, np.array([[0, 200]]), 64, line_end_table(ByteTokenizer()))
    assert rows.length[0] == 61  # ends just after the newline at 60, the last of 0..63


def test_a_piece_that_exactly_fills_a_row_joins_it():
    rows = pack_spans(np.zeros(16, np.int64), np.array([[0, 8], [8, 8]]), 16)
    assert len(rows) == 1 and rows.fill == 1.0
