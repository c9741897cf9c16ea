"""The run folder on disk: every file name and key lives here, nowhere else.

    run.json                  {"format": "mamba-studio-run", "version": 1, "spec": RunSpec dict,
                               "created": ISO time, "name": str}
    data/ids.npy              every token id of the corpus (T,), compact dtype (``data.id_dtype``)
    data/doc_offsets.npy      document starts (D + 1,) int64 (``engine.documents`` layout)
    data/train_spans.npy      the saved split: (k, 2) int64 [start, length] spans over ids.npy
    data/val_spans.npy        (held-out documents; unused by "stream" runs, which split at n_train)
    data/manifest.json        {"n_train": int, "records": str, "holdout": float, "seed": int,
                               "sha256": {file: digest}, "sources": [{"path", "bytes", "sha256"}]}
    snapshots/step-N/         config.json, model.safetensors, tokenizer.json (``checkpoint``),
                              state.safetensors (optimizer.* / trainable.* tensors),
                              trainer.json (trainer state without tensors, val_loss),
                              manifest.json ({file: sha256}, written last)
    latest.json / best.json   {"snapshot": "step-N", "step": N, "val_loss": float | null}
    metrics.csv               one row per optimizer step (kind "step") and per held-out evaluation
                              (kind "eval"); rows past the resumed snapshot are dropped on resume
    status.json               {"state": running|paused|stopped|finished|diverged, "step", "total_steps",
                               "best_val_loss", "pid", "updated"}
    lock                      flock()ed by the one writer; holds its pid (a dead holder's lock is
                              released by the kernel, so a stale lock is simply taken over)
    tb/                       TensorBoard event files (``engine.tblog``)

A snapshot is written into ``snapshots/.tmp-step-N-<pid>/``, every file fsynced, the folder renamed
to ``step-N`` and the parent fsynced; only then is ``latest.json`` atomically replaced (and its
parent fsynced). A crash at any moment leaves the previous snapshot and pointer intact; leftovers
are removed by ``clean_stale`` when a run is opened for writing.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import json
import math
import os
import re
import shlex
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as ckpt
from .docstore import npy_bytes
from .errors import CheckpointError, MambaStudioError
from .safeio import open_append, open_regular, read_bytes, read_json
from .samples import SAMPLES, read_samples
from .units import bits_per_byte
from .words import plural

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
# (samples.jsonl was missing: --force refused a run with samples as holding a user's file)
RUN_ENTRIES = frozenset({RUN_JSON, DATA, SNAPSHOTS, LATEST, BEST, METRICS, STATUS, LOCK, TB,
                         SAMPLES})
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


# ------------------------------------------------------------------------------ primitives
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


def _read(path: Path, what: str) -> Any:
    try:
        return read_json(path, what=what)
    except MambaStudioError as exc:
        raise CheckpointError(str(exc)) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None


def _slow_save() -> None:
    """Test hook: ``MAMBA_STUDIO_SLOW_SAVE=seconds`` widens the window a crash can land in."""
    delay = os.environ.get(SLOW_SAVE_ENV)
    if delay:
        time.sleep(float(delay))


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ run.json
def is_run(folder: Path) -> bool:
    return (Path(folder) / RUN_JSON).is_file()


def snapshot_run(path: str | Path) -> Path | None:
    """The run folder ``path`` is a snapshot of (``RUN/snapshots/step-N``), else None."""
    p = Path(path)
    return p.parent.parent if p.parent.name == SNAPSHOTS and is_run(p.parent.parent) else None


def run_written_ns(folder: str | Path) -> int:
    """When a run's run.json was last written (ns; 0 if it cannot be read): a folder replaced
    since (``train --force``) is another run."""
    try:
        return (Path(folder) / RUN_JSON).stat().st_mtime_ns
    except OSError:
        return 0


def progress_mark(folder: str | Path) -> tuple[int, int]:
    """(bytes of metrics.csv, bytes of samples.jsonl), -1 where one cannot be read: it changes as
    a run trains, so a view of a run another process trains reads the run again when it does."""
    def size(name: str) -> int:
        try:
            return (Path(folder) / name).stat().st_size
        except OSError:
            return -1

    return size(METRICS), size(SAMPLES)


_TEMP = re.compile(r"\.(.+\.[0-9a-f]{12}|write-test-[0-9]+)\.tmp")


def is_temp(name: str) -> bool:
    """A temporary file name of ``checkpoint.create_temp`` (".<name>.<12 hex>.tmp") or of the
    writability probe (".write-test-<pid>.tmp"): what the cleanups may delete (any hidden
    ``*.tmp`` was, a user's ".notes.tmp" in a run folder too)."""
    return _TEMP.fullmatch(name) is not None


DAMAGED = ".damaged"  # a snapshot a resume passed over, kept under step-N.damaged


def _set_aside_step(name: str) -> int | None:
    """N of a snapshot a resume set aside, ``step-N.damaged`` or ``step-N.damaged-K``."""
    m = re.fullmatch(rf"(step-[0-9]+){re.escape(DAMAGED)}(-[0-9]+)?", name)
    return _snapshot_step(m.group(1)) if m else None


def _snapshot_step(name: str) -> int | None:
    """N of a published snapshot folder's name ``step-N``, else None."""
    m = re.fullmatch(r"step-([0-9]{1,18})", name)  # ("step-²".isdigit() is True; int() fails)
    return int(m.group(1)) if m else None


def _real_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _run_made(p: Path) -> list[str]:
    """Names under the run entry ``p`` that a run does not write ([] when ``p`` is all ours)."""
    name = p.name
    if name not in (DATA, SNAPSHOTS, TB):
        return [] if p.is_file() and not p.is_symlink() else [name]
    if not _real_dir(p):
        return [name]
    if name == SNAPSHOTS:
        bad = []
        for q in p.iterdir():
            if not (_real_dir(q) and (_snapshot_step(q.name) is not None
                                      or _set_aside_step(q.name) is not None
                                      or q.name.startswith(TMP_PREFIX))):
                bad.append(f"{name}/{q.name}")
                continue
            bad += [f"{name}/{q.name}/{f.name}" for f in q.iterdir()
                    if not (f.is_file() and f.suffix in (".json", ".safetensors") or is_temp(f.name))]
        return bad
    if name == DATA:
        ok = {Path(f).name for f in (*DATA_FILES.values(), DATA_MANIFEST)}
        return [f"{name}/{q.name}" for q in p.iterdir()
                if not (q.is_file() and (q.name in ok or is_temp(q.name)))]
    return [f"{name}/{q.name}" for q in p.iterdir()  # tb/
            if not (q.is_file() and q.name.startswith("events.out.tfevents."))]


def foreign_entries(folder: Path) -> list[str]:
    """Paths in ``folder`` (relative, sorted) that no run writes: anything outside
    ``RUN_ENTRIES`` and ``.*.tmp`` leftovers, or inside data/, snapshots/ and tb/ anything but
    the files a run puts there. What ``--force`` must never delete."""
    bad: list[str] = []
    for p in Path(folder).iterdir():
        if p.name in RUN_ENTRIES:
            bad += _run_made(p)
        elif not (is_temp(p.name) and p.is_file()):
            bad.append(p.name)
    return sorted(bad)


def write_run_json(folder: Path, spec: dict[str, Any], name: str,
                   init_from: dict[str, Any] | None = None) -> None:
    """A new run's run.json: its settings (``spec``) and, for a run from a model
    (``RunSpec.init``), the folder its weights came from (``init_from``: ``init_source``)."""
    d = {"format": FORMAT, "version": VERSION, "name": name, "created": now_iso(), "spec": spec}
    write_json(folder / RUN_JSON, {**d, "init_from": init_from} if init_from else d)


def rewrite_run_spec(folder: Path, spec: dict[str, Any]) -> None:
    """A run's run.json with new settings (a resume's new totals, new preview prompts); the
    rest as it was (name, creation time, where its weights came from)."""
    write_json(folder / RUN_JSON, {**read_run_json(folder), "spec": spec})


def init_source(model: Path) -> dict[str, Any]:
    """What a run started from: ``model``, the folder its weights were read from (a run's
    snapshot rather than the run, whose latest snapshot moves on), and that snapshot's step."""
    model = Path(model).resolve()
    step = _snapshot_step(model.name) if snapshot_run(model) is not None else None
    return {"path": str(model), "step": step}


def init_described(init_from: Any) -> str:
    """``init_from`` of a run.json in words ("" when it has none or it is not ours)."""
    if not isinstance(init_from, dict) or not isinstance(init_from.get("path"), str):
        return ""
    step = init_from.get("step")
    at = f" (step {step})" if type(step) is int else ""
    return f"from {init_from['path']}{at}"


def read_run_json(folder: Path) -> dict[str, Any]:
    """run.json with its format and version checked (a clear error for other versions)."""
    path = Path(folder) / RUN_JSON
    if not path.exists():
        if not Path(folder).is_dir():
            what = "a file, not a folder" if Path(folder).exists() else "no such folder"
            raise CheckpointError(f"{folder}: {what}; pass a run folder (runs/...)")
        hint = (" (an old single-folder checkpoint: it loads for generate/eval/--init but cannot "
                "be resumed as a run)") if (Path(folder) / "trainer_state.json").exists() else ""
        here = Path(folder)
        if run := snapshot_run(here):
            hint = f" but a snapshot of the run {run}: resume that"
        elif found := snapshots(here):
            hint = (f" (lost or deleted): its snapshots still load for generate/eval/export; to "
                    f"train on, start a new run with --init {found[-1][1]}")
        elif prepared_only(here):
            hint = (": a run ended while it was being prepared, before its first save; nothing "
                    "of it can be resumed: start it again on its corpus with --out "
                    f"{folder} --force")
        raise CheckpointError(f"{folder}: no {RUN_JSON}, not a run folder{hint}")
    found = snapshots(Path(folder))
    use = (f"; its snapshots still load: give {found[-1][1]} to generate, eval or export, or "
           f"--init it to a new run" if found else "")  # (damaged: the file and no way on)
    try:
        d = _read(path, RUN_JSON)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}{use}") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT or not isinstance(d.get("version"), int):
        raise CheckpointError(f"{path}: not a Mamba Studio run file{use}")
    if d["version"] > VERSION:
        raise CheckpointError(f"{path}: written by a newer Mamba Studio (run format {d['version']}, "
                              f"this one reads {VERSION}); upgrade Mamba Studio to open it")
    if d["version"] < VERSION:
        raise CheckpointError(f"{path}: run format {d['version']} is older than {VERSION} and "
                              "cannot be opened; start a new run with --init from its snapshot")
    if not isinstance(d.get("spec"), dict):
        raise CheckpointError(f"{path}: has no 'spec' object{use}")
    return d


