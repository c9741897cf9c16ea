"""What training reports: one ``StepReport`` per optimizer step, one ``EpochReport`` per epoch
(immutable, safe to hand to another thread), and the ETA text of progress displays."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .evaluation import EvalReport


@dataclass(frozen=True)
class StepReport:
    step: int  # optimizer steps done (1-based)
    epoch: int  # 0-based
    total_steps: int
    loss: float
    grad_norm: float  # pre-clip
    lr: float
    tokens_per_s: float
    eta_s: float  # seconds left (engine.eta: steps left x median recent step + time between steps)
    elapsed_s: float
    nonfinite: bool = False
    skipped_tensors: tuple[str, ...] = ()
    val_loss: float | None = None  # held-out loss: every ``eval_every`` steps, and the run's
    # last step when it ends mid-epoch (``max_steps``)


def format_duration(seconds: float) -> str:
    """ETA text for progress displays: "MM:SS", "H:MM:SS" from an hour on, "--:--" if unknown."""
    if not math.isfinite(seconds):
        return "--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    train_loss: float
    grad_norm: float
    val: EvalReport | None
    steps: int
    nonfinite_steps: int
