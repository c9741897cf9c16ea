import numpy as np
import pytest

from engine import reference as ref
from engine.ops import selective_scan as scan_module
from engine.ops.selective_scan import (
    selective_scan_backward,
    selective_scan_forward,
    selective_scan_step,
)
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


def _other_regs() -> int:
    """The vector register count whose backward copy this machine does not run (16 <-> 32)."""
    return 48 - scan_module.VECTOR_REGS


@pytest.mark.parametrize("e, length, copy", [(70, 9, "own"), (150, 10, "own"), (40, 4, "own"),
                                             (70, 9, "other")])
def test_backward_finite_differences_float64(e, length, copy, monkeypatch):
    """With 128-channel backward jobs (CPUs with 16 vector registers; 32: 64-channel jobs
    throughout): e=70: one job (padded to 128), odd length (the reverse step's single last
    position); e=150: a 128-channel job and a 64-channel one (padded to 192), even length;
    e=40: only the 64-channel kernel. ``copy`` "other": the reverse step's loop shape
    this machine does not run (one position a pass for 16 vector registers, two for 32), in its
    128-channel job: its 64-channel job is the same source with another width constant, and
    compiling it too cost the suite ~24 s of its 15-minute budget; the machines that run it
    check it in the "own" cases."""
    if copy == "other":
        monkeypatch.setattr(scan_module, "VECTOR_REGS", _other_regs())
    args = _inputs(np.float64, length=length, e=e, seed=3)
    dout = np.random.default_rng(4).standard_normal(args[0].shape)
    grads = selective_scan_backward(dout, *args)
    u, delta, A_log, B, C, D, z = args
    order = {"u": (0, u), "delta": (1, delta), "A_log": (2, A_log), "B": (3, B), "C": (4, C),
             "D": (5, D), "z": (6, z)}

    def loss() -> float:
        return float((_ref_out(*args)[0] * dout).sum())

    for name, (i, x) in order.items():
        assert_grad_close(grads[i], loss, x, rtol=1e-5, name=name)


def test_backward_jobs_of_the_other_width_give_the_same_gradients(monkeypatch):
    """``BWD_CHUNKS``: 128-channel backward jobs on CPUs with 16 vector registers, 64 on those
    with 32. The width this machine does not run, through the wrapper, equals its own to
    rounding (float64; e = 150, padded to 192: a 128-channel job and a 64-channel remainder a
    row, or three 64-channel jobs; resets): only the grouping of the dB/dC partial sums over
    channel chunks differs. The kernels take their dB/dC row from the wrapper, so a copy
    compiled on a machine of the other width indexes them right."""
    own = scan_module.BWD_CHUNK
    assert own == scan_module.BWD_CHUNKS[scan_module.VECTOR_REGS]
    args = _inputs(np.float64, length=9, e=150, seed=6)
    reset = _reset_mask(2, 9)
    dout = np.random.default_rng(7).standard_normal(args[0].shape)
    mine = selective_scan_backward(dout, *args, reset=reset)
    monkeypatch.setattr(scan_module, "BWD_CHUNK", 192 - own)
    ran = []
    for key, fn in list(scan_module._BACKWARD.items()):
        monkeypatch.setitem(scan_module._BACKWARD, key,
                            lambda *a, key=key, fn=fn: (ran.append(key[0]), fn(*a)))
    other = selective_scan_backward(dout, *args, reset=reset)
    assert ran == ([64] if own == 128 else [128, 64])  # the calls, each over all its jobs
    for name, a, b in zip(("du", "ddelta", "dA_log", "dB", "dC", "dD", "dz"), mine, other,
                          strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=name)


# float32 vs float64 at rounding-derived tolerances: tests/ops/test_float32_accuracy.py


def _reset_mask(b, length, seed=0):
    """Random document starts, including a length-1 document and starts at t = 0."""
    rng = np.random.default_rng(seed)
    reset = rng.random((b, length)) < 0.25
    reset[0, 3] = reset[0, 4] = True  # a one-position document
    reset[-1, 0] = True
    return reset


