"""The old single-folder training checkpoint (``trainer_state.json`` beside the model files),
read only: its weights load (``engine.run.load_model``) and export after every file is checked
against the digests it lists; a run cannot resume from it (``engine.runformat`` holds the run
folder that replaced it, which is crash-safe).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from .errors import CheckpointError, MambaStudioError
from .limits import ConfigError, _int, check_train
from .safeio import read_json

TRAINER_STATE_KEYS = {"step": int, "epoch": int, "group": int, "optimizer_t": int,
                      "train_config": dict, "files": dict}
REQUIRED_FILES = ("config.json", "model.safetensors", "optimizer.safetensors")


def check_trainer_state(state: Any, source: str = "trainer_state.json") -> dict[str, Any]:
    """Types of a ``trainer_state.json`` before anything trusts it: the cursor fields are
    non-negative ints, ``train_config`` names only TrainConfig fields (and passes ``check_train``),
    ``files`` maps the checkpoint's own files (at least config.json, model.safetensors and
    optimizer.safetensors: an empty map would disable the integrity check) to sha256 digests, and
    history/epochs are lists. Returns ``state``."""
    from .lora import LoRAConfig
    from .trainer import TrainConfig

    if not isinstance(state, dict):
        raise ConfigError(f"{source}: expected a JSON object, got a JSON {type(state).__name__}")
    for key, typ in TRAINER_STATE_KEYS.items():
        if key not in state:
            raise ConfigError(f"{source}: has no {key!r} (not a complete training checkpoint)")
        value = state[key]
        if typ is int:
            _int(value, key, 0, 1 << 62, source)
        elif not isinstance(value, typ):
            raise ConfigError(f"{source}: {key!r} must be a JSON object")
    files = state["files"]
    missing = [n for n in REQUIRED_FILES if n not in files]
    if missing:
        raise ConfigError(f"{source}: 'files' lacks {missing}; the checkpoint cannot be verified")
    for name, digest in files.items():
        if not isinstance(digest, str) or len(digest) != 64 or not all(
                ch in "0123456789abcdef" for ch in digest):
            raise ConfigError(f"{source}: 'files' entry {name!r:.80} has no sha256 digest")
    for key in ("history", "epochs"):
        if key in state and not isinstance(state[key], list):
            raise ConfigError(f"{source}: {key!r} must be a JSON list")
    tc = dict(state["train_config"])
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(tc) - known)
    if unknown:
        raise ConfigError(f"{source}: train_config has unknown settings {unknown[:5]}")
    try:
        lora = tc.pop("lora", None)
        if lora is not None:
            if not isinstance(lora, dict) or not isinstance(lora.get("targets"), list):
                raise ConfigError(f"{source}: train_config.lora is not a LoRA setting")
            tc["lora"] = LoRAConfig.from_dict(lora)
        check_train(TrainConfig(**tc), source)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: unusable train_config ({exc})") from None
    return state


def read_trainer_state(folder: str | Path) -> dict[str, Any]:
    """Bounded read + ``check_trainer_state`` of ``folder/trainer_state.json``."""
    path = Path(folder) / "trainer_state.json"
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{folder}: no trainer_state.json (not a training checkpoint)")
    try:
        return check_trainer_state(read_json(path, what="trainer_state.json"), str(path))
    except MambaStudioError as exc:
        raise CheckpointError(str(exc)) from None
