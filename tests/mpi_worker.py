"""Run under ``mpirun -n N python -m tests.mpi_worker MODE OUT.npz`` by tests/test_distributed.py:
trains ``dist_setup.make_trainer(MODE)`` data-parallel and has rank 0 write what the test checks.
``--kill-at S`` kills rank 1 (SIGKILL) before step S; ``--hang-at S`` stops it answering."""

from __future__ import annotations

import argparse
import os
import signal
import time

import numpy as np

from engine.bench import set_threads
from engine.dataparallel import DataParallel, gathered_state_bytes
from engine.distributed import Comm, threads_per_rank
from tests.dist_setup import STEPS, make_trainer, ordered_reference


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("out")
    ap.add_argument("--kill-at", type=int, default=0)
    ap.add_argument("--hang-at", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--ordered-reference", type=int, default=0,
                    help="no MPI: one process doing what N ranks do, reduced in rank order")
    a = ap.parse_args()
    if a.ordered_reference:
        tr = ordered_reference(a.mode, a.ordered_reference)
        assert tr.trainable is not None
        np.savez(a.out, losses=[h.loss for h in tr.history], norms=[h.grad_norm for h in tr.history],
                 **{f"p.{n}": v for n, v in tr.trainable.tensors.items()})
        return
    comm = Comm(timeout_s=a.timeout)
    threads = threads_per_rank(comm.comm)
    set_threads(threads)
    tr = make_trainer(a.mode, a.steps)
    full_bytes = tr.optimizer.state_bytes()
    dp = DataParallel(tr, comm, threads)

    def on_step(report) -> None:  # type: ignore[no-untyped-def]
        if comm.rank == 1 and report.step + 1 == a.kill_at:
            print(f"rank 1 (pid {os.getpid()}) kills itself", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if comm.rank == 1 and report.step + 1 == a.hang_at:
            print("rank 1 hangs", flush=True)
            time.sleep(3600)

    tr.run(on_step=on_step)
    per_rank = gathered_state_bytes(dp)
    if comm.rank == 0:
        assert tr.trainable is not None
        np.savez(a.out, losses=[h.loss for h in tr.history], norms=[h.grad_norm for h in tr.history],
                 state_bytes=per_rank, threads=threads, full_bytes=full_bytes,
                 reduced=dp.grads.flat.size,
                 **{f"p.{n}": v for n, v in tr.trainable.tensors.items()})


if __name__ == "__main__":
    main()
