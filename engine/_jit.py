"""The one place where Numba options live.

Every kernel in ``engine.ops`` is compiled with the decorators below, so the flag set is uniform:

* ``cache=True``  -- compiled code is kept under ``NUMBA_CACHE_DIR`` (set it to a writable folder;
  ``engine`` defaults it to ``<checkout>/.numba-cache`` when unset).
* ``nogil=True``  -- kernels release the GIL so a GUI thread keeps running while training.
* ``fastmath``    -- only ``reassoc``/``contract``/``nsz``: lets LLVM vectorise reductions and fuse
  multiply-adds. ``nnan``/``ninf`` are never enabled: the code uses exp/log/softplus and the
  optimizer's NaN guard must see non-finite values.
* ``error_model="numpy"`` -- division by zero gives inf/nan instead of raising inside a kernel.
* ``inline="always"`` on the scalar helpers (``fast_exp``, ``scan_decay``, ``sigmoid``,
  ``softplus``) -- Numba inlines them itself rather than leaving it to LLVM's inliner, whose
  choice depends on the CPU: on an Intel Xeon (Emerald Rapids, Numba 0.68.0) LLVM kept
  ``softplus`` out of line, so the softplus loop ran scalar, 15x slower (tests/ops/
  test_helpers_inlined.py compiles the kernels with LLVM's inliner off to hold this).

Kernels are type-generic: the same source compiles for float32 (training) and float64
(finite-difference gradient checks).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable
from functools import partial
from types import FunctionType
from typing import Any, Protocol, TypeVar, cast

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, config
from numba.core.codegen import get_host_cpu_features
from numba.extending import intrinsic, overload, register_jitable

FASTMATH = frozenset({"reassoc", "contract", "nsz"})

_F = TypeVar("_F", bound=Callable[..., Any])


class _KernelDecorator(Protocol):
    """What the decorators do as far as a type checker sees: calls keep the Python signature
    (Numba compiles one specialisation per argument type behind it)."""

    def __call__(self, fn: _F, /) -> _F: ...


_njit = partial(njit, cache=True, nogil=True, fastmath=set(FASTMATH), error_model="numpy")
kernel = cast(_KernelDecorator, _njit)
parallel_kernel = cast(_KernelDecorator, partial(_njit, parallel=True))


def vector_registers(features: str | None = None, machine: str | None = None) -> int:
    """How many vector registers the code Numba compiles here may use: 16 on x86-64 without
    AVX-512 (AVX2 and older: ymm0-15; also ``NUMBA_CPU_NAME=generic``, whose features are
    empty), 32 otherwise (AVX-512's zmm0-31, Arm's v0-31). ``features`` is LLVM's feature string
    ("+avx2,-avx512f,..."), by default the one Numba compiles for (``NUMBA_CPU_FEATURES`` where
    set, else the host's); ``machine`` is ``platform.machine()`` by default. Kernels whose best
    loop shape differs with the register count are compiled in one copy per count
    (``specialised``) and pick theirs with this."""
    if features is None:
        features = config.CPU_FEATURES if config.CPU_FEATURES is not None else (
            get_host_cpu_features())
    x86 = (machine or platform.machine()).lower() in {"x86_64", "amd64", "i386", "i686", "x86"}
    return 16 if x86 and "+avx512f" not in features.split(",") else 32


def specialised(decorator: _KernelDecorator, fn: _F, **consts: object) -> _F:
    """``decorator`` applied to a copy of ``fn`` whose module globals named in ``consts`` are
    replaced by those values, which Numba then compiles as constants (e.g. a loop bound). The
    copy is named ``<fn>_<values>``, so each specialisation has its own cache file."""
    tag = "_".join(str(v) for v in consts.values())
    g = dict(fn.__globals__)
    g.update(consts)
    f = FunctionType(fn.__code__, g, f"{fn.__name__}_{tag}", fn.__defaults__, fn.__closure__)
    f.__qualname__ = f"{fn.__qualname__}_{tag}"
    f.__module__ = fn.__module__
    f.__doc__ = fn.__doc__
    return decorator(cast(_F, f))


@intrinsic
def _int32_bits_as_float32(typingctx, bits):
    """Reinterpret an int32 as the float32 with the same bit pattern (no conversion)."""
    if bits != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _float32_bits_as_int32(typingctx, x):
    """Reinterpret a float32 as the int32 with the same bit pattern (no conversion)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def prefetch(typingctx, arr, i):
    """prefetch(arr, i): ask the CPU to bring the cache line holding element ``i`` of the
    contiguous 1-D array ``arr`` into cache (LLVM's ``llvm.prefetch``, a read hint; no effect
    on results). The scan backward uses it on the input rows a few positions ahead: a job reads
    its (l, 64) column block of (b, l, e) arrays, 256 bytes a row at a stride of e floats, which
    the hardware prefetchers follow poorly (measured: 8-10 % of the kernel)."""
    if not isinstance(arr, types.Array) or arr.ndim != 1 or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        # read, high temporal locality, data cache
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, i), codegen


