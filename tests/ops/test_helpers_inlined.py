"""The float32 scalar helpers (``engine._jit``: fast_exp, decay_exp, sigmoid, softplus) are inlined
by Numba itself, whatever LLVM's inliner decides on a given CPU.

Measured on an Intel Xeon (Emerald Rapids) with Numba 0.68.0: LLVM kept ``softplus`` as an
out-of-line call, so the softplus forward loop stayed scalar and took 3.0 ms against 0.20 ms
vectorised (15x; 12-17 % of a small or medium training step there). The test compiles the
kernels that use the helpers with ``NUMBA_OPT=0`` (LLVM inlines nothing) and finds no call to a
helper (nor to cross-entropy's ``_row_max``) in their IR, so only Numba-level inlining
(``inline="always"``) can pass it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE_KEY = pytest.StashKey[subprocess.Popen[str]]()  # the probe tests/conftest.py started

PROBE = r"""
import re
import numpy as np
from engine.ops import activations, conv1d, cross_entropy, selective_scan
from engine.ops.activations import softplus_backward, softplus_forward
from engine.ops.conv1d import conv1d_backward, conv1d_forward
from engine.ops.cross_entropy import cross_entropy_forward_backward, cross_entropy_scores
from engine.ops.selective_scan import selective_scan_backward, selective_scan_forward

rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)
b, l, e, n, k, V = 1, 8, 16, 4, 4, 11
x = f(b * l, e)
softplus_backward(f(b * l, e), x, f(e)), softplus_forward(x, f(e))
xc = f(b, l, e)
w = f(e, 1, k)
uc, xcv = conv1d_forward(xc, w, f(e))
conv1d_backward(f(*uc.shape), xc, w, xcv)
cross_entropy_forward_backward(f(b * l, V), rng.integers(0, V, b * l), 1.0)
cross_entropy_scores(f(b * l, V), rng.integers(0, V, b * l))
u, delta = f(b, l, e), np.abs(f(b, l, e))
A_log, B, C, D, z = f(e, n), f(b, l, n), f(b, l, n), f(e), f(b, l, e)
selective_scan_forward(u, delta, A_log, B, C, D, z)
selective_scan_backward(f(b, l, e), u, delta, A_log, B, C, D, z)
selective_scan_backward(f(b, l, e), u, delta, A_log, B, C, D, z, need_dA=False)

HELPER = r"call [^\n]*@\"?(_ZN6engine(?:4_jit|3ops13cross_entropy8_row_max)[\w.]*)"
calls, names, kernels = set(), set(), 0
for mod in (activations, conv1d, cross_entropy, selective_scan):
    objs = list(vars(mod).values())
    objs += [v for d in objs if isinstance(d, dict) for v in d.values()]  # compiled copies
    for obj in objs:
        if hasattr(obj, "inspect_llvm") and getattr(obj, "signatures", None):
            for ir in obj.inspect_llvm().values():
                kernels += 1
                names.add(obj.__name__)
                calls |= set(re.findall(HELPER, ir))
print("KERNELS", kernels)
print("NAMES", sorted(names))
print("CALLS", sorted(calls))
"""


def start_probe(cache: Path) -> subprocess.Popen[str]:
    """The probe in a process of its own (compiling every kernel at ``NUMBA_OPT=0`` takes ~45 s:
    tests/conftest.py starts it as the session starts, beside the other tests, when this test
    is collected)."""
    env = dict(os.environ, NUMBA_OPT="0", NUMBA_CACHE_DIR=str(cache), NUMBA_DISABLE_CACHE="1")
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen([sys.executable, "-c", PROBE], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_kernels_inline_the_scalar_helpers(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    probe = request.config.stash.get(PROBE_KEY, None) or start_probe(tmp_path / "cache")
    out, err = probe.communicate(timeout=600)
    assert probe.returncode == 0, err[-2000:]
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert int(lines["KERNELS"]) >= 7, out
    # the backward is kept in compiled copies (a dict), not a module-level function
    assert "_scan_backward_kernel_64_" in lines["NAMES"], out
    assert lines["CALLS"] == "[]", f"helpers called out of line: {lines['CALLS']}"