def test_reference_reset_equals_separate_documents():
    u, delta, A_log, B, C, D, _ = _inputs(np.float64, b=1, length=12)
    reset = np.zeros((1, 12), bool)
    reset[0, [5, 6, 9]] = True
    y, h = ref.selective_scan(u, delta, -np.exp(A_log), B, C, D, reset)
    for lo, hi in ((0, 5), (5, 6), (6, 9), (9, 12)):
        part = [a[:, lo:hi] for a in (u, delta)]
        ys, hs = ref.selective_scan(*part, -np.exp(A_log), B[:, lo:hi], C[:, lo:hi], D)
        np.testing.assert_allclose(y[:, lo:hi], ys, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(h, hs, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-4)])
def test_forward_with_reset_matches_reference(dtype, tol):
    args = _inputs(dtype)
    reset = _reset_mask(2, 9)
    out, h_last = selective_scan_forward(*args, reset=reset)
    u, delta, A_log, B, C, D, z = [a.astype(np.float64) for a in args]
    y, h = ref.selective_scan(u, delta, -np.exp(A_log), B, C, D, reset)
    np.testing.assert_allclose(out, y * ref.silu(z), rtol=tol, atol=tol)
    np.testing.assert_allclose(h_last, h, rtol=tol, atol=tol)
    plain, _ = selective_scan_forward(*args)
    assert not np.allclose(out, plain), "the reset mask had no effect"


