"""Packing document spans into training rows with a per-row ``reset`` mask, and the seeded batch
order.

Spans (see ``engine.documents``) are (k, 2) int64 ``[start, length]`` over a compact id array:
inputs ``ids[start : start + length]``, targets one position further. ``pack_spans`` cuts every
span longer than a row into pieces (after a line-ending token when one lies in the second half of
the row, else at the row's width) and packs the pieces, in corpus order, into rows of ``seq_len``
inputs: each piece joins the first of the last ``OPEN_ROWS`` rows with room (bounded first-fit,
linear time). A document that fits in a row is never split. Each piece starts with ``reset``
True, so no recurrent state (selective scan or conv1d) crosses from one document into the next
inside a row.

A row is stored as its list of pieces (``PackedRows``: 16 bytes per piece plus 8 per row), never as
a (rows, seq_len) table; ``PackedRows.batch`` materialises only the requested rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._jit import kernel
from .errors import CorpusError

OPEN_ROWS = 64  # rows a piece may still join (first-fit over the most recent ones)
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]  # tokens (b, l), targets (b, l), reset (b, l)


@dataclass(frozen=True)
class PackedRows:
    """Rows over ``ids`` (T,): row ``r`` holds pieces ``row_ptr[r] : row_ptr[r + 1]``, piece ``j``
    being inputs ``ids[start[j] : start[j] + length[j]]`` placed one after the other from column 0.

    start, length (n_pieces,) int64; row_ptr (n_rows + 1,) int64; ``width`` is the row length
    ``l`` of every batch (the requested seq_len, or less when no row needs that much)."""

    ids: np.ndarray
    start: np.ndarray
    length: np.ndarray
    row_ptr: np.ndarray
    width: int

    def __len__(self) -> int:
        return len(self.row_ptr) - 1

    @property
    def n_targets(self) -> int:
        """Positions with a target (every packed input has exactly one)."""
        return int(self.length.sum())

    @property
    def fill(self) -> float:
        """Fraction of the (rows, width) table that holds tokens rather than padding."""
        return self.n_targets / max(1, len(self) * self.width)

    def batch(self, rows: np.ndarray) -> Batch:
        """rows (b,) row indices -> tokens (b, l) int64 (padding 0), targets (b, l) int64
        (padding -1, ignored by the loss), reset (b, l) bool (True where a piece starts)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        b, width = len(rows), self.width
        tokens = np.zeros((b, width), dtype=np.int64)
        targets = np.full((b, width), -1, dtype=np.int64)
        reset = np.zeros((b, width), dtype=bool)
        if b == 0:
            return tokens, targets, reset
        first, count = self.row_ptr[rows], self.row_ptr[rows + 1] - self.row_ptr[rows]
        offs = np.cumsum(count) - count  # where each row's pieces begin in the flat list (>= 1 each)
        piece_row = np.repeat(np.arange(b), count)
        piece = np.repeat(first - offs, count) + np.arange(int(count.sum()))
        start, length = self.start[piece], self.length[piece]
        end = np.cumsum(length)
        col0 = end - length - np.repeat((end - length)[offs], count)  # first column of each piece
        reset[piece_row, col0] = True
        of = np.repeat(np.arange(len(piece)), length)
        within = np.arange(int(end[-1])) - np.repeat(end - length, length)
        src = start[of] + within
        r, c = piece_row[of], col0[of] + within
        tokens[r, c] = self.ids[src]
        targets[r, c] = self.ids[src + 1]
        return tokens, targets, reset


def line_end_table(tokenizer: Any) -> np.ndarray:
    """(vocab_size,) bool: ids whose text contains a line break (where a long document may be cut)."""
    table = np.zeros(int(tokenizer.vocab_size), dtype=bool)
    if tokenizer.kind == "bytes":
        table[10] = True
        return table
    for i in range(len(table)):
        if i != tokenizer.eos_id and "\n" in tokenizer.decode([i]):
            table[i] = True
    return table


