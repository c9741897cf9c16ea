"""Which tensors a run updates. The trainer sees only this interface:

* ``tensors``       name -> array that AdamW updates in place
* ``effective()``   the parameter dict the model runs with
* ``grads(g)``      model gradients (every parameter) -> gradients of ``tensors``
* ``refresh()``     called after each optimizer step (LoRA re-merges its targets here)
* ``needs()``       the model parameters whose gradient must be computed (the rest are skipped)
* ``dropout_hooks(step, micro)``  linear hooks for one micro-batch (LoRA: dropout and the
  low-rank adapter gradients of frozen projections) or None
* ``state_tensors()`` / ``load_state_tensors(t)``  extra state a checkpoint or rollback must keep
* ``notices``       messages for the user (rank clamps, PEFT warnings)

``FullTrainable`` trains every parameter or a named subset (WSLA trains only each layer's x_proj);
``engine.lora.LoRATrainable`` trains low-rank adapters over a frozen base.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .model import LinearHooks
from .params import Params, decays, short_name


class Trainable(Protocol):
    tensors: Params
    notices: list[str]

    def effective(self) -> Params: ...
    def grads(self, model_grads: Params) -> Params: ...
    def refresh(self) -> None: ...
    def needs(self) -> list[str]: ...
    def dropout_hooks(self, step: int, micro: int) -> LinearHooks | None: ...
    def state_tensors(self) -> dict[str, np.ndarray]: ...
    def load_state_tensors(self, tensors: dict[str, np.ndarray]) -> None: ...
    def decays(self, name: str) -> bool: ...
    def describe(self) -> str: ...


class FullTrainable:
    """Train ``names`` of ``params`` directly (all of them by default)."""

    def __init__(self, params: Params, names: list[str] | None = None, label: str = "full") -> None:
        self.params = params
        self.tensors = {n: params[n] for n in (names if names is not None else list(params))}
        self.label = label
        self.notices: list[str] = []

    def effective(self) -> Params:
        return self.params

    def grads(self, model_grads: Params) -> Params:
        return {n: model_grads[n] for n in self.tensors}

    def needs(self) -> list[str]:
        return list(self.tensors)

    def refresh(self) -> None:
        return None

    def dropout_hooks(self, step: int, micro: int) -> LinearHooks | None:
        return None

    def state_tensors(self) -> dict[str, np.ndarray]:
        return {}  # everything lives in the weights and the optimizer

    def load_state_tensors(self, tensors: dict[str, np.ndarray]) -> None:
        return None

    def decays(self, name: str) -> bool:
        return bool(decays(name))

    def describe(self) -> str:
        n = sum(a.size for a in self.tensors.values())
        return f"{self.label}: {len(self.tensors)} tensors, {n:,} trainable parameters"


def wsla_names(params: Params) -> list[str]:
    """WSLA fast-adapt: every layer's x_proj (the delta, B and C rows), nothing else."""
    return [n for n in params if short_name(n) == "x_proj"]
