"""TensorBoard event files for a run (``tensorboard --logdir runs/``), written by tensorboardX.

Scalars: ``loss/train`` and ``loss/heldout`` in nats per token, ``bpb/*`` in bits per byte,
``grad_norm``, ``lr`` and ``tokens_per_s``, all against the optimizer step. tensorboardX is imported
when a logger is made, never at engine import."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .runformat import TB as TB_DIR


class TBLogger:
    def __init__(self, folder: str | Path, tokens_per_byte: float = 1.0) -> None:
        from tensorboardX import SummaryWriter

        self.tokens_per_byte = tokens_per_byte
        self.writer: Any = SummaryWriter(logdir=str(Path(folder) / TB_DIR), flush_secs=5)

    def _bpb(self, nats: float) -> float:
        return nats * self.tokens_per_byte / math.log(2)

    def step(self, step: int, loss: float, grad_norm: float, lr: float, tokens_per_s: float) -> None:
        if not math.isfinite(loss):
            return
        w = self.writer
        w.add_scalar("loss/train", loss, step)
        w.add_scalar("bpb/train", self._bpb(loss), step)
        w.add_scalar("grad_norm", grad_norm, step)
        w.add_scalar("lr", lr, step)
        w.add_scalar("tokens_per_s", tokens_per_s, step)

    def eval(self, step: int, val_loss: float) -> None:
        if math.isfinite(val_loss):
            self.writer.add_scalar("loss/heldout", val_loss, step)
            self.writer.add_scalar("bpb/heldout", self._bpb(val_loss), step)

    def close(self) -> None:
        self.writer.close()
