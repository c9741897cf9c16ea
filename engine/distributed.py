"""The communication layer of data-parallel training, on MPI through mpi4py (Open MPI or MPICH).

Independent of the trainer and the run folder, it provides:

* ``load_mpi()``             mpi4py's ``MPI`` module, imported only when asked for (importing it
                             initialises MPI); a one-line ``MambaStudioError`` naming the packages
                             when mpi4py or the MPI runtime is missing
* ``balanced_owners``        ZeRO-1 ownership: each trainable tensor to one rank, balanced by size
* ``partition_rows``         a deterministic, seeded split of one global batch across the ranks
* ``FlatBuffer``             one contiguous float32 buffer over named tensors (pack / views)
* ``threads_per_rank``       threads so that ranks x threads = the cores of each host
* ``launched_as``            (rank, size) an MPI launcher gave this process, from its environment
* ``Comm``                   the collectives training needs, each waited on by a watchdog: a rank
                             that does not answer within ``timeout_s`` (dead, hung, partitioned)
                             makes the others print one clear line and end the whole job
                             (``MPI_Abort``) instead of hanging

Gradients are averaged with one fused, in-place ``Allreduce`` over a single flat buffer (no
per-tensor calls); each rank then steps only the tensors it owns and the updated tensors travel
back with one ``Allgatherv``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import MambaStudioError

INSTALL_HINT = ("install an MPI runtime and mpi4py: apt-get install openmpi-bin (or mpich), then "
                "pip install mpi4py")
DEFAULT_TIMEOUT_S = 300.0  # a rank silent this long is taken for dead (rank 0 saving counts)


def load_mpi() -> Any:
    """mpi4py's ``MPI`` module (initialises MPI on first call). MambaStudioError if unavailable."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MambaStudioError(f"distributed training needs mpi4py ({exc}); {INSTALL_HINT}") from None
    except RuntimeError as exc:  # mpi4py present, but no MPI library to load
        raise MambaStudioError(f"no MPI runtime found ({' '.join(str(exc).split())}); "
                               f"{INSTALL_HINT}") from None
    return MPI


# ---------------------------------------------------------------------------------- planning
_LAUNCHER_ENV = (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
                 ("PMI_RANK", "PMI_SIZE"),  # MPICH (Hydra), Intel MPI
                 ("PMIX_RANK", "PMIX_SIZE"))


def launched_as(env: dict[str, str] | None = None) -> tuple[int, int]:
    """(rank, size) an MPI launcher (mpirun, mpiexec) set in the environment, without importing
    MPI; (0, 1) when none did or the values are not numbers."""
    env = dict(os.environ) if env is None else env
    for rank_key, size_key in _LAUNCHER_ENV:
        rank, size = env.get(rank_key, ""), env.get(size_key, "")
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size)
    return 0, 1


def balanced_owners(sizes: Iterable[int], count: int) -> tuple[int, ...]:
    """Owner rank of each tensor (by position), largest tensors first onto the least-loaded rank
    (ties: the lower rank). Deterministic: every rank computes the same answer."""
    sizes = list(sizes)
    load = [0] * count
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(count), key=lambda r: (load[r], r))
        owners[i] = r
        load[r] += sizes[i]
    return tuple(owners)


def partition_rows(n: int, step: int, seed: int, rank: int, size: int) -> np.ndarray:
    """Which of the ``n`` rows of one global batch ``rank`` of ``size`` computes: positions
    (sorted, int64) from a permutation seeded by (seed, step), cut into ``size`` near-equal parts
    (the first n % size ranks get one more). Every position belongs to exactly one rank; a pure
    function, so the ranks agree without talking."""
    perm = np.random.default_rng([seed, step, 0x6D7069]).permutation(n)
    return np.sort(np.array_split(perm, size)[rank])


@dataclass
class FlatBuffer:
    """One float32 buffer ``flat`` (total,) over tensors ``names`` with ``shapes``, in that order."""

    names: list[str]
    shapes: list[tuple[int, ...]]

    def __post_init__(self) -> None:
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)]).tolist()
        self.flat = np.zeros(self.offsets[-1], dtype=np.float32)

    @classmethod
    def over(cls, tensors: dict[str, np.ndarray], names: list[str]) -> FlatBuffer:
        return cls(list(names), [tuple(tensors[n].shape) for n in names])

    def pack(self, tensors: dict[str, np.ndarray], names: Iterable[str] | None = None) -> None:
        """Copy ``tensors`` (all of ``names``, default all) into their places in ``flat``."""
        index = {n: i for i, n in enumerate(self.names)}
        for n in self.names if names is None else names:
            i = index[n]
            self.flat[self.offsets[i] : self.offsets[i + 1]] = tensors[n].reshape(-1)

    def views(self) -> dict[str, np.ndarray]:
        """name -> a view of ``flat`` with the tensor's shape (no copy)."""
        return {n: self.flat[self.offsets[i] : self.offsets[i + 1]].reshape(self.shapes[i])
                for i, n in enumerate(self.names)}

    def unpack(self, tensors: dict[str, np.ndarray], names: Iterable[str]) -> None:
        """Copy ``names`` from ``flat`` into the arrays of ``tensors`` (in place)."""
        index = {n: i for i, n in enumerate(self.names)}
        for n in names:
            i = index[n]
            tensors[n].reshape(-1)[...] = self.flat[self.offsets[i] : self.offsets[i + 1]]


