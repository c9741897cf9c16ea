"""Tokenizers: byte-level (default, no training) and BPE trained on the user's corpus with HF
``tokenizers``. Both save the Hugging Face way: ``tokenizer.json`` (a real HF fast-tokenizer file;
the byte tokenizer as a byte-level BPE with the 256 bytes as ids 0..255, no merges, and
``<|endoftext|>`` as id 256), ``tokenizer_config.json`` and ``special_tokens_map.json``, so
``AutoTokenizer.from_pretrained(folder)`` gives our ids with eos = pad = bos = ``<|endoftext|>``."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import MambaStudioError, TokenizerError
from .fastbpe import FastBPE, fast_encoder
from .safeio import TOKENIZER_LIMIT, read_bytes, read_json
from .signals import answerable

EOS = "<|endoftext|>"
MAX_BPE = 1 << 20


class StreamDecoder(Protocol):
    """Incremental detokenisation: ``step(id)`` returns the text that id completes ("" while a
    multi-byte character is incomplete); cost per call does not grow with the text so far."""

    def step(self, token: int) -> str: ...
    def flush(self) -> str: ...


class Tokenizer(Protocol):
    kind: str
    vocab_size: int
    eos_id: int

    def encode(self, text: str) -> np.ndarray: ...
    def decode(self, ids: Iterable[int]) -> str: ...
    def stream(self) -> StreamDecoder: ...
    def save(self, folder: Path) -> None: ...


class _ByteStream:
    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token: int) -> str:
        return str(self._dec.decode(bytes([token]))) if 0 <= token < 256 else ""

    def flush(self) -> str:
        return str(self._dec.decode(b"", True))


class _HFStream:
    def __init__(self, tok, vocab_size: int) -> None:
        from tokenizers.decoders import DecodeStream

        self._tok, self._n = tok, vocab_size
        self._stream = DecodeStream(skip_special_tokens=False)
        self._pending: list[int] = []  # ids given since the last text

    def step(self, token: int) -> str:
        if not 0 <= token < self._n:
            return ""  # a padded-vocabulary id the tokenizer does not know
        text = self._stream.step(self._tok, int(token))
        if text:
            self._pending.clear()
            return str(text)
        self._pending.append(int(token))
        return ""

    def flush(self) -> str:
        """The ids given since the last text, as decode() gives them: U+FFFD for bytes that
        make no character, as the byte tokenizer's stream says (60 sampled lone continuation
        bytes printed nothing at all, and generate exited 0 with only the prompt). Draining
        them earlier could cut a character decode() reads whole; the text stays decode()'s."""
        text = str(self._tok.decode(self._pending, skip_special_tokens=False))
        self._pending.clear()
        return text


# BPE training reads the corpus in pieces of this many bytes: HF's trainer takes ~90 bytes of
# memory per byte of each text it is handed at once (4 MiB chunks of 17 MB of code: peak 1.56 GB),
# against 0.23 GB for the same corpus in 64 KiB pieces, with the same tokens (the pieces are cut
# where the byte-level pre-tokeniser cuts: ``data.iter_text``)
BPE_PIECE_BYTES = 64 * 1024
# ... and learns its merges from at most about this much of it: every k-th piece, spread over the
# whole corpus (HF's trainer splits words at ~1.2 MB/s a core: 83 s for a 200 MB corpus, ~13 s
# for this share of it; SentencePiece caps its input the same way)
BPE_TRAIN_MAX_BYTES = 32_000_000


# ... and hands it no run without whitespace longer than this many characters: HF's trainer
# rescans a whole word for every merge of a pair in it, so text that is one long distinct word
# after another (random letters, DNA, hex) trained 2 MB in 25.6 s in 64 KiB words, 3.2 s in
# words of 4,096 (a word cut there loses only the merges across its cuts)
LONG_WORD = 4096
# (anchored at the run's start: unanchored, the pattern was tried again from every character of
# each shorter run, 3.4 s for 1 MB of 4,000-letter runs)
_LONG_RUN = re.compile(rf"(?<!\S)\S{{{LONG_WORD + 1},}}")
# The encoders get no run without whitespace longer than this: tiktoken encoded a 10 MB line of
# letters as one word in 26.6 s with an 840 MB peak (its ids there differ from HF's whole-run ids
# only around the cuts; most texts have no such run and are encoded whole)
ENCODE_WORD = 65536
_ENCODE_RUN = re.compile(rf"(?<!\S)\S{{{ENCODE_WORD + 1},}}")


