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
        np.testing.assert_allclose(conv1d_step(window, x[:, t], w, bias), u[:, t], atol=1e-12)
