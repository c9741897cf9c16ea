"""AdamW on the CPU (bias-corrected, decoupled weight decay), global-norm clipping, a trust region,
a NaN/Inf guard that keeps the moments finite, a warmup-stable-decay schedule, and ZeRO-1 style
sharding of the optimizer state.

Update for one tensor at step t (g already multiplied by the clip factor):
    m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
    step = -lr * wd * p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (wd where ``decays``)
    p = p + clamp(step, +-max_delta)     (the trust region bounds the whole change, decay included)
A tensor whose gradient holds a NaN/Inf is skipped whole: its weights *and* moments stay as they
were (the seed library updated the moments first and so froze such elements forever).

Sharding: with ``ShardSpec(index, count)`` this optimizer owns the trainable tensors whose position
``i`` in the trainable list has ``i % count == index`` and holds moments only for those. Every shard
computes the same global gradient norm; the union of ``count`` shards' updates equals one unsharded
step. A multi-process backend runs one shard per rank, then all-gathers the updated tensors
(see README "Sharded optimizer state").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._jit import kernel
from .params import Params, decays


@kernel
def _adamw_kernel(p, g, m, v, lr, b1, b2, eps, wd, bc1, bc2, gscale, max_delta, check):
    """Flat p, g, m, v (same size). Returns False (and changes nothing) if g is not finite.
    ``check`` False skips that scan of g (a scalar loop: its early exit does not vectorise),
    for a g whose sum of squares, ``grad_norm``, already came out finite."""
    if check:
        for i in range(g.size):
            if not np.isfinite(g[i]):
                return False
    decay = 1.0 - lr * wd
    for i in range(g.size):
        gi = g[i] * gscale
        mi = b1 * m[i] + (1.0 - b1) * gi
        vi = b2 * v[i] + (1.0 - b2) * gi * gi
        m[i] = mi
        v[i] = vi
        step = p[i] * (decay - 1.0) - lr * (mi / bc1) / (math.sqrt(vi / bc2) + eps)
        if max_delta > 0.0:
            step = min(max(step, -max_delta), max_delta)
        p[i] = p[i] + step
    return True


@kernel
def _sumsq_kernel(g):
    acc = 0.0
    for i in range(g.size):
        acc += float(g[i]) * float(g[i])
    return acc


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count``. ``owners`` (optional) gives the owning shard of each trainable
    position (``engine.distributed.balanced_owners`` balances them by size); without it position
    ``i`` belongs to shard ``i % count``."""

    index: int
    count: int
    owners: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"invalid shard {self.index}/{self.count}")
        if self.owners is not None and any(not 0 <= o < self.count for o in self.owners):
            raise ValueError(f"shard owners must lie in [0, {self.count})")

    def owns(self, position: int) -> bool:
        if self.owners is not None:
            return self.owners[position] == self.index
        return position % self.count == self.index


@dataclass(frozen=True)
class AdamWConfig:
    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0  # <= 0 disables clipping
    max_delta: float = 0.0  # <= 0 disables the trust region


@dataclass
class StepStats:
    grad_norm: float  # pre-clip global L2 norm over the finite trainable gradients
    clip_scale: float
    skipped: list[str] = field(default_factory=list)  # tensors skipped by the NaN/Inf guard


def grad_norm(grads: Params, names: list[str]) -> tuple[float, list[str]]:
    """Global L2 norm over ``names``; also returns the names whose gradient is not finite (a
    float64 sum of float32 squares is finite exactly when every element is)."""
    total = 0.0
    bad = []
    for name in names:
        sq = _sumsq_kernel(grads[name].reshape(-1))
        if math.isfinite(sq):
            total += sq
        else:
            bad.append(name)
    return math.sqrt(total), bad


