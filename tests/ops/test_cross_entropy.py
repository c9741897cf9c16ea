import numpy as np

from engine import reference as ref
from engine.ops.cross_entropy import cross_entropy_forward_backward
from tests.gradcheck import assert_grad_close


def test_loss_and_grad_float64():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((9, 13)) * 3
    targets = rng.integers(0, 13, size=9)
    targets[4] = -1  # ignored position
    n = int((targets >= 0).sum())
    losses, dlogits = cross_entropy_forward_backward(logits, targets, 1.0 / n)
    assert losses[4] == 0 and np.all(dlogits[4] == 0)
    np.testing.assert_allclose(losses.sum() / n, ref.cross_entropy(logits, targets), rtol=1e-12)
    assert_grad_close(dlogits, lambda: ref.cross_entropy(logits, targets), logits, max_points=None)


def test_float32_large_logits_are_stable():
    logits = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    losses, d = cross_entropy_forward_backward(logits, np.array([0]), 1.0)
    assert np.isfinite(losses).all() and np.isfinite(d).all()
    assert abs(losses[0]) < 1e-6


def test_inplace_gives_same_result():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((5, 7)).astype(np.float32)
    t = rng.integers(0, 7, 5)
    l1, d1 = cross_entropy_forward_backward(logits.copy(), t, 0.2)
    l2, d2 = cross_entropy_forward_backward(logits, t, 0.2, inplace=True)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(d1, d2)
    assert d2 is logits
