"""Which tensors a run updates. The trainer sees only this interface:

* ``tensors``       name -> array that AdamW updates in place
* ``effective()``   the parameter dict the model runs with
* ``grads(g)``      model gradients (every parameter) -> gradients of ``tensors``
* ``refresh()``     called after each optimizer step (LoRA re-merges its targets here)
* ``needs()``       the model parameters whose gradient must be computed (the rest are skipped)

``FullTrainable`` trains every parameter or a named subset (WSLA trains only each layer's x_proj);
``engine.lora.LoRATrainable`` trains low-rank adapters over a frozen base.
"""

from __future__ import annotations

from typing import Protocol

from .params import Params, short_name


class Trainable(Protocol):
    tensors: Params

    def effective(self) -> Params: ...
    def grads(self, model_grads: Params) -> Params: ...
    def refresh(self) -> None: ...
    def needs(self) -> list[str]: ...
    def decays(self, name: str) -> bool: ...
    def describe(self) -> str: ...


class FullTrainable:
    """Train ``names`` of ``params`` directly (all of them by default)."""

    def __init__(self, params: Params, names: list[str] | None = None, label: str = "full") -> None:
        from .params import decays

        self.params = params
        self.tensors = {n: params[n] for n in (names if names is not None else list(params))}
        self._decays = decays
        self.label = label

    def effective(self) -> Params:
        return self.params

    def grads(self, model_grads: Params) -> Params:
        return {n: model_grads[n] for n in self.tensors}

    def needs(self) -> list[str]:
        return list(self.tensors)

    def refresh(self) -> None:
        return None

    def decays(self, name: str) -> bool:
        return bool(self._decays(name))

    def describe(self) -> str:
        n = sum(a.size for a in self.tensors.values())
        return f"{self.label}: {len(self.tensors)} tensors, {n:,} trainable parameters"


def wsla_names(params: Params) -> list[str]:
    """WSLA fast-adapt: every layer's x_proj (the delta, B and C rows), nothing else."""
    return [n for n in params if short_name(n) == "x_proj"]
