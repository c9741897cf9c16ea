"""The GEMMs of one training step, as ``engine.model`` runs them, and their standalone speed.

``step_gemms`` lists every matrix product of a step (forward, input gradients, weight gradients of
trained tensors, LoRA's low-rank adapter products) with its layout, so ``standalone_ms`` can time
the very same products outside the step: the GEMM-only time a step is measured against.
Shapes: M = batch * seq_len rows; a product is (m, k) @ (k, n) with ``ta``/``tb`` True where that
operand is a transposed view (as ``dy.T @ x`` and ``x @ W.T`` are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .config import MambaConfig


@dataclass(frozen=True)
class Gemm:
    label: str
    m: int
    k: int
    n: int
    ta: bool = False
    tb: bool = False

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


def step_gemms(cfg: MambaConfig, batch: int, seq_len: int, mode: str = "full",
               lora_rank: int = 8) -> list[Gemm]:
    """The products of one step; ``mode`` full | lora (the four projections adapted, rank
    ``lora_rank``) | wsla (x_proj trained)."""
    M = batch * seq_len
    d, e, n, r, V = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.vocab_size
    # (name, in, out) of the four projections in forward order
    projs = [("in_proj", d, 2 * e), ("x_proj", e, r + 2 * n), ("dt_proj", r, e), ("out_proj", e, d)]
    out: list[Gemm] = []
    for i in range(cfg.n_layer):
        for name, fin, fout in projs:
            out.append(Gemm(f"fwd {name}", M, fin, fout, tb=True))
            # frozen embeddings: layer 0's backward stops after its last weight gradient
            skip_dx = i == 0 and (
                (mode == "lora" and name == "in_proj")
                or (mode == "wsla" and name in ("in_proj", "x_proj")))
            if not skip_dx:
                out.append(Gemm(f"dx {name}", M, fout, fin))
            if mode == "full" or (mode == "wsla" and name == "x_proj"):
                out.append(Gemm(f"dW {name}", fout, M, fin, ta=True))
            elif mode == "lora":
                out += [Gemm(f"lora x A.T {name}", M, fin, lora_rank, tb=True),
                        Gemm(f"lora dy B {name}", M, fout, lora_rank),
                        Gemm(f"lora dB {name}", fout, M, lora_rank, ta=True),
                        Gemm(f"lora dA {name}", lora_rank, M, fin, ta=True)]
    out.append(Gemm("fwd head", M, d, V, tb=True))
    out.append(Gemm("dx head", M, V, d))
    if mode == "full":
        out.append(Gemm("dW head", V, M, d, ta=True))
    return out


def _operands(g: Gemm, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a = rng.random((g.k, g.m) if g.ta else (g.m, g.k), dtype=np.float32)
    b = rng.random((g.n, g.k) if g.tb else (g.k, g.n), dtype=np.float32)
    return (a.T if g.ta else a), (b.T if g.tb else b)


def standalone_ms(gemms: list[Gemm], repeats: int = 5) -> float:
    """Sum over ``gemms`` of each product's best time alone (same shapes and layouts), in ms."""
    rng = np.random.default_rng(0)
    best: dict[Gemm, float] = {}
    for g in gemms:
        key = Gemm("", g.m, g.k, g.n, g.ta, g.tb)
        if key in best:
            continue
        a, b = _operands(g, rng)
        a @ b
        t_best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            t_best = min(t_best, time.perf_counter() - t)
        best[key] = t_best
    return 1e3 * sum(best[Gemm("", g.m, g.k, g.n, g.ta, g.tb)] for g in gemms)
