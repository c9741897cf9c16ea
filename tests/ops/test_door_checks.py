"""Every public op function rejects, at its door, a wrong shape, a wrong or mixed dtype and a
non-contiguous array, with a ValueError naming the argument (Numba kernels check nothing)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

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

b, l, d, e, n, k, v = 2, 5, 8, 6, 4, 4, 11
rng = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def ids(*shape: int) -> np.ndarray:
    return rng.integers(0, v, shape)


# op -> (function, {argument name: valid value}); float arguments are the ndarray float values
OPS: dict[str, tuple[Callable[..., object], dict[str, object]]] = {
    "rmsnorm_forward": (rmsnorm_forward, {"x": f32(b, l, d), "weight": f32(d), "eps": 1e-5}),
    "rmsnorm_backward": (rmsnorm_backward, {"dy": f32(b, l, d), "x": f32(b, l, d),
                                            "weight": f32(d), "rstd": f32(b, l)}),
    "softplus_forward": (softplus_forward, {"x": f32(b * l, e), "bias": f32(e)}),
    "softplus_backward": (softplus_backward, {"dy": f32(b * l, e), "x": f32(b * l, e),
                                              "bias": f32(e)}),
    "conv1d_forward": (conv1d_forward, {"x": f32(b, l, 2 * e), "weight": f32(e, 1, k),
                                        "bias": f32(e)}),
    "conv1d_backward": (conv1d_backward, {"du": f32(b, l, e), "x": f32(b, l, 2 * e),
                                          "weight": f32(e, 1, k), "xc": f32(b, l, e),
                                          "dx": f32(b, l, 2 * e)}),
    "conv1d_step": (conv1d_step, {"window": f32(b, e, k), "x_new": f32(b, e),
                                  "weight": f32(e, 1, k), "bias": f32(e)}),
    "selective_scan_forward": (selective_scan_forward, {
        "u": f32(b, l, e), "delta": f32(b, l, e), "A_log": f32(e, n), "B": f32(b, l, n),
        "C": f32(b, l, n), "D": f32(e), "z": f32(b, l, e)}),
    "selective_scan_backward": (selective_scan_backward, {
        "dout": f32(b, l, e), "u": f32(b, l, e), "delta": f32(b, l, e), "A_log": f32(e, n),
        "B": f32(b, l, n), "C": f32(b, l, n), "D": f32(e), "z": f32(b, l, e),
        "dz": f32(b, l, e)}),
    "selective_scan_step": (selective_scan_step, {
        "h": f32(b, e, n), "u": f32(b, e), "delta": f32(b, e), "A_log": f32(e, n),
        "B": f32(b, n), "C": f32(b, n), "D": f32(e), "z": f32(b, e)}),
    "cross_entropy": (cross_entropy_forward_backward, {"logits": f32(b * l, v),
                                                       "targets": ids(b * l), "scale": 1.0}),
    "embedding_forward": (embedding_forward, {"tokens": ids(b, l), "weight": f32(v, d)}),
    "embedding_backward": (embedding_backward, {"tokens": ids(b, l), "dy": f32(b, l, d),
                                                "dweight": f32(v, d)}),
}

FLOAT_ARGS = [(op, name) for op, (_, kw) in OPS.items() for name, a in kw.items()
              if isinstance(a, np.ndarray) and a.dtype == np.float32]
MIXED_ARGS = [(op, name) for op, name in FLOAT_ARGS if sum(o == op for o, _ in FLOAT_ARGS) > 1]
INDEX_ARGS = [(op, name) for op, (_, kw) in OPS.items() for name, a in kw.items()
              if isinstance(a, np.ndarray) and a.dtype.kind == "i"]


def call(op: str, **changes: object) -> object:
    fn, kw = OPS[op]
    kw = {name: a.copy() if isinstance(a, np.ndarray) else a for name, a in kw.items()}
    return fn(**(kw | changes))


def non_contiguous(a: np.ndarray) -> np.ndarray:
    """The same values and shape, every other element of a twice-as-wide array."""
    wide = np.repeat(a, 2, axis=-1)[..., ::2]
    assert not wide.flags.c_contiguous and np.array_equal(wide, a)
    return wide


def _arrays(out: object) -> list[np.ndarray]:
    items = out if isinstance(out, tuple) else (out,)
    return [a for a in items if isinstance(a, np.ndarray) and a.dtype.kind == "f"]


@pytest.mark.parametrize("op", OPS)
def test_valid_arguments_pass(op):
    """A valid float32 call returns finite float32 arrays (the per-row losses of cross-entropy
    in float64): the checks refuse nothing valid."""
    out = _arrays(call(op))
    if op != "embedding_backward":  # (accumulates into dweight in place)
        assert out, op
    assert all(np.isfinite(a).all() for a in out), op
    wide = [a.dtype for a in out if a.dtype != np.float32]  # cross-entropy's losses: float64
    assert wide == ([np.float64] if op == "cross_entropy" else []), (op, wide)


@pytest.mark.parametrize(("op", "name"), FLOAT_ARGS)
def test_rejects_wrong_shape(op, name):
    a = OPS[op][1][name]
    with pytest.raises(ValueError, match="expected shape"):
        call(op, **{name: np.zeros((*a.shape, 3), a.dtype)})


@pytest.mark.parametrize(("op", "name"), FLOAT_ARGS)
def test_rejects_integer_dtype_naming_the_argument(op, name):
    a = OPS[op][1][name]
    with pytest.raises(ValueError, match=f"^{name}: expected float"):
        call(op, **{name: a.astype(np.int32)})


@pytest.mark.parametrize(("op", "name"), MIXED_ARGS)
def test_rejects_mixed_float_dtypes(op, name):
    """A float64 argument in a float32 call would compile a new mixed specialisation."""
    with pytest.raises(ValueError, match="expected float"):
        call(op, **{name: OPS[op][1][name].astype(np.float64)})


@pytest.mark.parametrize(("op", "name"), FLOAT_ARGS)
def test_rejects_non_contiguous_naming_the_argument(op, name):
    with pytest.raises(ValueError, match=f"^{name}: expected a C-contiguous array"):
        call(op, **{name: non_contiguous(OPS[op][1][name])})


@pytest.mark.parametrize(("op", "name"), INDEX_ARGS)
def test_index_arrays_must_be_integers_of_the_right_shape(op, name):
    a = OPS[op][1][name]
    with pytest.raises(ValueError, match=f"^{name}: expected an integer"):
        call(op, **{name: a.astype(np.float32)})
    if a.ndim == 1:  # tokens accept any leading shape; targets must have one per logits row
        with pytest.raises(ValueError, match=f"^{name}: expected shape"):
            call(op, **{name: a[:-1]})


def test_float64_calls_pass():
    """A float64 call (the finite-difference tests' precision) runs in float64."""
    fn, kw = OPS["selective_scan_forward"]
    out = _arrays(fn(**{name: a.astype(np.float64) for name, a in kw.items()}))
    assert out and all(a.dtype == np.float64 and np.isfinite(a).all() for a in out)


@pytest.mark.parametrize(("op", "name", "bad", "message"), [
    # out-of-bounds reads that were once reproduced: each used to read past an array end silently
    ("rmsnorm_forward", "weight", f32(4), rf"weight: expected shape \({d},\), got \(4,\)"),
    ("softplus_forward", "bias", f32(2), rf"bias: expected shape \({e},\), got \(2,\)"),
    ("conv1d_forward", "x", f32(b, l, 3), rf"x: expected shape \(b, l, >= {e}\)"),
    ("selective_scan_forward", "D", f32(3), rf"D: expected shape \({e},\), got \(3,\)"),
    ("selective_scan_forward", "A_log", f32(e + 1, n), rf"A_log: expected shape \({e}, any\)"),
])
def test_review_reproductions_are_rejected(op, name, bad, message):
    with pytest.raises(ValueError, match=message):
        call(op, **{name: bad})
