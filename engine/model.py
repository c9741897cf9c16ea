"""The Mamba-1 LM on the CPU: forward and backward composed from ``engine.ops``. No kernels here.

Per layer (h is the residual stream, m = b * l rows):
    xn = rmsnorm(h)                        (m, d)
    xz = xn @ W_in.T                       (m, 2e): columns [:e] -> x branch, [e:] -> gate z
    u = silu(conv1d(xz[:, :e]))            (b, l, e)   (kernels read xz in place, no split copy)
    x_dbl = u @ W_x.T                      (m, r + 2n) -> dt (m, r), B (m, n), C (m, n)
    delta = softplus(dt @ W_dt.T + b_dt)   (m, e)
    y = selective_scan(u, delta, A, B, C, D) * silu(z)   (b, l, e)
    h = h + y @ W_out.T                    (m, d)
then norm_f, the tied head (logits = hf @ E.T) and cross-entropy.
Packed rows: an optional ``reset`` (b, l) mask, True at the first position of each document, stops
conv1d and the scan from carrying anything across a document boundary (None: one document per row).
Reference: engine/reference.py::mamba_forward (float64, the source of truth).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .config import MambaConfig
from .ops.activations import softplus_backward, softplus_forward
from .ops.conv1d import conv1d_backward, conv1d_forward
from .ops.cross_entropy import cross_entropy_forward_backward
from .ops.embedding import embedding_backward, embedding_forward
from .ops.rmsnorm import rmsnorm_backward, rmsnorm_forward
from .ops.selective_scan import selective_scan_backward, selective_scan_forward
from .params import EMBEDDINGS, NORM_F, Params, head_name, layer_prefix


@dataclass
class LayerCache:
    """What one layer's backward needs. Shapes for b rows of length l."""

    h_in: np.ndarray  # (b, l, d) residual input
    rstd: np.ndarray  # (b, l)
    xn: np.ndarray  # (m, d) normed input
    xz: np.ndarray  # (b, l, 2e) in_proj output: conv input [..., :e], gate z [..., e:]
    xc: np.ndarray  # (b, l, e) conv output before SiLU
    u: np.ndarray  # (b, l, e) scan input
    x_dbl: np.ndarray  # (m, r + 2n)
    dt_pre: np.ndarray  # (m, e) dt_proj output without bias
    delta: np.ndarray  # (m, e)
    y: np.ndarray  # (m, e) gated scan output (out_proj input)
    h_last: np.ndarray  # (b, e, n) SSM state after the last position
    reset: np.ndarray | None = None  # (b, l) document starts, or None
    from_state: bool = False  # the forward went on from a recurrent state (``start``): the
    # backward has no gradient for that state's part, so it refuses such a cache


class LinearHooks(Protocol):
    """Extra terms on the four projections (LoRA uses this): ``forward(name, x)`` returns
    an addition to ``x @ W.T`` or None; ``backward(name, dy)`` returns the matching addition to
    the input gradient (or None) and keeps any parameter gradients itself; ``weight_grad`` sees
    (dy, x) of each frozen projection."""

    def forward(self, name: str, x: np.ndarray) -> np.ndarray | None: ...
    def backward(self, name: str, dy: np.ndarray) -> np.ndarray | None: ...
    def weight_grad(self, name: str, dy: np.ndarray, x: np.ndarray) -> None:
        """A projection whose weight gets no gradient (absent from ``grads``): dy (m, out) and its
        input x (m, in), so adapters form their gradients from low-rank products (never dy.T @ x)."""


