import numpy as np
import pytest

from engine import reference as ref
from engine.ops.selective_scan import selective_scan_backward, selective_scan_forward
from tests.gradcheck import assert_grad_close


def _inputs(dtype, b=2, length=9, e=70, n=4, seed=0):
    """e=70 spans two channel chunks (64 + 6) so the chunk remainder path is exercised."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((b, length, e))
    delta = ref.softplus(1.5 * rng.standard_normal((b, length, e)) - 2)
    A_log = np.log(np.arange(1, n + 1))[None, :] + 0.1 * rng.standard_normal((e, n))
    B = rng.standard_normal((b, length, n))
    C = rng.standard_normal((b, length, n))
    D = rng.standard_normal(e)
    z = rng.standard_normal((b, length, e))
    return [a.astype(dtype) for a in (u, delta, A_log, B, C, D, z)]


def _ref_out(u, delta, A_log, B, C, D, z):
    y, h = ref.selective_scan(u, delta, -np.exp(A_log), B, C, D)
    return y * ref.silu(z), h


@pytest.mark.parametrize("length", [1, 9])
def test_forward_matches_reference_float32(length):
    args = _inputs(np.float32, length=length)
    out, h_last = selective_scan_forward(*args)
    expect, h_expect = _ref_out(*[a.astype(np.float64) for a in args])
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h_last, h_expect, rtol=1e-4, atol=1e-5)


def test_forward_float64_exact():
    args = _inputs(np.float64)
    out, h_last = selective_scan_forward(*args)
    expect, h_expect = _ref_out(*args)
    np.testing.assert_allclose(out, expect, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h_last, h_expect, rtol=1e-12, atol=1e-12)


def test_backward_finite_differences_float64():
    args = _inputs(np.float64, seed=3)
    dout = np.random.default_rng(4).standard_normal(args[0].shape)
    grads = selective_scan_backward(dout, *args)
    u, delta, A_log, B, C, D, z = args
    order = {"u": (0, u), "delta": (1, delta), "A_log": (2, A_log), "B": (3, B), "C": (4, C),
             "D": (5, D), "z": (6, z)}

    def loss() -> float:
        return float((_ref_out(*args)[0] * dout).sum())

    for name, (i, x) in order.items():
        assert_grad_close(grads[i], loss, x, rtol=1e-5), name


def test_backward_float32_close_to_float64():
    args64 = _inputs(np.float64, b=3, length=40, e=128, n=16, seed=5)
    dout = np.random.default_rng(6).standard_normal(args64[0].shape)
    g64 = selective_scan_backward(dout, *args64)
    g32 = selective_scan_backward(dout.astype(np.float32), *[a.astype(np.float32) for a in args64])
    for a, b in zip(g32, g64, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3 * np.abs(b).max())


def test_shape_errors_are_clear():
    args = _inputs(np.float32)
    bad = list(args)
    bad[3] = bad[3][:, :-1]  # B one step short
    with pytest.raises(ValueError, match="B, C must be"):
        selective_scan_forward(*bad)
    with pytest.raises(ValueError, match="dout"):
        selective_scan_backward(args[0][:, :-1], *args)
