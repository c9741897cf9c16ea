"""The float32 scalar helpers of engine._jit: accuracy inside the range, and non-finite inputs
propagating as non-finite (the optimizer's guard must see an overflow)."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from engine._jit import decay_exp, fast_exp, vector_registers
from engine.ops.activations import softplus_forward
from engine.ops.selective_scan import selective_scan_forward


@njit(cache=False)
def _exp_all(x):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = fast_exp(x[i])
    return out


@njit(cache=False)
def _decay_exp_all(x):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = decay_exp(x[i])
    return out


def test_decay_exp_float32_is_fast_exp_bit_for_bit_up_to_its_overflow() -> None:
    x = np.concatenate([np.linspace(-110.0, 88.3, 400_001, dtype=np.float32),
                        np.array([-np.inf, np.nan, 0.0, -0.0, 88.37], np.float32)])
    got, want = _decay_exp_all(x), _exp_all(x)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
    assert np.isfinite(_decay_exp_all(np.array([1e30], np.float32))).all()  # no inf branch


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
