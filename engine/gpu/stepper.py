"""``GpuStepper``: the model's weights in wgpu storage buffers and one recurrent step as a chain of
compute dispatches, mirroring ``engine.inference.step``.

Everything is allocated once in ``__init__`` (weight, activation and state buffers, uniform
buffers, pipelines, bind groups); a step only writes the token id, encodes the dispatches and
reads back the logits (v floats). ``sync()`` re-uploads the tensors whose values changed since
the last upload (after an optimizer step), so the GPU always serves the latest weights.

Per layer: rmsnorm -> in_proj matvec -> conv1d_step -> x_proj matvec -> selective_scan_step
(dt_proj + softplus + state update + gate) -> out_proj matvec accumulated into the residual.
Then norm_f and the tied-head matvec. Prefill runs the same chain for every prompt token in one
submission (an ``advance`` dispatch moves the token cursor) and reads back only the last logits.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

import numpy as np

from ..params import EMBEDDINGS, NORM_F, head_name, layer_prefix
from .device import GpuDevice, GpuUnavailable, acquire_device

MAX_TOKENS = 4096


def _shader(name: str) -> str:
    return resources.files("engine.gpu").joinpath("shaders", f"{name}.wgsl").read_text()


def matvec_mode(gpu: GpuDevice) -> str:
    """"workgroup" (one workgroup per row) on real GPUs, "rows" (one invocation per row) on CPU
    adapters such as lavapipe, where workgroup barriers are expensive. MAMBA_STUDIO_GPU_MATVEC
    overrides it."""
    forced = os.environ.get("MAMBA_STUDIO_GPU_MATVEC")
    if forced in ("rows", "workgroup"):
        return forced
    return "rows" if "CPU" in gpu.adapter_type else "workgroup"


class GpuStepper:
    def __init__(self, lm: Any, gpu: GpuDevice) -> None:
        import wgpu

        self.wgpu = wgpu
        self.lm = lm
        self.cfg = lm.config
        self.gpu = gpu
        self.dev = gpu.device
        cfg = self.cfg
        d, e, n, r, k, v = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.d_conv, cfg.vocab_size
        S = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC

        def buf(nbytes: int) -> Any:
            return self.dev.create_buffer(size=max(16, nbytes), usage=S)

        # weights: one buffer per tensor, uploaded by sync()
        self.weights: dict[str, Any] = {}
        self._uploaded: dict[str, np.ndarray] = {}
        for name, a in lm.params.items():
            self.weights[name] = buf(a.size * 4)
        # activations and recurrent state
        self.tokens = buf(MAX_TOKENS * 4)
        self.cursor = buf(4)
        self.h = buf(d * 4)
        self.xn = buf(d * 4)
        self.xz = buf(2 * e * 4)
        self.u = buf(e * 4)
        self.x_dbl = buf((r + 2 * n) * 4)
        self.y = buf(e * 4)
        self.logits = buf(v * 4)
        self.conv = [buf(e * k * 4) for _ in range(cfg.n_layer)]
        self.ssm = [buf(e * n * 4) for _ in range(cfg.n_layer)]
        self._pipes: dict[str, Any] = {}
        self.matvec = matvec_mode(gpu)
        if self.matvec == "workgroup" and max(v, 2 * e) > 65535:
            self.matvec = "rows"  # one dispatch dimension holds at most 65535 workgroups
        for name in ("matvec", "rmsnorm", "embedding", "advance", "conv1d_step",
                     "selective_scan_step"):
            src = "matvec_wg" if name == "matvec" and self.matvec == "workgroup" else name
            module = self.dev.create_shader_module(code=_shader(src))
            self._pipes[name] = self.dev.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": "main"}
            )
        self._steps: list[tuple[str, Any, int]] = []  # (pipeline, bind group, workgroups)
        self._build()
        self.sync()
        self.reset()

    # ------------------------------------------------------------------ setup
    def _uniform(self, *values: int | float) -> Any:
        data = np.zeros(4, dtype=np.uint32)
        for i, val in enumerate(values):
            data[i] = np.array(val, dtype=np.float32).view(np.uint32) if isinstance(val, float) else val
        return self.dev.create_buffer_with_data(data=data, usage=self.wgpu.BufferUsage.UNIFORM)

    def _bind(self, pipe: str, buffers: list[Any]) -> Any:
        p = self._pipes[pipe]
        entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}}
                   for i, b in enumerate(buffers)]
        return self.dev.create_bind_group(layout=p.get_bind_group_layout(0), entries=entries)

    def _add(self, pipe: str, buffers: list[Any], threads: int) -> None:
        if pipe in ("rmsnorm", "advance"):
            groups = 1
        elif pipe == "matvec" and self.matvec == "workgroup":
            groups = threads  # one workgroup per output row
        else:
            groups = -(-threads // 64)
        self._steps.append((pipe, self._bind(pipe, buffers), groups))

    def _build(self) -> None:
        cfg = self.cfg
        d, e, n, r, k, v = cfg.d_model, cfg.d_inner, cfg.d_state, cfg.dt_rank, cfg.d_conv, cfg.vocab_size
        W = self.weights
        self._add("embedding", [self._uniform(d), self.tokens, self.cursor, W[EMBEDDINGS], self.h], d)
        for i in range(cfg.n_layer):
            pre = layer_prefix(i)
            mx = pre + "mixer."
            self._add("rmsnorm", [self._uniform(d, cfg.norm_eps), self.h, W[pre + "norm.weight"],
                                  self.xn], d)
            self._add("matvec", [self._uniform(2 * e, d, 0), W[mx + "in_proj.weight"], self.xn,
                                 self.xz], 2 * e)
            self._add("conv1d_step", [self._uniform(e, k), self.xz, W[mx + "conv1d.weight"],
                                      W[mx + "conv1d.bias"], self.conv[i], self.u], e)
            self._add("matvec", [self._uniform(r + 2 * n, e, 0), W[mx + "x_proj.weight"], self.u,
                                 self.x_dbl], r + 2 * n)
            self._add("selective_scan_step", [
                self._uniform(e, n, r), W[mx + "dt_proj.weight"], W[mx + "dt_proj.bias"],
                W[mx + "A_log"], W[mx + "D"], self.x_dbl, self.u, self.xz, self.ssm[i], self.y], e)
            self._add("matvec", [self._uniform(d, e, 1), W[mx + "out_proj.weight"], self.y,
                                 self.h], d)
        self._add("rmsnorm", [self._uniform(d, cfg.norm_eps), self.h, W[NORM_F], self.xn], d)
        self._add("matvec", [self._uniform(v, d, 0), W[head_name(W)], self.xn, self.logits], v)
        self._advance = self._bind("advance", [self.cursor])

    # ------------------------------------------------------------------ weights
    def sync(self, names: list[str] | None = None) -> list[str]:
        """Upload tensors whose values differ from the last upload (or ``names``); returns them."""
        changed = []
        for name, a in self.lm.params.items():
            if names is not None and name not in names:
                continue
            last = self._uploaded.get(name)
            if last is not None and np.array_equal(last, a):
                continue
            data = np.ascontiguousarray(a, dtype=np.float32)
            self.dev.queue.write_buffer(self.weights[name], 0, data)
            self._uploaded[name] = data.copy()
            changed.append(name)
        return changed

    # ------------------------------------------------------------------ stepping
    def reset(self) -> None:
        """Zero the recurrent state (conv windows and SSM states) and the token cursor."""
        q = self.dev.queue
        for b in (*self.conv, *self.ssm):
            q.write_buffer(b, 0, np.zeros(b.size // 4, np.float32))
        q.write_buffer(self.cursor, 0, np.zeros(1, np.uint32))

    def _run(self, n_tokens: int) -> np.ndarray:
        enc = self.dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        for t in range(n_tokens):
            for pipe, bg, groups in self._steps:
                cp.set_pipeline(self._pipes[pipe])
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(groups)
            if t + 1 < n_tokens:
                cp.set_pipeline(self._pipes["advance"])
                cp.set_bind_group(0, self._advance)
                cp.dispatch_workgroups(1)
        cp.end()
        self.dev.queue.submit([enc.finish()])
        out = self.dev.queue.read_buffer(self.logits)  # also the sync point
        return np.frombuffer(out, dtype=np.float32)[: self.cfg.vocab_size].copy()

    def prefill(self, ids: np.ndarray) -> np.ndarray:
        """Reset, run the prompt ``ids`` (l,), return the last position's logits (v,)."""
        self.reset()
        return self.feed(ids)

    def feed(self, ids: np.ndarray) -> np.ndarray:
        """Run ``ids`` (l >= 1) after what was run so far, ``MAX_TOKENS`` a submission (the
        token buffer's size); return the last position's logits (v,)."""
        ids = np.asarray(ids, dtype=np.uint32).reshape(-1)
        if ids.size == 0:
            raise ValueError("feed needs at least one token")
        for at in range(0, ids.size, MAX_TOKENS):
            piece = ids[at : at + MAX_TOKENS]
            self.dev.queue.write_buffer(self.tokens, 0, piece)
            self.dev.queue.write_buffer(self.cursor, 0, np.zeros(1, np.uint32))
            logits = self._run(piece.size)
        return logits

    def step(self, token: int) -> np.ndarray:
        """Feed one token, return its logits (v,)."""
        return self.feed(np.array([token]))

    @property
    def description(self) -> str:
        return f"wgpu: {self.gpu.adapter_summary} (matvec: {self.matvec})"


def open_stepper(lm: Any, allow_software: bool = True) -> tuple[GpuStepper | None, str]:
    """(stepper, reason): the stepper, or None with the reason the CPU step will be used."""
    got = acquire_device(allow_software)
    if isinstance(got, GpuUnavailable):
        return None, str(got)
    try:
        st = GpuStepper(lm, got)
    except Exception as exc:  # shader/pipeline validation, out of memory
        return None, f"GPU preview unavailable (setup): {exc}"
    return st, st.description


BACKENDS = ("auto", "cpu", "gpu")


def pick_backend(lm: Any, choice: str) -> tuple[GpuStepper | None, str]:
    """The decoding backend for ``choice``: "cpu"; "gpu" (any adapter, lavapipe included); "auto"
    (a hardware GPU if there is one, else the CPU step). Returns (stepper or None, description)."""
    if choice not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {choice!r}")
    if choice == "cpu":
        return None, "CPU step (chosen)"
    st, reason = open_stepper(lm, allow_software=choice == "gpu")
    return st, (reason if st is not None else f"CPU step — {reason}")
