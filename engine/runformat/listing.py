"""The runs under a runs root, as the window's Runs list shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError
from ..units import bits_per_byte
from .data_files import read_tokens_per_byte
from .metrics_file import read_status
from .names import RUN_JSON
from .out_folder import prepared_only
from .removal import swap_cut_short
from .run_file import init_described, read_run_json
from .run_lock import RunLock
from .snapshot_dirs import best_pointer, expected_snapshot


@dataclass(frozen=True)
class RunInfo:
    path: Path
    name: str
    created: str
    preset: str  # its preset, "custom" or "opened weights" (", LoRA r8" / ", WSLA")
    steps: int
    best_val_loss: float | None
    status: str  # running | paused | stopped | early-stopped | finished | diverged |
    # interrupted | broken
    error: str | None = None
    source: str = ""  # where a run from a model started ("from RUN/snapshots/step-N (step N)")
    bits_per_byte: float | None = None  # best_val_loss in bits per corpus byte, which compares
    # runs of different tokenizers (nats/token do not); None when its data cannot be read


def model_label(spec: dict) -> str:
    """The Runs list's model column: "custom", the preset, or "opened weights" for a run from
    opened weights, then what it trained of them ("opened weights, LoRA r8", "small, WSLA":
    LoRA and WSLA runs read alike as "opened weights", and on a new model as just "small")."""
    base = ("custom" if spec.get("model") else "opened weights" if spec.get("init")
            else str(spec.get("preset", "")))  # (a run of its own sizes or from opened weights
    train = spec.get("train")  # records the default preset, unused: it was listed as "small")
    train = train if isinstance(train, dict) else {}
    lora = train.get("lora")
    if isinstance(lora, dict):
        rank = lora.get("rank")
        return f"{base}, LoRA r{rank}" if isinstance(rank, int) else f"{base}, LoRA"
    return f"{base}, WSLA" if train.get("wsla") is True else base


SWAP_CUT = ("a train --force was cut short while it swapped its new run in (both runs are on "
            "disk); `python -m engine train --resume` of this folder finishes the swap")
UNFINISHED = ("killed while it was being prepared, before its first save: nothing of it can be "
              "resumed; delete it, or start the run again")


def list_runs(root: str | Path) -> list[RunInfo]:
    """Every run folder directly under ``root``, newest first (unreadable ones as "broken")."""
    root = Path(root)
    out: list[RunInfo] = []
    if not root.is_dir():
        return out
    for p in root.iterdir():
        if not (p / RUN_JSON).exists():
            if swap_cut_short(p) and not p.is_symlink():  # (said "killed while prepared")
                out.append(RunInfo(p, p.name, "", "", 0, None, "broken", SWAP_CUT))
            elif prepared_only(p) and not p.is_symlink() and not RunLock(p).held_elsewhere():
                out.append(RunInfo(p, p.name, "", "", 0, None, "broken", UNFINISHED))  # (a kill
                # before its first save left it unlisted: never seen, never deleted, its data kept)
            continue
        try:
            d = read_run_json(p)
        except CheckpointError as exc:
            out.append(RunInfo(p, p.name, "", "", 0, None, "broken", str(exc)))
            continue
        st = read_status(p)
        state = str(st.get("state", "interrupted"))  # no status.json: killed after its step-0
        # save, before training wrote one (it was listed "stopped", as if stopped by hand)
        if RunLock(p).held_elsewhere():  # a live writer: opened, training or saving right now
            state = "paused" if state == "paused" else "running"  # (status.json says "running"
            # only once its first step starts)
        elif state in ("running", "paused"):
            state = "interrupted"
        elif state == "stopped" and st.get("reason"):  # by its early stopping, not by hand
            state = "early-stopped"
        kept = expected_snapshot(p)  # (latest.json's step said 165 of a run whose step-165
        best = best_pointer(p)  # was gone: Continue and Open took step 154)
        spec = d["spec"]  # a run of its own sizes, or from opened weights, records the default
        model = model_label(spec)
        val = best.get("val_loss") if best else None
        tpb = read_tokens_per_byte(p) if val is not None else None
        out.append(RunInfo(
            p, p.name, str(d.get("created", "")), model,  # the folder's name (run.json's
            # stayed after a rename, and a copy showed two rows of one name)
            kept[1] if kept else 0, val, state, source=init_described(d.get("init_from")),
            bits_per_byte=bits_per_byte(val, tpb) if val is not None and tpb else None))
    return sorted(out, key=lambda r: (r.created, r.name), reverse=True)
