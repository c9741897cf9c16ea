"""Acquire a wgpu adapter and device, or say precisely why not.

Never raises for a missing GPU: returns ``GpuUnavailable(kind, detail)`` so callers fall back to
the CPU step and can show the reason. ``MAMBA_STUDIO_GPU=off`` disables the GPU path.
Kinds: "disabled", "no-wgpu" (package missing), "no-adapter" (no Vulkan/GL driver),
"limits" (the adapter cannot bind enough storage buffers), "device" (device creation failed).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

NEEDED_STORAGE_BUFFERS = 9  # selective_scan_step.wgsl binds 9 storage buffers


@dataclass(frozen=True)
class GpuUnavailable:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"GPU preview unavailable ({self.kind}): {self.detail}"


@dataclass
class GpuDevice:
    device: Any
    adapter_summary: str
    backend: str
    adapter_type: str


# what libwayland prints (once per probe, straight to fd 2) when the OpenGL/EGL probe looks for
# a Wayland display without XDG_RUNTIME_DIR: harmless, but it read like one of our errors
PROBE_NOISE = "XDG_RUNTIME_DIR is invalid or not set"
_FD2_LOCK = threading.Lock()  # two probes at once would restore each other's redirect


@contextmanager
def quiet_probe_noise() -> Iterator[None]:
    """Drop ``PROBE_NOISE`` lines written to file descriptor 2 inside the block; every other line
    written there is passed on to stderr afterwards, unchanged. One block at a time."""
    with _FD2_LOCK:
        yield from _filtered_fd2()


def _filtered_fd2() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as buf:
        os.dup2(buf.fileno(), 2)
        try:
            yield
        finally:
            with suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            buf.seek(0)
            kept = [ln for ln in buf.read().splitlines(keepends=True)
                    if PROBE_NOISE.encode() not in ln]
            if kept:
                os.write(2, b"".join(kept))


def _enumerate() -> list[Any]:
    import wgpu

    with quiet_probe_noise():
        return list(wgpu.gpu.enumerate_adapters_sync())


def _software(a: Any) -> bool:
    return "CPU" in str(a.info.get("adapter_type", ""))


def acquire_device(allow_software: bool = True) -> GpuDevice | GpuUnavailable:
    """``allow_software=False`` skips CPU adapters (lavapipe), which are slower than the CPU step."""
    if os.environ.get("MAMBA_STUDIO_GPU", "").lower() in ("0", "off", "false", "no"):
        return GpuUnavailable("disabled", "MAMBA_STUDIO_GPU=off")
    try:
        import wgpu  # noqa: F401
    except Exception as exc:  # ImportError or a broken native library
        return GpuUnavailable("no-wgpu", f"the wgpu package cannot be imported ({exc})")
    try:
        adapters = _enumerate()
    except Exception as exc:
        return GpuUnavailable("no-adapter", f"adapter enumeration failed ({exc})")
    if not adapters:
        return GpuUnavailable(
            "no-adapter", "no Vulkan or OpenGL adapter (install mesa-vulkan-drivers for lavapipe)"
        )

    if not allow_software:
        adapters = [a for a in adapters if not _software(a)]
        if not adapters:
            return GpuUnavailable("software-only", "only a software adapter (lavapipe), slower "
                                  "than the CPU step; choose the GPU backend to use it anyway")

    def rank(a: Any) -> tuple[int, int]:
        info = a.info
        backend = str(info.get("backend_type", ""))
        kind = str(info.get("adapter_type", ""))
        return (0 if "Vulkan" in backend else 1, 0 if "Discrete" in kind else 1)

    adapter = sorted(adapters, key=rank)[0]
    limit = int(adapter.limits.get("max-storage-buffers-per-shader-stage", 8))
    if limit < NEEDED_STORAGE_BUFFERS:
        return GpuUnavailable(
            "limits", f"{adapter.summary}: {limit} storage buffers per stage, "
            f"{NEEDED_STORAGE_BUFFERS} needed"
        )
    try:
        device = adapter.request_device_sync(
            required_limits={"max-storage-buffers-per-shader-stage": NEEDED_STORAGE_BUFFERS}
        )
    except Exception as exc:
        return GpuUnavailable("device", f"{adapter.summary}: device creation failed ({exc})")
    info = adapter.info
    return GpuDevice(device, adapter.summary, str(info.get("backend_type", "?")),
                     str(info.get("adapter_type", "?")))
