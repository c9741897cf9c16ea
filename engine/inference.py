"""Recurrent (token-by-token) inference with a per-layer cache, mirroring HF ``MambaCache``.

State per layer: ``conv`` (b, e, k) -- the last k inputs of the conv branch (zero-padded), and
``ssm`` (b, e, n) -- the selective-scan state h. ``prefill`` runs the full parallel forward over
the prompt (or a piece of it, from the state the pieces before it left) and keeps the final
states; ``step`` advances one token in O(1) time and memory by
composing the ops' recurrent steps (``conv1d_step``, ``selective_scan_step``) and forwards.
Reference: engine/reference.py (a step must equal the full forward at every position).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike

from .config import MambaConfig
from .model import layer_forward
from .ops.activations import softplus_forward
from .ops.conv1d import conv1d_step
from .ops.embedding import embedding_forward
from .ops.rmsnorm import rmsnorm_forward
from .ops.selective_scan import selective_scan_step
from .params import EMBEDDINGS, NORM_F, Params, head_name, layer_prefix


@dataclass
class InferenceState:
    conv: list[np.ndarray]  # n_layer x (b, e, k)
    ssm: list[np.ndarray]  # n_layer x (b, e, n)

    @classmethod
    def zeros(cls, cfg: MambaConfig, batch: int = 1, dtype: DTypeLike = np.float32) -> InferenceState:
        e, k, n = cfg.d_inner, cfg.d_conv, cfg.d_state
        return cls(
            conv=[np.zeros((batch, e, k), dtype) for _ in range(cfg.n_layer)],
            ssm=[np.zeros((batch, e, n), dtype) for _ in range(cfg.n_layer)],
        )


def prefill(p: Params, tokens: np.ndarray, cfg: MambaConfig, state: InferenceState | None = None,
            ) -> tuple[np.ndarray, InferenceState]:
    """tokens (b, l), l >= 1 -> (logits of the last position (b, v), state after them). With
    ``state`` (the state after earlier tokens) the tokens continue from it, so a long prompt
    read in pieces gives the logits and state of reading it whole; None: from the start."""
    b, length = tokens.shape
    k = cfg.d_conv
    dtype = p[EMBEDDINGS].dtype
    out = InferenceState.zeros(cfg, b, dtype)
    h = embedding_forward(tokens, p[EMBEDDINGS])
    for i in range(cfg.n_layer):
        start = None if state is None else (state.conv[i], state.ssm[i])
        h, c = layer_forward(p, i, h, cfg, start=start)
        before = np.zeros((b, cfg.d_inner, k), dtype) if state is None else state.conv[i]
        inputs = np.concatenate([before, c.xz[:, -k:, : cfg.d_inner].transpose(0, 2, 1)], axis=2)
        out.conv[i][...] = inputs[:, :, -k:]  # the last k inputs, zeros before the first
        out.ssm[i][...] = c.h_last
    hf, _ = rmsnorm_forward(np.ascontiguousarray(h[:, -1:, :]), p[NORM_F], cfg.norm_eps)
    return hf[:, 0, :] @ p[head_name(p)].T, out


SERIAL_STEP_ELEMENTS = 1 << 17
"""A token's ``step`` runs its Numba kernels in one thread while its SSM state (b x e x n) has at
most this many elements (a batch of 1 up to e = 8,192 at n = 16). It launches 4 parallel kernels
a layer and 1 more (17 for the small preset), and each launch wakes the OpenMP threads: ~70 us a
call at 2 threads against ~5 us at 1 for a (1, 128) RMSNorm on a 2-core VM, more than the work;
the kernels' results do not depend on their thread count. Measured (``python -m engine bench
--generate cpu``, same VM, two runs each): small 1.26-1.29 -> 0.42-0.45 ms a token, medium
2.31-2.34 -> 1.11-1.21, large (memory-bound GEMVs) 32.5-33.8 -> 29.2-30.0."""


def step(p: Params, token: np.ndarray, state: InferenceState, cfg: MambaConfig) -> np.ndarray:
    """token (b,) -> logits (b, v); advances ``state`` in place (``SERIAL_STEP_ELEMENTS``: its
    Numba kernels in one thread when the state is small)."""
    if token.shape[0] * cfg.d_inner * cfg.d_state > SERIAL_STEP_ELEMENTS:
        return _step(p, token, state, cfg)
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)  # (this thread's launches only)
    try:
        return _step(p, token, state, cfg)
    finally:
        numba.set_num_threads(before)


def _step(p: Params, token: np.ndarray, state: InferenceState, cfg: MambaConfig) -> np.ndarray:
    e, n, r = cfg.d_inner, cfg.d_state, cfg.dt_rank
    h = embedding_forward(token, p[EMBEDDINGS])  # (b, d)
    for i in range(cfg.n_layer):
        pre = layer_prefix(i)
        mx = pre + "mixer."
        xn, _ = rmsnorm_forward(h, p[pre + "norm.weight"], cfg.norm_eps)
        xz = xn @ p[mx + "in_proj.weight"].T  # (b, 2e)
        x, z = np.ascontiguousarray(xz[:, :e]), np.ascontiguousarray(xz[:, e:])
        u = conv1d_step(state.conv[i], x, p[mx + "conv1d.weight"], p[mx + "conv1d.bias"])
        x_dbl = u @ p[mx + "x_proj.weight"].T  # (b, r + 2n)
        dt, B, C = x_dbl[:, :r], x_dbl[:, r : r + n], x_dbl[:, r + n :]
        delta = softplus_forward(dt @ p[mx + "dt_proj.weight"].T, p[mx + "dt_proj.bias"])  # (b, e)
        y = selective_scan_step(state.ssm[i], u, delta, p[mx + "A_log"], np.ascontiguousarray(B),
                                np.ascontiguousarray(C), p[mx + "D"], z)
        h = h + y @ p[mx + "out_proj.weight"].T
    hf, _ = rmsnorm_forward(h, p[NORM_F], cfg.norm_eps)
    return hf @ p[head_name(p)].T


class CpuStepper:
    """The CPU backend of ``MambaLM.generate``: the same interface as ``engine.gpu.GpuStepper``
    (``prefill(ids) -> logits``, ``step(token) -> logits``) over ``prefill``/``step``."""

    description = "cpu (numpy)"

    def __init__(self, p: Params, cfg: MambaConfig) -> None:
        self.p = p
        self.cfg = cfg
        self.state = InferenceState.zeros(cfg, 1, p[EMBEDDINGS].dtype)

    def prefill(self, ids: np.ndarray) -> np.ndarray:
        """ids (l,) -> logits (v,) of the last position; resets the state."""
        return self._read(ids, None)

    def feed(self, ids: np.ndarray) -> np.ndarray:
        """ids (l,) read after what was read so far -> logits (v,) of the last position."""
        return self._read(ids, self.state)

    def _read(self, ids: np.ndarray, state: InferenceState | None) -> np.ndarray:
        logits, self.state = prefill(self.p, np.asarray(ids).reshape(1, -1), self.cfg, state)
        return logits[0]

    def step(self, token: int) -> np.ndarray:
        return step(self.p, np.array([token]), self.state, self.cfg)[0]