# ------------------------------------------------------------------------------ data/
@dataclass(frozen=True)
class RunData:
    """What a run trains on, as saved: ``ids`` (T,) compact dtype (memory-mapped), ``offsets``
    (D + 1,) int64 document starts (``engine.documents`` layout), the held-out split as spans
    (k, 2) int64 ``[start, length]`` over ids, and the manifest. Stream runs (records "stream")
    train on ``ids[:n_train]`` and hold out the rest."""

    ids: np.ndarray
    offsets: np.ndarray
    train_spans: np.ndarray
    val_spans: np.ndarray
    n_train: int
    manifest: dict[str, Any]

    @property
    def records(self) -> str:
        return str(self.manifest.get("records", "stream"))

    @property
    def train_ids(self) -> np.ndarray:
        return self.ids[: self.n_train]

    @property
    def val_ids(self) -> np.ndarray:
        return self.ids[self.n_train :]

    @property
    def tokens_per_byte(self) -> float | None:
        """Token ids per corpus byte (the bits/byte scale); None without byte counts."""
        return _per_byte(self.manifest, len(self.ids))

    @property
    def heldout_tokens_per_byte(self) -> float | None:
        """Token ids per byte of the held-out text (its losses' bits/byte scale, as ``eval``'s);
        the corpus's for a run made before it was recorded."""
        return _heldout_per_byte(self.manifest, len(self.ids))


def corpus_bytes(manifest: Any) -> int:
    """Bytes of the corpus files a data manifest lists (its "sources"); 0 (unknown) when a
    count is not a whole number."""
    sources = manifest.get("sources", []) if isinstance(manifest, dict) else []
    counts: list[Any] = [s.get("bytes") for s in sources if isinstance(s, dict)] if isinstance(
        sources, list) else []
    if not all(type(b) is int and b >= 0 for b in counts):  # hand-edited: 0, unknown ("abc"
        return 0  # raised in the window; skipping it gave a bits/byte scale twice too large)
    return sum(counts)


def _per_byte(manifest: Any, n_ids: int) -> float | None:
    n_bytes = corpus_bytes(manifest)
    return n_ids / n_bytes if n_bytes > 0 and n_ids > 0 else None


def _heldout_per_byte(manifest: Any, n_ids: int) -> float | None:
    """The held-out text's tokens per byte a data manifest records, else the corpus's."""
    tpb = manifest.get("heldout_tokens_per_byte") if isinstance(manifest, dict) else None
    if type(tpb) is float and math.isfinite(tpb) and tpb > 0:
        return tpb
    return _per_byte(manifest, n_ids)


def npy_length(path: Path) -> int:
    """The length of a .npy array from its header alone; a FIFO or device in its place is
    refused (UnsafeFileError), never waited on; a file that is no .npy raises ValueError."""
    fmt = np.lib.format
    with open_regular(path, "token file") as f:
        version = fmt.read_magic(f)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape = read(f)[0]
    if len(shape) < 1:
        raise ValueError(f"{path}: a scalar, not an array")
    return int(shape[0])


