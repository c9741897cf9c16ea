"""Turning logits into a token: greedy, temperature, top-k, top-p. Shared by the CPU and GPU paths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    """temperature <= 0 means greedy; top_k <= 0 and top_p >= 1 disable those filters;
    repetition_penalty > 1 divides positive (multiplies negative) logits of tokens already in the
    last ``repetition_window`` tokens (CTRL, Keskar et al. 2019), 1.0 is off.

    Stopping: generation ends early when ``stop_token`` is sampled, or, with ``stop_at_eos``, the
    tokenizer's end-of-text id (both tokenizers have one: BPE's ``<|endoftext|>``, the byte
    tokenizer's id 256; training puts it at the end of every document / record, so it is where a
    model says "done"). The stop token itself is never yielded. The CLI and the app turn
    ``stop_at_eos`` on (``generate --no-stop`` and the Playground checkbox turn it off)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    max_new_tokens: int = 200
    seed: int | None = 0
    stop_token: int | None = None
    stop_at_eos: bool = False  # also stop at the tokenizer's end-of-text id
    repetition_penalty: float = 1.0
    repetition_window: int = 64


# What a person gets unless they change it: `generate`'s flags, the training previews of the CLI
# and the app (the Gallery lists those) and the Playground. Repetition 1.1 keeps a small model's
# low-temperature text from looping on a word; ``SamplingConfig()`` itself stays plain sampling
# (no penalty, no stop) for the API and the interop checks against other libraries.
GENERATION_DEFAULTS = SamplingConfig(repetition_penalty=1.1, stop_at_eos=True)


def sample(logits: np.ndarray, cfg: SamplingConfig, rng: np.random.Generator,
           history: np.ndarray | None = None) -> int:
    """logits (v,) -> token id; ``history`` (n,) int: the tokens so far, for the repetition penalty."""
    logits = np.array(logits, dtype=np.float64)
    if not np.all(np.isfinite(logits)):
        raise FloatingPointError("logits contain NaN or Inf; the model is broken (diverged?)")
    if cfg.repetition_penalty != 1.0 and history is not None and len(history):
        seen = np.unique(np.asarray(history[-cfg.repetition_window:], dtype=np.int64))
        seen = seen[(seen >= 0) & (seen < logits.size)]
        v = logits[seen]
        logits[seen] = np.where(v > 0, v / cfg.repetition_penalty, v * cfg.repetition_penalty)
    if cfg.temperature <= 0:
        return int(np.argmax(logits))
    with np.errstate(over="ignore"):
        z = logits / cfg.temperature
    if not np.isfinite(z).all():  # a temperature so small (1e-320) the logits overflow: its
        return int(np.argmax(logits))  # limit, greedy (inf - inf made "Probabilities contain NaN")
    if 0 < cfg.top_k < z.size:
        kth = np.partition(z, -cfg.top_k)[-cfg.top_k]
        z = np.where(z >= kth, z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if cfg.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cum, cfg.top_p) + 1)]
        mask = np.zeros_like(probs)
        mask[keep] = probs[keep]
        probs = mask / mask.sum()
    return int(rng.choice(probs.size, p=probs))