def _cut_runs(text: str, pattern: re.Pattern[str], width: int) -> list[str]:
    """``text`` in pieces, cut inside each run ``pattern`` finds (runs without whitespace longer
    than ``width``) every ``width`` characters, never inside an end-of-text marker; the pieces
    add up to ``text``."""
    out: list[str] = []
    start = 0
    for m in pattern.finditer(text):
        cut = m.start() + width  # the text before the run and its first ``width`` characters,
        while cut < m.end():  # then the run ``width`` at a time; the rest of it goes with the
            eos = text.find(EOS, cut - len(EOS) + 1, cut + len(EOS) - 1)  # text after it
            cut = eos if 0 <= eos < cut and eos > start else cut
            out.append(text[start:cut])
            start, cut = cut, cut + width
    out.append(text[start:])
    return out


def _short_words(text: str) -> list[str]:
    """``text`` in pieces whose runs without whitespace are at most ``LONG_WORD`` characters
    (cut inside the longer runs only; most texts come back whole)."""
    return [text] if len(text) <= LONG_WORD else _cut_runs(text, _LONG_RUN, LONG_WORD)


def _encode_parts(text: str) -> list[str]:
    """``text`` for the encoders: cut inside runs without whitespace longer than
    ``ENCODE_WORD``. Such a run holds a whole aligned window of ``ENCODE_WORD // 2``
    characters with no space and no line break, so a text whose every window has one (almost
    every text: a find or two each) comes back whole without the pattern's scan."""
    half = ENCODE_WORD // 2
    if all(text.find(" ", i, i + half) >= 0 or text.find("\n", i, i + half) >= 0
           for i in range(0, len(text) - half + 1, half)):
        return [text]
    return _cut_runs(text, _ENCODE_RUN, ENCODE_WORD)


# ... and at most about this many bytes of distinct runs of letters of ``LONG_LETTERS`` or more
# (each different one is a word of its own to the trainer, ~90 bytes of its memory a byte:
# random letters, DNA, Chinese sentences without spaces; 4 MB of random CJK sentences peaked
# at 440 MB, 10 MB of random letters at 1.36 GB); runs past that are left out of its texts, runs
# it has seen are not (ordinary text repeats its long words)
LONG_LETTERS = 12
DISTINCT_LONG_BYTES = 2_000_000
_LETTER_RUN = re.compile(rf"[^\W\d_]{{{LONG_LETTERS},}}")


class _DistinctRuns:
    """Hands on the texts given to the BPE trainer with distinct long runs of letters left out
    (a line break in their place: a word boundary, nothing joined) once they would pass their
    share of ``DISTINCT_LONG_BYTES`` (UTF-8): the share grows with the bytes handed on so far,
    out of ``total`` expected, from a tenth at the start (a budget spent first-come learned a
    Chinese corpus's merges from its first files only, and the files after them got none).
    Runs it has handed on before are always kept. ``total`` None: first-come."""

    def __init__(self, budget: int | None = None, total: int | None = None) -> None:
        self.budget = DISTINCT_LONG_BYTES if budget is None else budget
        self.total = total
        self.spent = 0
        self.read = 0  # bytes of the texts handed on so far
        self.seen: set[str] = set()

    def __call__(self, text: str) -> str:
        self.read += len(text) if text.isascii() else len(text.encode("utf-8"))
        return _LETTER_RUN.sub(self._keep, text) if len(text) >= LONG_LETTERS else text

    def _share(self) -> float:
        if not self.total or self.total <= 0:
            return self.budget
        return self.budget * min(1.0, max(0.1, self.read / self.total))

    def _keep(self, m: re.Match[str]) -> str:
        run = m.group()
        if run in self.seen:
            return run
        size = len(run) if run.isascii() else len(run.encode("utf-8"))
        if self.spent + size > self._share():
            return "\n"
        self.spent += size
        self.seen.add(run)
        return run