def _flat_view(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` as a 1-D view that shares its memory: the kernel updates it in place, so a
    non-contiguous tensor (whose ``reshape(-1)`` would be a copy) is refused, never updated in a
    temporary."""
    if not a.flags.c_contiguous:
        raise ValueError(f"AdamW: {name} is not C-contiguous; pass np.ascontiguousarray({name})")
    return a.reshape(-1)


class AdamW:
    """AdamW over the trainable tensors ``names`` (order fixes shard ownership)."""

    def __init__(
        self,
        params: Params,
        names: list[str],
        cfg: AdamWConfig,
        shard: ShardSpec | None = None,
        decay_fn=decays,
    ) -> None:
        self.cfg = cfg
        self.names = list(names)
        self.shard = shard
        self.decay = {n: bool(decay_fn(n)) for n in self.names}
        self.owned = [n for i, n in enumerate(self.names) if shard is None or shard.owns(i)]
        for n in self.owned:
            _flat_view(params[n], n)
        self.m = {n: np.zeros(params[n].shape, params[n].dtype) for n in self.owned}
        self.v = {n: np.zeros(params[n].shape, params[n].dtype) for n in self.owned}
        self.t = 0

    def state_bytes(self) -> int:
        return int(sum(a.nbytes for a in self.m.values()) + sum(a.nbytes for a in self.v.values()))

    def step(self, params: Params, grads: Params, lr: float | None = None) -> StepStats:
        """One update of the owned tensors in place. ``grads`` must cover every name in ``names``."""
        c = self.cfg
        lr = c.lr if lr is None else lr
        norm, bad = grad_norm(grads, self.names)
        scale = 1.0
        if c.max_grad_norm > 0 and norm > c.max_grad_norm:
            scale = c.max_grad_norm / (norm + 1e-12)
        self.t += 1
        bc1 = 1.0 - c.beta1**self.t
        bc2 = 1.0 - c.beta2**self.t
        skipped = []
        nonfinite = set(bad)
        for n in self.owned:
            # float32: grad_norm's float64 sum of squares is finite exactly when every element
            # is, so the kernel's own scan of g is skipped (float64 may overflow the sum: scan)
            known = grads[n].dtype == np.float32
            ok = not (known and n in nonfinite) and _adamw_kernel(
                _flat_view(params[n], n), np.ascontiguousarray(grads[n]).reshape(-1),
                _flat_view(self.m[n], n), _flat_view(self.v[n], n), lr, c.beta1, c.beta2, c.eps,
                c.weight_decay if self.decay[n] else 0.0, bc1, bc2, scale, c.max_delta, not known,
            )
            if not ok:
                skipped.append(n)
        return StepStats(norm, scale, skipped if skipped else [b for b in bad if b in self.m])

    # ---------------------------------------------------------------- (de)serialisation
    def state_tensors(self) -> dict[str, np.ndarray]:
        out = {f"exp_avg.{n}": a for n, a in self.m.items()}
        out.update({f"exp_avg_sq.{n}": a for n, a in self.v.items()})
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"t": int, "tensors": {exp_avg.<name>, exp_avg_sq.<name>}}`` (live arrays, not copies)."""
        return {"t": self.t, "tensors": self.state_tensors()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy a ``state_dict()`` into this optimizer's moments (shapes checked: ValueError)."""
        self.load_state_tensors(state["tensors"], state["t"])

    def load_state_tensors(self, tensors: dict[str, np.ndarray], t: int) -> None:
        for n in self.owned:
            for key, store in ((f"exp_avg.{n}", self.m), (f"exp_avg_sq.{n}", self.v)):
                if key not in tensors:
                    raise ValueError(f"optimizer state lacks {key}")
                if tensors[key].shape != store[n].shape:
                    raise ValueError(
                        f"optimizer state {key}: shape {tensors[key].shape} != {store[n].shape}"
                    )
                store[n][...] = tensors[key]
        self.t = int(t)


MAX_WARMUP_FRACTION = 0.2  # a warmup longer than a fifth of the run leaves no time to learn


def effective_warmup(warmup: int, total_steps: int) -> int:
    """The warmup a run of ``total_steps`` uses: ``warmup``, cut to a fifth of the run (the
    default 100 steps on a 33-step run left held-out loss at 3.96 nats against 2.65 with 6)."""
    return min(warmup, int(total_steps * MAX_WARMUP_FRACTION))


def lr_at(step: int, total_steps: int, base_lr: float, warmup: int, min_ratio: float = 0.1,
          decay_fraction: float = 1.0) -> float:
    """Linear warmup over ``effective_warmup(warmup, total_steps)`` steps, ``base_lr`` held,
    then cosine decay to ``min_ratio * base_lr`` over the last ``decay_fraction`` of the steps
    after the warmup (warmup-stable-decay; 1.0 is a cosine over the whole run)."""
    warmup = effective_warmup(warmup, total_steps)
    if warmup > 0 and step < warmup:
        return base_lr * (step + 1) / warmup
    start = warmup + (1.0 - decay_fraction) * max(0, total_steps - warmup)
    if step < start:
        return base_lr
    progress = min(1.0, (step - start) / max(1.0, total_steps - start))
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
