import numpy as np

from engine import reference as ref
from engine.ops.activations import softplus_backward, softplus_forward
from tests.gradcheck import assert_grad_close


def test_softplus_float32_accuracy_over_the_range():
    x = np.linspace(-80, 80, 100001).astype(np.float32)[None]
    y = softplus_forward(x, np.zeros(x.shape[1], np.float32))
    expect = ref.softplus(x.astype(np.float64))
    rel = np.abs(y - expect) / expect
    assert rel.max() < 1e-6


def test_softplus_backward_finite_differences_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((13, 6)) * 3
    b = rng.standard_normal(6)
    dy = rng.standard_normal(x.shape)
    dx, db = softplus_backward(dy, x, b)

    def loss() -> float:
        return float((ref.softplus(x + b) * dy).sum())

    assert_grad_close(dx, loss, x)
    assert_grad_close(db, loss, b)
