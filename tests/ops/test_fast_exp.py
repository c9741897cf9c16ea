"""The float32 scalar helpers of engine._jit: accuracy inside the range, and non-finite inputs
propagating as non-finite (the optimizer's guard must see an overflow)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from engine._jit import LOG2E, decay_units, fast_exp, scan_decay, vector_registers
from engine.ops.activations import softplus_forward
from engine.ops.selective_scan import selective_scan_forward


@njit(cache=False)
def _exp_all(x):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = fast_exp(x[i])
    return out


@njit(cache=False)
def _decay_all(x):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = scan_decay(x[i])
    return out


def test_decay_float32_is_two_to_the_x_within_1_2e7_relative() -> None:
    # every float32 spacing class of the decays' range: a dense grid, then random points
    x = np.concatenate([np.linspace(-126.0, 0.0, 1_000_001, dtype=np.float32),
                        -np.random.default_rng(0).exponential(2.0, 1_000_000).astype(np.float32)])
    x = x[x >= -126.0]
    got = _decay_all(x).astype(np.float64)
    ref = np.exp2(x.astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) < 1.2e-7  # 1-2 float32 ulp (1.01e-7 measured)


def test_decay_float32_edges() -> None:
    x = np.array([0.0, -0.0, -1.0, -126.0, -126.5, -126.6, -127.0, -1e30, -np.inf, np.nan,
                  126.9, 1e30], np.float32)
    got = _decay_all(x)
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 0.5
    assert got[3] == np.float32(2.0**-126)  # the smallest normal: still a decay
    assert 0.0 < got[4] < np.float32(2.0**-126)  # rint(-126.5) = -126: a subnormal
    assert (got[5:9] == 0.0).all()  # rint below -126.5 is -127: nothing carries
    assert np.isnan(got[9])  # the optimizer's guard must see a NaN delta or A
    assert np.isfinite(got[10:]).all()  # positive arguments are never decays: bounded, no inf


def test_decay_float64_is_math_exp_and_units_match() -> None:
    x = np.linspace(-700.0, 0.0, 10_001)
    # math.exp as Numba compiles it: NumPy's exp to the bit on an AVX2 EPYC, within an ulp or
    # two where its loop is vectorised with another exp (an AVX-512 Xeon); fast_exp's error
    # would be ~1e-7
    np.testing.assert_allclose(_decay_all(x), np.exp(x), rtol=1e-15, atol=0)
    assert decay_units(np.float64) == 1.0 and decay_units(np.float32) == LOG2E
    # what the scan passes: A log2(e) in float32 gives exp(delta A) to the argument's rounding
    dA = -np.linspace(0.0, 20.0, 2001, dtype=np.float32)
    got = _decay_all((dA * np.float32(LOG2E)).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got / np.exp(dA.astype(np.float64)) - 1)) < 2e-6


def test_fast_exp_float32_matches_float64_exp_within_4e7_relative() -> None:
    x = np.linspace(-87.0, 88.0, 200_001, dtype=np.float32)
    got = _exp_all(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) < 4e-7  # ~3 float32 ulp


def test_fast_exp_float32_overflow_is_inf_underflow_zero_nan_nan() -> None:
    x = np.array([np.inf, 89.0, 1e30, -np.inf, -104.0, -1e30, np.nan, 0.0], np.float32)
    got = _exp_all(x)
    assert got[0] == np.inf and got[1] == np.inf and got[2] == np.inf
    assert got[3] == 0.0 and got[4] == 0.0 and got[5] == 0.0
    assert np.isnan(got[6])
    assert got[7] == 1.0


def test_softplus_float32_propagates_inf_and_nan() -> None:
    x = np.array([[np.inf, np.nan, -np.inf, 1.0]], np.float32)
    y = softplus_forward(x, np.zeros(4, np.float32))
    assert y[0, 0] == np.inf and np.isnan(y[0, 1]) and y[0, 2] == 0.0
    assert abs(y[0, 3] - np.log1p(np.e)) < 1e-6


def test_scan_forward_float32_output_is_nonfinite_when_delta_overflows() -> None:
    rng = np.random.default_rng(0)
    b, length, e, n = 1, 4, 8, 4
    f = np.float32
    u = rng.standard_normal((b, length, e)).astype(f)
    delta = np.full((b, length, e), 0.1, f)
    delta[0, 1, 3] = np.inf  # exp(delta * A) = exp(-inf) = 0, but delta * B * u = inf
    A_log = np.zeros((e, n), f)
    B = rng.standard_normal((b, length, n)).astype(f)
    C = rng.standard_normal((b, length, n)).astype(f)
    out, h_last = selective_scan_forward(u, delta, A_log, B, C, np.ones(e, f), np.ones_like(u))
    assert not np.isfinite(out[0, 1, 3])
    assert np.isfinite(out[0, 0]).all() and np.isfinite(np.delete(out[0, 1], 3)).all()


@pytest.mark.parametrize("features, machine, regs", [
    ("+sse2,+avx,+avx2,+fma,-avx512f", "x86_64", 16),  # AVX2 (the scan's one-position copy)
    ("+sse2,+avx2,+avx512f,+avx512vl", "x86_64", 32),  # AVX-512: 32 registers
    ("", "x86_64", 16),  # NUMBA_CPU_NAME=generic: empty features, plain SSE2
    ("+sse2,+avx2", "AMD64", 16),  # Windows spells it so
    ("+neon,+fp-armv8", "aarch64", 32),  # Arm: v0-v31
    ("", "arm64", 32),
])
def test_vector_registers_reads_the_compile_target(features, machine, regs):
    assert vector_registers(features, machine) == regs
