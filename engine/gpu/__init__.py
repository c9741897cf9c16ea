"""wgpu / WGSL inference path: the trained weights mirrored into GPU storage buffers and one
recurrent decoding step of the whole model as compute shaders. Training never needs it; the CPU
step in ``engine.inference`` is the fallback and the reference it is tested against."""

from .device import GpuUnavailable, acquire_device
from .stepper import BACKENDS, GpuStepper, open_stepper, pick_backend

__all__ = ["BACKENDS", "GpuStepper", "GpuUnavailable", "acquire_device", "open_stepper", "pick_backend"]
