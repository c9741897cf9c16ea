"""Documents: a corpus tokenised into one compact id array with document offsets, and the seeded
held-out split of whole documents.

Layout (``Documents``): every document is preceded by the end-of-text id and one more closes the
array::

    ids     = [EOS] doc0 [EOS] doc1 ... [EOS] doc(n-1) [EOS]          (T,)  id_dtype(vocab)
    offsets = [o0, o1, ..., on]  with ids[o_i] == EOS, o0 == 0, on == T - 1   (n + 1,) int64

Document ``i`` trains on inputs ``ids[o_i : o_(i+1)]`` and targets ``ids[o_i + 1 : o_(i+1) + 1]``:
its leading EOS (where the recurrent state starts from zero) predicts its first token and its last
token predicts the next EOS (the end of the document). Nothing of one document predicts another.

A *span* is a ``(start, length)`` pair over ``ids``: inputs ``ids[start : start + length]``, targets
one position further. ``Spans`` are (k, 2) int64 arrays; the split and the packer work on them, so
nothing ever copies the corpus.

Records (a user choice): ``"file"`` -- each file is one document; ``"blank-line"`` -- each file is
cut at blank lines (lines of only spaces), the blank lines dropped; ``"line"`` -- each non-blank
line is a document, its line break dropped. The end-of-text id takes the place of the separator.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .data import (
    _CUT_SPACE,
    CHUNK,
    Corpus,
    CorpusFile,
    FileGone,
    Progress,
    _last_cut,
    id_dtype,
    iter_bytes,
    iter_text,
    reread,
)
from .errors import CorpusError

RECORDS = ("file", "blank-line", "line")
_SEPARATORS = {
    "blank-line": re.compile(r"\r?\n(?:[ \t\f\v]*\r?\n)+"),  # one or more blank lines
    "line": re.compile(r"\r?\n"),
}
TEXT_CHUNK = 512 << 10  # characters handed to a (non-byte) tokenizer at once: bounds its temporaries


@dataclass(frozen=True)
class Documents:
    """``ids`` (T,) compact ids and ``offsets`` (n_docs + 1,) int64 as in the module docstring."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """(n_docs,) int64: input positions of each document (its tokens + the leading EOS)."""
        return np.diff(self.offsets)

    def spans(self, docs: np.ndarray | None = None) -> np.ndarray:
        """(k, 2) int64 [start, length] of the given documents (all of them by default)."""
        idx = np.arange(len(self)) if docs is None else np.asarray(docs, dtype=np.int64)
        return np.stack([self.offsets[idx], self.offsets[idx + 1] - self.offsets[idx]], axis=1)


def check_records(records: str) -> str:
    if records not in RECORDS:
        raise CorpusError(f"records must be one of {', '.join(RECORDS)}; got {records!r}")
    return records


def iter_records(text_chunks: Iterator[str], records: str,
                 limit: int = 4 * CHUNK) -> Iterator[tuple[str, bool]]:
    """Split a stream of text pieces into records: yields (text, ends_record). A record longer than
    ``limit`` characters is yielded in pieces cut before a space between words (a byte-level BPE
    boundary), the last piece with ends_record=True. Blank (whitespace-only) records are skipped."""
    for batch in iter_record_batches(text_chunks, records, limit):
        yield from batch


def iter_record_batches(text_chunks: Iterator[str], records: str,
                        limit: int = 4 * CHUNK) -> Iterator[list[tuple[str, bool]]]:
    """``iter_records`` grouped by input piece: one list of (text, ends_record) per piece read."""
    sep = _SEPARATORS[check_records(records)] if records != "file" else None
    pending = ""
    started = False  # part of the current record was already yielded
    for chunk in text_chunks:
        if sep is None:
            yield [(chunk, False)]
            started = True
            continue
        pending += chunk
        parts = sep.split(pending)
        pending = parts.pop()
        batch = [(part, True) for part in parts if part.strip()]
        if started and parts and not parts[0].strip():  # the end of a record begun earlier
            batch.insert(0, (parts[0], True))
        started = started and not parts
        if len(pending) > limit:
            cut = _last_cut(_CUT_SPACE, pending, len(pending) - limit // 2) or len(pending) - 1
            if started or pending[:cut].strip():
                batch.append((pending[:cut], False))
                started = True
            pending = pending[cut:]
        if batch:
            yield batch
    if sep is None:
        if started:
            yield [("", True)]
        return
    pending = pending.rstrip("\r\n") if records == "blank-line" else pending.rstrip("\r")
    if started or pending.strip():
        yield [(pending, True)]


def _encode_batch(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """texts -> (their ids concatenated (n,), the id count of each (k,) int64)."""
    if tokenizer.kind == "bytes":
        blob = "".join(texts).encode("utf-8")
        lens = list(map(len, texts))
        if len(blob) != sum(lens):  # not all ASCII: count UTF-8 bytes
            lens = [len(t.encode("utf-8")) for t in texts]
        return np.frombuffer(blob, dtype=np.uint8), np.array(lens, dtype=np.int64)
    many = getattr(tokenizer, "encode_batch", None)
    parts = many(texts) if many is not None else [tokenizer.encode(t) for t in texts]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), sizes


class _Growing:
    """A compact id array grown in place (``ndarray.resize``), never copied into a list."""

    def __init__(self, cap: int, dtype: np.dtype) -> None:
        self.a = np.empty(max(cap, 16), dtype=dtype)
        self.n = 0

    def put(self, ids: np.ndarray) -> None:
        end = self.n + len(ids)
        if end > len(self.a):  # a tokenizer that emits more ids than bytes (rare): grow by half
            self.a.resize(max(end, len(self.a) + len(self.a) // 2 + 1), refcheck=False)
        self.a[self.n:end] = ids
        self.n = end

    def done(self) -> np.ndarray:
        self.a.resize(self.n, refcheck=False)  # shrinks in place (realloc), no copy
        return self.a


def encode_documents(corpus: Corpus, tokenizer: Any, records: str = "file",
                     progress: Progress | None = None) -> Documents:
    """Tokenise ``corpus`` file by file (streamed, bounded pieces) into ``Documents``.

    ``records``: "file", "blank-line" or "line" (see the module docstring). ``progress(done,
    total)`` gets byte counts after each piece. Memory: the id array (<= 2 bytes per corpus byte
    for the byte tokenizer) plus 8 bytes per document. Raises CorpusError when no document is left
    or the tokenizer produces an id outside its vocabulary."""
    check_records(records)
    dtype = id_dtype(int(tokenizer.vocab_size))
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    total = corpus.n_bytes
    out = _Growing(total + len(corpus.files) + 1, dtype)  # byte-level: <= 1 id per byte
    offsets = array("q")
    done = 0
    for f in list(corpus.files):  # a file unreadable since the scan is skipped (Corpus.drop)
        mark, n_docs = out.n, len(offsets)
        try:
            done = _encode_file(f, tokenizer, records, out, offsets, progress, total, done,
                                corpus.check_stop)
        except FileGone as exc:
            out.n = mark  # what was read of it is dropped with it
            del offsets[n_docs:]
            corpus.drop(f, exc.reason)
    if not offsets:
        raise CorpusError(f"no non-blank {records} records in the corpus; check --records")
    offsets.append(out.n)
    out.put(eos)
    return Documents(out.done(), np.frombuffer(offsets, dtype=np.int64))


def _encode_file(f: CorpusFile, tokenizer: Any, records: str, out: _Growing, offsets: array,
                 progress: Progress | None, total: int, done: int,
                 check_stop: Callable[[], None]) -> int:
    """Append the documents of one file to ``out`` / ``offsets``; returns the bytes done.
    ``check_stop`` is called between pieces (it raises to end the work)."""
    dtype = out.a.dtype
    eos = np.array([tokenizer.eos_id], dtype=dtype)
    if records == "file" and tokenizer.kind == "bytes":
        offsets.append(out.n)
        out.put(eos)
        for data in reread(f.path, iter_bytes(f.path)):
            check_stop()
            out.put(np.frombuffer(data, dtype=np.uint8))
            done += len(data)
            if progress is not None:
                progress(done, total)
        return done
    limit = np.iinfo(dtype).max + 1
    fresh = True
    pieces = _counted(reread(f.path, iter_text(f.path, TEXT_CHUNK)), progress, total, done)
    for batch in iter_record_batches(pieces, records, 4 * TEXT_CHUNK):
        check_stop()
        ids, lens = _encode_batch(tokenizer, [t for t, _ in batch])
        if len(ids) and int(ids.max()) >= limit:
            raise CorpusError(f"{f.path}: tokenizer produced an id outside its vocabulary")
        begins = np.array([fresh] + [e for _, e in batch[:-1]], dtype=bool)  # a new document
        at = (np.cumsum(lens) - lens)[begins]
        offsets.extend((out.n + at + np.arange(len(at))).tolist())
        out.put(np.insert(ids.astype(dtype, copy=False), at, eos[0]))
        fresh = batch[-1][1]
    return done + f.n_bytes


def _counted(chunks: Iterator[str], progress: Progress | None, total: int,
             done: int) -> Iterator[str]:
    for text in chunks:
        if progress is not None:
            done += len(text.encode("utf-8"))
            progress(min(done, total), total)
        yield text


def split_documents(docs: Documents, fraction: float, seed: int = 0,
                    min_tokens: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded held-out split -> (train spans, held-out spans), each (k, 2) int64.

    The held-out set is a seeded random choice of whole documents holding about ``fraction`` of
    the tokens (at least ``min_tokens`` when that leaves something to train on): documents are
    taken in a seeded random order, skipping any that would overshoot the target by half. When no
    whole document fits (one document, or all of them too large) a seeded random window of
    ``fraction`` of the largest document is held out instead. Train and held-out never share a
    target position; ``fraction <= 0`` holds nothing out."""
    train = docs.spans()
    if fraction <= 0 or len(docs.ids) < 3:
        return train, train[:0]
    if not fraction < 1:
        raise CorpusError(f"held-out fraction must be below 1; got {fraction}")
    lengths = docs.lengths
    total = int(lengths.sum())
    target = max(int(total * fraction), min(min_tokens, total // 5), 1)
    rng = np.random.default_rng([seed, 0x5EED])
    chosen: list[int] = []
    held = 0
    if len(docs) > 1:
        for i in rng.permutation(len(docs)):
            n = int(lengths[i])
            if held + n <= target * 1.5 and held + n < total:
                chosen.append(int(i))
                held += n
                if held >= target:
                    break
    if chosen and held >= target // 2:
        mask = np.zeros(len(docs), dtype=bool)
        mask[chosen] = True
        return train[~mask], train[np.sort(np.asarray(chosen))]
    return _split_window(train, target, rng)


def held_out_files(tokens: dict[str, int], fraction: float, seed: int = 0,
                   min_tokens: int = 0) -> dict[str, bool]:
    """Which files a run on ``tokens`` (file path -> its token count; each file one document,
    records "file") holds out, by ``split_documents`` over the documents ``encode_documents``
    makes of them: in path order (``load_corpus``'s), each with its end-of-text token. True for a
    file held out whole, False for one a window of which is (no whole file fits the share). The
    window's Corpus table marks them before Start; its own copy of this rule drifted once (it
    counted no end-of-text token)."""
    if fraction <= 0 or not tokens:
        return {}
    paths = sorted(tokens, key=Path)
    lengths = np.array([tokens[p] + 1 for p in paths])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    _, val = split_documents(Documents(np.zeros(int(offsets[-1]), dtype=np.uint8), offsets),
                             fraction, seed, min_tokens)
    out: dict[str, bool] = {}
    for start, n in val:
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, start + n - 1, side="right")) - 1
        whole = start == offsets[first] and start + n == offsets[last + 1]
        out.update(dict.fromkeys(paths[first:last + 1], bool(whole)))
    return out


def _split_window(spans: np.ndarray, target: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Hold out a window of ``target`` inputs from the largest span. The train parts around it
    stop one position short so no position is a target on both sides."""
    i = int(np.argmax(spans[:, 1]))
    start, n = (int(v) for v in spans[i])
    target = min(target, n - 2)
    if target < 1:
        return spans, spans[:0]
    c = start + int(rng.integers(0, n - target + 1))  # held-out inputs [c, c + target)
    e = c + target
    parts = [spans[:i]]
    if c - 1 > start:
        parts.append(np.array([[start, c - 1 - start]], dtype=np.int64))
    if start + n > e + 1:
        parts.append(np.array([[e + 1, start + n - e - 1]], dtype=np.int64))
    parts.append(spans[i + 1:])
    return np.concatenate(parts), np.array([[c, target]], dtype=np.int64)