def test_reset_none_is_bit_identical_to_no_starts():
    args = _inputs(np.float32)
    dout = np.random.default_rng(1).standard_normal(args[0].shape).astype(np.float32)
    no_starts = np.zeros((2, 9), np.uint8)
    for a, b in zip(selective_scan_forward(*args), selective_scan_forward(*args, reset=no_starts),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(selective_scan_backward(dout, *args),
                    selective_scan_backward(dout, *args, reset=no_starts), strict=True):
        np.testing.assert_array_equal(a, b)


def test_backward_with_reset_finite_differences_float64():
    args = _inputs(np.float64, seed=7)
    reset = _reset_mask(2, 9, seed=1)
    dout = np.random.default_rng(8).standard_normal(args[0].shape)
    grads = selective_scan_backward(dout, *args, reset=reset)
    u, delta, A_log, B, C, D, z = args

    def loss() -> float:
        y, _ = ref.selective_scan(u, delta, -np.exp(A_log), B, C, D, reset)
        return float((y * ref.silu(z) * dout).sum())

    for i, x in enumerate(args):
        assert_grad_close(grads[i], loss, x, rtol=1e-5, name=str(i))


def test_reset_mask_shape_is_checked():
    args = _inputs(np.float32)
    with pytest.raises(ValueError, match=r"reset: expected shape \(2, 9\)"):
        selective_scan_forward(*args, reset=np.zeros((2, 8), bool))


def test_step_matches_full_forward():
    """The recurrent step, started from zeros, gives the forward's output at every position and its
    final state (float64: the same update, so to rounding)."""
    u, delta, A_log, B, C, D, z = _inputs(np.float64)
    out, h_last = selective_scan_forward(u, delta, A_log, B, C, D, z)
    h = np.zeros_like(h_last)
    for t in range(u.shape[1]):
        row = [np.ascontiguousarray(a[:, t]) for a in (u, delta, B, C, z)]
        y = selective_scan_step(h, row[0], row[1], A_log, row[2], row[3], D, row[4])
        np.testing.assert_allclose(y, out[:, t], rtol=1e-12, atol=1e-12, err_msg=str(t))
    np.testing.assert_allclose(h, h_last, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_without_dA_is_the_same_except_dA_log_is_none(dtype):
    """need_dA=False (A_log frozen) runs the reverse step without the dA sum; every other
    gradient is bit-identical."""
    args = _inputs(dtype)
    dout = np.random.default_rng(1).standard_normal(args[0].shape).astype(dtype)
    reset = _reset_mask(2, 9, seed=3)
    full = selective_scan_backward(dout, *args, reset=reset)
    part = selective_scan_backward(dout, *args, reset=reset, need_dA=False)
    assert part[2] is None and full[2] is not None
    for i in (0, 1, 3, 4, 5, 6):
        np.testing.assert_array_equal(full[i], part[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cut", [1, 4, 8])
def test_forward_from_h0_goes_on_where_the_first_part_stopped(dtype, cut):
    """A sequence scanned in two parts, the second from the first's h_last (``h0``), gives the
    whole scan's outputs and final state bit for bit (the same update from the same state);
    e=70 pads h0 to two 64-channel chunks. A zero or missing h0 would differ (the test checks)."""
    u, delta, A_log, B, C, D, z = _inputs(dtype)
    whole, h_whole = selective_scan_forward(u, delta, A_log, B, C, D, z)
    part = [np.ascontiguousarray(a[:, :cut]) for a in (u, delta, B, C, z)]
    rest = [np.ascontiguousarray(a[:, cut:]) for a in (u, delta, B, C, z)]
    out1, h1 = selective_scan_forward(part[0], part[1], A_log, part[2], part[3], D, part[4])
    out2, h2 = selective_scan_forward(rest[0], rest[1], A_log, rest[2], rest[3], D, rest[4],
                                      h0=h1)
    np.testing.assert_array_equal(np.concatenate([out1, out2], axis=1), whole)
    np.testing.assert_array_equal(h2, h_whole)
    cold, _ = selective_scan_forward(rest[0], rest[1], A_log, rest[2], rest[3], D, rest[4])
    assert not np.allclose(cold, out2), "h0 had no effect"


def test_forward_h0_is_cut_by_a_reset_at_position_0_and_checked():
    u, delta, A_log, B, C, D, z = _inputs(np.float64)
    h0 = np.random.default_rng(5).standard_normal((2, 70, 4))
    reset = np.zeros((2, 9), bool)
    reset[:, 0] = True
    a = selective_scan_forward(u, delta, A_log, B, C, D, z, reset=reset, h0=h0)
    b = selective_scan_forward(u, delta, A_log, B, C, D, z)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match=r"h0: expected shape \(2, 70, 4\)"):
        selective_scan_forward(u, delta, A_log, B, C, D, z, h0=h0[:, :69])


def _from_cache(regs: int, dtype) -> bool:
    """Whether the 128-channel backward copy for ``regs`` in ``dtype`` was loaded from Numba's
    cache (rather than compiled in this process)."""
    stats = scan_module._BACKWARD[128, regs].stats
    return any(str(sig[0].dtype) == np.dtype(dtype).name for sig in stats.cache_hits)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("length", [1, 8, 9])
def test_the_two_loop_shapes_agree(length, dtype, monkeypatch):
    """The backward's copies for 16 and 32 vector registers (one or two positions a pass of the
    reverse step) do the same arithmetic in the same order (e = 70 in one 128-channel job, 58
    channels of padding; resets; lengths 1, 8, 9; with and without dA). Compiled for AVX2
    (x86 without AVX-512, 16 registers), the gradients are bit-identical; compiled for AVX-512
    LLVM groups the two copies' sums over channels (dB, dC) differently: 2e-5 (float32) and
    1e-13 (float64) relative apart, measured on a Xeon, so there they are compared to rounding
    (each machine runs one copy: a run's bits do not depend on it). Bit-identical also needs
    both copies in the same cache state: a kernel loaded from Numba's cache rounds apart from
    one compiled in the process (README, limitations)."""
    monkeypatch.setattr(scan_module, "BWD_CHUNK", 128)
    args = _inputs(dtype, b=3, length=length, e=70, n=16, seed=5)
    dout = np.random.default_rng(2).standard_normal(args[0].shape).astype(dtype)
    reset = _reset_mask(3, length, seed=4) if length >= 5 else None
    own, other = scan_module.VECTOR_REGS, _other_regs()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for need_dA in (True, False):
        got = {}
        for regs in (own, other):
            monkeypatch.setattr(scan_module, "VECTOR_REGS", regs)
            got[regs] = selective_scan_backward(dout, *args, reset=reset, need_dA=need_dA)
        bitwise = own == 16 and _from_cache(own, dtype) == _from_cache(other, dtype)
        for a, b in zip(got[own], got[other], strict=True):
            if a is None or b is None:
                assert a is None and b is None and not need_dA
            elif bitwise:
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
