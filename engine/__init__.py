"""Mamba Studio engine: a headless Mamba-1 language model trainer for the CPU.

Importing ``engine`` sets process-wide defaults before NumPy/Numba load (only when unset):
* ``NUMBA_CACHE_DIR`` -> ``<checkout>/.numba-cache/<hash of the kernel sources>`` (under
  ``~/.cache`` when the checkout is read-only): Numba keys its cache on each file's timestamp
  only, so a change to a helper in another file (``_jit.py``) would otherwise be served stale;
  hashing every kernel source makes the cache correct by construction.
* ``OMP_WAIT_POLICY=PASSIVE`` and ``OPENBLAS_THREAD_TIMEOUT=4``: Numba's OpenMP workers and
  OpenBLAS's threads otherwise spin-wait against each other after every kernel/GEMM (measured 3x
  slower training steps on 2 cores). OpenBLAS reads its variable when NumPy loads, so this works
  only when ``engine`` is imported before NumPy (the CLI, app and tests do so).

It also tunes glibc's allocator (``_keep_freed_memory``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
from pathlib import Path


def _set_runtime_defaults() -> None:
    here = Path(__file__).resolve().parent
    if "NUMBA_CACHE_DIR" not in os.environ:
        digest = hashlib.sha1()
        for src in sorted(here.rglob("*.py")):
            digest.update(src.read_bytes())
        base = here.parent / ".numba-cache"
        if not os.access(here.parent, os.W_OK):  # installed read-only: use the user's cache
            base = Path.home() / ".cache" / "mamba-studio" / "numba"
        os.environ["NUMBA_CACHE_DIR"] = str(base / digest.hexdigest()[:12])
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


def _keep_freed_memory() -> None:
    """glibc returns every freed block above 128 KiB-32 MiB to the OS and page-faults it back on
    the next step: ~20% of a training step was kernel time. Keep it in the heap instead
    (``MAMBA_STUDIO_MALLOC=default`` opts out)."""
    if not sys.platform.startswith("linux") or os.environ.get("MAMBA_STUDIO_MALLOC") == "default":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: blocks up to 32 MiB come from the heap
    libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never trim the heap top
    libc.mallopt(-2, 64 << 20)  # M_TOP_PAD: grow the heap in 64 MiB steps


_set_runtime_defaults()
_keep_freed_memory()

from .adapt import AdaptReport, FastAdapter  # noqa: E402
from .checkpoint import atomic_write_bytes  # noqa: E402
from .config import PRESETS, MambaConfig, preset  # noqa: E402
from .data import Corpus, CorpusFile, encode_corpus, load_corpus, split_holdout  # noqa: E402
from .docstore import load_documents, save_documents  # noqa: E402
from .documents import RECORDS, Documents, encode_documents, split_documents  # noqa: E402
from .errors import (  # noqa: E402
    CheckpointError,
    CorpusError,
    MambaStudioError,
    TokenizerError,
    TrainingError,
)
from .gpu import GpuUnavailable, open_stepper  # noqa: E402
from .lm import MambaLM  # noqa: E402
from .lora import (  # noqa: E402
    LORA_TARGETS,
    PEFT_REFUSES,
    LoRAConfig,
    LoRATrainable,
    count_trainable,
    load_adapter,
)
from .optim import AdamWConfig, ShardSpec  # noqa: E402
from .packing import PackedRows, iter_batches, line_end_table, pack_spans  # noqa: E402
from .sampling import SamplingConfig  # noqa: E402
from .tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer  # noqa: E402
from .trainer import (  # noqa: E402
    EpochReport,
    EvalReport,
    StepReport,
    TrainConfig,
    TrainControl,
    Trainer,
    evaluate,
    format_duration,
)

__all__ = [
    "LORA_TARGETS", "PEFT_REFUSES", "PRESETS", "AdaptReport", "AdamWConfig", "FastAdapter",
    "BPETokenizer", "ByteTokenizer",
    "CheckpointError", "Corpus", "CorpusError", "CorpusFile", "EpochReport", "EvalReport",
    "LoRAConfig", "LoRATrainable", "MambaConfig", "MambaLM", "MambaStudioError", "SamplingConfig",
    "ShardSpec", "StepReport", "TokenizerError", "TrainConfig", "TrainControl", "Trainer",
    "TrainingError", "atomic_write_bytes", "count_trainable", "GpuUnavailable",
    "open_stepper", "encode_corpus", "evaluate", "format_duration", "load_adapter",
    "load_corpus", "load_tokenizer", "preset", "split_holdout",
]
__all__ += [  # documents, packing and their store
    "RECORDS", "Documents", "PackedRows", "encode_documents", "iter_batches", "line_end_table",
    "load_documents", "pack_spans", "save_documents", "split_documents",
]
