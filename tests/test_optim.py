import math

import numpy as np
import pytest

from engine.optim import AdamW, AdamWConfig, ShardSpec, effective_warmup, lr_at
from engine.params import decays


def _setup(seed=0):
    rng = np.random.default_rng(seed)
    params = {
        "backbone.layers.0.mixer.in_proj.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "backbone.layers.0.mixer.A_log": rng.standard_normal((4, 2)).astype(np.float32),
        "backbone.layers.0.mixer.D": rng.standard_normal(4).astype(np.float32),
        "backbone.layers.0.mixer.conv1d.bias": rng.standard_normal(4).astype(np.float32),
        "backbone.norm_f.weight": rng.standard_normal(3).astype(np.float32),
        "backbone.layers.0.mixer.out_proj.weight": rng.standard_normal((3, 4)).astype(np.float32),
    }
    grads = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in params.items()}
    return params, grads


def test_decay_mask_skips_A_log_D_biases_norms_embeddings():
    assert decays("backbone.layers.0.mixer.in_proj.weight")
    assert decays("backbone.layers.3.mixer.x_proj.weight")
    for name in ("backbone.layers.0.mixer.A_log", "backbone.layers.0.mixer.D",
                 "backbone.layers.0.mixer.conv1d.bias", "backbone.layers.0.mixer.dt_proj.bias",
                 "backbone.layers.0.norm.weight", "backbone.norm_f.weight",
                 "backbone.embeddings.weight"):
        assert not decays(name), name


