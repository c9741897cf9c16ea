"""A training run spread over the ranks of an MPI job (``python -m engine train --distributed``).

Rank 0 is the leader: it alone opens (or creates) the run folder with ``engine.run`` (lock, crash-
safe snapshots, metrics, progress) and sends the followers what they need to build the same
trainer (spec, model, token ids, trainer state), so followers need no access to the run folder:
it may live on shared storage or on rank 0's disk alone. Every rank then trains through
``DataParallel``; rank 0's ``Run.save`` is wrapped to gather the sharded optimizer moments first,
so every snapshot holds the whole state and resumes with any number of ranks (or none: a plain
``python -m engine train --resume``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from .bench import set_threads
from .control import TrainControl
from .dataparallel import CollectiveControl, DataParallel, gathered_state_bytes
from .distributed import DEFAULT_TIMEOUT_S, Comm, threads_per_rank
from .errors import TrainingError
from .guard import DivergenceGuard
from .run import Run
from .runspec import RunSpec
from .signals import stop_on_signals
from .trainer import Trainer
from .words import plural


class DistributedJob:
    """This process's place in the job: ``leader`` (rank 0) or a follower."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.comm = Comm(timeout_s=timeout_s)
        self.threads = threads_per_rank(self.comm.comm)
        set_threads(self.threads)
        self.leader = self.comm.rank == 0
        self.dp: DataParallel | None = None
        self.state_bytes: list[int] = []

    def describe(self, tr: Trainer) -> str:
        per_rank = -(-tr.rows_per_step // self.comm.size)
        ranks = plural(self.comm.size, "rank")  # ("1 ranks")
        return (f"distributed: {ranks} x {self.threads} thread(s); global batch "
                f"{tr.rows_per_step} rows (batch {tr.cfg.batch_size} x accum {tr.cfg.grad_accum}) = "
                f"{ranks} x <= {per_rank} rows; optimizer state per rank "
                f"{', '.join(f'{b:,}' for b in self.state_bytes)} bytes")

    # ------------------------------------------------------------------ leader
    def open(self, open_run: Callable[[], Run]) -> Run:
        """Rank 0: open the run as a single process would, then start the followers on it."""
        try:
            run = open_run()
        except BaseException:
            self.comm.bcast_object(None)  # the followers exit; rank 0 reports the error
            raise
        tr = run.trainer
        self.comm.bcast_object({"spec": run.spec.to_dict(), "lm": run.lm, "train_ids": tr.train_ids,
                                "val_ids": tr.val_ids, "rows": tr.rows, "val_rows": tr.val_rows,
                                "state": tr.state_dict()})
        self._attach(tr)
        save = run.save

        def save_whole(val_loss: float | None = None) -> Path:
            assert self.dp is not None
            with self.dp.full_optimizer_state():
                return save(val_loss)

        run.save = save_whole  # type: ignore[method-assign]  # rank 0 saves the gathered, whole state
        return run

    def control(self, local: TrainControl) -> CollectiveControl:
        return CollectiveControl(self.comm, local)

    def finish(self) -> None:
        """Rank 0, after its last snapshot (also on errors): release the followers."""
        if self.dp is not None:
            self.dp.finish()

    def comm_fraction(self, seconds: float) -> float:
        """Share of ``seconds`` this rank spent in the collectives of training steps."""
        return (self.dp.comm_s / seconds) if self.dp is not None and seconds > 0 else 0.0

    # ------------------------------------------------------------------ followers
    def follow(self) -> int:
        """A follower's whole life: build the leader's trainer, train in step with it, answer its
        snapshot requests, exit when it says done. Prints nothing (rank 0 reports)."""
        payload: dict[str, Any] | None = self.comm.bcast_object(None)
        if payload is None:
            return 2
        spec = RunSpec.from_dict(payload["spec"])
        tr = Trainer(payload["lm"], payload["train_ids"], payload["val_ids"], spec.train,
                     rows=payload["rows"], val_rows=payload["val_rows"])
        tr.load_state_dict(payload["state"])
        self._attach(tr)
        local = TrainControl()
        with stop_on_signals(local, notify=lambda m: None):
            with suppress(TrainingError):  # the same on rank 0, which saves and reports it
                tr.run(control=self.control(local), guard=DivergenceGuard())
            assert self.dp is not None
            self.dp.finish()
        return 0

    def _attach(self, tr: Trainer) -> None:
        self.dp = DataParallel(tr, self.comm, self.threads)
        self.dp.on_leader_gone = _leader_gone
        self.state_bytes = gathered_state_bytes(self.dp)


def _leader_gone() -> None:
    """Rank 0 ended (an error it reported) while this follower waited in a collective."""
    sys.stdout.flush()
    os._exit(2)
