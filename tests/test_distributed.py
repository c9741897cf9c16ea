"""Data-parallel training under ``mpirun -n 2`` equals one process at the same global batch.

Each test launches ``tests/mpi_worker.py`` through the MPI launcher in a subprocess. They are
skipped (with the reason) only when MPI is absent and MAMBA_STUDIO_REQUIRE_MPI is unset.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.distributed import balanced_owners, partition_rows
from engine.errors import MambaStudioError
from tests.dist_setup import STEPS, make_trainer

ROOT = Path(__file__).resolve().parents[1]


def _launcher() -> list[str] | None:
    try:
        import mpi4py  # noqa: F401

        from engine.distributed import mpirun_command

        return mpirun_command(2)
    except (ImportError, MambaStudioError) as exc:
        if os.environ.get("MAMBA_STUDIO_REQUIRE_MPI"):
            pytest.fail(f"MPI is required here but unavailable: {exc}")
        pytest.skip(f"no MPI (mpi4py + mpirun): {exc}; bash scripts/setup-mpi.sh installs them")
    return None


def run_mpi(args: list[str], timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = _launcher()
    assert cmd is not None
    t0 = time.monotonic()
    proc = subprocess.run([*cmd, sys.executable, "-m", "tests.mpi_worker", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def ordered_reference(out: Path) -> dict[str, np.ndarray]:
    """What 2 ranks do, in one fresh 1-thread process with the reduction in rank order."""
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "tests.mpi_worker", "full", str(out),
                           "--ordered-reference", "2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


@pytest.fixture(scope="module")
def full_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("mpi")
    _launcher()  # skip before any work when MPI is absent
    # Kernels JIT-compiled in a process round ~1e-8 apart from the same kernels loaded from the
    # Numba cache: fill the cache first, so the job and the reference both load them.
    ordered_reference(tmp / "warm.npz")
    out = tmp / "full.npz"
    proc, _ = run_mpi(["full", str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


def single_process(mode: str, steps: int = STEPS):  # type: ignore[no-untyped-def]
    tr = make_trainer(mode, steps)
    tr.run()
    return tr


def test_two_ranks_losses_equal_single_process_for_20_steps(full_job: dict[str, np.ndarray]) -> None:
    ref = np.array([h.loss for h in single_process("full").history])
    assert len(full_job["losses"]) == len(ref) == STEPS
    np.testing.assert_allclose(full_job["losses"], ref, rtol=1e-6, atol=0)
    assert ref[-1] < ref[0] - 0.2  # it trained (5.94 -> 5.58 with the new init)


def test_two_ranks_parameters_bit_equal_to_ordered_reduction(full_job: dict[str, np.ndarray],
                                                            tmp_path: Path) -> None:
    """The reference runs in a fresh process with 1 thread, like each rank (2 ranks on 2 cores):
    BLAS sums in an order that depends on the thread count."""
    assert full_job["threads"] == 1
    ref = ordered_reference(tmp_path / "ref.npz")
    names = [k for k in ref if k.startswith("p.")]
    assert names
    for n in names:
        assert np.array_equal(full_job[n], ref[n]), n
    np.testing.assert_array_equal(full_job["norms"], ref["norms"])


def test_optimizer_state_bytes_per_rank_are_about_half(full_job: dict[str, np.ndarray]) -> None:
    per_rank, whole = full_job["state_bytes"], int(full_job["full_bytes"])
    assert int(per_rank.sum()) == whole
    assert per_rank.max() <= 0.55 * whole, (per_rank, whole)


@pytest.mark.parametrize("mode", ["lora", "wsla"])
def test_lora_and_wsla_reduce_only_trainable_tensors(mode: str, tmp_path: Path) -> None:
    out = tmp_path / f"{mode}.npz"
    proc, _ = run_mpi([mode, str(out), "--steps", "8"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = dict(np.load(out))
    ref = single_process(mode, 8)
    assert ref.trainable is not None
    n_trainable = sum(a.size for a in ref.trainable.tensors.values())
    assert int(job["reduced"]) == n_trainable < ref.lm.n_params
    np.testing.assert_allclose(job["losses"], [h.loss for h in ref.history], rtol=1e-6, atol=0)
    # 2 ranks add the gradients in another order than one process; AdamW's normalised update
    # m / sqrt(v) amplifies that float32 rounding for near-zero gradients: 2.8e-6 measured on one
    # LoRA A element after 8 steps (the ordered reduction is tested bit-equal above)
    for n, a in ref.trainable.tensors.items():
        np.testing.assert_allclose(job[f"p.{n}"], a, rtol=1e-5, atol=1e-5, err_msg=n)


def test_killed_rank_ends_the_job_without_a_hang(tmp_path: Path) -> None:
    proc, took = run_mpi(["full", str(tmp_path / "x.npz"), "--kill-at", "3"], timeout=300)
    assert proc.returncode != 0
    assert "kills itself" in proc.stdout
    assert not (tmp_path / "x.npz").exists()
    assert took < 240


def test_hung_rank_makes_the_others_exit_with_a_clear_message(tmp_path: Path) -> None:
    proc, took = run_mpi(["full", str(tmp_path / "x.npz"), "--hang-at", "3", "--timeout", "5"],
                         timeout=300)
    assert proc.returncode != 0
    assert "\nerror: rank 0: no answer from the other ranks for 5 s" in proc.stderr, proc.stderr[-2000:]
    assert took < 240


def test_balanced_owners_balance_by_size() -> None:
    sizes = [100, 1, 1, 50, 49, 1]
    owners = balanced_owners(sizes, 2)
    load = [sum(s for s, o in zip(sizes, owners, strict=True) if o == r) for r in range(2)]
    assert load == [101, 101]
    assert balanced_owners(sizes, 2) == owners  # deterministic


def test_partition_rows_covers_the_batch_once() -> None:
    parts = [partition_rows(11, 4, 0, r, 3) for r in range(3)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(11))
    assert [len(p) for p in parts] == [4, 4, 3]
    assert not np.array_equal(partition_rows(11, 5, 0, 0, 3), parts[0])  # reseeded per step


def test_missing_mpi4py_is_one_line_naming_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.distributed import load_mpi

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails as if not installed
    with pytest.raises(MambaStudioError) as err:
        load_mpi()
    msg = str(err.value)
    assert "\n" not in msg
    assert "pip install mpi4py" in msg and "openmpi-bin" in msg and "mpich" in msg
