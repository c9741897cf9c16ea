import numpy as np

from engine import reference as ref
from engine.ops.cross_entropy import cross_entropy_forward_backward, cross_entropy_scores
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


def _scores_in_float64(logits: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row cross-entropy and argmax hits, float64 NumPy (what held-out scoring computed)."""
    lg = logits.astype(np.float64)
    mx = lg.max(axis=1)
    lse = mx + np.log(np.exp(lg - mx[:, None]).sum(axis=1))
    safe = np.where(t >= 0, t, 0)
    losses = np.where(t >= 0, lse - lg[np.arange(len(t)), safe], 0.0)
    return losses, (t >= 0) & (lg.argmax(axis=1) == t)


def test_scores_equal_a_float64_log_softmax_and_numpys_argmax() -> None:
    """Per-row losses and hits, also on rows whose max is tied (NumPy's argmax is the first of
    them: a target at the second copy is no hit) and ignored rows (loss 0, no hit)."""
    rng = np.random.default_rng(4)
    v = 2051
    logits = rng.standard_normal((40, v)) * 4
    t = rng.integers(0, v, 40)
    t[3] = -1
    for i in range(5, 40, 2):  # every other row: the target holds the max (a hit)
        logits[i, t[i]] = logits[i].max() + 1.0
    logits[6, [10, 700]] = 50.0  # a tie: the target is the second copy -> not a hit
    t[6] = 700
    logits[8, [10, 700]] = 50.0  # the target is the first copy -> a hit
    t[8] = 10
    want_l, want_h = _scores_in_float64(logits, t)
    losses, hits = cross_entropy_scores(logits, t)
    np.testing.assert_allclose(losses, want_l, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(hits, want_h)
    assert losses[3] == 0 and not hits[3] and not hits[6] and hits[8] and hits[5:40:2].all()
    assert hits.sum() == 19  # the 18 rows with a raised target and row 8; row 6's tie lost


def test_scores_of_float32_logits_are_within_1e_6_of_float64() -> None:
    """float32 exp, float64 sum: a BPE-sized vocabulary (50,280) and logits of a few hundred
    (the row max must be found wherever it is, or float32 exp overflows), the input untouched."""
    rng = np.random.default_rng(5)
    v = 50280
    logits = (rng.standard_normal((16, v)) * 6).astype(np.float32)
    for i, p in enumerate((0, 1, 7, 8, 15, 50271, 50272, 50279)):
        logits[i, p] = 300.0
    t = rng.integers(0, v, 16)
    t[1] = 1
    before = logits.copy()
    losses, hits = cross_entropy_scores(logits, t)
    np.testing.assert_array_equal(logits, before)
    want_l, want_h = _scores_in_float64(logits, t)
    np.testing.assert_allclose(losses, want_l, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(hits, want_h)
    assert hits[1] and abs(losses[1]) < 1e-6


def test_scores_of_non_finite_logits_are_non_finite() -> None:
    for p in (0, 9, 2050):
        logits = np.zeros((2, 2051), dtype=np.float32)
        logits[0, p] = np.nan
        losses, _ = cross_entropy_scores(logits, np.array([1, 1]))
        assert np.isnan(losses[0]) and np.isfinite(losses[1]), p