def test_adamw_matches_written_formula_over_three_steps():
    params, grads = _setup()
    cfg = AdamWConfig(lr=1e-2, weight_decay=0.1, max_grad_norm=0.0)
    opt = AdamW(params, list(params), cfg)
    ref = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in ref.items()}
    v = {k: np.zeros_like(x) for k, x in ref.items()}
    for t in range(1, 4):
        opt.step(params, grads)
        for k in ref:
            g = grads[k].astype(np.float64)
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            s = 1e-2 * (m[k] / (1 - 0.9**t)) / (np.sqrt(v[k] / (1 - 0.999**t)) + 1e-8)
            wd = 0.1 if decays(k) else 0.0
            ref[k] = ref[k] * (1 - 1e-2 * wd) - s
    for k in ref:
        np.testing.assert_allclose(params[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_clipped_gradients_are_what_adamw_steps_on():
    """Three steps whose gradients differ in size, clipped to norm 0.5 (steps 1 and 3 clip, step 2
    does not): the weights follow the formula on g * min(1, 0.5 / |g|). Adam's first step is
    nearly scale-free, and the trust region hid the update in the clip test below."""
    params, grads = _setup()
    cfg = AdamWConfig(lr=1e-2, weight_decay=0.0, max_grad_norm=0.5, max_delta=0.0)
    opt = AdamW(params, list(params), cfg)
    ref = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in ref.items()}
    v = {k: np.zeros_like(x) for k, x in ref.items()}
    for t, size in enumerate((3.0, 0.01, 1.0), start=1):
        g_t = {k: (size * g).astype(np.float32) for k, g in grads.items()}
        norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in g_t.values()))
        scale = min(1.0, 0.5 / norm)
        assert (scale < 1) == (t != 2)
        stats = opt.step(params, g_t)
        assert stats.clip_scale == pytest.approx(scale, rel=1e-6)
        for k in ref:
            g = g_t[k].astype(np.float64) * scale
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            ref[k] = ref[k] - 1e-2 * (m[k] / (1 - 0.9**t)) / (np.sqrt(v[k] / (1 - 0.999**t)) + 1e-8)
    for k in ref:
        np.testing.assert_allclose(params[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_global_clip_and_trust_region():
    params, grads = _setup()
    before = {k: v.copy() for k, v in params.items()}
    total = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads.values()))
    opt = AdamW(params, list(params), AdamWConfig(lr=10.0, weight_decay=0.0, max_grad_norm=0.5,
                                                   max_delta=0.05))
    stats = opt.step(params, grads)
    assert stats.grad_norm == pytest.approx(total, rel=1e-6)
    assert stats.clip_scale == pytest.approx(0.5 / total, rel=1e-6)
    for k in params:  # lr=10 asks for far more than 0.05: every element moves by exactly the cap
        moved = np.abs(params[k] - before[k])
        np.testing.assert_allclose(moved, 0.05, rtol=0, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("layout", ["fortran", "transposed"])
def test_non_contiguous_param_is_refused_not_updated_in_a_copy(layout):
    params, grads = _setup()
    name = "backbone.layers.0.mixer.in_proj.weight"
    params[name] = np.asfortranarray(params[name]) if layout == "fortran" else params[name].T.copy().T
    assert not params[name].flags.c_contiguous
    with pytest.raises(ValueError, match=f"{name} is not C-contiguous"):
        AdamW(params, list(params), AdamWConfig())
    params[name] = np.ascontiguousarray(params[name])
    opt = AdamW(params, list(params), AdamWConfig())
    params[name] = np.asfortranarray(params[name])  # swapped after construction: refused at step
    with pytest.raises(ValueError, match="not C-contiguous"):
        opt.step(params, grads)


def test_non_contiguous_grad_updates_the_param():
    params, grads = _setup()
    name = "backbone.layers.0.mixer.in_proj.weight"
    twin = {k: v.copy() for k, v in params.items()}
    AdamW(twin, list(twin), AdamWConfig()).step(twin, grads)
    grads[name] = np.asfortranarray(grads[name])
    AdamW(params, list(params), AdamWConfig()).step(params, grads)
    np.testing.assert_array_equal(params[name], twin[name])
    assert not np.array_equal(params[name], _setup()[0][name])


def test_nan_guard_skips_tensor_and_keeps_moments_finite():
    params, grads = _setup()
    opt = AdamW(params, list(params), AdamWConfig(lr=1e-2))
    opt.step(params, grads)
    bad = "backbone.layers.0.mixer.A_log"
    grads[bad][0, 0] = np.nan
    w_before = params[bad].copy()
    m_before, v_before = opt.m[bad].copy(), opt.v[bad].copy()
    other = "backbone.layers.0.mixer.D"
    o_before = params[other].copy()
    stats = opt.step(params, grads)
    assert stats.skipped == [bad]
    np.testing.assert_array_equal(params[bad], w_before)
    np.testing.assert_array_equal(opt.m[bad], m_before)
    np.testing.assert_array_equal(opt.v[bad], v_before)
    assert math.isfinite(stats.grad_norm)
    assert not np.array_equal(params[other], o_before)
    grads[bad][0, 0] = 0.1  # recovers on the next finite step
    opt.step(params, grads)
    assert not np.array_equal(params[bad], w_before)
    assert all(np.isfinite(a).all() for a in opt.m.values())


def test_shards_union_equals_unsharded_step_bit_for_bit():
    params, grads = _setup()
    full = {k: v.copy() for k, v in params.items()}
    opt = AdamW(full, list(full), AdamWConfig(lr=1e-2, max_grad_norm=1.0))
    count = 3
    shards = [{k: v.copy() for k, v in params.items()} for _ in range(count)]
    opts = [AdamW(s, list(s), AdamWConfig(lr=1e-2, max_grad_norm=1.0), ShardSpec(i, count))
            for i, s in enumerate(shards)]
    for _ in range(3):
        opt.step(full, grads)
        for o, s in zip(opts, shards, strict=True):
            o.step(s, grads)
        merged = {k: next(s[k] for o, s in zip(opts, shards, strict=True) if k in o.owned)
                  for k in full}  # the all-gather a multi-process backend would do
        for s in shards:
            for k in s:
                s[k][...] = merged[k]
    for k in full:
        np.testing.assert_array_equal(merged[k], full[k])
    assert sum(o.state_bytes() for o in opts) == opt.state_bytes()
    assert sorted(sum((o.owned for o in opts), [])) == sorted(full)
    with pytest.raises(ValueError):
        ShardSpec(3, 3)


def test_warmup_then_cosine():
    assert lr_at(0, 100, 1.0, 10) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(10, 100, 1.0, 10) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(55, 100, 1.0, 10, 0.0) == pytest.approx(0.5)


def test_warmup_stable_decay():
    # 10 warmup steps, 90 after them; decay_fraction 0.2 decays over the last 18 (steps 82..100)
    assert lr_at(5, 100, 1.0, 10, 0.1, 0.2) == pytest.approx(0.6)
    for step in (10, 50, 82):
        assert lr_at(step, 100, 1.0, 10, 0.1, 0.2) == pytest.approx(1.0)
    assert lr_at(91, 100, 1.0, 10, 0.0, 0.2) == pytest.approx(0.5)  # half-way down the cosine
    assert lr_at(100, 100, 1.0, 10, 0.1, 0.2) == pytest.approx(0.1)
    assert lr_at(500, 100, 1.0, 10, 0.1, 0.2) == pytest.approx(0.1)  # past the end: the floor
    assert lr_at(99, 100, 1.0, 10, 0.1, 0.0) == pytest.approx(1.0)  # 0: constant after warmup
    # 1.0 is the cosine over the whole run
    assert all(lr_at(s, 100, 1.0, 10, 0.1, 1.0) == lr_at(s, 100, 1.0, 10, 0.1) for s in range(101))


def test_old_run_json_keeps_its_cosine_schedule():
    from engine.run import RunSpec

    d = RunSpec().to_dict()
    assert d["train"]["decay_fraction"] == 0.2  # the default schedule is warmup-stable-decay
    del d["train"]["decay_fraction"]  # a run.json written before the field existed
    assert RunSpec.from_dict(d).train.decay_fraction == 1.0


def test_warmup_is_cut_to_a_fifth_of_a_short_run():
    # a 33-step run (3 epochs of the sample corpus) with the default 100-step warmup: 6 steps
    assert effective_warmup(100, 33) == 6
    assert effective_warmup(100, 1000) == 100
    assert lr_at(5, 33, 1.0, 100) == pytest.approx(1.0)  # warmup over, lr at its peak
    assert lr_at(0, 33, 1.0, 100) == pytest.approx(1 / 6)
    assert lr_at(0, 3, 1.0, 100) == pytest.approx(1.0)  # a 3-step run: no warmup at all