def fast_exp(x):
    """exp(x). float32: Cephes polynomial (max rel. error ~1e-7, vectorisable; exp(+inf) = inf,
    exp(-inf) = 0, exp(nan) = nan); float64: math.exp."""
    return math.exp(x)


_LO = np.float32(-87.33654)
_HI = np.float32(88.37626)
_INF = np.float32(np.inf)
_ZERO = np.float32(0.0)
_LOG2E = np.float32(1.44269504088896341)
_HALF = np.float32(0.5)
_ONE = np.float32(1.0)
_C1 = np.float32(0.693359375)
_C2 = np.float32(-2.12194440e-4)
_P0 = np.float32(1.9875691500e-4)
_P1 = np.float32(1.3981999507e-3)
_P2 = np.float32(8.3334519073e-3)
_P3 = np.float32(4.1665795894e-2)
_P4 = np.float32(1.6666665459e-1)
_P5 = np.float32(5.0000001201e-1)


@register_jitable(inline="always", fastmath=set(FASTMATH))
def _exp_poly(x):  # pragma: no cover - compiled
    """float32 exp(x) for x clamped to [_LO, _HI]: 2^n * a degree-7 polynomial of the remainder
    (Cephes expf), for ``fast_exp``, which adds its range handling."""
    xc = min(max(x, _LO), _HI)
    fx = np.floor(xc * _LOG2E + _HALF)
    r = xc - fx * _C1 - fx * _C2
    z = r * r
    p = ((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5
    return (p * z + r + _ONE) * _int32_bits_as_float32(np.int32((np.int32(fx) + np.int32(127))
                                                              << 23))


@overload(fast_exp, inline="always", jit_options={"fastmath": set(FASTMATH)})
def _fast_exp_overload(x):
    if x == types.float32:

        def impl(x):
            y = _exp_poly(x)
            # outside the polynomial's range: overflow is inf, underflow 0, NaN stays NaN (selects,
            # so the loop still vectorises); the optimizer's non-finite guard must see them
            y = _INF if x > _HI else y
            y = _ZERO if x < _LO else y
            return x if x != x else y

        return impl

    def impl64(x):
        return math.exp(x)

    return impl64


LOG2E = 1.4426950408889634  # log2(e): float32 decay arguments are in base 2 (``decay_units``)
_D_LO = np.float32(-127.0)  # 2^-127 is below the normal range: decays there are 0
_D_HI = np.float32(127.0)
_D_ROUND = np.float32(12582912.0)  # 1.5 * 2^23: x + it has rint(x) in its low mantissa bits
_D_ONE_BITS = np.int32(0x3F800000)  # the bits of 1.0f: exponent 127
# 2^r = 1 + r (_E0 + r (_E1 + ... + r _E5)) on r in [-1/2, 1/2]: fitted here to the relative
# error of 2^r (iterated weighted least squares, then rounded to float32): 1.6e-8 in exact
# arithmetic, 1.01e-7 evaluated in float32 (tests/ops/test_fast_exp.py; fast_exp: 3.0e-7)
_E0 = np.float32(0.6931471824645996)
_E1 = np.float32(0.24022647738456726)
_E2 = np.float32(0.055503323674201965)
_E3 = np.float32(0.00961843691766262)
_E4 = np.float32(0.0013398873852565885)
_E5 = np.float32(0.00015353361959569156)


def decay_units(dtype: Any) -> float:
    """What ``scan_decay``'s argument is multiplied by: log2(e) for float32 (its argument is
    delta A log2(e), a power of 2), 1 for float64 (delta A, a power of e)."""
    return LOG2E if np.dtype(dtype) == np.float32 else 1.0


def scan_decay(x):
    """The scan's decays exp(delta A), whose argument is never positive (delta >= 0, A < 0),
    from x = delta A in ``decay_units``. float32: 2^x, x = delta A log2(e) (the rates are scaled
    once per call, not per element): a degree-6 polynomial of r = x - rint(x) times 2^rint(x),
    whose exponent bits come from x + 1.5 * 2^23 (no float-to-int conversion); max relative
    error 1.01e-7 against 2^x (1-2 ulp). 0 for x <= -127 (and -inf; from -126.5 to -126 a
    subnormal), nan for nan (the clamps keep it, the arithmetic carries it), 2^127 for
    x >= 127 (never a decay). 15 vector instructions as compiled for AVX2 (the NaN-keeping
    lower clamp is a compare and a blend) against 22 of the natural-base Cephes form used
    before (``fast_exp``'s: its two-part ln 2 reduction, the selects): the scan forward
    0.77-0.80x on an AVX2 EPYC, 0.74-0.85x on an AVX-512 Xeon (measured). float64:
    math.exp(x), x = delta A (unchanged: the float64 results stay those of the reference)."""
    return math.exp(x)


@overload(scan_decay, inline="always", jit_options={"fastmath": set(FASTMATH)})
def _scan_decay_overload(x):
    if x == types.float32:

        def impl(x):
            xc = _D_LO if x < _D_LO else x  # written as selects, not min/max: NaN goes through
            xc = _D_HI if xc > _D_HI else xc
            r = xc - np.rint(xc)
            p = ((((_E5 * r + _E4) * r + _E3) * r + _E2) * r + _E1) * r + _E0
            # rint(xc) + 127 in the exponent field: 0 (the float 0) at -127
            scale = _int32_bits_as_float32(
                np.int32((_float32_bits_as_int32(xc + _D_ROUND) << 23) + _D_ONE_BITS))
            return (p * r + _ONE) * scale

        return impl

    def impl64(x):
        return math.exp(x)

    return impl64


def sigmoid(x):
    """1 / (1 + exp(-x)), in the dtype of x (float32 uses ``fast_exp``)."""
    return 1.0 / (1.0 + math.exp(-x))


@overload(sigmoid, inline="always", jit_options={"fastmath": set(FASTMATH)})
def _sigmoid_overload(x):
    if x == types.float32:

        def impl(x):
            return _ONE / (_ONE + fast_exp(-x))

        return impl

    def impl64(x):
        return 1.0 / (1.0 + math.exp(-x))

    return impl64


def softplus(x):
    """log(1 + exp(x)), stable; float32 uses ``fast_exp`` and a Cephes log polynomial."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


_SQRT2M1 = np.float32(0.41421356)
_TINY = np.float32(1e-12)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_LOGP = tuple(
    np.float32(c)
    for c in (
        7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
        -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
    )
)
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = _LOGP


@overload(softplus, inline="always", jit_options={"fastmath": set(FASTMATH)})
def _softplus_overload(x):
    if x == types.float32:

        def impl(x):
            y = fast_exp(-abs(x))  # (0, 1]; softplus(x) = max(x, 0) + log1p(y)
            big = y > _SQRT2M1
            # log1p(y) = e*ln2 + log(m), m = (1 + y) / 2^e in [0.707, 1.414], r = m - 1 formed
            # without the rounded sum 1 + y (no cancellation, and safe under reassociation)
            r = (y - _ONE) * _HALF if big else y
            e = _ONE if big else _ZERO
            # below y = 1e-12 (then r = y), log1p(r) rounds to r, and r * r is a denormal for
            # r < 1.1e-19, which costs Intel CPUs a microcode assist per operation: softplus
            # forward on x in [-60, -45] took 3.8 ms against 0.29 (Xeon, (1024, 256)); same bits
            z = r * r if y > _TINY else _ZERO
            p = (((((((_L0 * r + _L1) * r + _L2) * r + _L3) * r + _L4) * r + _L5) * r + _L6) * r
                 + _L7) * r + _L8
            l1p = r + (r * z * p - _HALF * z) + e * _LN2_LO + e * _LN2_HI
            return (x if x > _ZERO else _ZERO) + l1p

        return impl

    def impl64(x):
        return max(x, 0.0) + math.log1p(math.exp(-abs(x)))

    return impl64
