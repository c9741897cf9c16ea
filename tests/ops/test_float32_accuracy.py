"""float32 kernels against float64 on the same inputs, at tolerances derived from float32 rounding.

Every input is drawn in float32, so the float64 run sees exactly the same numbers and the whole
difference is float32 rounding inside the kernel. A result that takes ``chain`` dependent float32
operations (each rounding to within u = 2**-24 relative; ``fast_exp`` within 2 u) is off by at
most ~chain * u times the largest magnitude it is built from; the tolerance below is
``chain * eps32`` (eps32 = 2 u, a factor 2 of slack) times the largest value of the reference.
``chain`` is counted from each op's formula in the comment beside it.
"""

import numpy as np

from engine.model import loss_and_grad
from engine.ops.activations import softplus_backward, softplus_forward
from engine.ops.conv1d import conv1d_backward, conv1d_forward, conv1d_step
from engine.ops.cross_entropy import cross_entropy_forward_backward
from engine.ops.embedding import embedding_backward, embedding_forward
from engine.ops.rmsnorm import rmsnorm_backward, rmsnorm_forward
from engine.ops.selective_scan import (
    selective_scan_backward,
    selective_scan_forward,
    selective_scan_step,
)
from engine.params import zeros_like
from tests.helpers import random_batch, random_params, tiny_config

EPS32 = float(np.finfo(np.float32).eps)
B, L, E, N, D, K, V = 2, 24, 70, 16, 48, 4, 50


def assert_float32_close(got, exact, chain, name=""):
    """|got - exact| <= chain * eps32 * max|exact| elementwise; also checks got is float32."""
    assert got.dtype == np.float32, name
    tol = chain * EPS32 * float(np.abs(exact).max())
    err = float(np.abs(got.astype(np.float64) - exact).max())
    assert err <= tol, f"{name}: max error {err:.3e} > {tol:.3e} ({chain} float32 roundings)"


def _f32(rng, *shape, scale=1.0, shift=0.0):
    return (scale * rng.standard_normal(shape) + shift).astype(np.float32)


def _both(fn, *args):
    """fn on the float32 args and on the same values in float64 (ints passed through)."""
    up = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype == np.float32 else a
          for a in args]
    return fn(*args), fn(*up)


def _pairs(got, exact):
    return zip(got if isinstance(got, tuple) else (got,),
               exact if isinstance(exact, tuple) else (exact,), strict=True)


def test_softplus_forward_backward():
    rng = np.random.default_rng(0)
    x, bias, dy = _f32(rng, B, L, E, scale=3), _f32(rng, E), _f32(rng, B, L, E)
    y32, y64 = _both(softplus_forward, x, bias)
    assert_float32_close(y32, y64, 8, "softplus")  # add, exp, log1p, max: a handful
    g32, g64 = _both(softplus_backward, dy, x, bias)
    assert_float32_close(g32[0], g64[0], 8, "dx")  # add, exp, sigmoid, multiply
    assert_float32_close(g32[1], g64[1], B * L + 8, "dbias")  # sum over b * l positions


def test_rmsnorm_forward_backward():
    rng = np.random.default_rng(1)
    x, w, dy = _f32(rng, B, L, D), _f32(rng, D, shift=1), _f32(rng, B, L, D)
    (y32, r32), (y64, r64) = _both(rmsnorm_forward, x, w, 1e-5)
    assert_float32_close(y32, y64, D + 8, "y")  # sum of d squares, rsqrt, two products
    assert_float32_close(r32, r64, D + 8, "rstd")
    g32, g64 = _both(rmsnorm_backward, dy, x, w, r32)
    assert_float32_close(g32[0], g64[0], 2 * D + 8, "dx")  # the d-term dot product, then a fma
    assert_float32_close(g32[1], g64[1], B * L + 8, "dweight")  # sum over positions


def test_conv1d_forward_backward_step():
    rng = np.random.default_rng(2)
    x, w, bias, du = _f32(rng, B, L, E), _f32(rng, E, 1, K), _f32(rng, E), _f32(rng, B, L, E)
    (u32, xc32), (u64, xc64) = _both(conv1d_forward, x, w, bias)
    assert_float32_close(xc32, xc64, K + 2, "xc")  # k products summed, plus the bias
    assert_float32_close(u32, u64, K + 8, "u")  # then silu
    g32, g64 = _both(lambda *a: conv1d_backward(*a), du, x, w, xc32)
    assert_float32_close(g32[0], g64[0], K + 8, "dx")  # k taps per input
    assert_float32_close(g32[1], g64[1], B * L + 8, "dweight")  # sum over positions
    assert_float32_close(g32[2], g64[2], B * L + 8, "dbias")
    window, x_new = _f32(rng, B, E, K), _f32(rng, B, E)
    w64 = window.astype(np.float64)
    s32 = conv1d_step(window, x_new, w, bias)
    s64 = conv1d_step(w64, x_new.astype(np.float64), w.astype(np.float64), bias.astype(np.float64))
    assert_float32_close(s32, s64, K + 8, "step")