def read_tokens_per_byte(folder: Path) -> float | None:
    """``RunData.heldout_tokens_per_byte`` of a run folder (the scale of its held-out losses in
    bits/byte) from its data manifest and ids.npy's header only (``npy_length``; nothing
    verified or read whole): for showing a run. None when unreadable."""
    folder = Path(folder)
    try:
        manifest = read_json(folder / DATA_MANIFEST, what="data manifest")
        n_ids = npy_length(folder / IDS)
    except (MambaStudioError, OSError, ValueError, TypeError, AttributeError):
        return None
    return _heldout_per_byte(manifest, n_ids)


def read_epochs_done(folder: Path) -> int:
    """Epochs completed at a run's latest snapshot (its trainer.json); 0 when unreadable."""
    folder = Path(folder)
    pointer = read_pointer(folder)
    if pointer is None:
        return 0
    try:
        state = read_json(folder / SNAPSHOTS / str(pointer["snapshot"]) / SNAP_TRAINER,
                          what="trainer state")
        epochs = state.get("epochs", []) if isinstance(state, dict) else []
        return len(epochs) if isinstance(epochs, list) else 0
    except (MambaStudioError, OSError, ValueError):
        return 0


DATA_FILES = {"ids": IDS, "offsets": "data/doc_offsets.npy", "train_spans": "data/train_spans.npy",
              "val_spans": "data/val_spans.npy"}


