"""Each WGSL step shader against the CPU op it mirrors (one dispatch each, float32 on both sides).

Skips where wgpu or an adapter is missing, and fails instead when MAMBA_STUDIO_REQUIRE_GPU=1
(scripts/test.sh installs Mesa lavapipe and sets it)."""


import numpy as np
import pytest

from engine.gpu.stepper import _shader
from engine.ops.activations import softplus_forward
from engine.ops.conv1d import conv1d_step
from engine.ops.rmsnorm import rmsnorm_forward
from engine.ops.selective_scan import selective_scan_step

# float32 on both sides, different operation order and exp/log implementations: a few ulps of
# the largest value per output, times the length of the longest dependent chain (d_state, d)
ULP = float(np.finfo(np.float32).eps)


def _dispatch(gpu, shader, uniform, arrays, groups):
    """Run ``shader`` once with a uniform (4 x u32/f32) and storage buffers holding ``arrays``;
    return every storage buffer read back as float32."""
    import wgpu

    dev = gpu.device
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    words = np.zeros(4, np.uint32)
    for i, val in enumerate(uniform):
        words[i] = np.float32(val).view(np.uint32) if isinstance(val, float) else val
    bufs = [dev.create_buffer_with_data(data=words, usage=wgpu.BufferUsage.UNIFORM)]
    bufs += [dev.create_buffer_with_data(data=np.ascontiguousarray(a, np.float32), usage=usage)
             for a in arrays]
    pipe = dev.create_compute_pipeline(
        layout="auto", compute={"module": dev.create_shader_module(code=_shader(shader)),
                                "entry_point": "main"})
    group = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
        for i, b in enumerate(bufs)])
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, group)
    cp.dispatch_workgroups(groups)
    cp.end()
    dev.queue.submit([enc.finish()])
    return [np.frombuffer(dev.queue.read_buffer(b), np.float32).reshape(a.shape)
            for b, a in zip(bufs[1:], arrays, strict=True)]


def _close(got, want, chain):
    np.testing.assert_allclose(got, want, rtol=0, atol=8 * chain * ULP * np.abs(want).max())


@pytest.mark.parametrize("e,n,r", [(8, 4, 1), (70, 16, 5)])
def test_selective_scan_step_shader_matches_cpu_op(gpu, e, n, r):
    rng = np.random.default_rng(e)
    f = np.float32
    dt_w, dt_b = rng.standard_normal((e, r)).astype(f), rng.standard_normal(e).astype(f) - 1
    A_log = (np.log(np.arange(1, n + 1))[None, :] + 0.1 * rng.standard_normal((e, n))).astype(f)
    D, u = rng.standard_normal(e).astype(f), rng.standard_normal(e).astype(f)
    x_dbl, xz = rng.standard_normal(r + 2 * n).astype(f), rng.standard_normal(2 * e).astype(f)
    h = rng.standard_normal((e, n)).astype(f)
    _, _, _, _, _, _, _, state, y = _dispatch(
        gpu, "selective_scan_step", (e, n, r),
        [dt_w, dt_b, A_log, D, x_dbl, u, xz, h, np.zeros(e, f)], -(-e // 64))
    delta = softplus_forward((x_dbl[:r] @ dt_w.T)[None], dt_b)
    h_cpu = h[None].copy()
    y_cpu = selective_scan_step(h_cpu, u[None], delta, A_log, x_dbl[None, r:r + n],
                                x_dbl[None, r + n:], D, xz[None, e:])
    _close(state, h_cpu[0], r + 4)
    _close(y, y_cpu[0], r + n + 4)


@pytest.mark.parametrize("e,k", [(8, 4), (70, 3)])
def test_conv1d_step_shader_matches_cpu_op(gpu, e, k):
    rng = np.random.default_rng(k)
    f = np.float32
    xz, w = rng.standard_normal(2 * e).astype(f), rng.standard_normal((e, 1, k)).astype(f)
    bias, window = rng.standard_normal(e).astype(f), rng.standard_normal((e, k)).astype(f)
    _, _, _, win_gpu, u = _dispatch(gpu, "conv1d_step", (e, k),
                                    [xz, w, bias, window, np.zeros(e, f)], -(-e // 64))
    win_cpu = window[None].copy()
    u_cpu = conv1d_step(win_cpu, xz[None, :e], w, bias)
    np.testing.assert_array_equal(win_gpu, win_cpu[0])  # the shift is exact
    _close(u, u_cpu[0], k + 4)


@pytest.mark.parametrize("d", [16, 200])
def test_rmsnorm_shader_matches_cpu_op(gpu, d):
    rng = np.random.default_rng(d)
    x, w = rng.standard_normal(d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    _, _, y = _dispatch(gpu, "rmsnorm", (d, 1e-5), [x, w, np.zeros(d, np.float32)], 1)
    y_cpu, _ = rmsnorm_forward(x[None], w, 1e-5)
    _close(y, y_cpu[0], d + 4)
