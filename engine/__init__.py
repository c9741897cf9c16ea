"""Mamba Studio engine: a headless Mamba-1 language model trainer for the CPU.

Importing ``engine`` sets two process-wide defaults before NumPy/Numba load (only when unset):
* ``NUMBA_CACHE_DIR`` -> ``<checkout>/.numba-cache/<hash of the kernel sources>``: Numba keys its
  cache on each file's timestamp only, so a change to a helper in another file (``_jit.py``) would
  otherwise be served stale; hashing every kernel source makes the cache correct by construction.
* ``OMP_WAIT_POLICY=PASSIVE``: Numba's OpenMP workers and OpenBLAS's threads otherwise spin-wait
  against each other on small machines (measured 3x slower training steps on 2 cores).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _set_runtime_defaults() -> None:
    here = Path(__file__).resolve().parent
    if "NUMBA_CACHE_DIR" not in os.environ:
        digest = hashlib.sha1()
        for src in sorted(here.rglob("*.py")):
            digest.update(src.read_bytes())
        os.environ["NUMBA_CACHE_DIR"] = str(here.parent / ".numba-cache" / digest.hexdigest()[:12])
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


_set_runtime_defaults()
