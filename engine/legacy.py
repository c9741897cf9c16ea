"""The old single-folder training checkpoint (``trainer_state.json`` beside the model files).

Kept only so that code not yet moved to ``engine.run`` keeps working; it is not crash-safe (see
``engine.runformat`` for the run folder that replaced it). Run folders cannot resume from it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import checkpoint as ckpt
from .errors import CheckpointError
from .limits import read_trainer_state
from .lm import MambaLM

if TYPE_CHECKING:
    from .trainer import TrainConfig, Trainer


def _fingerprint(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def save_trainer(tr: Trainer, folder: Path) -> Path:
    """Write weights + optimizer + cursor into ``folder`` (each file atomic, the folder not)."""
    hashes = tr.lm.save(folder)
    assert tr.trainable is not None
    extra = {**tr.optimizer.state_tensors(), **tr.trainable.state_tensors()}
    ckpt.atomic_write_tensors(folder / "optimizer.safetensors", extra)
    hashes["optimizer.safetensors"] = ckpt.sha256_file(folder / "optimizer.safetensors")
    state = {
        "format": "mamba-studio-trainer/1",
        "step": tr.cursor.step,
        "epoch": tr.cursor.epoch,
        "group": tr.cursor.group,
        "cursor": asdict(tr.cursor),
        "optimizer_t": tr.optimizer.t,
        "train_config": tr.cfg.to_dict(),
        "data_fingerprint": _fingerprint(tr.train_ids),
        "history": [asdict(h) for h in tr.history[-5000:]],
        "epochs": [asdict(e) for e in tr.epochs],
        "files": hashes,
    }
    ckpt.atomic_write_json(folder / "trainer_state.json", state)
    return folder


def load_trainer_state(tr: Trainer, folder: Path, strict_data: bool = True) -> None:
    from .trainer import EpochReport, EvalReport, StepReport, _Cursor

    state = read_trainer_state(folder)  # bounded read, types checked
    ckpt.verify_hashes(folder, state["files"])
    if strict_data and state.get("data_fingerprint") != _fingerprint(tr.train_ids):
        raise CheckpointError(
            f"{folder}: the checkpoint was trained on different data; resume with the same "
            "corpus and tokenizer (or start a new run from these weights)"
        )
    tensors = ckpt.read_tensors(folder / "optimizer.safetensors")
    assert tr.trainable is not None
    tr.trainable.load_state_tensors(tensors)
    try:
        tr.optimizer.load_state_tensors(tensors, state["optimizer_t"])
    except ValueError as exc:
        raise CheckpointError(f"{folder}: {exc}") from exc
    try:
        cur = state.get("cursor")
        tr.cursor = (_Cursor(**cur) if isinstance(cur, dict)
                     else _Cursor(state["step"], state["epoch"], state["group"]))
        tr.history = [StepReport(**{**h, "skipped_tensors": tuple(h["skipped_tensors"])})
                      for h in state.get("history", [])]
        tr.epochs = [EpochReport(**{**e, "val": EvalReport(**e["val"]) if e["val"] else None})
                     for e in state.get("epochs", [])]
    except (TypeError, KeyError, ValueError) as exc:
        raise CheckpointError(f"{folder}: trainer_state.json has a corrupt history ({exc})") from None
    if not isinstance(cur, dict):  # written before the cursor kept the epoch's sums
        mine = [h for h in tr.history if h.epoch == tr.cursor.epoch and not h.nonfinite]
        tr.cursor.loss_sum = float(sum(h.loss for h in mine))
        tr.cursor.norm_sum = float(sum(h.grad_norm for h in mine))
        tr.cursor.good = len(mine)
        tr.cursor.steps = len([h for h in tr.history if h.epoch == tr.cursor.epoch])


def resume_trainer(cls: type[Trainer], folder: Path, train_ids: np.ndarray, val_ids: np.ndarray,
                   cfg: TrainConfig | None = None, **overrides: Any) -> Trainer:
    from .trainer import TrainConfig

    state = read_trainer_state(folder)
    cfg = replace(cfg or TrainConfig.from_dict(state["train_config"]), **overrides)
    lm = MambaLM.load(folder)
    if cfg.lora is not None:
        base = ckpt.read_tensors(folder / "optimizer.safetensors")
        lm.params.update({k[len("lora_base."):]: v for k, v in base.items()
                          if k.startswith("lora_base.")})
    tr = cls(lm, train_ids, val_ids, cfg)
    load_trainer_state(tr, folder)
    return tr
