"""Names of a run folder's files and the small primitives every part of the format uses: atomic
JSON writes, folder fsyncs, the names of snapshot folders and of temporary files.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..errors import CheckpointError, MambaStudioError
from ..safeio import read_json
from ..samples import SAMPLES

FORMAT = "mamba-studio-run"
VERSION = 1
RUN_JSON = "run.json"
DATA = "data"
IDS = "data/ids.npy"
DATA_MANIFEST = "data/manifest.json"
SNAPSHOTS = "snapshots"
LATEST = "latest.json"
BEST = "best.json"
METRICS = "metrics.csv"
STATUS = "status.json"
METRICS_LIMIT = 1 << 30  # ~7 million steps of metrics.csv rows
LOCK = "lock"
TB = "tb"
# a ``--force`` start writes the new run into REPLACING, then swaps it for the old run, whose
# entries wait in REPLACED until they are deleted (a crash while preparing kept neither run)
REPLACING = ".replacing"
REPLACING_IN = ".replacing-in"  # the stage once the old run's entries are all out (``swap_in``)
REPLACED = ".replaced"
STAGES = (REPLACING, REPLACING_IN, REPLACED)  # what a killed `train --force` can leave
# (samples.jsonl was missing: --force refused a run with samples as holding a user's file)
RUN_ENTRIES = frozenset({RUN_JSON, DATA, SNAPSHOTS, LATEST, BEST, METRICS, STATUS, LOCK, TB,
                         SAMPLES, *STAGES})
SNAP_STATE = "state.safetensors"
SNAP_TRAINER = "trainer.json"
SNAP_MANIFEST = "manifest.json"
# the files every snapshot's manifest names (each is read by a load); tokenizer files when there
SNAP_NEEDS = frozenset({SNAP_TRAINER, SNAP_STATE, ckpt.SINGLE, "config.json"})
TMP_PREFIX = ".tmp-"
KEEP = 3  # most recent snapshots kept (plus the best by held-out loss)
SLOW_SAVE_ENV = "MAMBA_STUDIO_SLOW_SAVE"  # seconds slept between the files of a save (crash tests)
METRIC_FIELDS = ("kind", "step", "epoch", "loss", "grad_norm", "lr", "tokens_per_s", "val_loss",
                 "elapsed_s")


def fsync_dir(path: Path) -> None:
    """Make a rename/creation inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json(path: Path, obj: Any) -> None:
    """Atomically replace ``path`` with ``obj`` as JSON and fsync its folder."""
    ckpt.atomic_write_json(path, obj, make_parents=False)  # (a run folder is never re-made)
    fsync_dir(path.parent)


def read_entry(path: Path, what: str) -> Any:
    try:
        return read_json(path, what=what)
    except MambaStudioError as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None


def slow_save() -> None:
    """Test hook: ``MAMBA_STUDIO_SLOW_SAVE=seconds`` widens the window a crash can land in."""
    delay = os.environ.get(SLOW_SAVE_ENV)
    if delay:
        time.sleep(float(delay))


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


_TEMP = re.compile(r"\.(.+\.[0-9a-f]{12}|write-test-[0-9]+)\.tmp")


def is_temp(name: str) -> bool:
    """A temporary file name of ``checkpoint.create_temp`` (".<name>.<12 hex>.tmp") or of the
    writability probe (".write-test-<pid>.tmp"): what the cleanups may delete (any hidden
    ``*.tmp`` was, a user's ".notes.tmp" in a run folder too)."""
    return _TEMP.fullmatch(name) is not None


DAMAGED = ".damaged"  # a snapshot a resume passed over, kept under step-N.damaged


def set_aside_step(name: str) -> int | None:
    """N of a snapshot a resume set aside, ``step-N.damaged`` or ``step-N.damaged-K``."""
    m = re.fullmatch(rf"(step-[0-9]+){re.escape(DAMAGED)}(-[0-9]+)?", name)
    return snapshot_step(m.group(1)) if m else None


def snapshot_step(name: str) -> int | None:
    """N of a published snapshot folder's name ``step-N``, else None."""
    m = re.fullmatch(r"step-([0-9]{1,18})", name)  # ("step-²".isdigit() is True; int() fails)
    return int(m.group(1)) if m else None


def real_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()
