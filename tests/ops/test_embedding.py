import numpy as np
import pytest

from engine.ops.embedding import embedding_backward, embedding_forward
from tests.gradcheck import assert_grad_close


def test_embedding_backward_finite_differences():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((7, 3))
    tokens = np.array([[1, 1, 4], [6, 0, 1]])  # repeated ids must accumulate
    dy = rng.standard_normal((2, 3, 3))
    dw = np.zeros_like(w)
    embedding_backward(tokens, dy, dw)
    assert_grad_close(dw, lambda: float((embedding_forward(tokens, w) * dy).sum()), w,
                      max_points=None)


def test_embedding_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="out of range"):
        embedding_forward(np.array([[7]]), np.zeros((7, 2)))

