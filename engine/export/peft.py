"""PEFT export: the adapter (``adapter_config.json`` + ``adapter_model.safetensors``) with
``base_model_name_or_path`` pointing at ``out/base``, the UNMERGED base we also write (the run
folder itself holds the merged weights; applying the adapter to it would apply it twice).

``PEFT_SUPPORT`` is measured (peft 0.21.2 on transformers 5.24 and 4.57), not assumed: for each
LoRA target, what PEFT does with our adapter un-merged (``PeftModel.from_pretrained``) on each
transformers line. The interop suite (tests/interop/test_peft.py) re-measures every entry
against our LoRA forward and fails when the table is wrong.
    "exact"    the adapter is applied; logits equal ours
    "bypassed" PEFT wraps the module but the model never calls it: logits are the base model's
    "partial"  the input embeddings are adapted, the tied output head is not
    "refused"  PEFT raises when the target is requested
    "dropped"  PEFT silently leaves it out when other targets are present (raises when alone)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import checkpoint as ckpt
from ..errors import CheckpointError
from ..safeio import resolved
from .card import measure_held_out, write_card
from .source import check_out, open_source, staged_folder

LINES = ("5.x", "4.x")
PEFT_SUPPORT: dict[str, dict[str, str]] = {
    "in_proj": {"5.x": "exact", "4.x": "exact"},
    "x_proj": {"5.x": "exact", "4.x": "exact"},
    "dt_proj": {"5.x": "bypassed", "4.x": "exact"},  # 5.x reads dt_proj.weight directly
    "out_proj": {"5.x": "refused", "4.x": "refused"},
    "conv1d": {"5.x": "refused", "4.x": "refused"},
    "A_log": {"5.x": "dropped", "4.x": "dropped"},
    "embeddings": {"5.x": "partial", "4.x": "partial"},
}


def peft_notices(targets: list[str] | tuple[str, ...]) -> list[str]:
    """One line per target PEFT does not apply exactly on every transformers line."""
    out = []
    for t in sorted(set(targets)):
        row = PEFT_SUPPORT[t]
        if all(row[line] == "exact" for line in LINES):
            continue
        where = ", ".join(f"transformers {line}: {row[line]}" for line in LINES)
        out.append(f"PEFT un-merged LoRA on {t}: {where}; share the merged export for an exact model")
    return out


def peft_refused(targets: list[str] | tuple[str, ...]) -> list[str]:
    """The LoRA targets (sorted) that no transformers line applies exactly un-merged: a run
    adapting any of them has no PEFT export (only the merged one)."""
    return [t for t in sorted(set(targets))
            if not any(PEFT_SUPPORT[t][line] == "exact" for line in LINES)]


def export_peft(src_folder: str | Path, out: str | Path, force: bool = False,
                progress: Callable[[str], None] | None = None) -> list[str]:
    """Write the PEFT adapter of a LoRA run to ``out/`` and its unmerged base to ``out/base/``.

    Refuses (CheckpointError) a run without LoRA, and one with a target that no transformers line
    applies exactly (the adapter would load and silently compute another model). Returns the
    per-target notices for targets exact on one line only (and a parent folder created, a corrupt
    latest snapshot passed over, a held-out loss not measured). ``out``
    must be new or empty (``force``: replace an earlier export there)."""
    notes = check_out(src_folder, out, force=force)
    run = open_source(src_folder)
    if run.lora is None and (Path(src_folder) / "adapter_config.json").is_file():
        raise CheckpointError(  # (it said "not a LoRA run" of a LoRA adapter's folder)
            f"{src_folder}: already a PEFT adapter export (it loads as it is); copy the folder "
            "to share it, or give it to the merged export for one model folder")
    if run.lora is None and run.state_problem is not None and run.train.get("lora"):
        raise CheckpointError(f"{src_folder}: its LoRA adapters are kept in its training state, "
                              f"which is damaged ({run.state_problem}); export --merged "
                              "still writes its weights")
    if run.lora is None:
        raise CheckpointError(
            f"{src_folder}: not a LoRA run (no adapters to export); use the merged export")
    targets = sorted(run.lora.cfg.targets)
    if broken := peft_refused(targets):
        raise CheckpointError(
            f"{src_folder}: PEFT does not apply LoRA on {broken} un-merged (" + "; ".join(
                f"{t}: " + ", ".join(f"{line} {PEFT_SUPPORT[t][line]}" for line in LINES)
                for t in broken) + "); use the merged export (python -m engine export --merged)")
    held = measure_held_out(run, progress=progress)
    final_base = resolved(Path(out) / "base")  # where base/ will be once published
    with staged_folder(out, force) as tmp:
        base = tmp / "base"
        lm = run.lm
        ckpt.save_model_files(base, lm.config, run.lora.params, lm.tokenizer)
        write_card(base, run, kind="base")
        run.lora.save_adapter(tmp, base_model=str(final_base))
        for name in ckpt.TOKENIZER_FILES:
            ckpt.atomic_write_bytes(tmp / name, (base / name).read_bytes())
        write_card(tmp, run, kind="peft", held=held, caveats=peft_notices(targets))
    return notes + run.notices + ([held.note] if held.note else []) + peft_notices(targets)
