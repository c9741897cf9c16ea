import os

import pytest

from engine.runtime import configure

configure()  # before any test imports NumPy or the kernels (cache folder, threading layer, BLAS)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

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
