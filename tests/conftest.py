import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from engine.runtime import configure

configure()  # before any test imports NumPy or the kernels (cache folder, threading layer, BLAS)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def _ignore(signum: int, frame: object) -> None:
    """Ignores a signal in this process only: a handler, unlike SIG_IGN, is reset to the
    default by exec, so the children the tests send signals to get the terminal's defaults."""


# pytest started in the background or under nohup inherits these ignored, and a child inherits
# SIG_IGN (the tests then waited 120 s for a stop that never came). A preexec_fn restoring them
# made Popen fork, and a fork runs OpenBLAS's prefork handler, which once waited forever to join
# an idle BLAS thread (the suite hung in tests/app/test_signals.py); without one Popen uses vfork.
for _s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
    if signal.getsignal(_s) == signal.SIG_IGN:
        signal.signal(_s, _ignore)

# tests/interop needs torch, transformers, peft and llama-cpp-python: it runs only from
# scripts/test-interop.sh, in its own virtualenvs, so the main suite never imports torch.
collect_ignore_glob = [] if os.environ.get("MAMBA_STUDIO_INTEROP") else ["interop/*"]


@pytest.fixture(scope="module")
def gpu():  # type: ignore[no-untyped-def]
    """A wgpu device for the GPU tests: skipped without one, a failure where
    MAMBA_STUDIO_REQUIRE_GPU=1 says one must exist (scripts/test.sh installs lavapipe)."""
    from engine.gpu import GpuUnavailable, acquire_device

    got = acquire_device()
    if isinstance(got, GpuUnavailable):
        if os.environ.get("MAMBA_STUDIO_REQUIRE_GPU") == "1":
            pytest.fail(f"a wgpu adapter is required here: {got}")
        pytest.skip(str(got))
    return got


@pytest.fixture(autouse=True)
def _blas_count_kept_where_it_changes_bits(monkeypatch):  # type: ignore[no-untyped-def]
    """Where this machine's BLAS gives other bits at 1 thread than at several (OpenBLAS's
    Haswell kernel), a training run's bits depend on which counts its thread tuner picked, i.e.
    on timing: the tests that compare a resumed run with one run bit for bit would fail by
    chance. There the tuner of every test's training keeps the BLAS count (it still tries the
    Numba counts); the tuner itself is tested in tests/test_threads.py, without this."""
    from engine import trainer
    from engine.threads import ThreadTuner, blas_bits_depend_on_threads

    if not blas_bits_depend_on_threads():
        return

    class KeptBlas(ThreadTuner):
        def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, **k)
            self.candidates = [c for c in self.candidates if c[1] == self.threads]
            self.history = {c: self.history[c] for c in self.candidates}
            self.probe_every = max(self.probe_every,
                                   (len(self.candidates) - 1) * self.probe_steps + 1)

    monkeypatch.setattr(trainer, "ThreadTuner", KeptBlas)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the slowest test's subprocess (every kernel compiled at NUMBA_OPT=0, ~45 s) now, so
    it runs beside the rest of the suite, which keeps about one of two cores busy. Not under
    pytest-xdist: every worker collects every test, so each would start one; there the test
    starts its probe when it runs, beside the other worker's tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if not any(i.nodeid.endswith("::test_kernels_inline_the_scalar_helpers") for i in items):
        return
    from tests.ops.test_helpers_inlined import PROBE_KEY, start_probe

    folder = tempfile.mkdtemp(prefix="mamba-inline-probe-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    probe = start_probe(Path(folder) / "cache")
    config.add_cleanup(probe.kill)  # (no-op once it ended; the test waits for it)
    config.stash[PROBE_KEY] = probe
