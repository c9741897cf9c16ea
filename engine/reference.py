"""Slow, readable float64 NumPy reference of the whole Mamba-1 LM: the single source of truth.

Written for clarity (mamba-minimal style einsums, a Python loop over time); every fast kernel in
``engine.ops`` and the WGSL shaders are tested against it. Shapes use the glossary in ``config.py``.
"""

from __future__ import annotations

import numpy as np

from .config import MambaConfig
from .params import EMBEDDINGS, NORM_F, Params, head_name, layer_prefix


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x (..., d) * rsqrt(mean(x^2) + eps) * weight (d,)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def doc_start(reset: np.ndarray | None, b: int, length: int) -> np.ndarray:
    """(b, l): the first position of the document that holds each position (0 without ``reset``,
    a (b, l) mask that is True where a document starts)."""
    if reset is None:
        return np.zeros((b, length), dtype=np.int64)
    pos = np.where(np.asarray(reset, dtype=bool), np.arange(length), 0)
    return np.maximum.accumulate(pos, axis=1)


def conv1d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray,
           reset: np.ndarray | None = None) -> np.ndarray:
    """Causal depthwise conv: x (b, l, e), weight (e, 1, k), bias (e,) -> (b, l, e). With ``reset``
    (b, l) the window of position t reads nothing before the start of t's document."""
    k = weight.shape[2]
    b, length = x.shape[:2]
    xp = np.pad(x, ((0, 0), (k - 1, 0), (0, 0)))
    t = np.arange(length)
    start = doc_start(reset, b, length)
    # tap j of position t reads position t - (k - 1) + j; it counts only inside t's document
    keep = [(t - (k - 1) + j >= start)[..., None] for j in range(k)]
    return bias + sum(xp[:, j : j + length, :] * weight[:, 0, j] * keep[j] for j in range(k))


def selective_scan(
    u: np.ndarray, delta: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray, D: np.ndarray,
    reset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """u, delta (b, l, e); A (e, n); B, C (b, l, n); D (e,) -> y (b, l, e), h_last (b, e, n).
    With ``reset`` (b, l) the state is zeroed before each position where it is True."""
    b, length, e = u.shape
    dA = np.exp(np.einsum("ble,en->blen", delta, A))
    dBu = np.einsum("ble,bln,ble->blen", delta, B, u)
    keep = np.ones((b, length)) if reset is None else 1.0 - np.asarray(reset, dtype=bool)
    h = np.zeros((b, e, A.shape[1]))
    ys = []
    for t in range(length):
        h = dA[:, t] * h * keep[:, t, None, None] + dBu[:, t]
        ys.append(np.einsum("ben,bn->be", h, C[:, t]))
    return np.stack(ys, axis=1) + u * D, h


def mixer(p: Params, prefix: str, x: np.ndarray, cfg: MambaConfig,
          reset: np.ndarray | None = None) -> np.ndarray:
    """One Mamba mixer: x (b, l, d) -> (b, l, d); ``reset`` (b, l) marks document starts."""
    e, n, r = cfg.d_inner, cfg.d_state, cfg.dt_rank
    xz = x @ p[prefix + "in_proj.weight"].T  # (b, l, 2e)
    xb, z = xz[..., :e], xz[..., e:]  # column split: x first, gate second
    u = silu(conv1d(xb, p[prefix + "conv1d.weight"], p[prefix + "conv1d.bias"], reset))
    x_dbl = u @ p[prefix + "x_proj.weight"].T  # (b, l, r + 2n)
    dt, B, C = x_dbl[..., :r], x_dbl[..., r : r + n], x_dbl[..., r + n :]
    delta = softplus(dt @ p[prefix + "dt_proj.weight"].T + p[prefix + "dt_proj.bias"])
    A = -np.exp(p[prefix + "A_log"])
    y, _ = selective_scan(u, delta, A, B, C, p[prefix + "D"], reset)
    return (y * silu(z)) @ p[prefix + "out_proj.weight"].T


def mamba_forward(p: Params, tokens: np.ndarray, cfg: MambaConfig,
                  reset: np.ndarray | None = None) -> np.ndarray:
    """tokens (b, l) -> logits (b, l, v); ``reset`` (b, l) marks document starts."""
    p = {k: np.asarray(v, dtype=np.float64) for k, v in p.items()}
    h = p[EMBEDDINGS][tokens]
    for i in range(cfg.n_layer):
        pre = layer_prefix(i)
        h = h + mixer(p, pre + "mixer.", rmsnorm(h, p[pre + "norm.weight"], cfg.norm_eps), cfg, reset)
    h = rmsnorm(h, p[NORM_F], cfg.norm_eps)
    return h @ p[head_name(p)].T


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean over positions with target >= 0. logits (..., v), targets (...)."""
    lg = logits.reshape(-1, logits.shape[-1])
    tg = targets.reshape(-1)
    keep = tg >= 0
    lse = np.logaddexp.reduce(lg[keep], axis=-1)
    return float(np.mean(lse - lg[keep, tg[keep]]))


def mamba_loss(p: Params, tokens: np.ndarray, targets: np.ndarray, cfg: MambaConfig,
               reset: np.ndarray | None = None) -> float:
    return cross_entropy(mamba_forward(p, tokens, cfg, reset), targets)
