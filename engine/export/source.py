"""Reading a run folder for export: the model as trained, its training state (if any) and, for a
LoRA run, the adapters over the exact unmerged base."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..errors import CheckpointError
from ..lm import MambaLM
from ..lora import LoRAConfig, LoRATrainable


@dataclass
class RunSource:
    folder: Path
    lm: MambaLM  # the weights as trained (LoRA merged in)
    state: dict[str, Any] | None  # trainer_state.json; None for a bare model folder
    lora: LoRATrainable | None  # adapters + the unmerged base (``lora.base``); None without LoRA


def open_run(folder: str | Path) -> RunSource:
    """Load ``folder``; a training checkpoint's file hashes are verified first, so a half-written
    or mixed checkpoint is refused instead of exported."""
    from ..limits import read_trainer_state

    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder; pass a run folder (with config.json)")
    state = None
    if (folder / "trainer_state.json").exists():
        state = read_trainer_state(folder)
        ckpt.verify_hashes(folder, state["files"])
    lm = MambaLM.load(folder)
    lm.check_finite(folder)
    lora = None
    lora_cfg = (state or {}).get("train_config", {}).get("lora")
    if lora_cfg is not None:
        tensors = ckpt.read_tensors(folder / "optimizer.safetensors")
        params = {k: v.copy() for k, v in lm.params.items()}
        lora = LoRATrainable(params, LoRAConfig.from_dict(lora_cfg))
        lora.load_state_tensors(tensors)  # base from the state, adapters applied (merged)
        lora.unmerge()  # lora.params now holds the exact base the adapters were trained on
    return RunSource(folder, lm, state, lora)
