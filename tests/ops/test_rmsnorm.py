import numpy as np

from engine import reference as ref
from engine.ops.rmsnorm import rmsnorm_backward, rmsnorm_forward
from tests.gradcheck import assert_grad_close


def test_forward_matches_reference_float32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7, 33)).astype(np.float32)
    w = rng.standard_normal(33).astype(np.float32)
    y, _ = rmsnorm_forward(x, w, 1e-5)
    np.testing.assert_allclose(y, ref.rmsnorm(x.astype(np.float64), w, 1e-5), rtol=2e-5, atol=2e-6)


def test_backward_finite_differences_float64():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 70, 9))  # 140 rows: spans several row blocks
    w = rng.standard_normal(9)
    dy = rng.standard_normal(x.shape)
    _, rstd = rmsnorm_forward(x, w, 1e-5)
    dx, dw = rmsnorm_backward(dy, x, w, rstd)

    def loss() -> float:
        return float((ref.rmsnorm(x, w, 1e-5) * dy).sum())

    assert_grad_close(dx, loss, x)
    assert_grad_close(dw, loss, w)