def test_embedding_forward_backward():
    rng = np.random.default_rng(3)
    weight, dy = _f32(rng, V, D), _f32(rng, B, L, D)
    tokens = rng.integers(0, V, (B, L))
    y32, y64 = _both(embedding_forward, tokens, weight)
    np.testing.assert_array_equal(y32, y64)  # a gather: exact
    dw32, dw64 = np.zeros((V, D), np.float32), np.zeros((V, D))
    embedding_backward(tokens, dy, dw32)
    embedding_backward(tokens, dy.astype(np.float64), dw64)
    assert_float32_close(dw32, dw64, B * L, "dweight")  # at most b * l rows add into one


def test_cross_entropy():
    rng = np.random.default_rng(4)
    logits, targets = _f32(rng, B * L, V, scale=4), rng.integers(0, V, B * L)
    (l32, d32), (l64, d64) = _both(cross_entropy_forward_backward, logits, targets, 0.5)
    # losses come back float64 from float32 logits: max, v exps summed, a log
    np.testing.assert_allclose(l32, l64, rtol=0, atol=(V + 8) * EPS32 * np.abs(l64).max())
    assert_float32_close(d32, d64, V + 8, "dlogits")  # softmax: v-term sum, exp, divide


def _scan_inputs(rng):
    u, z = _f32(rng, B, L, E), _f32(rng, B, L, E)
    delta = np.log1p(np.exp(_f32(rng, B, L, E, scale=1.5, shift=-2))).astype(np.float32)
    A_log = (np.log(np.arange(1, N + 1))[None, :] + 0.1 * rng.standard_normal((E, N))).astype(np.float32)
    return u, delta, A_log, _f32(rng, B, L, N), _f32(rng, B, L, N), _f32(rng, E), z


def test_selective_scan_forward_backward_step():
    rng = np.random.default_rng(5)
    args = _scan_inputs(rng)
    # the state after t steps has been rounded ~6 times per step (exp, 2 products, fma, ...);
    # y adds an n-term dot product and the gate
    per_step = 6
    (o32, h32), (o64, h64) = _both(selective_scan_forward, *args)
    assert_float32_close(h32, h64, per_step * L + 8, "h_last")
    assert_float32_close(o32, o64, per_step * L + N + 8, "out")
    dout = _f32(rng, B, L, E)
    g32, g64 = _both(lambda *a: selective_scan_backward(*a), dout, *args)
    # the backward runs the state forward again, then the adjoint back over l steps; parameter
    # gradients (A_log, D) also sum over the b * l positions
    chains = {"du": 2 * per_step * L + N, "ddelta": 2 * per_step * L + N, "dA_log": 2 * per_step * L + B * L,
              "dB": 2 * per_step * L + E, "dC": per_step * L + E, "dD": B * L + 8, "dz": per_step * L + N + 8}
    for (name, chain), a32, a64 in zip(chains.items(), g32, g64, strict=True):
        assert_float32_close(a32, a64, chain, name)
    h = _f32(rng, B, E, N)
    step_args = [np.ascontiguousarray(a[:, 0]) if a.ndim == 3 else a for a in args]
    h64 = h.astype(np.float64)
    s32 = selective_scan_step(h, *step_args)
    s64 = selective_scan_step(h64, *[a.astype(np.float64) for a in step_args])
    assert_float32_close(h, h64, per_step + 2, "step state")
    assert_float32_close(s32, s64, per_step + N + 8, "step out")


def test_whole_model_loss_and_gradients():
    """Every layer composes the ops above; the chain through n_layer layers of the model is bounded
    by the sum of the ops' chains (embedding, then per layer: norm, in_proj (d), conv (k), x_proj
    (e), dt_proj (r), scan (6 l + n), out_proj (e); then norm_f, head (d), cross-entropy (v)),
    taken twice for the backward."""
    cfg = tiny_config(d_model=32, n_layer=2, d_state=16)
    p64 = random_params(cfg, seed=3)
    p32 = {k: v.astype(np.float32) for k, v in p64.items()}
    p64 = {k: v.astype(np.float64) for k, v in p32.items()}  # the same values in both runs
    tokens, targets = random_batch(cfg, b=2, length=33, seed=4)
    g64, g32 = zeros_like(p64), zeros_like(p32)
    loss64, _ = loss_and_grad(p64, tokens, targets, cfg, g64, 1 / targets.size)
    loss32, _ = loss_and_grad(p32, tokens, targets, cfg, g32, 1 / targets.size)
    d, e, n, k, r, v, length = (cfg.d_model, cfg.d_inner, cfg.d_state, cfg.d_conv, cfg.dt_rank,
                                cfg.vocab_size, tokens.shape[1])
    layer = d + d + k + e + r + 6 * length + n + e + 16
    chain = 2 * (cfg.n_layer * layer + d + d + v) + tokens.size  # + the sum over positions
    assert abs(loss32 - loss64) <= chain * EPS32 * abs(loss64)
    for name in p64:
        assert np.abs(g32[name]).max() > 0, name
        assert_float32_close(g32[name], g64[name], chain, name)