def write_data(folder: Path, arrays: dict[str, np.ndarray], n_train: int,
               sources: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    """Write data/: the arrays named in ``DATA_FILES`` (ids in their compact dtype), then the
    manifest with their sha256 (last)."""
    (folder / DATA).mkdir(parents=True, exist_ok=True)
    digests = {}
    for key, name in DATA_FILES.items():
        ckpt.atomic_write_bytes(folder / name, npy_bytes(arrays[key]))
        digests[Path(name).name] = ckpt.sha256_file(folder / name)
    write_json(folder / DATA_MANIFEST, {"n_train": int(n_train), "sha256": digests,
                                        "sources": sources, **extra})
    fsync_dir(folder)


def read_data(folder: Path) -> RunData:
    """data/ with checksums verified; the ids are memory-mapped (read-only), not read whole."""
    m = _read(folder / DATA_MANIFEST, "data manifest")
    if not isinstance(m, dict) or not isinstance(m.get("sha256"), dict) or not isinstance(
            m.get("n_train"), int):
        raise CheckpointError(f"{folder / DATA_MANIFEST}: not a data manifest")
    if set(m["sha256"]) != {Path(name).name for name in DATA_FILES.values()}:  # an empty map
        # skipped every checksum, and the regular-file check with them: a FIFO there hung eval
        raise CheckpointError(f"{folder / DATA_MANIFEST}: its checksums do not name the run's "
                              "data files " + ", ".join(sorted(Path(n).name
                                                               for n in DATA_FILES.values())))
    verify_files(folder / DATA, m["sha256"], DATA_MANIFEST,
                 "every snapshot shares these token ids, so the run cannot go on: start a new run "
                 f"on the corpus with --init {folder / SNAPSHOTS}/step-N to keep its weights")
    arrays = {}
    try:
        for key, name in DATA_FILES.items():
            arrays[key] = np.load(folder / name, mmap_mode="r" if key == "ids" else None,
                                  allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise CheckpointError(f"{folder / DATA}: unreadable token data ({exc})") from None
    ids = arrays["ids"]
    if ids.ndim != 1 or ids.dtype.kind != "u" or not 0 < m["n_train"] <= len(ids):
        raise CheckpointError(f"{folder / IDS}: not a token id array matching the manifest")
    for key in ("train_spans", "val_spans"):
        a = arrays[key]
        if a.ndim != 2 or a.shape[1] != 2 or (len(a) and (a.min() < 0 or (a[:, 0] + a[:, 1]).max()
                                                          >= len(ids))):
            raise CheckpointError(f"{folder / DATA_FILES[key]}: spans outside the token ids")
    return RunData(ids, arrays["offsets"], arrays["train_spans"], arrays["val_spans"], m["n_train"], m)


def file_sources(files: list[tuple[Path, int]]) -> list[dict[str, Any]]:
    """Manifest entries of the corpus files (path, bytes read): path, size and sha256
    (fingerprints, not copies); a file that can no longer be read gets sha256 None."""
    out = []
    for p, n in files:
        try:
            digest: str | None = ckpt.sha256_file(p)
        except OSError:  # gone since it was encoded: its ids are in the run all the same
            digest = None
        out.append({"path": str(p), "bytes": int(n), "sha256": digest})
    return out


# ------------------------------------------------------------------------------ snapshots
def snapshot_name(step: int) -> str:
    return f"step-{step}"


def write_snapshot(folder: Path, step: int, write_model: Callable[[Path], dict[str, str]],
                   tensors: dict[str, np.ndarray], trainer: dict[str, Any],
                   val_loss: float | None, keep: int = KEEP) -> Path:
    """Write, fsync and publish ``snapshots/step-<step>``; update latest/best; prune old ones.
    On any failure (disk full...) the temp folder is removed and the previous snapshot stays the
    published one. Returns the snapshot folder."""
    snaps = folder / SNAPSHOTS
    check_own_folders(folder)  # (swapped for a link mid-run: written and pruned through it)
    snaps.mkdir(exist_ok=True)
    name = snapshot_name(step)
    tmp = snaps / f"{TMP_PREFIX}{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        files = dict(write_model(tmp))
        _slow_save()
        ckpt.atomic_write_tensors(tmp / SNAP_STATE, tensors)
        _slow_save()
        ckpt.atomic_write_json(tmp / SNAP_TRAINER, {**trainer, "step": step, "val_loss": val_loss})
        for f in (SNAP_STATE, SNAP_TRAINER):
            files[f] = ckpt.sha256_file(tmp / f)
        ckpt.atomic_write_json(tmp / SNAP_MANIFEST, files)
        fsync_dir(tmp)
        _slow_save()
        final = snaps / name
        if final.exists():  # the same step saved again (e.g. after a rollback): swap it out
            old = snaps / f"{TMP_PREFIX}old-{name}-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_dir(snaps)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointer = {"snapshot": name, "step": step, "val_loss": val_loss}
    write_json(folder / LATEST, pointer)
    best = best_pointer(folder)
    if val_loss is not None and math.isfinite(val_loss) and (
            best is None or best.get("val_loss") is None or val_loss <= best["val_loss"]):
        write_json(folder / BEST, pointer)
    elif best is not None and read_pointer(folder, BEST) is None:
        write_json(folder / BEST, best)  # a damaged best.json, rebuilt from the snapshots
    prune(folder, keep)
    return final


def read_pointer(folder: Path, which: str = LATEST) -> dict[str, Any] | None:
    """``latest.json`` or ``best.json`` ({"snapshot", "step", "val_loss"}); None when missing or
    damaged. For latest.json, a published snapshot newer than the one it names is the latest
    (a crash between publishing a snapshot and re-pointing, a first save included): resume takes
    it (``find_snapshot``), and the Runs list, Continue and exports had said the older step."""
    ptr = _pointer_file(folder, which)
    if which != LATEST:
        return ptr
    published = [(n, p) for n, p in snapshots(folder) if not p.is_symlink()]
    if not published or (ptr is not None and published[-1][0] <= ptr["step"]):
        return ptr
    step, snap = published[-1]
    try:
        if ptr is not None and (snap / SNAP_TRAINER).stat().st_mtime_ns <= (
                folder / LATEST).stat().st_mtime_ns:  # latest.json was written after it: a
            return ptr  # snapshot a resume passed over (damaged), not one a crash left behind
        trainer = _read(snap / SNAP_TRAINER, SNAP_TRAINER)
    except (CheckpointError, OSError):
        return ptr
    if not isinstance(trainer, dict) or trainer.get("step") != step:
        return ptr
    val = trainer.get("val_loss")
    return {"snapshot": snap.name, "step": step,
            "val_loss": val if isinstance(val, (int, float)) and not isinstance(val, bool) else None}


def _pointer_file(folder: Path, which: str) -> dict[str, Any] | None:
    path = folder / which
    if not path.exists():
        return None
    try:
        d = _read(path, which)
    except CheckpointError:
        return None
    ok = (isinstance(d, dict) and isinstance(d.get("snapshot"), str)
          and isinstance(d.get("step"), int) and not isinstance(d.get("step"), bool)
          and _snapshot_step(d["snapshot"]) == d["step"])  # a name in snapshots/, no path: a
    # crafted "../../other/snapshots/step-600" was followed (and the run's own snapshots pruned
    # after a resume from another run's weights)
    if not ok:
        return None
    v = d.get("val_loss")  # "abc" stopped the window from opening (the Runs list formats it)
    finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return {**d, "val_loss": v if finite else None}


def best_if_not_latest(folder: Path, now: int | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The snapshot with the lowest held-out loss (``best.json``) when it is not the latest
    weights (the latest snapshot's, or ``now``: the step a run training now is at) and is still
    on disk: its folder and its pointer ({"snapshot", "step", "val_loss"})."""
    best, kept = best_pointer(folder), expected_snapshot(folder)  # (latest.json's step may
    last = now if now is not None else kept[1] if kept is not None else None  # be gone)
    if best is None or last is None or best["step"] == last:
        return None
    snap = folder / SNAPSHOTS / best["snapshot"]
    ok = _snapshot_step(best["snapshot"]) is not None and _real_dir(snap)
    return (snap, best) if ok and isinstance(best.get("val_loss"), (int, float)) else None


def best_pointer(folder: Path) -> dict[str, Any] | None:
    """``best.json``; when it is missing, damaged or names a snapshot that is gone, the snapshot
    with the lowest held-out loss its own trainer.json records (a damaged best.json let the next
    save prune the best snapshot, step 273 at 1.9234, and point best.json at a worse one
    without a word)."""
    best = read_pointer(folder, BEST)
    if best is not None and _real_dir(folder / SNAPSHOTS / best["snapshot"]):
        return best  # (one whose snapshot is gone showed its loss in the Runs list)
    found: dict[str, Any] | None = None
    for step, snap in snapshots(folder):
        try:
            val = _read(snap / SNAP_TRAINER, SNAP_TRAINER).get("val_loss")
        except (CheckpointError, AttributeError):
            continue
        if isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val) \
                and (found is None or val <= found["val_loss"]):
            found = {"snapshot": snap.name, "step": step, "val_loss": float(val)}
    return found


ANOTHER_SNAPSHOT = "use another snapshot of the run"


def verify_files(folder: Path, digests: dict[str, Any], manifest: str,
                 fix: str = ANOTHER_SNAPSHOT, unhashed: frozenset[str] = frozenset()) -> None:
    """``checkpoint.verify_files`` with a run's fix (use another snapshot)."""
    ckpt.verify_files(folder, digests, manifest, fix, unhashed)


def verify_snapshot(path: Path, weights: bool = True) -> dict[str, Any]:
    """Check every file of a snapshot against its manifest; return its trainer.json. With
    ``weights`` False only trainer.json is hashed, the other files need only be there (a cheap
    look before a load: ``expected_snapshot``)."""
    files = _read(path / SNAP_MANIFEST, "snapshot manifest")
    if not isinstance(files, dict) or not SNAP_NEEDS.issubset(files):
        raise CheckpointError(f"{path / SNAP_MANIFEST}: not a snapshot manifest")
    unnamed = [n for n in ckpt.TOKENIZER_FILES if n not in files and (path / n).exists()]
    if unnamed:  # a manifest that left out a file the loader reads got it read unverified
        raise CheckpointError(f"{path / SNAP_MANIFEST}: does not name {', '.join(unnamed)}, "
                              f"which the snapshot holds; {ANOTHER_SNAPSHOT}")
    verify_files(path, files, SNAP_MANIFEST,
                 unhashed=frozenset() if weights else frozenset(files) - {SNAP_TRAINER})
    trainer = _read(path / SNAP_TRAINER, "trainer state")
    why = _trainer_problem(trainer)
    if why is not None:
        raise CheckpointError(f"{path / SNAP_TRAINER}: {why}")
    return trainer


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _trainer_problem(t: Any) -> str | None:
    """What makes a snapshot's trainer.json unusable for a resume, or None: the fields
    ``Trainer.load_state_dict`` reads, with their types and ranges (a missing ``lr_scale``
    was a KeyError traceback; a step of -5 resumed "at step -5")."""
    if not isinstance(t, dict):
        return "not a JSON object"
    cur = t.get("cursor")
    if not isinstance(cur, dict):
        return "no cursor"
    for k in ("step", "epoch", "group", "good", "steps"):
        if not _count(cur.get(k)):
            return f"cursor.{k} is {cur.get(k)!r:.40}, not a count"
    for k in ("loss_sum", "norm_sum"):
        if type(cur.get(k)) not in (int, float):
            return f"cursor.{k} is {cur.get(k)!r:.40}, not a number"
    if set(cur) - {"step", "epoch", "group", "good", "steps", "loss_sum", "norm_sum"}:
        return f"cursor holds unknown keys {sorted(set(cur))}"
    scale = t.get("lr_scale")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale <= 1:
        return f"lr_scale is {scale!r:.40}, not a number in (0, 1]"
    if not _count(t.get("optimizer_t")) or not isinstance(t.get("epochs"), list):
        return "optimizer_t or epochs missing or of the wrong type"
    if t.get("step") != cur["step"]:
        return f"step {t.get('step')!r:.40} differs from cursor.step {cur['step']}"
    return None


def snapshots(folder: Path) -> list[tuple[int, Path]]:
    """Published snapshots, oldest first."""
    out = []
    snaps = folder / SNAPSHOTS
    if snaps.is_dir():
        for p in snaps.iterdir():
            step = _snapshot_step(p.name)
            if step is not None:
                out.append((step, p))
    return sorted(out)


def _light_check(p: Path) -> bool:
    """Whether snapshot ``p`` looks loadable without reading its weights: not a link, and
    ``verify_snapshot`` without hashing the weights passes (its manifest, the files it names,
    trainer.json against it and as a trainer state)."""
    if p.is_symlink():
        return False
    try:
        verify_snapshot(p, weights=False)
    except (CheckpointError, OSError):
        return False
    return True


def expected_snapshot(folder: Path, which: str = LATEST) -> tuple[Path, int, str] | None:
    """The snapshot a load of ``which`` will take, found without reading its weights (for the
    words before a load: "continues from step N", the export question, the Runs list): the one
    ``read_pointer`` names when it passes ``_light_check``, else the newest older one that does
    (``find_snapshot``'s next choice; any, when the pointer is missing). Returns (its folder,
    its step, a note when it is not the pointer's, e.g. "step-165 is missing"), or None when
    the run has no such snapshot. Weights whose bytes no longer match their manifest are found
    only by the load itself (``find_snapshot``), which then takes an older snapshot."""
    ptr = read_pointer(folder, which)
    for step, p in reversed(snapshots(folder)):
        if ptr is not None and step > ptr["step"]:  # (one a resume passed over: damaged)
            continue
        if not _light_check(p):
            continue
        note = ""
        if ptr is not None and p.name != ptr["snapshot"]:
            name = ptr["snapshot"]
            gone = folder / SNAPSHOTS / name
            aside = gone.with_name(name + DAMAGED)  # (set aside by a resume: not "missing")
            note = (f"{name} is damaged (kept as {aside.name})" if aside.is_dir() and not
                    gone.exists() else f"{name} is {'missing' if not gone.exists() else 'damaged'}")
        return p, step, note
    return None


def find_snapshot(folder: Path, which: str = LATEST) -> tuple[Path, dict[str, Any], list[str]]:
    """The snapshot ``which`` points to, verified, or a newer one that verifies (latest.json
    only: a crash between publishing it and re-pointing); if it is missing or corrupt, the newest
    one that verifies. Returns (folder, trainer.json, the reasons the snapshots passed over were
    refused, and a newer one's notice). CheckpointError if none."""
    errors: list[str] = []
    ptr = _pointer_file(folder, which)  # as written: a newer snapshot is named below
    # a snapshot newer than latest.json names was published just before a crash (or a save in
    # progress re-points now): complete, and nothing after it was trained; it was passed over
    newer = [p for n, p in reversed(snapshots(folder))
             if which == LATEST and ptr is not None and n > ptr["step"]]
    candidates = [*newer, *([folder / SNAPSHOTS / ptr["snapshot"]] if ptr else [])]
    candidates += [p for _, p in reversed(snapshots(folder)) if p not in candidates]
    for p in candidates:
        if p.is_symlink():  # it was followed, wherever it pointed
            errors.append(f"{p}: a link, not a snapshot folder of the run")
            continue
        try:
            trainer = verify_snapshot(p)
        except CheckpointError as exc:  # another one is tried: no "use another snapshot" here
            errors.append(str(exc).removesuffix(f"; {ANOTHER_SNAPSHOT}"))
            continue
        if p in newer and ptr is not None:
            errors.append(f"{folder / which} names {ptr['snapshot']}, but {p.name} is newer and "
                          "complete (a crash between publishing it and updating latest.json, "
                          "or a save in progress)")
        return p, trainer, errors
    if not errors:
        raise CheckpointError(f"{folder}: no snapshot in {folder / SNAPSHOTS}; the run was never "
                              "saved: start it again")
    present = len(snapshots(folder))  # (not the errors: latest.json's missing one counted,
    if present == 0:  # "none of its 1 snapshot" with none there)
        raise CheckpointError(f"{folder}: no snapshot in {folder / SNAPSHOTS} ({errors[0]}); "
                              "start a new run (--init takes any other model folder)")
    raise CheckpointError(f"{folder}: none of its {plural(present, 'snapshot')} is complete "
                          f"({errors[0]}); start a new run (--init takes any other model folder)")


def unreadable_newer(folder: Path, chosen: Path) -> Path | None:
    """A file or folder of a snapshot newer than ``chosen`` that this user may not read, or
    None: such a snapshot was passed over as if it were damaged, and a resume went back to an
    older one and set the newer aside (every step since lost to a ``chmod`` that can be fixed)."""
    published = snapshots(folder)
    step = next((n for n, p in published if p == chosen), -1)
    for n, p in published:
        if n <= step:
            continue
        if not os.access(p, os.R_OK | os.X_OK):
            return p
        try:
            names = sorted(e.name for e in os.scandir(p))
        except OSError:
            return p
        for name in names:
            if not os.access(p / name, os.R_OK):
                return p / name
    return None


def latest_snapshot(folder: Path, which: str = LATEST) -> tuple[Path, dict[str, Any]]:
    """``find_snapshot`` without the list of refused snapshots."""
    path, trainer, _ = find_snapshot(folder, which)
    return path, trainer


OWN_FOLDERS = (DATA, SNAPSHOTS, TB)  # a run's folders that training writes and deletes in


def check_own_folders(folder: Path) -> None:
    """A run's data/, snapshots/ and tb/ are folders of its own, not links nor files: training
    writes, prunes and cleans inside them (a snapshots/ linked to another folder had a resume
    delete a user's step-1/ and .tmp files there). CheckpointError naming the entry and the
    fix."""
    for name in OWN_FOLDERS:
        p = folder / name
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            link = p.is_symlink()
            raise CheckpointError(
                f"{p}: {'a link' if link else 'a file'} where the run keeps its {name} folder; "
                "training writes and deletes files in it, so it must be the run's own: "
                + ("put the folder itself there (move what the link points to back in)" if link
                   else "move the file away and put the run's folder back")
                + ", then resume (generate, eval and export read the run as it is)")


def set_aside_passed_over(folder: Path, used: Path) -> list[str]:
    """Snapshots newer than ``used`` (the one a resume loads) are the ones it passed over as
    damaged: each is renamed ``step-N.damaged`` so that the run, going on from ``used``, neither
    prunes it nor saves its own step N over it (a trainer.json damaged by hand had 24 trained
    steps, whose weights were intact, deleted for good). Returns the new names."""
    used_step = _snapshot_step(used.name)
    out = []
    for step, p in snapshots(folder):
        if used_step is None or step <= used_step or p.is_symlink():
            continue
        target = p.with_name(p.name + DAMAGED)
        n = 2
        while target.exists():
            target = p.with_name(f"{p.name}{DAMAGED}-{n}")
            n += 1
        os.rename(p, target)
        out.append(target.name)
    if out:
        fsync_dir(folder / SNAPSHOTS)
        best = read_pointer(folder, BEST)
        if best is not None and best["snapshot"] not in {n.name for _, n in snapshots(folder)}:
            (folder / BEST).unlink()  # it named one set aside: the run saves its own step N
            # there, and Best would have exported those weights under the old loss
    return out


def prune(folder: Path, keep: int = KEEP) -> None:
    """Delete all but the newest ``keep`` snapshots and the best one."""
    if not _real_dir(folder / SNAPSHOTS):  # never through a link (check_own_folders)
        return
    best = best_pointer(folder)
    latest = read_pointer(folder, LATEST)
    protect = {p["snapshot"] for p in (best, latest) if p}
    for _, p in snapshots(folder)[:-keep]:
        if p.name not in protect:
            shutil.rmtree(p, ignore_errors=True)


def drop_after(folder: Path, step: int) -> tuple[int, float | None] | None:
    """Delete the snapshots after ``step``, and re-point latest.json (and a best.json that named
    one of them) at what is left: the divergence guard rolled the run back to ``step`` because
    their weights are bad (a step's loss tells of the weights the step before it left, so a save
    can come before its weights are found bad; such a snapshot was the newest, which generate,
    eval, export and resume take). Deleted first, so that a crash in between leaves latest.json
    naming a missing snapshot (an older one is taken), never a bad one. Returns the step and
    held-out loss of the snapshot latest.json names now, or None when none is left."""
    if not _real_dir(folder / SNAPSHOTS):  # never through a link (check_own_folders)
        return None
    for n, p in snapshots(folder):
        if n > step:  # renamed first: a crash or a failed delete leaves no snapshot of the name
            gone = p.with_name(f"{TMP_PREFIX}{p.name}-{os.getpid()}")  # (clean_stale's to remove)
            try:
                os.rename(p, gone)
            except OSError as exc:
                raise CheckpointError(f"{p}: holds weights the divergence guard found bad, and "
                                      f"could not be removed ({exc.strerror}); delete it before "
                                      "using the run") from None
            shutil.rmtree(gone, ignore_errors=True)
    left = snapshots(folder)
    if not left:
        return None
    n, p = left[-1]
    try:
        val = _read(p / SNAP_TRAINER, SNAP_TRAINER).get("val_loss")
    except (CheckpointError, AttributeError):
        val = None
    val = float(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else None
    write_json(folder / LATEST, {"snapshot": p.name, "step": n, "val_loss": val})
    best = _pointer_file(folder, BEST)
    if best is not None and not _real_dir(folder / SNAPSHOTS / best["snapshot"]):
        rebuilt = best_pointer(folder)
        if rebuilt is not None:
            write_json(folder / BEST, rebuilt)
        else:
            (folder / BEST).unlink(missing_ok=True)
    return n, val


def clean_stale(folder: Path) -> list[str]:
    """Remove temp folders/files left by a crashed save (call only while holding the lock)."""
    removed = []
    snaps = folder / SNAPSHOTS
    if _real_dir(snaps):  # a crash between the two renames of a step saved again: the old copy
        for p in snaps.iterdir():  # is put back (both copies were deleted here)
            name = p.name.removeprefix(f"{TMP_PREFIX}old-").rsplit("-", 1)[0]
            if (p.name.startswith(f"{TMP_PREFIX}old-") and _real_dir(p)
                    and _snapshot_step(name) is not None and not (snaps / name).exists()):
                os.rename(p, snaps / name)
    for base in (folder, folder / DATA, folder / SNAPSHOTS):
        if not base.is_dir() or base != folder and base.is_symlink():  # (a link's target is
            continue  # not the run's: a user's .tmp files there were deleted)
        for p in base.iterdir():
            stale_dir = p.name.startswith(TMP_PREFIX) and p.is_dir()
            stale_file = is_temp(p.name) and p.is_file()
            if stale_dir or stale_file:
                try:  # (a read-only folder: left, said by the writability check after this)
                    shutil.rmtree(p, ignore_errors=True) if stale_dir else p.unlink(missing_ok=True)
                except OSError:
                    continue
                removed.append(str(p.relative_to(folder)))
    return removed


def snapshot_bytes(n_params: int, n_trained: int) -> int:
    """Upper estimate of one snapshot: float32 weights + two moments (+ LoRA base) + slack."""
    return 4 * (n_params + 3 * n_trained) + (1 << 20)


# ------------------------------------------------------------------------------ lock
class RunLock:
    """Exclusive writer lock on a run folder (``flock``; released by the kernel if we die)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self.fd: int | None = None

    def _open(self, flags: int) -> int | None:
        """The lock file opened without following a link or blocking on a FIFO; None when it
        is missing (and ``flags`` does not create it); CheckpointError when it is not a plain
        file (a link could make the pid write clobber a file outside the run)."""
        bad = (f"{self.path}: not a plain file (a link, FIFO or device); a run's lock must be "
               "one: delete it and try again")
        try:
            fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink / a FIFO without a writer
                raise CheckpointError(bad) from None
            if exc.errno == errno.EISDIR:  # (it said only "<run>/lock: Is a directory")
                raise CheckpointError(f"{self.path}: a folder where the run keeps its lock file; "
                                      "move it away, then try again") from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and flags & os.O_CREAT:
                folder = self.path.parent  # it said only "<run>/lock: Read-only file system"
                raise CheckpointError(
                    f"{folder}: cannot write into the run folder ({exc.strerror}); training and "
                    "resuming write there: copy it somewhere writable "
                    f"(cp -a {shlex.quote(str(folder))} NEW) and resume that (generate, eval and "
                    "export read it as it is)") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CheckpointError(bad)
        return fd

    def acquire(self) -> RunLock:
        fd = self._open(os.O_RDWR | os.O_CREAT)
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            # (SIGTERM: a job started in the background ignores SIGINT, and kill -INT did nothing)
            stop = f" (kill -TERM {holder}: it saves, then ends)" if holder.isdigit() else ""
            raise CheckpointError(
                f"{self.path.parent}: the run is in use by {who}; wait for it to "
                f"finish or stop it{stop}, or train into another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def held_elsewhere(self) -> bool:
        """True when another process holds the lock now (for listing runs)."""
        try:
            fd = self._open(os.O_RDONLY)
        except (CheckpointError, OSError):
            return False  # not a lock anyone can hold (the writer refuses it too)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------ output folder
def prepared_only(folder: Path) -> bool:
    """A run killed while it was being prepared (tokenizer training, encoding): its lock (and
    perhaps data/), no run.json, nothing to load or resume."""
    return (folder / LOCK).is_file() and not (folder / RUN_JSON).exists()


def _not_writable(folder: Path) -> OSError | None:
    """Why a file cannot be written in ``folder`` (a probe file written and removed), or None."""
    probe = folder / f".write-test-{os.getpid()}.tmp"
    try:
        probe.write_bytes(b"x")
        probe.unlink()
    except OSError as exc:
        return exc
    return None


def check_out_dir(folder: Path, need_bytes: int) -> None:
    """Before step 1: ``folder`` exists or can be created, is writable, and its disk has room for
    ``need_bytes``. Raises CheckpointError naming the folder and the fix."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"{folder}: cannot create the run folder ({exc.strerror or exc}); "
                              "choose another --out") from None
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder; choose another --out")
    if (denied := _not_writable(folder)) is not None:
        raise CheckpointError(f"{folder}: not writable ({denied.strerror or denied}); choose "
                              "another --out")
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise CheckpointError(
            f"{folder}: only {free / 2**20:,.1f} MiB free, a run needs {need_bytes / 2**20:,.1f} MiB "
            "(two snapshots and the token ids); free space or choose another --out")


def check_resume_dir(folder: Path, need_bytes: int) -> None:
    """Before a resume's step 1: the run folder is writable and its disk has room for one more
    snapshot (``need_bytes``). A read-only folder failed later naming a hidden temporary file
    (".samples.jsonl.<hex>.tmp: Permission denied"), a full disk as "could not write
    metrics.csv", neither with a fix."""
    if (denied := _not_writable(folder)) is not None:
        raise CheckpointError(
            f"{folder}: cannot write into the run folder ({denied.strerror or denied}); make it "
            f"writable (chmod u+w), or copy it somewhere writable (cp -a "
            f"{shlex.quote(str(folder))} NEW) and resume that")
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise CheckpointError(
            f"{folder}: only {free / 2**20:,.1f} MiB free, the next snapshot needs "
            f"{need_bytes / 2**20:,.1f} MiB; free some space, then resume (nothing was lost: the "
            "run is at its last snapshot)")


RUN_NUMBERS = ".run-numbers.json"  # in a runs root: the last n given to each <date>-<label>


def _numbers_given(root: Path) -> dict[str, int]:
    try:
        given = read_json(root / RUN_NUMBERS, 64 * 1024, RUN_NUMBERS)
    except (MambaStudioError, OSError, ValueError):
        return {}
    return {k: v for k, v in given.items() if isinstance(k, str) and type(v) is int
            } if isinstance(given, dict) else {}


def unique_run_folder(root: Path, label: str) -> Path:
    """``root/<date>-<label>-<n>`` with n past every number a run under ``root`` was given
    (``note_run_number`` keeps them in ``root/.run-numbers.json``): a deleted run's name is not
    given to a later run, whose exports and samples would be taken for the deleted one's."""
    stem = f"{_dt.date.today().isoformat()}-{label}"
    n = max(_numbers_given(root).get(stem, 0), 0) + 1
    while (root / f"{stem}-{n}").exists() or (root / f"{stem}-{n}").is_symlink():
        n += 1
    return root / f"{stem}-{n}"


def note_run_number(folder: Path) -> None:
    """Remember ``folder``'s n (a name ``unique_run_folder`` gave) in its root's book of today's
    numbers; best effort: without it a deleted newest run's name is given again."""
    stem, _, n = folder.name.rpartition("-")
    if not n.isdigit():
        return
    root = folder.parent
    given = _numbers_given(root)
    today = {k: v for k, v in given.items() if k[:10] == stem[:10]}
    today[stem] = max(today.get(stem, 0), int(n))
    with contextlib.suppress(OSError, CheckpointError):
        ckpt.atomic_write_json(root / RUN_NUMBERS, today)


# ------------------------------------------------------------------------------ metrics / status
def append_metric(folder: Path, row: dict[str, Any]) -> None:
    path = folder / METRICS
    new = not path.exists()
    try:
        with open_append(path, METRICS) as f:
            w = csv.DictWriter(f, METRIC_FIELDS, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow({k: ("" if row.get(k) is None else row[k]) for k in METRIC_FIELDS})
    except OSError as exc:  # a write or close on a full disk names no file
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _metrics_text(folder: str | Path) -> str | None:
    path = Path(folder) / METRICS
    if not path.exists() and not path.is_symlink():
        return None
    try:  # bounded, and never a FIFO or device (a link to /dev/zero grew to 6.9 GB)
        text = read_bytes(path, METRICS_LIMIT, METRICS).decode("utf-8", errors="replace")
    except MambaStudioError as exc:
        raise CheckpointError(f"{exc}; delete or replace {path} (the snapshots do not need it)"
                              ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark an editor's "CSV UTF-8" save adds


def _metric_columns(header: str) -> tuple[str, ...]:
    """The columns a metrics.csv header names: its own names when they are all ours (an older
    file may have fewer; empty names after a last comma dropped), else ours in order (a
    damaged header lost every row)."""
    names = [n.strip() for n in header.split(",")]
    while names and not names[-1]:
        names.pop()
    ok = "kind" in names and "step" in names and set(names) <= set(METRIC_FIELDS)
    return tuple(names) if ok else METRIC_FIELDS


def _is_header(line: str) -> bool:
    """Whether a first line is a header (a file whose header was lost starts with a row)."""
    return _metric_row(line, METRIC_FIELDS) is None


def _metric_row(line: str, columns: tuple[str, ...]) -> dict[str, Any] | None:
    """One metrics.csv line as a row, or None when it is not one of ours. Lines are split on
    commas, not parsed as CSV: every field is a word or a number, and a stray quote swallowed
    every row after it (a line past the csv module's field limit raised)."""
    cells = line.rstrip("\r").split(",")
    while len(cells) > len(columns) and len(cells) > len(METRIC_FIELDS) and not cells[-1]:
        cells.pop()  # empty cells after a last comma
    if len(cells) == len(METRIC_FIELDS) and len(columns) < len(METRIC_FIELDS):
        columns = METRIC_FIELDS  # a row of today's under an older file's shorter header
    if len(cells) != len(columns):
        return None
    raw = dict(zip(columns, cells, strict=True))
    try:
        row: dict[str, Any] = {"kind": raw["kind"], "step": int(raw["step"]),
                               "epoch": int(raw.get("epoch") or 0)}
        for k in METRIC_FIELDS[3:]:
            v = raw.get(k)
            row[k] = float(v) if v not in (None, "") else None
    except (KeyError, ValueError, TypeError):
        return None
    return row if row["kind"] in ("step", "eval") else None


def _metric_lines(text: str) -> tuple[tuple[str, ...], list[str]]:
    """A metrics.csv text's columns and its lines after the header (all of them when the
    header was lost)."""
    lines = text.split("\n")
    if not _is_header(lines[0]):
        return METRIC_FIELDS, lines
    return _metric_columns(lines[0]), lines[1:]


def read_metrics(folder: str | Path) -> list[dict[str, Any]]:
    """metrics.csv as dicts (kind: str, step/epoch: int, the rest float or None); a line that is
    not a row (a torn last line from a crash, an edit) is skipped."""
    text = _metrics_text(folder)
    if not text:
        return []
    columns, lines = _metric_lines(text)
    return [row for line in lines if (row := _metric_row(line, columns)) is not None]


def read_kept_metrics(folder: str | Path) -> list[dict[str, Any]]:
    """``read_metrics`` as the run will go on from it: a run no process holds drops the rows
    after its latest snapshot, the work a crash lost (a resume truncates them; a window showed
    steps 1-28 of a run it said continues from step 16). A run in training keeps them all."""
    rows = read_metrics(folder)
    last = _kept_step(Path(folder)) if rows else None
    return rows if last is None else [r for r in rows if int(r.get("step", 0)) <= last]


def _kept_step(folder: Path) -> int | None:
    """The step a run no process holds goes on from (``expected_snapshot``'s: latest.json's,
    when its snapshot is gone, kept the rows of the lost work after it), or None: a run in
    training keeps all it wrote, a run with no snapshot all there is."""
    if RunLock(folder).held_elsewhere():
        return None
    kept = expected_snapshot(folder)
    return kept[1] if kept is not None else None


def read_kept_samples(folder: str | Path) -> list[dict[str, Any]]:
    """``read_samples`` as the run will go on from it: like ``read_kept_metrics``, a run no
    process holds drops the samples after the snapshot a resume takes; and of the samples of one
    step with one prompt only the newest is kept (a resume from an older snapshot samples those
    steps again: the Gallery listed step 165 twice)."""
    rows = read_samples(folder)
    kept = _kept_step(Path(folder))
    if kept is not None:
        rows = [r for r in rows if int(r.get("step", 0)) <= kept]
    last = {(r.get("step"), r.get("prompt")): i for i, r in enumerate(rows)}
    return [r for i, r in enumerate(rows) if last[(r.get("step"), r.get("prompt"))] == i]


def truncate_metrics(folder: Path, step: int) -> int:
    """Drop the rows after ``step`` (they belong to work lost in a crash) and an unfinished last
    line (the next row would be glued to it) -- atomic rewrite. Every other line is kept as it
    is, rows or not (a byte-order mark or a damaged header had the rewrite keep only the rows it
    could read: 60 steps of history went without a word). Returns how many lines were kept that
    are not rows."""
    text = _metrics_text(folder)
    if text is None:
        return 0
    columns, lines = _metric_lines(text)
    if lines:
        lines.pop()  # "" after the last newline, or a torn last line (no row can follow it)
    keep, odd = [",".join(METRIC_FIELDS)], 0
    for line in lines:
        row = _metric_row(line, columns)
        if row is None:
            odd += 1
            keep.append(line)
        elif row["step"] <= step:  # in today's column order (an older file's too)
            keep.append(",".join("" if row.get(k) is None else str(row[k]) for k in METRIC_FIELDS))
    ckpt.atomic_write_bytes(folder / METRICS, "\n".join([*keep, ""]).encode())
    return odd


def truncate_samples(folder: Path, step: int) -> int:
    """Drop the sample records after ``step``, samples of work a crash lost (a resume from
    ``step`` trains those steps again and samples them anew: a lost step-39 sample came back in
    the Gallery once the run had passed it), as ``truncate_metrics`` drops their rows. Streamed
    into a temporary file (the file may be large), then an atomic replace; lines that are no
    record are kept as they are. Returns how many were dropped."""
    path = folder / SAMPLES
    if path.is_symlink():
        return 0  # not the run's own file (appending refuses it): left as it is
    try:
        f = open_regular(path, SAMPLES)
    except MambaStudioError:
        return 0  # none (or not a plain file: appending refuses it too)
    dropped = 0
    fd, tmp = ckpt.create_temp(path)  # (a crash leaves it: clean_stale removes it)
    try:
        with f, os.fdopen(fd, "wb") as out:
            for line in iter(lambda: f.readline(1 << 24), b""):  # (a longer line: in pieces)
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    row = None
                s = row.get("step") if isinstance(row, dict) else None
                if isinstance(s, int) and not isinstance(s, bool) and s > step:
                    dropped += 1
                    continue
                out.write(line)
            if dropped:
                out.flush()
                os.fsync(out.fileno())
        if dropped:
            os.replace(tmp, path)
            fsync_dir(folder)
    finally:
        Path(tmp).unlink(missing_ok=True)  # (gone once it replaced the file)
    return dropped


def write_status(folder: Path, state: str, **fields: Any) -> None:
    ckpt.atomic_write_json(folder / STATUS, {"state": state, "pid": os.getpid(),
                                             "updated": now_iso(), **fields}, make_parents=False)


def read_status(folder: str | Path) -> dict[str, Any]:
    """status.json ({"state", "step", "total_steps", "best_val_loss", "pid", "updated"}; its
    step is the latest saved one), or {} when it cannot be read."""
    folder = Path(folder)
    try:
        d = _read(folder / STATUS, STATUS)
    except CheckpointError:
        return {}
    return d if isinstance(d, dict) else {}


# ------------------------------------------------------------------------------ listing
@dataclass(frozen=True)
class RunInfo:
    path: Path
    name: str
    created: str
    preset: str  # its preset, "custom" or "opened weights" (", LoRA r8" / ", WSLA")
    steps: int
    best_val_loss: float | None
    status: str  # running | paused | stopped | finished | diverged | interrupted | broken
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


def list_runs(root: str | Path) -> list[RunInfo]:
    """Every run folder directly under ``root``, newest first (unreadable ones as "broken")."""
    root = Path(root)
    out: list[RunInfo] = []
    if not root.is_dir():
        return out
    for p in root.iterdir():
        if not (p / RUN_JSON).exists():
            continue
        try:
            d = read_run_json(p)
        except CheckpointError as exc:
            out.append(RunInfo(p, p.name, "", "", 0, None, "broken", str(exc)))
            continue
        st = read_status(p)
        state = str(st.get("state", "stopped"))
        if RunLock(p).held_elsewhere():  # a live writer: opened, training or saving right now
            state = "paused" if state == "paused" else "running"  # (status.json says "running"
            # only once its first step starts)
        elif state in ("running", "paused"):
            state = "interrupted"
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