# ---------------------------------------------------------------------------------- the world
def threads_per_rank(comm: Any) -> int:
    """Threads for this rank so that (ranks on this host) x threads = the host's cores: the
    union of the local ranks' CPU affinities, split evenly (at least 1; never more than this
    rank may run on). A collective over ``comm``."""
    MPI = load_mpi()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        mine = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(
            range(os.cpu_count() or 1))
        union = set().union(*node.allgather(mine))
        return max(1, min(len(mine), len(union) // node.Get_size()))
    finally:
        node.Free()


SETUP_POLL_S = 0.05  # how often a rank waiting for the run's setup looks again


class Comm:
    """The collectives of data-parallel training over ``comm`` (default COMM_WORLD), each a
    non-blocking call waited on with a deadline of ``timeout_s``. ``idle`` is called while
    waiting (a follower serves rank 0's requests there). On a timeout the rank prints one line
    naming what it waited for, then ``Abort``s the job (the launcher ends every rank)."""

    def __init__(self, comm: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.MPI = load_mpi()
        self.comm = comm if comm is not None else self.MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout_s = timeout_s
        self.idle: Callable[[], None] | None = None
        self.waited_s = 0.0  # time spent in collectives (communication + waiting for peers)

    # ------------------------------------------------------------------ waiting
    def wait(self, req: Any, what: str) -> None:
        """Complete ``req`` or end the job after ``timeout_s`` without progress."""
        t0 = time.perf_counter()
        polls = 0
        while not req.Test():
            if self.idle is not None:
                self.idle()
            polls += 1
            if polls > 2000:  # spin briefly (fast collectives), then yield the core
                time.sleep(0.0002)
                if time.perf_counter() - t0 > self.timeout_s:
                    self.abort(f"rank {self.rank}: no answer from the other ranks for "
                               f"{self.timeout_s:.0f} s in {what}; a rank died or hung, ending the "
                               "job (resume from the last snapshot with any number of ranks)")
        self.waited_s += time.perf_counter() - t0

    def abort(self, message: str, code: int = 3) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"\nerror: {message}\n")  # (on a line of its own: it was glued to the
        # end of the progress line)
        sys.stderr.flush()
        self.comm.Abort(code)

    # ------------------------------------------------------------------ collectives
    def allreduce_sum(self, buf: np.ndarray, what: str = "the gradient all-reduce") -> None:
        """In-place sum of ``buf`` over all ranks (one fused call for the whole buffer)."""
        if self.size > 1:
            self.wait(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM), what)

    def any(self, flag: bool, what: str) -> bool:
        """True on every rank when ``flag`` is True on any rank."""
        buf = np.array([1 if flag else 0], dtype=np.int32)
        if self.size > 1:
            self.wait(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.MAX), what)
        return bool(buf[0])

    def allgatherv(self, flat: np.ndarray, counts: list[int], what: str) -> None:
        """Rank r's segment of ``flat`` (rank-ordered, ``counts[r]`` elements) to every rank."""
        if self.size > 1:
            displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
            req = self.comm.Iallgatherv(self.MPI.IN_PLACE,
                                        [flat, (list(counts), displs), self.MPI.FLOAT])
            self.wait(req, what)

    def bcast(self, buf: np.ndarray, what: str, root: int = 0) -> None:
        if self.size > 1:
            self.wait(self.comm.Ibcast(buf, root=root), what)

    def bcast_object(self, obj: Any, root: int = 0) -> Any:
        """Any picklable object from ``root`` (setup only; blocking, without a deadline: rank 0
        prepares the run first, minutes for a big corpus). The ranks meet at a barrier polled
        with sleeps first: MPI's blocking broadcast kept each waiting rank spinning (~55 % of
        a core while rank 0 tokenized)."""
        if self.size == 1:
            return obj
        req = self.comm.Ibarrier()
        while not req.Test():
            time.sleep(SETUP_POLL_S)
        return self.comm.bcast(obj, root=root)

    def allgather_object(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj) if self.size > 1 else [obj]


def mpirun_command(n: int, launcher: str = "mpirun") -> list[str]:
    """``[launcher, -n, N, ...]`` for a local job of ``n`` ranks: Open MPI gets
    ``--oversubscribe --allow-run-as-root`` (more ranks than cores, and root in CI containers) and
    ``--bind-to none`` (threads per rank are set by ``threads_per_rank``); MPICH needs none."""
    import shutil
    import subprocess

    exe = shutil.which(launcher)
    if exe is None:
        raise MambaStudioError(f"{launcher} not found; {INSTALL_HINT}")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    cmd = [exe, "-n", str(n)]
    if "Open MPI" in out.stdout + out.stderr:
        cmd += ["--oversubscribe", "--allow-run-as-root", "--bind-to", "none"]
    return cmd
