"""Process-wide runtime settings, applied only by an explicit :func:`configure` call.

Importing ``engine`` changes nothing in the process. Our own entry points (``python -m engine``,
``python -m app``, the test suite's ``conftest.py``, the benchmarks) call ``configure()`` first,
before NumPy/Numba load, because several of the settings are read once when a library loads:

* **Numba cache folder** (``NUMBA_CACHE_DIR``): ``<checkout>/.numba-cache/<hash of the engine
  sources>``, or ``~/.cache/mamba-studio/numba/<hash>`` when the checkout is read-only. Numba keys
  its cache on each file's timestamp only, so a change to a helper in another file (``_jit.py``)
  would otherwise be served stale; hashing every engine source makes the cache correct by
  construction. Numba fixes a kernel's cache folder when the kernel is decorated, so this must run
  before ``engine.ops`` is imported (later calls keep what the kernels already chose).
* **Threading layer** pinned to ``omp`` (``NUMBA_THREADING_LAYER``): training and the CPU preview
  run parallel kernels from two threads at once; Numba's fallback ``workqueue`` layer is not
  thread-safe and terminates the process when that happens. OpenMP comes from libgomp; when it
  cannot load, :func:`configure` raises a one-line error saying which package to install.
  ``NUMBA_THREADING_LAYER=tbb`` (also thread-safe) is respected when the user sets it.
* **Thread counts**: ``threads`` sets Numba's pool size (``NUMBA_NUM_THREADS``, read when the pool
  starts; every thread then defaults to it) and ``blas_threads`` caps NumPy's BLAS through
  ``threadpoolctl``. Both default to the library defaults (one per core).
* **Spin-waiting** (``OMP_WAIT_POLICY=PASSIVE``, ``OPENBLAS_THREAD_TIMEOUT=4``): Numba's OpenMP
  workers and OpenBLAS's threads otherwise spin against each other after every kernel/GEMM
  (measured 3x slower training steps on 2 cores). libgomp reads its variable when the first
  parallel kernel runs; OpenBLAS reads its variable when NumPy loads, so it only takes effect when
  ``configure()`` runs before ``import numpy`` (the report says whether it did).
* **Allocator** (opt-in, ``tune_allocator=True``, Linux/glibc only): glibc returns every freed
  block above 128 KiB-32 MiB to the OS and page-faults it back on the next step (~20% of a
  training step was kernel time). The tuning keeps freed memory in the heap for the rest of the
  process, so only our own processes (CLI, app) opt in; ``MAMBA_STUDIO_MALLOC=default`` opts out.

Values the user already set in the environment are kept (``setdefault``).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import MambaStudioError

THREAD_SAFE_LAYERS = ("omp", "tbb")


class RuntimeConfigError(MambaStudioError):
    """The process cannot be set up for training (for example libgomp is missing)."""


@dataclass(frozen=True)
class RuntimeReport:
    """What :func:`configure` applied."""

    cache_dir: str
    threading_layer: str
    openblas_env_applied: bool  # False when NumPy was loaded before configure() ran
    allocator_tuned: bool


_report: RuntimeReport | None = None


def default_cache_dir() -> Path:
    """``<checkout>/.numba-cache/<12 hex of sha1 over engine/**/*.py>`` (user cache if read-only)."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha1()
    for src in sorted(here.rglob("*.py")):
        digest.update(src.read_bytes())
    base = here.parent / ".numba-cache"
    if not os.access(here.parent, os.W_OK):
        base = Path.home() / ".cache" / "mamba-studio" / "numba"
    return base / digest.hexdigest()[:12]