def bpe_sample_every(n_bytes: int) -> int:
    """BPE training on a corpus of ``n_bytes`` reads every this-many-th piece (1: all of it)."""
    return max(1, -(-n_bytes // BPE_TRAIN_MAX_BYTES))


def _chunks(texts: Iterable[str]) -> Iterator[str]:
    """A Corpus (or its ``texts``) streams pieces of about ``BPE_PIECE_BYTES`` from disk, each
    kept with probability 1 / ``bpe_sample_every`` (seeded); anything else as given; either cut
    inside runs without whitespace longer than ``LONG_WORD`` (``_short_words``). A piece
    the reader could not cut (a line of 8 pieces or more without a space: minified JSON, base64)
    is drawn from in parts of ``BPE_PIECE_BYTES`` (a 50 MB line was one piece, dropped by its
    one draw: the "BPE" tokenizer learned no merge), and at least one part is always kept.
    Distinct long runs of letters past their share of ``DISTINCT_LONG_BYTES`` are left out
    (``_DistinctRuns``)."""
    source = getattr(texts, "corpus", texts)
    n_bytes = getattr(source, "n_bytes", None)
    total = (int(n_bytes) // bpe_sample_every(int(n_bytes)) if isinstance(n_bytes, int)
             else None)  # (a list of texts: first-come)
    budget = _DistinctRuns(total=total)
    for text in _pieces(texts):
        yield budget(text)


def _pieces(texts: Iterable[str]) -> Iterator[str]:
    """``_chunks``'s texts before the budget of distinct long runs."""
    source = getattr(texts, "corpus", texts)
    chunks = getattr(source, "chunks", None)
    if not callable(chunks):
        for text in texts:
            yield from _short_words(text)
        return
    every = bpe_sample_every(int(getattr(source, "n_bytes", 0)))
    rng = np.random.default_rng(0x5A3)  # seeded draws, not a stride: a stride over alternating
    first: str | None = None  # small files of two kinds kept only one kind
    kept = False
    for piece in chunks(BPE_PIECE_BYTES):
        parts = ([piece] if len(piece) < 8 * BPE_PIECE_BYTES else
                 [piece[i:i + BPE_PIECE_BYTES] for i in range(0, len(piece), BPE_PIECE_BYTES)])
        for part in parts:
            first = part if first is None else first
            if every == 1 or rng.random() < 1 / every:
                kept = True
                yield from _short_words(part)
    if not kept and first is not None:
        yield from _short_words(first)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map (what HF's ByteLevel pre-tokenizer emits)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
            *range(ord("\xae"), ord("\xff") + 1)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def byte_tokenizer_json() -> dict:
    """The byte tokenizer as an HF ``tokenizer.json``: ByteLevel pre-tokenizer without the split
    regex, a BPE model whose vocabulary is the 256 byte characters (id = byte value) and no merges,
    and <|endoftext|> as special token 256."""
    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 256, "content": EOS, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": {**byte_level, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def hf_tokenizer_config(split_special: bool = False) -> dict[str, dict]:
    """``tokenizer_config.json`` and ``special_tokens_map.json``: <|endoftext|> is eos, bos and
    pad (so AutoTokenizer adds no pad token of its own); nothing is added around encoded text.
    ``split_special``: a literal "<|endoftext|>" in text is encoded as its characters (as our
    byte tokenizer reads it: transformers matched it as the special token, so an exported byte
    model was given other ids for that text than it trained on)."""
    special = {"bos_token": EOS, "eos_token": EOS, "pad_token": EOS}
    split = {"split_special_tokens": True} if split_special else {}
    return {
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast", **special, "unk_token": None,
            "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": 1 << 30, **split,
            "added_tokens_decoder": {"__EOS_ID__": {
                "content": EOS, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": True}},
        },
        "special_tokens_map.json": special,
    }


def _save_hf_files(folder: Path, tokenizer_json: str, eos_id: int,
                   split_special: bool = False) -> None:
    folder = Path(folder)
    _write_text(folder / "tokenizer.json", tokenizer_json)
    for name, obj in hf_tokenizer_config(split_special).items():
        text = json.dumps(obj, indent=2, ensure_ascii=False).replace("__EOS_ID__", str(eos_id))
        _write_text(folder / name, text + "\n")


def _write_text(path: Path, text: str) -> None:
    """``path.write_text`` whose failure names the file: a full disk met at the close raised
    "No space left on device" with no file, and a run's save said so of nothing."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def is_byte_tokenizer_json(spec: dict) -> bool:
    """True for the file ``ByteTokenizer.save`` writes (and the older ``mamba_studio_tokenizer``)."""
    if spec.get("mamba_studio_tokenizer") == "bytes":
        return True
    model = spec.get("model")
    ref = byte_tokenizer_json()
    return (isinstance(model, dict) and model.get("type") == "BPE" and not model.get("merges")
            and model.get("vocab") == ref["model"]["vocab"]
            and spec.get("added_tokens") == ref["added_tokens"]
            and spec.get("pre_tokenizer") == ref["pre_tokenizer"])


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

    def stream(self) -> StreamDecoder:
        return _ByteStream()

    def save(self, folder: Path) -> None:
        """tokenizer.json (HF byte-level BPE, see ``byte_tokenizer_json``) + the HF config files
        (a literal "<|endoftext|>" in text read as its 13 bytes, as ``encode`` reads it)."""
        _save_hf_files(Path(folder), json.dumps(byte_tokenizer_json(), indent=2, ensure_ascii=False),
                       self.eos_id, split_special=True)


class BPETokenizer:
    """Byte-level BPE (GPT-2 style) trained with HF ``tokenizers``."""

    kind = "bpe"

    def __init__(self, tok) -> None:
        self._tok = tok
        self.vocab_size = int(tok.get_vocab_size())
        eos = tok.token_to_id(EOS)
        self.eos_id = int(eos) if eos is not None else 0
        self._fast: FastBPE | None | bool = False  # False: not built yet (``_encoder``)

    def _encoder(self) -> FastBPE | None:
        """tiktoken's encoder for these merges where it gives HF's ids (``engine.fastbpe``),
        ~8x faster; None: HF's own."""
        if self._fast is False:
            self._fast = fast_encoder(self._tok.to_str(), self._hf_encode)
        assert self._fast is not True
        return self._fast

    def _hf_encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 2048, min_frequency: int = 2) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if type(vocab_size) is not int or not 257 <= vocab_size <= MAX_BPE:
            raise TokenizerError(
                f"BPE vocabulary size must be an integer in [257, {MAX_BPE}], got {vocab_size!r}"
            )

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
        answerable(lambda: tok.train_from_iterator(_chunks(texts), trainer=trainer))  # (native,
        # without the GIL: Ctrl-C went unanswered while it trained)
        return cls(tok)

    def encode(self, text: str) -> np.ndarray:
        """Runs without whitespace longer than ``ENCODE_WORD`` are encoded in parts
        (``_encode_parts``)."""
        parts = _encode_parts(text)
        if len(parts) > 1:
            return np.concatenate(self._encode_all(parts))
        fast = self._encoder()
        return np.asarray(fast.encode(text) if fast is not None else self._hf_encode(text),
                          dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """``encode`` of each text, in one call (HF's encoder runs it in parallel)."""
        split = [_encode_parts(t) for t in texts]
        if all(len(p) == 1 for p in split):
            return self._encode_all(texts)
        ids = iter(self._encode_all([p for parts in split for p in parts]))
        return [np.concatenate([next(ids) for _ in parts]) for parts in split]

    def _encode_all(self, texts: list[str]) -> list[np.ndarray]:
        fast = self._encoder()
        if fast is not None:
            return fast.encode_batch(texts)
        out = self._tok.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.int64) for e in out]

    def decode(self, ids: Iterable[int]) -> str:
        return str(self._tok.decode([int(i) for i in ids if 0 <= int(i) < self.vocab_size]))

    def stream(self) -> StreamDecoder:
        return _HFStream(self._tok, self.vocab_size)

    def save(self, folder: Path) -> None:
        """tokenizer.json + tokenizer_config.json + special_tokens_map.json."""
        _save_hf_files(Path(folder), self._tok.to_str(pretty=True), self.eos_id)


PAD_SLACK = 128  # a model's vocabulary may exceed its tokenizer's by padding: fewer than this many ids


def recorded_kind(folder: str | Path) -> str | None:
    """The tokenizer kind our ``config.json`` records ("bytes"/"bpe"), None if absent/unreadable."""
    try:
        cfg = read_json(Path(folder) / "config.json", what="config.json")
    except MambaStudioError:
        return None
    block = cfg.get("mamba_studio") if isinstance(cfg, dict) else None
    kind = block.get("tokenizer") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """Load ``folder/tokenizer.json`` (ours or any HF fast-tokenizer file). Without one, the byte
    tokenizer is used only when ``config.json`` does not record another kind (a BPE model folder
    without its tokenizer.json is refused). Reads are bounded; a FIFO or device is refused."""
    path = Path(folder) / "tokenizer.json"
    kind = recorded_kind(folder)
    if not path.exists() and not path.is_symlink():
        if kind not in (None, "bytes"):
            raise TokenizerError(
                f"{path}: missing, but {Path(folder) / 'config.json'} records a {kind!r} tokenizer; "
                "copy the tokenizer.json this model was trained with into the folder"
            )
        return ByteTokenizer()
    try:
        data = read_bytes(path, TOKENIZER_LIMIT, "tokenizer.json")
        spec = json.loads(data.decode("utf-8"))
    except MambaStudioError as exc:
        raise TokenizerError(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise TokenizerError(f"{path}: not a readable tokenizer.json ({str(exc)[:200]})") from None
    if not isinstance(spec, dict):
        raise TokenizerError(f"{path}: not a tokenizer.json (a JSON {type(spec).__name__}, not an object)")
    if is_byte_tokenizer_json(spec):
        tok: Tokenizer = ByteTokenizer()
    else:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            tok = BPETokenizer(HFTokenizer.from_str(data.decode("utf-8")))
        except BaseException as exc:  # tokenizers raises Exception subclasses, or a pyo3 panic
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise TokenizerError(f"{path}: HF tokenizers could not load it ({why})") from None
    if kind is not None and kind != tok.kind:
        model = spec.get("model")  # (a WordLevel tokenizer was called "a 'bpe' tokenizer")
        named = model.get("type") if isinstance(model, dict) else None
        what = (f"a {named} tokenizer" if isinstance(named, str) and named.lower() != tok.kind
                and named.isidentifier() else f"a {tok.kind!r} tokenizer")
        raise TokenizerError(
            f"{path}: {what}, but config.json records {kind!r}; "
            "this is not the tokenizer the model was trained with"
        )
    return tok


def check_fits(tok: Tokenizer, model_vocab: int, source: str | Path) -> None:
    """The rule for a tokenizer and a model's embedding table: the tokenizer may not have more ids
    than the model (they would index past the table), and the model may exceed the tokenizer only by
    padding (fewer than ``PAD_SLACK`` extra ids, as HF pads vocabularies to a multiple of 8-128);
    anything else means the tokenizer is not this model's."""
    if tok.vocab_size > model_vocab:
        raise TokenizerError(
            f"{source}: the tokenizer has {tok.vocab_size:,} tokens but the model only {model_vocab:,}; "
            "use the tokenizer.json the model was trained with"
        )
    if model_vocab - tok.vocab_size >= PAD_SLACK:
        raise TokenizerError(
            f"{source}: the tokenizer has {tok.vocab_size:,} tokens but the model {model_vocab:,} "
            f"(more than padding, < {PAD_SLACK}, explains); use the tokenizer.json the model was "
            "trained with"
        )
