"""A snapshot's training state, written, read and checked here alone.

``trainer.json`` (``SNAP_TRAINER``): the trainer's cursor (``CURSOR_COUNTS`` and
``CURSOR_SUMS``), its learning-rate scale, its epoch reports, the optimizer's step count, the
evaluations without improvement of early stopping (``early_bad``), and ``eval_stopped`` when the
step's evaluation was cut short by a stop. ``state.safetensors`` (``SNAP_STATE``): the optimizer's
tensors under ``optimizer.``, the trainable set's (a LoRA's adapters and base, WSLA's frozen
copy) under ``trainable.``. ``write_snapshot`` adds the step, the held-out loss and the files'
manifest to trainer.json.
"""

from __future__ import annotations

from typing import Any

import numpy as np

OPTIMIZER = "optimizer."  # prefixes of state.safetensors' tensor names
TRAINABLE = "trainable."
CURSOR_COUNTS = ("step", "epoch", "group", "good", "steps")  # trainer._Cursor's fields, which a
CURSOR_SUMS = ("loss_sum", "norm_sum")  # snapshot's trainer.json keeps (a test ties the two)


def pack(state: dict[str, Any], early_bad: int, eval_stopped: bool
         ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``Trainer.state_dict()`` as a snapshot keeps it: (state.safetensors' tensors, trainer.json's
    fields)."""
    tensors = {f"{OPTIMIZER}{k}": v for k, v in state["optimizer"]["tensors"].items()}
    tensors.update({f"{TRAINABLE}{k}": v for k, v in state["trainable"]["tensors"].items()})
    meta = {"cursor": state["cursor"], "lr_scale": state["lr_scale"], "epochs": state["epochs"],
            "early_bad": early_bad,  # evaluations since the best (early stopping)
            "optimizer_t": state["optimizer"]["t"]}
    if eval_stopped:  # the step's evaluation was cut short by a stop: the resume measures it
        meta["eval_stopped"] = True
    return tensors, meta


def unpack(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, Any]:
    """The ``Trainer.load_state_dict`` argument of a snapshot's trainer.json and tensors (``pack``
    undone)."""
    return {"cursor": meta["cursor"], "lr_scale": meta["lr_scale"], "epochs": meta["epochs"],
            "optimizer": {"t": meta["optimizer_t"], "tensors": prefixed(tensors, OPTIMIZER)},
            "trainable": {"tensors": prefixed(tensors, TRAINABLE)}}


def prefixed(tensors: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The tensors named ``prefix...``, without it."""
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def early_bad(meta: dict[str, Any]) -> int:
    """Early stopping's evaluations without improvement (0 for a snapshot from before it)."""
    bad = meta.get("early_bad", 0)
    return bad if type(bad) is int and bad >= 0 else 0


def epochs_done(meta: Any) -> int:
    """Epochs completed (its epoch reports); 0 when unreadable."""
    epochs = meta.get("epochs", []) if isinstance(meta, dict) else []
    return len(epochs) if isinstance(epochs, list) else 0


def last_epoch_eval(epochs: Any) -> tuple[dict[str, Any] | None, int | None]:
    """The last epoch's held-out evaluation and the step it was measured at (the end of that
    epoch: the steps of every epoch up to it); (None, None) if no epoch has one."""
    last: tuple[dict[str, Any] | None, int | None] = (None, None)
    step = 0
    for e in epochs if isinstance(epochs, list) else []:
        if not isinstance(e, dict):
            continue
        try:
            step += int(e.get("steps", 0))
        except (TypeError, ValueError):
            return last[0], None
        if e.get("val"):
            last = (e["val"], step)
    return last


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def problem(t: Any) -> str | None:
    """What makes a snapshot's trainer.json unusable for a resume, or None: the fields
    ``Trainer.load_state_dict`` reads, with their types and ranges (a missing ``lr_scale``
    was a KeyError traceback; a step of -5 resumed "at step -5")."""
    if not isinstance(t, dict):
        return "not a JSON object"
    cur = t.get("cursor")
    if not isinstance(cur, dict):
        return "no cursor"
    for k in CURSOR_COUNTS:
        if not _count(cur.get(k)):
            return f"cursor.{k} is {cur.get(k)!r:.40}, not a count"
    for k in CURSOR_SUMS:
        if type(cur.get(k)) not in (int, float):
            return f"cursor.{k} is {cur.get(k)!r:.40}, not a number"
    if set(cur) - {*CURSOR_COUNTS, *CURSOR_SUMS}:
        return f"cursor holds unknown keys {sorted(set(cur))}"
    scale = t.get("lr_scale")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale <= 1:
        return f"lr_scale is {scale!r:.40}, not a number in (0, 1]"
    if not _count(t.get("optimizer_t")) or not isinstance(t.get("epochs"), list):
        return "optimizer_t or epochs missing or of the wrong type"
    if t.get("step") != cur["step"]:
        return f"step {t.get('step')!r:.40} differs from cursor.step {cur['step']}"
    return None
