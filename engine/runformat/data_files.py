"""``data/``: what a run trains on, as saved (token ids, document starts, the held-out split, the
manifest with digests and the tokens per byte of the corpus and of its held-out text).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..docstore import npy_bytes
from ..errors import CheckpointError, MambaStudioError
from ..safeio import open_regular, read_json
from . import trainer_state
from .names import DATA, DATA_MANIFEST, IDS, SNAP_TRAINER, SNAPSHOTS, fsync_dir, read_entry, write_json
from .snapshot_dirs import read_pointer, verify_files


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
        return trainer_state.epochs_done(read_json(
            folder / SNAPSHOTS / str(pointer["snapshot"]) / SNAP_TRAINER, what="trainer state"))
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
    lost = ("every snapshot shares these token ids, so the run cannot go on: start a new run on "
            f"the corpus with --init {shlex.quote(str(folder / SNAPSHOTS / 'step-N'))} to keep "
            "its weights")
    try:
        m = read_entry(folder / DATA_MANIFEST, "data manifest")
    except CheckpointError as exc:  # (data/ deleted: "no such data manifest", and no way on)
        raise CheckpointError(f"{exc}; {lost}") from None
    if not isinstance(m, dict) or not isinstance(m.get("sha256"), dict) or not isinstance(
            m.get("n_train"), int):
        raise CheckpointError(f"{folder / DATA_MANIFEST}: not a data manifest")
    if set(m["sha256"]) != {Path(name).name for name in DATA_FILES.values()}:  # an empty map
        # skipped every checksum, and the regular-file check with them: a FIFO there hung eval
        raise CheckpointError(f"{folder / DATA_MANIFEST}: its checksums do not name the run's "
                              "data files " + ", ".join(sorted(Path(n).name
                                                               for n in DATA_FILES.values())))
    verify_files(folder / DATA, m["sha256"], DATA_MANIFEST, lost)
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
