"""``MambaLM``: a config, its parameters and a tokenizer, with generation and save/load.

It only composes other modules (model, inference, sampling, checkpoint); optimizer state and the
training loop live in ``engine.trainer``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import checkpoint as ckpt
from .config import MambaConfig
from .inference import prefill, step
from .model import logits_forward
from .params import Params, count, init_params
from .sampling import SamplingConfig, sample
from .tokenizer import ByteTokenizer, Tokenizer, load_tokenizer


@dataclass
class MambaLM:
    config: MambaConfig
    params: Params
    tokenizer: Tokenizer

    @classmethod
    def create(cls, config: MambaConfig, tokenizer: Tokenizer | None = None, seed: int = 0) -> MambaLM:
        tokenizer = tokenizer or ByteTokenizer()
        if config.vocab_size < tokenizer.vocab_size:
            config = config.with_vocab(tokenizer.vocab_size)
        return cls(config, init_params(config, seed), tokenizer)

    @property
    def n_params(self) -> int:
        return count(self.params)

    def logits(self, tokens: np.ndarray) -> np.ndarray:
        """tokens (b, l) -> logits (b, l, v)."""
        return logits_forward(self.params, np.atleast_2d(tokens), self.config)

    def generate_ids(
        self, prompt_ids: np.ndarray, sampling: SamplingConfig, backend=None  # type: ignore[no-untyped-def]
    ) -> Iterator[int]:
        """Yield new token ids one at a time (recurrent step; ``backend`` may be a GPU stepper)."""
        rng = np.random.default_rng(sampling.seed)
        ids = np.asarray(prompt_ids, dtype=np.int64).reshape(1, -1)
        if ids.size == 0:
            ids = np.array([[self.tokenizer.eos_id]], dtype=np.int64)
        if backend is not None:
            logits = backend.prefill(ids[0])
        else:
            logits, state = prefill(self.params, ids, self.config)
            logits = logits[0]
        for _ in range(sampling.max_new_tokens):
            tok = sample(logits, sampling, rng)
            if sampling.stop_token is not None and tok == sampling.stop_token:
                return
            yield tok
            if backend is not None:
                logits = backend.step(tok)
            else:
                logits = step(self.params, np.array([tok]), state, self.config)[0]

    def generate(self, prompt: str, sampling: SamplingConfig | None = None, backend=None) -> Iterator[str]:  # type: ignore[no-untyped-def]
        """Stream decoded text pieces; multi-byte characters are emitted once complete."""
        sampling = sampling or SamplingConfig()
        ids: list[int] = []
        emitted = ""
        for tok in self.generate_ids(self.tokenizer.encode(prompt), sampling, backend):
            ids.append(tok)
            text = self.tokenizer.decode(ids)
            if text.endswith("\ufffd"):
                continue
            yield text[len(emitted) :]
            emitted = text

    # ---------------------------------------------------------------- save / load
    def save(self, folder: str | Path) -> dict[str, str]:
        return ckpt.save_model_files(Path(folder), self.config, self.params, self.tokenizer)

    @classmethod
    def load(cls, folder: str | Path) -> MambaLM:
        """Load our checkpoint folder or a local HF Mamba folder (config.json + model.safetensors
        + tokenizer.json)."""
        cfg, params = ckpt.load_model_files(Path(folder))
        tok = load_tokenizer(folder)
        if tok.vocab_size > cfg.vocab_size:
            raise ckpt.CheckpointError(
                f"{folder}: tokenizer has {tok.vocab_size} tokens but the model only {cfg.vocab_size}"
            )
        return cls(cfg, params, tok)
