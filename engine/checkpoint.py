"""Checkpoints: safetensors weights with Hugging Face ``MambaForCausalLM`` key names, a
``config.json`` that HF ``MambaConfig`` accepts, the tokenizer, and (for training checkpoints)
optimizer moments + trainer state.

Folder layout:
    config.json                 HF config (+ "mamba_studio" block)
    model.safetensors           backbone.* tensors, float32; lm_head omitted (tied)
    tokenizer.json
    optimizer.safetensors       exp_avg.<name>, exp_avg_sq.<name>      (training checkpoints)
    trainer_state.json          step, epoch, cursor, configs, sha256 of every file above (written last)
Every file is written to a temp file in the same folder, fsync'ed, then renamed over the old one;
``trainer_state.json`` goes last and records the hash of each file, so a half-written checkpoint is
detected on load instead of being silently mixed with an older one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .config import MambaConfig
from .errors import CheckpointError, MambaStudioError
from .params import Params, param_shapes

LM_HEAD = "lm_head.weight"
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; on failure (disk full...) the old file is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CheckpointError(f"could not write {path}: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tensors_to_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> bytes:
    from safetensors.numpy import save

    return bytes(save({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata=metadata))


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    if not Path(path).exists():
        raise CheckpointError(f"{path}: file not found")
    from .safeio import UnsafeFileError, check_regular

    try:
        check_regular(path, "safetensors file")  # a FIFO or device is refused before opening
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    try:
        return load_file(str(path))
    except TypeError as exc:  # e.g. "data type 'bfloat16' not understood" (NumPy has no bf16)
        raise CheckpointError(
            f"{path}: unsupported tensor dtype ({exc}); convert the weights to float32 or float16"
        ) from exc
    except Exception as exc:  # SafetensorError is a plain Exception subclass
        raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({exc})") from exc


def check_params(tensors: dict[str, np.ndarray], cfg: MambaConfig, source: str) -> Params:
    """Validate names/shapes against ``cfg``; tolerate an absent or tied lm_head."""
    shapes = param_shapes(cfg)
    out: Params = {}
    for name, shape in shapes.items():
        alt = name.replace("backbone.embeddings.", "backbone.embedding.")
        a = tensors.get(name, tensors.get(alt))
        if a is None:
            raise CheckpointError(f"{source}: tensor {name} is missing (expected shape {shape})")
        if tuple(a.shape) != shape:
            raise CheckpointError(
                f"{source}: tensor {name} has shape {tuple(a.shape)}, the config needs {shape}"
            )
        if a.dtype.kind != "f":
            raise CheckpointError(f"{source}: tensor {name} has dtype {a.dtype}, expected float")
        out[name] = np.ascontiguousarray(a, dtype=np.float32)
    if LM_HEAD in tensors and tensors[LM_HEAD].shape != shapes["backbone.embeddings.weight"]:
        raise CheckpointError(f"{source}: {LM_HEAD} shape {tensors[LM_HEAD].shape} does not match")
    extra = sorted(set(tensors) - set(shapes) - {LM_HEAD, "backbone.embedding.weight"})
    if extra:
        raise CheckpointError(f"{source}: unexpected tensors {extra[:5]} (not a Mamba-1 checkpoint?)")
    return out


def save_model_files(  # type: ignore[no-untyped-def]
    folder: Path, cfg: MambaConfig, params: Params, tokenizer, extra: dict | None = None
) -> dict[str, str]:
    """Write config.json, model.safetensors, tokenizer.json atomically; return their sha256."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hf = cfg.to_hf_dict()
    hf["mamba_studio"] = {"tokenizer": tokenizer.kind, **(extra or {})}
    atomic_write_json(folder / "config.json", hf)
    atomic_write_bytes(
        folder / "model.safetensors",
        tensors_to_bytes(dict(params), metadata={"format": "np", "config": json.dumps(cfg.to_dict())}),
    )
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        tokenizer.save(Path(tmp))
        atomic_write_bytes(folder / "tokenizer.json", (Path(tmp) / "tokenizer.json").read_bytes())
    return {n: sha256_file(folder / n) for n in ("config.json", "model.safetensors", "tokenizer.json")}


def read_config(folder: Path) -> MambaConfig:
    path = Path(folder) / "config.json"
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{folder}: no config.json (not a model folder)")
    from .limits import check_hf_config
    from .safeio import read_json

    try:
        d = read_json(path, what="config.json")  # bounded; a FIFO/device is refused
        check_hf_config(d, str(path))  # types and ranges before any shape is built
        return MambaConfig.from_hf_dict(d)
    except MambaStudioError as exc:
        raise CheckpointError(str(exc)) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unusable config ({exc})") from exc


def find_weights(folder: Path) -> Path:
    for name in ("model.safetensors", "adapter_model.safetensors"):
        if (Path(folder) / name).exists():
            return Path(folder) / name
    if (Path(folder) / "pytorch_model.bin").exists():
        raise CheckpointError(f"{folder}: only pytorch_model.bin found; convert it to safetensors")
    raise CheckpointError(f"{folder}: no model.safetensors")


def load_model_files(folder: Path) -> tuple[MambaConfig, Params]:
    folder = Path(folder)
    cfg = read_config(folder)
    path = find_weights(folder)
    return cfg, check_params(read_tensors(path), cfg, str(path))


def verify_hashes(folder: Path, hashes: dict[str, str]) -> None:
    from .safeio import UnsafeFileError, check_regular, inside

    if not hashes:
        raise CheckpointError(f"{folder}: trainer_state.json lists no files; cannot verify the checkpoint")
    for name, digest in hashes.items():
        try:
            p = inside(folder, name)  # a name from the folder's own state never leads outside it
            if p.exists():
                check_regular(p, "checkpoint file")  # a FIFO or device would hang the hash
        except UnsafeFileError as exc:
            raise CheckpointError(str(exc)) from None
        if not p.exists():
            raise CheckpointError(f"{p}: missing (the checkpoint is incomplete)")
        if sha256_file(p) != digest:
            raise CheckpointError(
                f"{p}: contents do not match trainer_state.json (corrupt or from another save)"
            )
