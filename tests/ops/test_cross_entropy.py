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


def test_row_max_is_found_at_every_position() -> None:
    """The row max (8 interleaved chains and a tail) is the stabiliser of exp: a logit of 200 that
    it missed would overflow float32 exp. Positions: first, chain ends, the tail of an odd width."""
    v = 2053
    for p in (0, 1, 7, 8, 15, 2047, 2048, 2052):
        logits = np.random.default_rng(p).standard_normal((3, v)).astype(np.float32)
        logits[1, p] = 200.0
        t = np.array([0, p, 5])
        for inplace in (False, True):
            losses, d = cross_entropy_forward_backward(logits.copy(), t, 1.0, inplace=inplace)
            assert np.isfinite(losses).all() and np.isfinite(d).all(), (p, inplace)
            assert abs(losses[1]) < 1e-6  # the dominant logit is the target
            want = ref.cross_entropy(logits.astype(np.float64)[[0]], t[[0]])
            np.testing.assert_allclose(losses[0], want, rtol=1e-5)


def test_inplace_equals_out_of_place_on_wide_rows() -> None:
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((64, 2051)) * 4).astype(np.float32)
    t = rng.integers(0, 2051, 64)
    t[7] = -1
    l1, d1 = cross_entropy_forward_backward(logits.copy(), t, 1 / 63)
    l2, d2 = cross_entropy_forward_backward(logits, t, 1 / 63, inplace=True)
    np.testing.assert_array_equal(l1, l2)
    np.testing.assert_array_equal(d1, d2)


def test_non_finite_logits_give_a_non_finite_loss() -> None:
    """The optimizer's guard must see a NaN anywhere in a row, also at the row's first place."""
    for p in (0, 9, 2050):
        logits = np.zeros((2, 2051), dtype=np.float32)
        logits[0, p] = np.nan
        losses, _ = cross_entropy_forward_backward(logits, np.array([1, 1]), 1.0, inplace=True)
        assert np.isnan(losses[0]) and np.isfinite(losses[1]), p
