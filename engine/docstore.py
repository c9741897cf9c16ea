"""Storing ``Documents`` in a folder (a run folder keeps its training data this way).

Files: ``ids.npy`` (T,) compact unsigned ids and ``doc_offsets.npy`` (n_docs + 1,) int64, both plain
NumPy ``.npy`` (no pickle). ``load_documents`` memory-maps them by default, so a large corpus costs
page cache, not private memory, and is checked (dtype, shape, offsets, vocabulary) before use.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from .documents import Documents
from .errors import CorpusError
from .safeio import check_regular

IDS = "ids.npy"
OFFSETS = "doc_offsets.npy"
_STORE_LIMIT = 64 << 30  # bytes per stored array: far above any corpus this engine trains on


def npy_bytes(a: np.ndarray) -> bytes:
    """``a`` as the bytes of a .npy file (no pickles)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def save_documents(folder: str | Path, docs: Documents) -> None:
    """Write ``docs`` into ``folder`` (created if needed). Each file is written to a temporary
    name and renamed, so a crash leaves the previous file or the new one, never half of one."""
    from .checkpoint import atomic_write_bytes

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, arr in ((IDS, docs.ids), (OFFSETS, docs.offsets)):
        atomic_write_bytes(folder / name, npy_bytes(arr))  # (a fixed temp name: two writers
        # collided, and a link there was followed)


def _load(path: Path, mmap: bool) -> np.ndarray:
    check_regular(path, "token file", _STORE_LIMIT)
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CorpusError(f"{path}: not a readable .npy token file ({exc}); "
                          "rebuild it from the corpus") from None


def load_documents(folder: str | Path, mmap: bool = True, vocab_size: int | None = None,
                   eos_id: int | None = None) -> Documents:
    """Read the ``Documents`` saved in ``folder`` (memory-mapped unless ``mmap=False``).

    Raises CorpusError naming the file when a file is missing, not a regular file, corrupt, of the
    wrong dtype or shape, when the offsets do not describe the id array, or (given ``vocab_size``
    / ``eos_id``) when an id is outside the vocabulary or a document does not start with EOS."""
    folder = Path(folder)
    ids, offsets = _load(folder / IDS, mmap), _load(folder / OFFSETS, mmap)
    bad = None
    if ids.ndim != 1 or ids.dtype.kind != "u" or len(ids) < 2:
        bad = (IDS, f"expected a 1-D unsigned id array of 2 or more, got {ids.dtype} {ids.shape}")
    elif offsets.ndim != 1 or offsets.dtype != np.int64 or len(offsets) < 2:
        bad = (OFFSETS, f"expected 1-D int64 offsets, got {offsets.dtype} {offsets.shape}")
    elif offsets[0] != 0 or offsets[-1] != len(ids) - 1 or not np.all(np.diff(offsets) > 0):
        bad = (OFFSETS, f"offsets do not describe the {len(ids):,} ids in {IDS}")
    elif vocab_size is not None and int(ids.max()) >= vocab_size:
        bad = (IDS, f"id {int(ids.max())} is outside the vocabulary of {vocab_size:,}")
    elif eos_id is not None and not (np.all(ids[offsets] == eos_id)):
        bad = (IDS, f"documents do not start with the end-of-text id {eos_id}")
    if bad is not None:
        raise CorpusError(f"{folder / bad[0]}: {bad[1]}; rebuild it from the corpus")
    return Documents(ids, np.asarray(offsets))
