"""The small training job shared by the distributed tests and their MPI worker."""

from __future__ import annotations

import numpy as np

from engine.distributed import FlatBuffer, partition_rows
from engine.lm import MambaLM
from engine.lora import LoRAConfig
from engine.model import loss_and_grad
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


def ordered_reference(mode: str, size: int) -> Trainer:
    """One process doing what ``size`` ranks do, with the reduction in rank order
    (g_0 + g_1 + ...): each rank's rows accumulated on their own, then summed."""
    tr = make_trainer(mode)

    def step(rows):  # type: ignore[no-untyped-def]
        c = tr.cfg
        assert tr.trainable is not None
        tokens, targets, _ = tr.rows.batch(rows)
        n_valid = int(np.count_nonzero(targets >= 0))
        tr._last_tokens = n_valid
        names = list(tr.trainable.tensors)
        total = FlatBuffer.over(tr.trainable.tensors, names)
        part = FlatBuffer.over(tr.trainable.tensors, names)
        loss = 0.0
        for r in range(size):
            for g in tr._grads.values():
                g.fill(0.0)
            mine = partition_rows(len(rows), tr.cursor.step, c.seed, r, size)
            for s in range(0, len(mine), c.batch_size):
                mb = mine[s : s + c.batch_size]
                loss += loss_and_grad(tr.trainable.effective(), tokens[mb], targets[mb],
                                      tr.lm.config, tr._grads, 1.0 / n_valid)[0]
            part.pack(tr.trainable.grads(tr._grads))
            total.flat += part.flat
        stats = tr.optimizer.step(tr.trainable.tensors, total.views(), tr.current_lr())
        tr.trainable.refresh()
        return loss / n_valid, stats.grad_norm, False, ()

    tr.train_step = step  # type: ignore[method-assign]
    tr.run()
    return tr


