"""Tokenizers: byte-level (default, no training) and BPE trained on the user's corpus with HF
``tokenizers``. Both save/load a ``tokenizer.json``-style file in a model folder."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import TokenizerError

EOS = "<|endoftext|>"


class Tokenizer(Protocol):
    kind: str
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> np.ndarray: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def save(self, folder: Path) -> None: ...


class ByteTokenizer:
    """UTF-8 bytes 0..255 are ids 0..255; id 256 is ``<|endoftext|>``."""

    kind = "bytes"
    vocab_size = 257
    eos_id = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        data = bytes(int(i) for i in ids if 0 <= int(i) < 256)
        return data.decode("utf-8", errors="replace")

    def save(self, folder: Path) -> None:
        spec = {"mamba_studio_tokenizer": "bytes", "eos_token": EOS, "eos_id": self.eos_id}
        (Path(folder) / "tokenizer.json").write_text(json.dumps(spec, indent=2))


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) trained with HF ``tokenizers``."""

    kind = "bpe"

    def __init__(self, tok) -> None:  # type: ignore[no-untyped-def]
        self._tok = tok
        self.vocab_size = int(tok.get_vocab_size())
        eos = tok.token_to_id(EOS)
        self.eos_id = int(eos) if eos is not None else 0

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(list(texts), trainer=trainer)
        return cls(tok)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text).ids, dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._tok.decode([int(i) for i in ids if 0 <= int(i) < self.vocab_size]))

    def save(self, folder: Path) -> None:
        self._tok.save(str(Path(folder) / "tokenizer.json"))


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load ``folder/tokenizer.json`` (ours or any HF fast-tokenizer file); bytes if absent."""
    path = Path(folder) / "tokenizer.json"
    if not path.exists():
        return ByteTokenizer()
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: not a readable tokenizer.json ({exc})") from exc
    if spec.get("mamba_studio_tokenizer") == "bytes":
        return ByteTokenizer()
    from tokenizers import Tokenizer as HFTokenizer

    try:
        return BPETokenizer(HFTokenizer.from_file(str(path)))
    except Exception as exc:  # tokenizers raises plain Exception subclasses
        raise TokenizerError(f"{path}: HF tokenizers could not load it ({exc})") from exc
