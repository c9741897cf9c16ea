"""Data-parallel training of one ``Trainer`` per MPI rank, with ZeRO-1 sharded optimizer state.

``DataParallel(trainer, comm)`` wraps an existing trainer (its step loop is not rewritten): it
replaces ``trainer.optimizer`` by the rank's shard and ``trainer.train_step`` by the version below.
One optimizer step over the global batch ``rows`` (R,) = batch_size x grad_accum rows:

1. ``partition_rows`` gives this rank its ~R/N rows, run as micro-batches of <= batch_size rows;
   gradients are scaled by 1 / (valid targets of the *global* batch), so their sum over ranks is
   exactly the single-process gradient;
2. the losses are summed (float64, 1 value) and the trainable gradients with one fused in-place
   ``Allreduce`` on a flat float32 buffer (frozen tensors under LoRA/WSLA are not in it);
3. every rank computes the same global norm from the same reduced buffer and steps only the
   tensors it owns (``ShardSpec`` with ``balanced_owners``: moments ~1/N of the whole per rank);
4. the owners' updated tensors are shared back with one ``Allgatherv``.

Saving: ``full_optimizer_state()`` (rank 0) collects every rank's moments, so a snapshot holds the
whole unsharded state and can be resumed by any number of ranks. Followers answer those requests
while they wait in any collective (``serve``), so rank 0 may save whenever it likes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from .control import TrainControl
from .distributed import Comm, FlatBuffer, balanced_owners, partition_rows
from .errors import MambaStudioError
from .optim import AdamW, ShardSpec
from .threads import ThreadTuner
from .trainer import Trainer

_REQ, _DATA = 71, 72  # tags on the service communicator


class DataParallel:
    """Makes ``trainer`` one rank of a data-parallel job over ``comm``. Every rank must hold the
    same trainer state when this is built (rank 0's trainable tensors are broadcast to be sure).
    ``threads``: this rank's thread budget (``threads_per_rank``), given to the trainer's tuner."""

    def __init__(self, trainer: Trainer, comm: Comm, threads: int | None = None) -> None:
        assert trainer.trainable is not None
        if threads is not None:  # the trainer's tuner would otherwise take every core per rank
            trainer.thread_tuner = ThreadTuner(threads)
        self.trainer = trainer
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        tensors = trainer.trainable.tensors
        self.names = list(tensors)
        owners = balanced_owners((tensors[n].size for n in self.names), self.size)
        self.owners = owners
        full = trainer.optimizer.state_dict()
        self.optimizer = AdamW(tensors, self.names, trainer.cfg.adamw(),
                               ShardSpec(self.rank, self.size, owners),
                               decay_fn=trainer.trainable.decays)
        self.optimizer.load_state_dict(full)
        trainer.optimizer = self.optimizer
        trainer.train_step = self.train_step  # type: ignore[method-assign]  # the step becomes collective
        # gradients in trainable order; parameters grouped by owner for the Allgatherv
        self.grads = FlatBuffer.over(tensors, self.names)
        self.by_owner = [[n for n, o in zip(self.names, owners, strict=True) if o == r]
                         for r in range(self.size)]
        self.params = FlatBuffer.over(tensors, [n for group in self.by_owner for n in group])
        self.counts = [sum(tensors[n].size for n in group) for group in self.by_owner]
        self.svc = comm.comm.Dup() if self.size > 1 else None
        self.done = False
        self.finishing = False  # "done" before finish() means rank 0 has failed mid-training
        self.on_leader_gone: Callable[[], None] | None = None
        if self.rank != 0:
            comm.idle = self.serve
        self.comm_s = 0.0
        self._sync_weights()

    # ------------------------------------------------------------------ setup
    def _sync_weights(self) -> None:
        """Broadcast rank 0's trainable tensors, then check that every rank runs the same model."""
        tr = self.trainer
        assert tr.trainable is not None
        self.params.pack(tr.trainable.tensors)
        self.comm.bcast(self.params.flat, "the initial weights")
        self.params.unpack(tr.trainable.tensors, self.params.names)
        tr.trainable.refresh()
        h = hashlib.sha256()
        for n, a in sorted(tr.trainable.effective().items()):
            h.update(n.encode())
            h.update(np.ascontiguousarray(a).tobytes())
        digests = self.comm.allgather_object(h.hexdigest())
        if len(set(digests)) != 1:
            raise MambaStudioError("the ranks hold different models after setup (different "
                                   "snapshots or code versions on the hosts?); use one run folder")

    def state_bytes(self) -> int:
        """Optimizer-state bytes held by this rank."""
        return self.optimizer.state_bytes()

    # ------------------------------------------------------------------ one step
    def train_step(self, rows: np.ndarray,
                   workers: int | None = None) -> tuple[float, float, bool, tuple[str, ...]]:
        """Trainer.train_step over the global batch ``rows`` (R,), computed by all ranks together;
        returns the same (loss, pre-clip grad norm, non-finite, skipped tensors) on every rank."""
        tr = self.trainer
        assert tr.trainable is not None
        mine = partition_rows(len(rows), tr.cursor.step, tr.cfg.seed, self.rank, self.size)
        loss_sum, n_valid = tr.accumulate(rows, mine, micro0=self.rank, micro_stride=self.size,
                                          workers=workers)
        grads = tr.trainable.grads(tr._grads)
        w0 = self.comm.waited_s
        total = np.array([loss_sum], dtype=np.float64)
        self.comm.allreduce_sum(total, "the loss all-reduce")
        loss = float(total[0]) / n_valid
        if tr.loss_check is not None:  # (the same loss on every rank: the same decision)
            self.comm_s += self.comm.waited_s - w0
            w0 = self.comm.waited_s
            tr.loss_check(loss)
        if not math.isfinite(loss):
            self.comm_s += self.comm.waited_s - w0
            return loss, float("nan"), True, ()
        self.grads.pack(grads)
        self.comm.allreduce_sum(self.grads.flat)
        reduced = self.grads.views()
        bad = () if np.isfinite(self.grads.flat).all() else tuple(
            n for n, g in reduced.items() if not np.isfinite(g).all())
        stats = self.optimizer.step(tr.trainable.tensors, reduced, tr.current_lr())
        self.params.pack(tr.trainable.tensors, self.by_owner[self.rank])
        self.comm.allgatherv(self.params.flat, self.counts, "the weight all-gather")
        others = [n for r, group in enumerate(self.by_owner) if r != self.rank for n in group]
        self.params.unpack(tr.trainable.tensors, others)
        tr.trainable.refresh()
        self.comm_s += self.comm.waited_s - w0
        return loss, stats.grad_norm, False, bad

    # ------------------------------------------------------------------ saving
    def _own_moments(self) -> np.ndarray:
        opt = self.optimizer
        return np.concatenate([np.concatenate([opt.m[n].reshape(-1), opt.v[n].reshape(-1)])
                               for n in self.by_owner[self.rank]] or [np.zeros(0, np.float32)])

    def serve(self) -> None:
        """Follower: answer rank 0's pending requests (moments for a snapshot, or "done")."""
        if self.svc is None:
            return
        while self.svc.Iprobe(source=0, tag=_REQ):
            cmd = self.svc.recv(source=0, tag=_REQ)
            if cmd == "moments":
                self.svc.Send(self._own_moments(), dest=0, tag=_DATA)
            elif cmd == "done":
                self.done = True
                if not self.finishing and self.on_leader_gone is not None:
                    self.on_leader_gone()

    @contextmanager
    def full_optimizer_state(self) -> Iterator[None]:
        """Rank 0: while active, ``trainer.optimizer`` holds every rank's moments (for a snapshot
        of the whole, unsharded state); its own shard is put back afterwards."""
        opt = self.optimizer
        tensors = self.trainer.trainable.tensors  # type: ignore[union-attr]  # set once the trainer is built
        m, v = dict(opt.m), dict(opt.v)
        for r in range(1, self.size):
            assert self.svc is not None
            self.svc.send("moments", dest=r, tag=_REQ)
            buf = np.empty(2 * self.counts[r], dtype=np.float32)
            self.comm.wait(self.svc.Irecv(buf, source=r, tag=_DATA), f"the moments of rank {r}")
            off = 0
            for n in self.by_owner[r]:
                k = tensors[n].size
                m[n] = buf[off : off + k].reshape(tensors[n].shape)
                v[n] = buf[off + k : off + 2 * k].reshape(tensors[n].shape)
                off += 2 * k
        own_m, own_v = opt.m, opt.v
        opt.m = {n: m[n] for n in self.names}
        opt.v = {n: v[n] for n in self.names}
        try:
            yield
        finally:
            opt.m, opt.v = own_m, own_v

    def finish(self) -> None:
        """Rank 0: release the followers (call once, after the last snapshot). Followers: serve
        until rank 0 says done (watchdog applies)."""
        if self.size == 1 or self.svc is None:
            return
        if self.rank == 0:
            for r in range(1, self.size):
                self.svc.send("done", dest=r, tag=_REQ)
            return
        self.finishing = True
        while not self.done:
            self.comm.wait(_Pending(self), "rank 0's last snapshot")


class _Pending:
    """A request-like object that completes when the follower has been told "done"."""

    def __init__(self, dp: DataParallel) -> None:
        self.dp = dp

    def Test(self) -> bool:  # noqa: N802  (the mpi4py Request interface)
        return self.dp.done


class CollectiveControl:
    """A TrainControl for all ranks: a stop asked on any rank (e.g. the launcher forwarding Ctrl-C)
    stops every rank before the same step. ``Trainer.run`` reads ``stopped`` once per step on every
    rank, so the check is a (tiny) collective. Pausing is not supported across ranks."""

    def __init__(self, comm: Comm, local: TrainControl | None = None) -> None:
        self.comm = comm
        self.local = local or TrainControl()

    def stop(self) -> None:
        self.local.stop()

    def wait_if_paused(self) -> None:
        return None

    @property
    def paused(self) -> bool:
        return False

    @property
    def stopped(self) -> bool:
        return self.comm.any(self.local.stopped, "the stop check")


def gathered_state_bytes(dp: DataParallel) -> list[int]:
    """Optimizer-state bytes of every rank (a collective)."""
    return [int(b) for b in dp.comm.allgather_object(dp.state_bytes())]


__all__ = ["CollectiveControl", "DataParallel", "gathered_state_bytes"]
