"""Byte n-gram baselines: interpolated modified Kneser-Ney (Chen & Goodman 1998), orders 2-5,
trained and scored by the benchmark itself with NumPy (a byte n-gram key fits in an int64).

    model = KneserNey.fit(train_bytes, order=5)
    model.bits_per_byte(heldout_bytes)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def gram_keys(data: np.ndarray, k: int) -> np.ndarray:
    """data (T,) uint8 -> (T - k + 1,) int64 keys of every k-gram, big-endian base 256."""
    x = data.astype(np.int64)
    n = len(x) - k + 1
    key = np.zeros(max(n, 0), dtype=np.int64)
    for j in range(k):
        key = key * 256 + x[j : j + n]
    return key


@dataclass
class _Order:
    """One order's table: gram keys (sorted) with their (raw or continuation) counts, and per
    context (the key without its last byte) the count total and the back-off weight gamma."""

    keys: np.ndarray
    counts: np.ndarray
    discount: np.ndarray  # D for count 0, 1, 2, 3+
    ctx_keys: np.ndarray
    ctx_total: np.ndarray
    ctx_gamma: np.ndarray

    @classmethod
    def build(cls, keys: np.ndarray, counts: np.ndarray) -> _Order:
        n = [int(np.count_nonzero(counts == i)) for i in range(1, 5)]
        y = n[0] / max(n[0] + 2 * n[1], 1)
        d = [0.0] + [max(0.0, min(float(i), i - (i + 1) * y * n[i] / max(n[i - 1], 1)))
                     for i in (1, 2, 3)]
        disc = np.asarray(d)
        ctx_keys, inv = np.unique(keys // 256, return_inverse=True)
        total = np.bincount(inv, weights=counts).astype(np.float64)
        removed = np.bincount(inv, weights=disc[np.minimum(counts, 3)])
        return cls(keys, counts, disc, ctx_keys, total, removed / np.maximum(total, 1e-300))


def _lookup(table_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values at ``query`` keys, 0 where a key is absent."""
    if len(table_keys) == 0:
        return np.zeros(len(query), dtype=values.dtype)
    i = np.minimum(np.searchsorted(table_keys, query), len(table_keys) - 1)
    return np.where(table_keys[i] == query, values[i], 0)


@dataclass
class KneserNey:
    order: int
    tables: list[_Order]  # tables[k - 1] holds the k-grams

    @classmethod
    def fit(cls, data: bytes | np.ndarray, order: int = 5) -> KneserNey:
        """Count every 1..order-gram of ``data``; lower orders use continuation counts."""
        if not 1 <= order <= 7:
            raise ValueError("order must be 1..7 (a key must fit in an int64)")
        x = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        uniq = [np.unique(gram_keys(x, k), return_counts=True) for k in range(1, order + 1)]
        tables = []
        for k in range(1, order + 1):
            if k == order:
                keys, counts = uniq[k - 1]
            else:  # continuation count: distinct bytes seen before the k-gram
                keys, counts = np.unique(uniq[k][0] % 256**k, return_counts=True)
            tables.append(_Order.build(keys, counts.astype(np.int64)))
        return cls(order, tables)

    def prob(self, grams: np.ndarray, k: int | None = None) -> np.ndarray:
        """grams (m,) keys of ``k``-grams (context then target byte) -> P(target | context) (m,)."""
        k = k or self.order
        p = np.full(len(grams), 1.0 / 256)
        for j in range(1, k + 1):
            t = self.tables[j - 1]
            g = grams % 256**j
            c = _lookup(t.keys, t.counts, g)
            ctx = g // 256
            total = _lookup(t.ctx_keys, t.ctx_total, ctx)
            gamma = _lookup(t.ctx_keys, t.ctx_gamma, ctx)
            seen = total > 0
            own = np.maximum(c - t.discount[np.minimum(c, 3)], 0.0) / np.where(seen, total, 1.0)
            p = np.where(seen, own + gamma * p, p)
        return p

    def bits_per_byte(self, data: bytes | np.ndarray, chunk: int = 1 << 20) -> float:
        """Mean -log2 P over every byte of ``data`` that has a full context (from byte order-1)."""
        x = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        grams = gram_keys(x, self.order)
        bits = 0.0
        for s in range(0, len(grams), chunk):
            bits -= float(np.log2(self.prob(grams[s : s + chunk])).sum())
        return bits / max(len(grams), 1)


def baselines(train: bytes, heldout: bytes, orders: tuple[int, ...] = (2, 3, 4, 5)) -> dict[str, float]:
    """{"kn2": bpb, ..., "kn5": bpb} on ``heldout`` for models fitted on ``train``."""
    out = {}
    for k in orders:
        out[f"kn{k}"] = KneserNey.fit(train, k).bits_per_byte(heldout)
        assert math.isfinite(out[f"kn{k}"])
    return out
