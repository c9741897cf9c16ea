"""The small training job shared by the distributed tests and their MPI worker."""

from __future__ import annotations

import numpy as np

from engine.lm import MambaLM
from engine.lora import LoRAConfig
from engine.trainer import TrainConfig, Trainer
from tests.helpers import tiny_config

STEPS = 20


def make_trainer(mode: str = "full", steps: int = STEPS) -> Trainer:
    """A tiny model on random tokens: global batch 8 rows = batch 4 x accum 2, shuffled rows."""
    cfg = tiny_config(vocab_size=24, d_model=16, n_layer=2)
    lm = MambaLM.create(cfg, seed=3)
    ids = np.random.default_rng(7).integers(0, cfg.vocab_size, size=16 * 8 * 12 + 1)
    lora = LoRAConfig(("in_proj", "x_proj"), rank=4) if mode == "lora" else None
    tc = TrainConfig(epochs=3, batch_size=4, grad_accum=2, seq_len=16, lr=1e-2, warmup_steps=2,
                     seed=5, max_steps=steps, lora=lora, wsla=mode == "wsla")
    return Trainer(lm, ids, ids[:200], tc)
