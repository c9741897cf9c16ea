"""Task generators. Every task is plain text (ASCII, one example per line) so it trains through
the same path as a user's corpus; an example's answer is the last ``answer_len`` characters
before its newline.

selective copying (Mamba paper, sec. 4.1.1): 4 data symbols of 16 scattered among 64 noise
    positions, then 4 markers, then the 4 data symbols in order:
    ``...c....k..........a...p....||||ckap``
induction heads: 64 random symbols with one trigger ``#`` followed by a key; the line ends with
    the trigger and the key must be recalled: ``fhd#kap...mno#k``
natural text: Python standard-library sources (present wherever Python is), split by file
    (document), so held-out text comes from files never trained on.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SYMBOLS = "abcdefghijklmnop"  # 16 data symbols
NOISE = "."
MARKER = "|"
TRIGGER = "#"


@dataclass(frozen=True)
class Task:
    """A synthetic task: ``answer_len`` answer characters end every line."""

    name: str
    answer_len: int

    def line(self, rng: np.random.Generator) -> str:
        raise NotImplementedError

    def text(self, n_lines: int, seed: int) -> str:
        rng = np.random.default_rng(seed)
        return "".join(self.line(rng) + "\n" for _ in range(n_lines))


@dataclass(frozen=True)
class SelectiveCopy(Task):
    name: str = "copy"
    answer_len: int = 4
    positions: int = 64

    def line(self, rng: np.random.Generator) -> str:
        k = self.answer_len
        data = rng.choice(len(SYMBOLS), size=k)
        where = np.sort(rng.choice(self.positions, size=k, replace=False))
        body = [NOISE] * self.positions
        for pos, sym in zip(where, data, strict=True):
            body[pos] = SYMBOLS[sym]
        answer = "".join(SYMBOLS[s] for s in data)
        return "".join(body) + MARKER * k + answer


@dataclass(frozen=True)
class Induction(Task):
    name: str = "induction"
    answer_len: int = 1
    length: int = 64

    def line(self, rng: np.random.Generator) -> str:
        body = [SYMBOLS[s] for s in rng.integers(0, len(SYMBOLS), size=self.length)]
        at = int(rng.integers(0, self.length - 1))  # the trigger and its key fit in the body
        body[at] = TRIGGER
        return "".join(body) + TRIGGER + body[at + 1]


TASKS: dict[str, Task] = {"copy": SelectiveCopy(), "induction": Induction()}


def stdlib_documents(root: Path | None = None) -> list[tuple[str, str]]:
    """(relative path, text) of every ``.py`` file of the standard library (site-packages
    excluded), sorted by path. ``root`` defaults to this interpreter's stdlib folder."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        try:
            docs.append((rel, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return docs


def split_documents(docs: list[tuple[str, str]], train_bytes: int, heldout_bytes: int,
                    heldout_every: int = 20) -> tuple[str, str]:
    """Split by document: a file is held out when the hash of its path is 0 mod ``heldout_every``.
    Files are taken in hash order (a mix of the whole library) until each side has its bytes."""
    def key(rel: str) -> int:
        return int.from_bytes(hashlib.sha256(rel.encode()).digest()[:8], "little")

    train: list[str] = []
    held: list[str] = []
    n_train = n_held = 0
    for rel, text in sorted(docs, key=lambda d: key(d[0])):
        size = len(text.encode("utf-8"))
        if key(rel) % heldout_every == 0:
            if n_held < heldout_bytes:
                held.append(text)
                n_held += size
        elif n_train < train_bytes:
            train.append(text)
            n_train += size
    return "".join(train), "".join(held)
