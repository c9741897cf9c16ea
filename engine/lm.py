"""``MambaLM``: a config, its parameters and a tokenizer, with generation and save/load.

It only composes other modules (model, inference, sampling, checkpoint); optimizer state and the
training loop live in ``engine.trainer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from . import checkpoint as ckpt
from .config import MambaConfig
from .defaults import PROMPT_PIECE
from .inference import CpuStepper
from .model import logits_forward
from .params import Params, count, init_params
from .sampling import SamplingConfig, sample
from .tokenizer import ByteTokenizer, Tokenizer, check_fits, load_tokenizer


class Stepper(Protocol):
    """A recurrent decoding backend: CpuStepper or engine.gpu.GpuStepper. ``prefill`` reads
    ids (l,) from a zero state, ``feed`` reads them after what was read so far; both return the
    last position's logits (v,)."""

    def prefill(self, ids: np.ndarray) -> np.ndarray: ...
    def feed(self, ids: np.ndarray) -> np.ndarray: ...
    def step(self, token: int) -> np.ndarray: ...


@dataclass
class MambaLM:
    config: MambaConfig
    params: Params
    tokenizer: Tokenizer
    source: Path | None = field(default=None, compare=False)  # the folder it was loaded from

    @classmethod
    def create(cls, config: MambaConfig, tokenizer: Tokenizer | None = None, seed: int = 0,
               init: str = "default") -> MambaLM:
        """A new model; ``init="reference"`` is mamba_ssm's init (``engine.params.INIT_SCALES``)."""
        tokenizer = tokenizer or ByteTokenizer()
        if config.vocab_size < tokenizer.vocab_size:
            config = config.with_vocab(tokenizer.vocab_size)
        return cls(config, init_params(config, seed, init=init), tokenizer)

    @property
    def n_params(self) -> int:
        return count(self.params)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """tokens (b, l) -> logits (b, l, v)."""
        return logits_forward(self.params, np.atleast_2d(tokens), self.config)

    def prompt_ids(self, prompt: str) -> np.ndarray:
        """The ids a text prompt is read as (L + 1,) int64: an end-of-text id, then the
        prompt's, as every training document starts (``engine.documents``), so a prompt is the
        beginning of a document. ``generate``, the window's Playground and the exports' recipes
        all prompt this way (the Playground once read the prompt alone: other text than
        ``generate`` for the same model and seed)."""
        return np.concatenate([[self.tokenizer.eos_id], self.tokenizer.encode(prompt)]).astype(np.int64)

    def generate_ids(
        self, prompt_ids: np.ndarray, sampling: SamplingConfig, backend: Stepper | None = None,
        reading: Callable[[int], bool] | None = None,
    ) -> Iterator[int]:
        """Yield new token ids one at a time with the recurrent step of ``backend`` (a
        ``GpuStepper``; the CPU step when None); ends early at a stop token (``SamplingConfig``).
        An end-of-text id that does not stop it resets the state (each document trains from zero).
        The prompt is read ``PROMPT_PIECE`` tokens at a time; between pieces ``reading`` gets
        the count read so far, and True from it ends the generation before any token."""
        stepper = backend if backend is not None else CpuStepper(self.params, self.config)
        rng = np.random.default_rng(sampling.seed)
        ids = np.asarray(prompt_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            ids = np.array([self.tokenizer.eos_id], dtype=np.int64)
        logits = stepper.prefill(ids[:PROMPT_PIECE])
        for at in range(PROMPT_PIECE, ids.size, PROMPT_PIECE):
            if reading is not None and reading(at):
                return
            logits = stepper.feed(ids[at : at + PROMPT_PIECE])
        history = list(ids[-sampling.repetition_window:])
        stops = {t for t in (sampling.stop_token,
                             self.tokenizer.eos_id if sampling.stop_at_eos else None) if t is not None}
        eos = self.tokenizer.eos_id
        for _ in range(sampling.max_new_tokens):
            tok = sample(logits, sampling, rng, np.asarray(history))
            if tok in stops:
                return
            yield tok
            history.append(tok)
            del history[:-sampling.repetition_window]
            # past an end of text (not stopping there) a new document starts as in training: from
            # a zero state with the end-of-text id as its first input
            logits = stepper.prefill(np.array([tok])) if tok == eos else stepper.step(tok)

    def generate(
        self, prompt: str, sampling: SamplingConfig | None = None, backend: Stepper | None = None
    ) -> Iterator[str]:
        """Stream decoded text pieces; multi-byte characters are emitted once complete. Decoding is
        incremental (the tokenizer's ``stream()``), so each token costs the same however long the
        text already is. The prompt is read as ``prompt_ids`` gives it."""
        sampling = sampling or SamplingConfig()
        text = GeneratedText(self.tokenizer)
        for tok in self.generate_ids(self.prompt_ids(prompt), sampling, backend):
            piece = text.step(tok)
            if piece:
                yield piece
        tail = text.flush()
        if tail:
            yield tail

    def check_finite(self, source: str | Path = "model") -> None:
        """Raise CheckpointError naming the first tensor with NaN/Inf (a diverged model)."""
        for name, a in self.params.items():
            if not np.isfinite(a).all():
                raise ckpt.CheckpointError(
                    f"{source}: weight {name} contains NaN or Inf (training diverged?); use an "
                    "earlier checkpoint or retrain with a lower learning rate"
                )

    # ---------------------------------------------------------------- save / load
    def save(self, folder: str | Path) -> dict[str, str]:
        return ckpt.save_model_files(Path(folder), self.config, self.params, self.tokenizer)

    @classmethod
    def load(cls, folder: str | Path) -> MambaLM:
        """Load our checkpoint folder or a local HF Mamba folder (config.json + model.safetensors
        + tokenizer.json)."""
        cfg, params = ckpt.load_model_files(Path(folder))
        tok = load_tokenizer(folder)
        check_fits(tok, cfg.vocab_size, Path(folder) / "tokenizer.json")
        return cls(cfg, params, tok, source=Path(folder))


class GeneratedText:
    """Generated tokens as text, one piece a token (``tokenizer.stream()``: a character split
    over tokens comes whole), where an end-of-text token that generation went past (``stop_at_eos``
    off) is a line break between the documents: it decoded to nothing with the byte tokenizer (the
    examples ran together) and to "<|endoftext|>" with BPE. ``generate`` and the window's
    Playground decode alike through this."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._stream = tokenizer.stream()
        self._eos = tokenizer.eos_id

    def step(self, tok: int) -> str:
        return self._stream.flush() + "\n" if tok == self._eos else self._stream.step(int(tok))

    def flush(self) -> str:
        return self._stream.flush()
