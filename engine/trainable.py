"""Which tensors a run updates. The trainer sees only this interface:

* ``tensors``       name -> array that AdamW updates in place
* ``effective()``   the parameter dict the model runs with
* ``grads(g)``      model gradients (every parameter) -> gradients of ``tensors``
* ``refresh()``     called after each optimizer step (LoRA re-merges its targets here)
* ``needs()``       the model parameters whose gradient must be computed (the rest are skipped)
* ``dropout_hooks(step, micro, part, first_row)``  linear hooks for one micro-batch, or for
  its rows from ``first_row`` on when it runs as two halves (``part`` 0 and 1, which gather
  their terms apart, so the halves may run at once in two threads: LoRA's dropout and
  low-rank adapter gradients of frozen projections) or None
* ``state_dict()`` / ``load_state_dict(d)``  ``{"tensors": {...}}``: extra state a snapshot or a
  rollback must keep beyond the model weights (LoRA: frozen base + adapters; full: nothing)
* ``notices``       messages for the user (rank clamps, PEFT warnings)

``FullTrainable`` trains every parameter or a named subset (WSLA trains only each layer's x_proj);
``engine.lora.LoRATrainable`` trains low-rank adapters over a frozen base. ``make_trainable``
picks one of them from a kind name, so the trainer never imports LoRA.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

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
    def dropout_hooks(self, step: int, micro: int, part: int = 0,
                      first_row: int = 0) -> LinearHooks | None: ...
    def state_tensors(self) -> dict[str, np.ndarray]: ...
    def load_state_tensors(self, tensors: dict[str, np.ndarray]) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...
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

    def dropout_hooks(self, step: int, micro: int, part: int = 0,
                      first_row: int = 0) -> LinearHooks | None:
        return None

    def state_tensors(self) -> dict[str, np.ndarray]:
        return {}  # everything lives in the weights and the optimizer

    def load_state_tensors(self, tensors: dict[str, np.ndarray]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"tensors": {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def decays(self, name: str) -> bool:
        return bool(decays(name))

    def describe(self) -> str:
        n = sum(a.size for a in self.tensors.values())
        return f"{self.label}: {len(self.tensors)} tensors, {n:,} trainable parameters"


WSLA_TARGETS = ("x_proj",)  # what WSLA trains, alone or under LoRA adapters


def wsla_names(params: Params) -> list[str]:
    """WSLA fast-adapt: every layer's x_proj (the delta, B and C rows), nothing else."""
    return [n for n in params if short_name(n) in WSLA_TARGETS]


TrainableKind = Literal["full", "wsla", "lora", "wsla+lora"]


def trainable_kind(wsla: bool, lora: Any) -> TrainableKind:
    """The kind name of a (wsla flag, LoRA config or None) pair."""
    if lora is not None:
        return "wsla+lora" if wsla else "lora"
    return "wsla" if wsla else "full"


def make_trainable(kind: TrainableKind, params: Params, lora: Any = None) -> Trainable:
    """The trainable for ``kind``: every parameter ("full"), each layer's x_proj ("wsla"), or
    LoRA adapters (``lora``: a ``LoRAConfig``; "wsla+lora" allows only the x_proj target)."""
    if kind in ("lora", "wsla+lora"):
        if lora is None:
            raise ValueError(f"trainable {kind!r} needs a LoRA config")
        if kind == "wsla+lora":
            bad = set(lora.targets) - set(WSLA_TARGETS)
            if bad:
                raise ValueError(f"WSLA + LoRA allows only the x_proj target, not {sorted(bad)}")
        from .lora import LoRATrainable  # LoRA is loaded only when a run asks for it

        return LoRATrainable(params, lora)
    if kind == "wsla":
        return FullTrainable(params, wsla_names(params), label="WSLA (x_proj)")
    if kind == "full":
        return FullTrainable(params)
    raise ValueError(f"unknown trainable kind {kind!r}; choose full, wsla, lora or wsla+lora")
