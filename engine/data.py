"""Corpus loading and validation, train/held-out split, and chunking into (input, target) rows.

Chunking: a token stream of length T gives rows starting at 0, S, 2S, ... with inputs
ids[s : s + S] and targets ids[s + 1 : s + S + 1]; the last row is padded with target -1 (ignored).
Every token after the first is a target exactly once per epoch (the seed library dropped S - 1
targets when T was a multiple of S).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import CorpusError

TEXT_SUFFIXES = {
    ".txt", ".md", ".rst", ".py", ".js", ".ts", ".c", ".h", ".cpp", ".hpp", ".rs", ".go",
    ".java", ".kt", ".swift", ".rb", ".sh", ".toml", ".yaml", ".yml", ".json", ".html",
    ".css", ".tex", ".csv", ".ini", ".cfg", ".sql", ".lua", ".jl", ".r", ".m", ".scala", "",
}


@dataclass
class CorpusFile:
    path: Path
    text: str
    n_bytes: int


@dataclass
class Corpus:
    files: list[CorpusFile] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason)

    @property
    def texts(self) -> list[str]:
        return [f.text for f in self.files]

    @property
    def n_bytes(self) -> int:
        return sum(f.n_bytes for f in self.files)


def read_text_file(path: Path) -> CorpusFile:
    """Read one file as UTF-8 text or raise CorpusError naming the problem."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if not data.strip():
        raise CorpusError(f"{path}: file is empty")
    if b"\x00" in data[:65536]:
        raise CorpusError(f"{path}: looks binary (contains NUL bytes), not text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from exc
    return CorpusFile(path, text.lstrip("\ufeff"), len(data))


def load_corpus(paths: list[str | Path], strict: bool = False) -> Corpus:
    """Read files and folders (recursively: text-like suffixes are read, other files are listed as
    rejected, hidden ones ignored). Bad files are collected in ``rejected`` (or raise with
    ``strict``). Raises CorpusError when nothing usable remains."""
    corpus = Corpus()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            candidates = []
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p).parts
                if not f.is_file() or any(part.startswith(".") for part in rel):
                    continue  # hidden files and folders (.git, .venv, ...) are not corpus
                if f.suffix.lower() in TEXT_SUFFIXES:
                    candidates.append(f)
                else:
                    corpus.rejected.append((f, f"not a text file type ({f.suffix})"))
        elif p.exists():
            candidates = [p]
        else:
            corpus.rejected.append((p, "no such file or folder"))
            continue
        for f in candidates:
            try:
                corpus.files.append(read_text_file(f))
            except CorpusError as exc:
                if strict:
                    raise
                corpus.rejected.append((f, str(exc).split(": ", 1)[-1]))
    if not corpus.files:
        why = "; ".join(f"{p}: {r}" for p, r in corpus.rejected) or "no files given"
        raise CorpusError(f"no usable text in the corpus ({why})")
    return corpus


def encode_corpus(texts: list[str], tokenizer) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Concatenate documents, separated by the tokenizer's end-of-text id -> ids (T,) int64."""
    parts: list[np.ndarray] = []
    for i, t in enumerate(texts):
        if i:
            parts.append(np.array([tokenizer.eos_id], dtype=np.int64))
        parts.append(tokenizer.encode(t))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def split_holdout(ids: np.ndarray, fraction: float, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Last ``fraction`` of the stream (at least one row of seq_len + 1 when possible) is held out."""
    if fraction <= 0:
        return ids, ids[:0]
    n_val = max(int(len(ids) * fraction), min(seq_len + 1, len(ids) // 5))
    if len(ids) - n_val < 2:
        return ids, ids[:0]
    return ids[: len(ids) - n_val], ids[len(ids) - n_val :]


def make_rows(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """ids (T,) -> inputs, targets (rows, seq_len); padded targets are -1."""
    n = len(ids)
    if n < 2:
        raise CorpusError(f"corpus has {n} token(s); at least 2 are needed to train")
    rows = -(-(n - 1) // seq_len)
    inputs = np.zeros((rows, seq_len), dtype=np.int64)
    targets = np.full((rows, seq_len), -1, dtype=np.int64)
    for r in range(rows):
        s = r * seq_len
        x = ids[s : s + seq_len]
        y = ids[s + 1 : s + seq_len + 1]
        inputs[r, : len(x)] = x
        targets[r, : len(y)] = y
    return inputs, targets