def _hook_fwd(hooks: LinearHooks | None, name: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    extra = hooks.forward(name, x) if hooks is not None else None
    return y if extra is None else y + extra


def _hook_bwd(hooks: LinearHooks | None, name: str, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    extra = hooks.backward(name, dy) if hooks is not None else None
    return dx if extra is None else dx + extra


def _weight_grad(grads: Params, hooks: LinearHooks | None, name: str, dy: np.ndarray,
                 x: np.ndarray) -> None:
    """grads[name] += dy.T @ x for a trained weight; for a frozen one only the hooks see (dy, x)."""
    if name in grads:
        grads[name] += dy.T @ x
    elif hooks is not None:
        hooks.weight_grad(name, dy, x)


def layer_forward(
    p: Params, i: int, h: np.ndarray, cfg: MambaConfig, hooks: LinearHooks | None = None,
    reset: np.ndarray | None = None, start: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, LayerCache]:
    """h (b, l, d) -> (h + mixer(norm(h)) (b, l, d), cache); ``reset`` (b, l) marks document
    starts. ``start``: the layer's recurrent state before position 0, (conv window (b, e, k),
    SSM state (b, e, n)) as ``engine.inference`` keeps them, to go on from where an earlier call
    stopped (a prompt read piece by piece; not with ``reset``); None: a zero state."""
    pre = layer_prefix(i)
    mx = pre + "mixer."
    b, length, d = h.shape
    e, n, r = cfg.d_inner, cfg.d_state, cfg.dt_rank
    W_in = p[mx + "in_proj.weight"]
    xn, rstd = rmsnorm_forward(h, p[pre + "norm.weight"], cfg.norm_eps)
    xn = xn.reshape(-1, d)
    xz = _hook_fwd(hooks, mx + "in_proj.weight", xn, xn @ W_in.T).reshape(b, length, 2 * e)
    if start is None:
        u, xc = conv1d_forward(xz, p[mx + "conv1d.weight"], p[mx + "conv1d.bias"], reset)
    else:
        if reset is not None:
            raise ValueError("layer_forward: start and reset are not combined")
        k = cfg.d_conv  # the window's last k - 1 inputs come before position 0
        x = np.ascontiguousarray(
            np.concatenate([start[0][:, :, 1:].transpose(0, 2, 1), xz[:, :, :e]], axis=1))
        u, xc = conv1d_forward(x, p[mx + "conv1d.weight"], p[mx + "conv1d.bias"])
        u, xc = np.ascontiguousarray(u[:, k - 1 :]), np.ascontiguousarray(xc[:, k - 1 :])
    u2 = u.reshape(-1, e)
    x_dbl = _hook_fwd(hooks, mx + "x_proj.weight", u2, u2 @ p[mx + "x_proj.weight"].T)
    dt_low = x_dbl[:, :r]
    dt_pre = _hook_fwd(hooks, mx + "dt_proj.weight", dt_low, dt_low @ p[mx + "dt_proj.weight"].T)
    delta = softplus_forward(dt_pre, p[mx + "dt_proj.bias"])
    B = np.ascontiguousarray(x_dbl[:, r : r + n]).reshape(b, length, n)
    C = np.ascontiguousarray(x_dbl[:, r + n :]).reshape(b, length, n)
    y, h_last = selective_scan_forward(
        u, delta.reshape(b, length, e), p[mx + "A_log"], B, C, p[mx + "D"], xz, z_offset=e,
        reset=reset, h0=None if start is None else start[1],
    )
    y = y.reshape(-1, e)
    out = h + _hook_fwd(hooks, mx + "out_proj.weight", y, y @ p[mx + "out_proj.weight"].T
                        ).reshape(b, length, d)
    return out, LayerCache(h, rstd, xn, xz, xc, u, x_dbl, dt_pre, delta, y, h_last, reset,
                           from_state=start is not None)


def layer_backward(
    p: Params, i: int, c: LayerCache, dout: np.ndarray, grads: Params, cfg: MambaConfig,
    hooks: LinearHooks | None = None, need_dx: bool = True,
) -> np.ndarray | None:
    """dout (b, l, d) -> dh_in (b, l, d); adds this layer's parameter gradients into ``grads``.
    With ``need_dx`` False (the first layer when the embeddings are frozen) the backward stops
    after the last gradient it must produce and returns None. Refuses the cache of a forward
    that went on from a recurrent state (``layer_forward(start=...)``, reading only)."""
    if c.from_state:
        raise ValueError("layer_backward: the forward went on from a recurrent state (start=); "
                         "only a forward from a zero state has a backward")
    pre = layer_prefix(i)
    mx = pre + "mixer."
    b, length, d = dout.shape
    e, n, r = cfg.d_inner, cfg.d_state, cfg.dt_rank
    dout2 = dout.reshape(-1, d)
    W_out = p[mx + "out_proj.weight"]
    _weight_grad(grads, hooks, mx + "out_proj.weight", dout2, c.y)
    dy = _hook_bwd(hooks, mx + "out_proj.weight", dout2, dout2 @ W_out).reshape(b, length, e)
    B = np.ascontiguousarray(c.x_dbl[:, r : r + n]).reshape(b, length, n)
    C = np.ascontiguousarray(c.x_dbl[:, r + n :]).reshape(b, length, n)
    dxz = np.empty_like(c.xz)  # (b, l, 2e): conv-input grads [..., :e], gate grads [..., e:]
    du, ddelta, dA_log, dB, dC, dD, _ = selective_scan_backward(
        dy, c.u, c.delta.reshape(b, length, e), p[mx + "A_log"], B, C, p[mx + "D"], c.xz,
        z_offset=e, dz=dxz, reset=c.reset, need_dA=mx + "A_log" in grads,
    )
    if dA_log is not None and mx + "A_log" in grads:
        grads[mx + "A_log"] += dA_log
    if mx + "D" in grads:
        grads[mx + "D"] += dD
    ddt_pre, dbias = softplus_backward(ddelta.reshape(-1, e), c.dt_pre, p[mx + "dt_proj.bias"])
    if mx + "dt_proj.bias" in grads:
        grads[mx + "dt_proj.bias"] += dbias
    W_dt = p[mx + "dt_proj.weight"]
    _weight_grad(grads, hooks, mx + "dt_proj.weight", ddt_pre, c.x_dbl[:, :r])
    dx_dbl = np.empty_like(c.x_dbl)
    dx_dbl[:, :r] = _hook_bwd(hooks, mx + "dt_proj.weight", ddt_pre, ddt_pre @ W_dt)
    dx_dbl[:, r : r + n] = dB.reshape(-1, n)
    dx_dbl[:, r + n :] = dC.reshape(-1, n)
    W_x = p[mx + "x_proj.weight"]
    u2 = c.u.reshape(-1, e)
    _weight_grad(grads, hooks, mx + "x_proj.weight", dx_dbl, u2)
    below = (mx + "conv1d.weight", mx + "conv1d.bias", mx + "in_proj.weight", pre + "norm.weight")
    if not need_dx and hooks is None and not any(k in grads for k in below):
        return None
    du = du.reshape(-1, e) + _hook_bwd(hooks, mx + "x_proj.weight", dx_dbl, dx_dbl @ W_x)
    _, dconv_w, dconv_b = conv1d_backward(du.reshape(b, length, e), c.xz, p[mx + "conv1d.weight"],
                                          c.xc, dx=dxz, reset=c.reset,
                                          need_dw=mx + "conv1d.weight" in grads)
    if dconv_w is not None and mx + "conv1d.weight" in grads:
        grads[mx + "conv1d.weight"] += dconv_w
    if mx + "conv1d.bias" in grads:
        grads[mx + "conv1d.bias"] += dconv_b
    dxz2 = dxz.reshape(-1, 2 * e)
    _weight_grad(grads, hooks, mx + "in_proj.weight", dxz2, c.xn)
    if not need_dx and pre + "norm.weight" not in grads:
        if hooks is not None:
            hooks.backward(mx + "in_proj.weight", dxz2)  # adapter-side gradients (dropout)
        return None
    dxn = _hook_bwd(hooks, mx + "in_proj.weight", dxz2, dxz2 @ p[mx + "in_proj.weight"])
    dh, dnorm = rmsnorm_backward(dxn.reshape(b, length, d), c.h_in, p[pre + "norm.weight"], c.rstd)
    if pre + "norm.weight" in grads:
        grads[pre + "norm.weight"] += dnorm
    return dout + dh


def logits_forward(p: Params, tokens: np.ndarray, cfg: MambaConfig,
                   reset: np.ndarray | None = None) -> np.ndarray:
    """tokens (b, l) -> logits (b, l, v). Keeps no caches. ``reset`` (b, l) marks document
    starts."""
    h = embedding_forward(tokens, p[EMBEDDINGS])
    for i in range(cfg.n_layer):
        h, _ = layer_forward(p, i, h, cfg, reset=reset)
    hf, _ = rmsnorm_forward(h, p[NORM_F], cfg.norm_eps)
    return hf @ p[head_name(p)].T


def loss_and_grad(
    p: Params,
    tokens: np.ndarray,
    targets: np.ndarray,
    cfg: MambaConfig,
    grads: Params | None,
    scale: float,
    checkpoint: bool = False,
    hooks: LinearHooks | None = None,
    reset: np.ndarray | None = None,
) -> tuple[float, int]:
    """Forward + backward for one micro-batch.

    tokens, targets (b, l); targets < 0 are ignored. Adds ``scale * d(sum of losses)/dparam`` into
    ``grads`` (skipped when None); parameters absent from ``grads`` get no gradient computed
    (frozen under LoRA/WSLA), which skips their weight-gradient GEMMs.
    Returns (sum of per-position losses, number of valid targets).
    With ``checkpoint`` only each layer's input is kept and the layer is re-run during backward:
    the same gradients, with one layer's activations alive at a time.
    ``reset`` (b, l), True at the first position of each document of a packed row: no state
    crosses a document boundary (None: one document per row).
    """
    head = head_name(p)  # the embeddings when tied (their gradient gets both contributions)
    b, length = tokens.shape
    h = embedding_forward(tokens, p[EMBEDDINGS])
    saved: list[np.ndarray | LayerCache] = []
    for i in range(cfg.n_layer):
        h_next, c = layer_forward(p, i, h, cfg, hooks, reset)
        saved.append(h if checkpoint else c)
        del c
        h = h_next
    hf, rstd_f = rmsnorm_forward(h, p[NORM_F], cfg.norm_eps)
    hf2 = hf.reshape(-1, cfg.d_model)
    logits = hf2 @ p[head].T
    losses, dlogits = cross_entropy_forward_backward(logits, targets.reshape(-1), scale, inplace=True)
    n_valid = int(np.count_nonzero(targets >= 0))
    if grads is None:
        return float(losses.sum()), n_valid
    if head in grads:
        grads[head] += dlogits.T @ hf2
    dhf = (dlogits @ p[head]).reshape(b, length, cfg.d_model)
    del dlogits, logits
    dh, dnf = rmsnorm_backward(dhf, h, p[NORM_F], rstd_f)
    if NORM_F in grads:
        grads[NORM_F] += dnf
    for i in reversed(range(cfg.n_layer)):
        item = saved.pop()
        c = layer_forward(p, i, item, cfg, hooks, reset)[1] if isinstance(item, np.ndarray) else item
        dh_in = layer_backward(p, i, c, dh, grads, cfg, hooks,
                               need_dx=i > 0 or EMBEDDINGS in grads)
        del c, item
        if dh_in is None:
            break
        dh = dh_in
    if EMBEDDINGS in grads:
        embedding_backward(tokens, dh, grads[EMBEDDINGS])
    return float(losses.sum()), n_valid
