"""Untied output head (tie_word_embeddings false): lm_head.weight (v, d) of its own."""

from __future__ import annotations

import numpy as np

from engine import ByteTokenizer, MambaLM
from engine import reference as ref
from engine.inference import CpuStepper
from engine.model import loss_and_grad
from engine.params import EMBEDDINGS, LM_HEAD, param_shapes, zeros_like

from .gradcheck import numeric_grad
from .helpers import random_batch, random_params, tiny_config


def test_untied_config_has_its_own_head() -> None:
    cfg = tiny_config(tie_embeddings=False)
    assert param_shapes(cfg)[LM_HEAD] == (cfg.vocab_size, cfg.d_model)
    assert LM_HEAD not in param_shapes(tiny_config())
    assert cfg.to_hf_dict()["tie_word_embeddings"] is False


def test_untied_gradients_match_finite_differences_float64() -> None:
    cfg = tiny_config(tie_embeddings=False)
    p = random_params(cfg, seed=7)
    tokens, targets = random_batch(cfg, b=2, length=5, seed=8)
    grads = zeros_like(p)
    loss_sum, n = loss_and_grad(p, tokens, targets, cfg, grads, 1.0 / targets.size)
    assert abs(loss_sum / n - ref.mamba_loss(p, tokens, targets, cfg)) < 1e-12
    for name in (LM_HEAD, EMBEDDINGS, "backbone.norm_f.weight"):
        idx, num = numeric_grad(lambda: ref.mamba_loss(p, tokens, targets, cfg), p[name],
                                max_points=12, rng=np.random.default_rng(1))
        assert np.abs(num).max() > 1e-8, name
        np.testing.assert_allclose(grads[name].reshape(-1)[idx], num, rtol=1e-5, atol=1e-9,
                                   err_msg=name)


def test_untied_head_is_what_decoding_uses(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tiny_config(vocab_size=264, tie_embeddings=False)
    lm = MambaLM.create(cfg, ByteTokenizer(), seed=3)
    lm.save(tmp_path)
    back = MambaLM.load(tmp_path)
    assert back.config.tie_embeddings is False
    np.testing.assert_array_equal(back.params[LM_HEAD], lm.params[LM_HEAD])
    ids = np.array([1, 2, 3])
    step = CpuStepper(back.params, back.config).prefill(ids)
    np.testing.assert_allclose(step, ref.mamba_forward(back.params, ids[None], cfg)[0, -1],
                               rtol=1e-4, atol=1e-4)