def _pieces(ids: np.ndarray, spans: np.ndarray, seq_len: int,
            line_end: np.ndarray | None) -> np.ndarray:
    """Spans -> (k', 2) pieces of at most ``seq_len`` inputs, in order."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    long = np.flatnonzero(spans[:, 1] > seq_len)
    if not len(long):
        return spans
    parts: list[np.ndarray] = []
    prev = 0
    half = (seq_len + 1) // 2
    for i in long:
        parts.append(spans[prev:i])
        pos, end = (int(v) for v in spans[i])
        end += pos
        cut: list[tuple[int, int]] = []
        while end - pos > seq_len:
            n = seq_len
            if line_end is not None:
                breaks = np.flatnonzero(line_end[ids[pos + half - 1 : pos + seq_len]])
                if len(breaks):
                    n = half + int(breaks[-1])  # the piece ends just after the line break
            cut.append((pos, n))
            pos += n
        cut.append((pos, end - pos))
        parts.append(np.array(cut, dtype=np.int64))
        prev = int(i) + 1
    parts.append(spans[prev:])
    return np.concatenate(parts)


def pack_spans(ids: np.ndarray, spans: np.ndarray, seq_len: int,
               line_end: np.ndarray | None = None) -> PackedRows:
    """Pack ``spans`` (k, 2) over ``ids`` (T,) into rows of at most ``seq_len`` inputs (see the
    module docstring). ``line_end`` (vocab,) bool marks tokens after which a long document may be
    cut (``line_end_table``); None cuts long documents at the row width. ``ids`` is not copied."""
    if seq_len < 1:
        raise CorpusError(f"sequence length must be at least 1; got {seq_len}")
    pieces = _pieces(ids, spans, seq_len, line_end)
    if not np.all(pieces[:, 1] > 0):
        pieces = pieces[pieces[:, 1] > 0]
    if not len(pieces):
        raise CorpusError("no tokens to pack into rows (the text is empty)")
    start, length = np.ascontiguousarray(pieces[:, 0]), np.ascontiguousarray(pieces[:, 1])
    del pieces
    row = _first_fit(length, seq_len, OPEN_ROWS)
    per_row = np.bincount(row)
    width = int(np.bincount(row, weights=length).max())
    if np.any(row[1:] < row[:-1]):  # a piece joined an earlier row: group pieces by row
        order = np.argsort(row, kind="stable")  # rows in order of opening, pieces in corpus order
        del row
        start, length = start[order], length[order]
    row_ptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    return PackedRows(ids, start, length, row_ptr, width)


def pack_documents(ids: np.ndarray, spans: np.ndarray, seq_len: int, tokenizer: Any) -> PackedRows:
    """The rows a run trains (or evaluates) on: ``pack_spans`` with long documents cut after a
    line break of ``tokenizer`` (``line_end_table``). One composition for the run, ``eval`` and
    the learning benchmark, so they pack alike."""
    return pack_spans(ids, spans, seq_len, line_end_table(tokenizer))


@kernel
def _first_fit(length: np.ndarray, seq_len: int, window: int) -> np.ndarray:  # pragma: no cover
    """length (n,) int64 -> row (n,) int64: each piece goes into the first of the ``window`` most
    recently opened rows with room, else opens a row (the oldest open row is closed when more than
    ``window`` are open). Row numbers follow opening order."""
    n = length.shape[0]
    row = np.empty(n, dtype=np.int64)
    open_row = np.empty(window, dtype=np.int64)
    free = np.empty(window, dtype=np.int64)
    n_open = 0
    n_rows = 0
    for j in range(n):
        need = length[j]
        k = 0
        while k < n_open and free[k] < need:
            k += 1
        if k == n_open:
            if n_open == window:  # close the oldest open row
                for q in range(1, n_open):
                    open_row[q - 1] = open_row[q]
                    free[q - 1] = free[q]
                n_open -= 1
            k = n_open
            open_row[k] = n_rows
            free[k] = seq_len
            n_open += 1
            n_rows += 1
        row[j] = open_row[k]
        free[k] -= need
        if free[k] == 0:  # full: no longer open
            for q in range(k + 1, n_open):
                open_row[q - 1] = open_row[q]
                free[q - 1] = free[q]
            n_open -= 1
    return row


def epoch_order(n_rows: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """(n_rows,) int64: the row order of ``epoch``, a function of (seed, epoch) only."""
    if not shuffle:
        return np.arange(n_rows, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n_rows).astype(np.int64)


def iter_batches(rows: PackedRows, batch_size: int, seed: int, epoch: int, cursor: int = 0,
                 shuffle: bool = True) -> Iterator[Batch]:
    """Batches (tokens, targets, reset), each (b, l), of ``epoch`` from row ``cursor`` of its
    order on: resuming with the same (seed, epoch, cursor) yields the same batches. The last batch
    of an epoch may be smaller."""
    if batch_size < 1:
        raise CorpusError(f"batch size must be at least 1; got {batch_size}")
    order = epoch_order(len(rows), seed, epoch, shuffle)
    for s in range(max(0, cursor), len(order), batch_size):
        yield rows.batch(order[s : s + batch_size])
