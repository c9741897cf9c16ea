"""Fixtures for the interop suite: small trained runs (byte and BPE tokenizers, full and LoRA)
written by our trainer, and the peer tools (torch, transformers, peft, llama-cpp-python)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine import BPETokenizer, ByteTokenizer, MambaLM, TrainConfig, Trainer  # noqa: E402
from engine.config import MambaConfig  # noqa: E402
from engine.lora import LoRAConfig  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog. A small model learns the shape of text, "
        "one byte at a time; naïve café, 日本語, emoji 😀.\n") * 40
LINE = transformers.__version__.split(".")[0] + ".x"


def small_config(vocab: int, **kw) -> MambaConfig:  # type: ignore[no-untyped-def]
    return MambaConfig(vocab_size=vocab, d_model=32, n_layer=2, d_state=8, **kw)


def train_run(folder: Path, tok, steps: int, lora: LoRAConfig | None = None,  # type: ignore[no-untyped-def]
              base: MambaLM | None = None, untied: bool = False, seed: int = 0) -> MambaLM:
    """Train ``steps`` steps on TEXT and save the run folder (with trainer state)."""
    if base is None:
        cfg = small_config(tok.vocab_size + (-tok.vocab_size) % 8, tie_embeddings=not untied)
        base = MambaLM.create(cfg, tok, seed=seed)
    ids = tok.encode(TEXT)
    cfg_t = TrainConfig(epochs=1, batch_size=4, seq_len=32, lr=1e-2, max_steps=steps, seed=seed,
                        warmup_steps=0, lora=lora)
    tr = Trainer(base, ids[: len(ids) * 9 // 10], ids[len(ids) * 9 // 10:], cfg_t)
    tr.run()
    tr.save(folder)
    return tr.lm


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    bpe = BPETokenizer.train([TEXT], vocab_size=300)
    out = {}
    for name, tok, untied in (("byte", ByteTokenizer(), False), ("bpe", bpe, False),
                              ("untied", ByteTokenizer(), True)):
        train_run(root / name, tok, steps=40, untied=untied)
        out[name] = root / name
    return out


def hf_logits(folder: Path | str, ids: np.ndarray, dtype=None):  # type: ignore[no-untyped-def]
    """Logits (l, v) of transformers' MambaForCausalLM loaded from ``folder``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder))
    model = model.to(dtype or torch.float32).eval()
    with torch.no_grad():
        return model(torch.as_tensor(ids)[None]).logits[0].double().numpy()


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, os.cpu_count() or 1))
