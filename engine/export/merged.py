"""Merged export: a plain HF ``MambaForCausalLM`` folder (any LoRA folded into the weights)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import checkpoint as ckpt
from .card import measure_held_out, write_card
from .source import check_out, open_source, staged_folder


def export_merged(src_folder: str | Path, out: str | Path, force: bool = False,
                  progress: Callable[[str], None] | None = None) -> list[str]:
    """Write ``out/`` = config.json, generation_config.json, model.safetensors (sharded when
    large), tokenizer files and README.md. Loads with ``AutoModelForCausalLM.from_pretrained(out)``
    on transformers 4.x and 5.x. ``out`` must be new or empty (``force``: replace an earlier
    export there). Returns notices (a parent folder created, a corrupt latest snapshot passed
    over for an older one, a held-out loss not measured). ``progress``: told as the card's
    held-out scoring starts."""
    notes = check_out(src_folder, out, force=force)
    run = open_source(src_folder)
    held = measure_held_out(run, progress=progress) if run.train else None
    with staged_folder(out, force) as tmp:
        ckpt.save_model_files(tmp, run.lm.config, run.lm.params, run.lm.tokenizer)
        write_card(tmp, run, kind="merged", held=held)
    return notes + run.notices + ([held.note] if held is not None and held.note else [])