def configure(
    *, threads: int | None = None, blas_threads: int | None = None, tune_allocator: bool = False
) -> RuntimeReport:
    """Apply the settings in the module docstring; idempotent (later calls return the first
    report, but still apply ``blas_threads``). Raises :class:`RuntimeConfigError` when no
    thread-safe Numba threading layer can be used."""
    global _report
    if _report is not None:
        _limit_blas(blas_threads)
        return _report
    openblas_env_applied = "numpy" not in sys.modules
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
    os.environ.setdefault("NUMBA_CACHE_DIR", str(default_cache_dir()))
    if threads is not None:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
    layer = os.environ.setdefault("NUMBA_THREADING_LAYER", "omp").lower()
    if layer not in THREAD_SAFE_LAYERS:
        raise RuntimeConfigError(
            f"NUMBA_THREADING_LAYER={layer} is not thread-safe for training with previews; "
            "unset it or set it to omp or tbb"
        )
    _pin_numba(layer, threads)
    _cache_saves_never_fail()
    allocator_tuned = tune_allocator and _keep_freed_memory()
    _limit_blas(blas_threads)
    _report = RuntimeReport(os.environ["NUMBA_CACHE_DIR"], layer, openblas_env_applied, allocator_tuned)
    return _report


def _cache_saves_never_fail() -> None:
    """A compiled kernel Numba cannot save to its cache (a full disk, a file-size limit) is used
    all the same, and that is said once on stderr: a first run on such a disk ended with
    "error: File too large", naming no file."""
    from numba.core import caching

    real = caching.Cache.save_overload
    if getattr(real, "_saves_never_fail", False):
        return
    said: list[str] = []

    def save_overload(self: Any, sig: Any, data: Any) -> None:
        try:
            real(self, sig, data)
        except OSError as exc:
            if not said:
                said.append(str(exc))
                sys.stderr.write(f"warning: could not save compiled kernels in "
                                 f"{os.environ.get('NUMBA_CACHE_DIR', 'the Numba cache')} "
                                 f"({exc.strerror or exc}); they are compiled again by the next "
                                 "process\n")

    save_overload._saves_never_fail = True  # type: ignore[attr-defined]
    caching.Cache.save_overload = save_overload


def _limit_blas(blas_threads: int | None) -> None:
    """Cap NumPy's BLAS pool (loading NumPy first: threadpoolctl only sees loaded libraries)."""
    if blas_threads is None:
        return
    import numpy  # noqa: F401
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=blas_threads, user_api="blas")


def _pin_numba(layer: str, threads: int | None) -> None:
    """Point an already-imported Numba at the same settings and check the layer can load."""
    import numba

    numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    numba.config.THREADING_LAYER = layer
    if threads is not None:
        numba.config.NUMBA_NUM_THREADS = threads
    try:
        running = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet: the layer is chosen at the first one
        running = None
    if running is not None and running != layer:
        raise RuntimeConfigError(
            f"Numba already runs the {running} threading layer; call engine.runtime.configure() "
            "before the first parallel kernel"
        )
    pool = "omppool" if layer == "omp" else "tbbpool"
    try:
        importlib.import_module(f"numba.np.ufunc.{pool}")
    except ImportError as exc:
        fix = (
            "install libgomp (Debian/Ubuntu: apt install libgomp1; Fedora: dnf install libgomp)"
            if layer == "omp"
            else "pip install tbb"
        )
        raise RuntimeConfigError(f"Numba's {layer} threading layer cannot load ({exc}): {fix}") from None


def _keep_freed_memory() -> bool:
    """mallopt: blocks up to 32 MiB come from the heap, the heap top is never trimmed, and it grows
    in 64 MiB steps. Returns whether the tuning was applied."""
    if os.environ.get("MAMBA_STUDIO_MALLOC") == "default" or (libc := _libc()) is None:
        return False
    libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD
    libc.mallopt(-2, 64 << 20)  # M_TOP_PAD
    return True


def release_freed_memory() -> bool:
    """Give memory freed since (a run's activations, gradients and optimizer state, once the run
    is let go) back to the system: ``configure`` keeps freed memory for the next step, and the
    window held ~690 MB after a run until it was closed. glibc's ``malloc_trim``; returns
    whether it ran."""
    if (libc := _libc()) is None:
        return False
    libc.malloc_trim(0)
    return True


def _libc() -> Any:
    """glibc, for its allocator's settings (None off Linux, or without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
