"""Fixtures for the interop suite: small trained runs (byte and BPE tokenizers, full and LoRA)
written by our trainer, and the peer tools (torch, transformers, peft, llama-cpp-python)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine import MambaLM, TrainConfig  # noqa: E402
from engine.lora import LoRAConfig  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog. A small model learns the shape of text, "
        "one byte at a time; naïve café, 日本語, emoji 😀.\n") * 40
LINE = transformers.__version__.split(".")[0] + ".x"


def train_run(folder: Path, steps: int, tokenizer: str = "bytes", lora: LoRAConfig | None = None,
              init: Path | None = None, untied: bool = False, seed: int = 0) -> MambaLM:
    """Train ``steps`` steps on TEXT into a run folder (engine.run, as the CLI and app do)."""
    from engine.run import RunSpec, load_model, start

    folder.parent.mkdir(parents=True, exist_ok=True)
    (folder.parent / "corpus.txt").write_text(TEXT, encoding="utf-8")
    model = {"d_model": 32, "n_layer": 2, "d_state": 8, "pad_vocab_size_multiple": 8}
    if untied:
        model["tie_embeddings"] = False
    spec = RunSpec(model=None if init else model, tokenizer=tokenizer, bpe_vocab=300,
                   init=str(init) if init else None, holdout=0.1,
                   train=TrainConfig(epochs=1, batch_size=4, seq_len=32, lr=1e-2, max_steps=steps,
                                     seed=seed, warmup_steps=0, lora=lora))
    with start(spec, [folder.parent / "corpus.txt"], out=folder) as run:
        run.train()
    return load_model(folder)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, tok, untied in (("byte", "bytes", False), ("bpe", "bpe", False),
                              ("untied", "bytes", True)):
        folder = tmp_path_factory.mktemp(name) / "run"
        train_run(folder, steps=40, tokenizer=tok, untied=untied)
        out[name] = folder
    return out


def model_folder(run: Path) -> Path:
    """The files transformers reads: the run's latest snapshot folder."""
    from engine import runformat as rf

    return rf.latest_snapshot(run)[0]


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
