import numpy as np
import pytest

from engine import reference as ref
from engine.ops.conv1d import conv1d_backward, conv1d_forward, conv1d_step
from tests.gradcheck import assert_grad_close


def _inputs(dtype, b=2, length=11, e=5, k=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, length, e)).astype(dtype)
    w = rng.standard_normal((e, 1, k)).astype(dtype)
    bias = rng.standard_normal(e).astype(dtype)
    return x, w, bias


@pytest.mark.parametrize("length", [1, 3, 11])
def test_forward_matches_reference(length):
    x, w, bias = _inputs(np.float32, length=length)
    u, xc = conv1d_forward(x, w, bias)
    expect = ref.conv1d(x.astype(np.float64), w, bias)
    np.testing.assert_allclose(xc, expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(u, ref.silu(expect), rtol=1e-5, atol=1e-5)


def test_is_causal():
    x, w, bias = _inputs(np.float64)
    u0, _ = conv1d_forward(x, w, bias)
    x2 = x.copy()
    x2[:, 6:] += 10.0
    u1, _ = conv1d_forward(x2, w, bias)
    np.testing.assert_array_equal(u0[:, :6], u1[:, :6])
    assert not np.allclose(u0[:, 6:], u1[:, 6:])


def test_backward_finite_differences_float64():
    x, w, bias = _inputs(np.float64, seed=2)
    du = np.random.default_rng(3).standard_normal(x.shape)
    _, xc = conv1d_forward(x, w, bias)
    dx, dw, db = conv1d_backward(du, x, w, xc)

    def loss() -> float:
        return float((ref.silu(ref.conv1d(x, w, bias)) * du).sum())

    assert_grad_close(dx, loss, x)
    assert_grad_close(dw, loss, w)
    assert_grad_close(db, loss, bias)


def test_step_matches_full_forward():
    x, w, bias = _inputs(np.float64, b=2, length=9, e=6)
    u, _ = conv1d_forward(x, w, bias)
    window = np.zeros((2, 6, 4))
    for t in range(9):
        step = conv1d_step(window, np.ascontiguousarray(x[:, t]), w, bias)
        np.testing.assert_allclose(step, u[:, t], rtol=1e-13, atol=1e-13)


def test_reference_reset_equals_separate_documents():
    x, w, bias = _inputs(np.float64, b=1, length=12)
    reset = np.zeros((1, 12), bool)
    reset[0, [5, 6, 9]] = True
    xc = ref.conv1d(x, w, bias, reset)
    for lo, hi in ((0, 5), (5, 6), (6, 9), (9, 12)):
        np.testing.assert_allclose(xc[:, lo:hi], ref.conv1d(x[:, lo:hi], w, bias), atol=1e-13)


def _reset_mask(b, length, seed=0):
    rng = np.random.default_rng(seed)
    reset = rng.random((b, length)) < 0.3
    reset[0, 3] = reset[0, 4] = True  # a one-position document
    return reset


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 1e-5)])
def test_forward_with_reset_matches_reference(dtype, tol):
    x, w, bias = _inputs(dtype)
    reset = _reset_mask(2, 11)
    u, xc = conv1d_forward(x, w, bias, reset)
    expect = ref.conv1d(x.astype(np.float64), w.astype(np.float64), bias.astype(np.float64), reset)
    np.testing.assert_allclose(xc, expect, rtol=tol, atol=tol)
    np.testing.assert_allclose(u, ref.silu(expect), rtol=tol, atol=tol)
    assert not np.allclose(xc, conv1d_forward(x, w, bias)[1]), "the reset mask had no effect"


def test_reset_none_is_bit_identical_to_no_starts():
    x, w, bias = _inputs(np.float32)
    du = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    no_starts = np.zeros((2, 11), bool)
    u0, xc0 = conv1d_forward(x, w, bias)
    u1, xc1 = conv1d_forward(x, w, bias, no_starts)
    np.testing.assert_array_equal(u0, u1)
    np.testing.assert_array_equal(xc0, xc1)
    for a, b in zip(conv1d_backward(du, x, w, xc0), conv1d_backward(du, x, w, xc0, reset=no_starts),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_backward_with_reset_finite_differences_float64():
    x, w, bias = _inputs(np.float64, seed=4)
    reset = _reset_mask(2, 11, seed=2)
    du = np.random.default_rng(5).standard_normal(x.shape)
    _, xc = conv1d_forward(x, w, bias, reset)
    dx, dw, db = conv1d_backward(du, x, w, xc, reset=reset)

    def loss() -> float:
        return float((ref.silu(ref.conv1d(x, w, bias, reset)) * du).sum())

    assert_grad_close(dx, loss, x)
    assert_grad_close(dw, loss, w)
    assert_grad_close(db, loss, bias)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_without_dweight_is_the_same_except_dweight_is_none(dtype):
    """need_dw=False (a frozen conv1d weight) skips the weight's sum; dx and dbias are
    bit-identical."""
    x, w, bias = _inputs(dtype)
    du = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    reset = _reset_mask(2, 11, seed=2)
    _, xc = conv1d_forward(x, w, bias, reset)
    dx, dw, db = conv1d_backward(du, x, w, xc, reset=reset)
    dx2, dw2, db2 = conv1d_backward(du, x, w, xc, reset=reset, need_dw=False)
    assert dw2 is None and dw is not None
    np.testing.assert_array_equal(dx, dx2)
    np.testing.assert_array_equal(db, db2)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_forward_other_kernel_sizes_match_reference(k):
    """k != 4 takes the general tap-by-tap loop (the one-pass path is for Mamba's k = 4)."""
    x, w, bias = _inputs(np.float32, length=13, k=k)
    u, xc = conv1d_forward(x, w, bias)
    expect = ref.conv1d(x.astype(np.float64), w, bias)
    np.testing.assert_allclose(xc, expect, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(u, ref.silu(expect), rtol=1e-5, atol=1e-5)


def test_one_pass_path_has_the_general_loops_bits():
    """k = 4 with a whole window runs one pass; the same taps behind a zero fifth tap (k = 5)
    run the general loop, which adds the taps in the same order: equal to the last bit."""
    x, w, bias = _inputs(np.float32, b=3, length=40, e=70, seed=5)
    w5 = np.concatenate([np.zeros((70, 1, 1), np.float32), w], axis=2)
    u4, xc4 = conv1d_forward(x, w, bias)
    u5, xc5 = conv1d_forward(x, w5, bias)
    np.testing.assert_array_equal(xc4, xc5)
    np.testing.assert_array_equal(u4, u5)
