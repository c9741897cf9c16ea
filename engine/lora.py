"""LoRA adapters over a frozen base: W = W0 + (alpha / r) * B @ A, with B = 0 at the start.

Targets (per layer unless noted): in_proj, x_proj, dt_proj, out_proj, conv1d (as an (e, k)
matrix), A_log (e, n), embeddings (v, d; the tied head is adapted with it).
Shapes: for a target viewed as a (rows, cols) matrix, A (r, cols) ~ U(+-1/sqrt(cols)), B (rows, r).

Gradients are exact: the model runs on the merged weights, and with G = dL/dW (rows, cols)
    dB = s * G @ A.T,   dA = s * B.T @ G           (s = alpha / r)
For the four projections G = dy.T @ x is never formed: the model hands (dy, x) of each frozen
projection to ``_LoRAHooks.weight_grad``, which uses dB = s * dy.T @ (x A.T), dA = s * (dy B).T @ x.
Every base tensor stays bit-identical (only A and B are optimizer state).

Dropout (PEFT semantics, on the four projections): y = x W0.T + s * drop(x) A.T B.T, computed as
the merged product plus a correction s * ((m - 1) * x) A.T B.T through ``engine.model``'s linear
hooks, with m the inverted-dropout mask; masks are a pure function of (seed, step, micro-batch,
tensor), so activation checkpointing recomputes the same ones, and the two halves a micro-batch
runs as (``Trainer.accumulate``) draw the rows of the same mask (the generator advanced to the
half's first row). conv1d, A_log and embeddings
adapters get no dropout (as in PEFT's embedding LoRA). Evaluation and generation use no dropout.

PEFT export: ``adapter_config.json`` + ``adapter_model.safetensors`` with keys
``base_model.model.<module>.lora_A.weight`` (r, in) / ``lora_B.weight`` (out, r); embeddings use
``lora_embedding_A`` (r, v) / ``lora_embedding_B`` (d, r) as PEFT does.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as ckpt
from .errors import CheckpointError, MambaStudioError
from .params import EMBEDDINGS, Params, short_name

LORA_TARGETS = ("in_proj", "x_proj", "dt_proj", "out_proj", "conv1d", "A_log", "embeddings")
# Targets no transformers line applies exactly through PEFT un-merged (PEFT refuses out_proj and
# conv1d on Mamba, drops A_log, adapts embeddings but not the tied head): share those runs with
# the merged export. Measured per line in engine.export.peft.PEFT_SUPPORT (the interop suite
# checks both agree).
PEFT_REFUSES = ("out_proj", "conv1d", "A_log", "embeddings")
# Targets PEFT applies exactly un-merged on some transformers lines only, and the lines that
# skip them: 5.x reads dt_proj.weight directly, so its adapter is bypassed there (logits off by
# up to 0.9 after 20 steps, measured); the merged export is exact everywhere
PEFT_PARTIAL = {"dt_proj": "transformers 5.x"}
# A LoRA's targets when none are named (a settings file's [train.lora] without targets, the
# window's boxes): PEFT applies both exactly un-merged on every transformers line, so the
# adapter exports (out_proj, the engine's default before, made an adapter PEFT refuses)
DEFAULT_LORA_TARGETS = ("in_proj", "x_proj")


@dataclass(frozen=True)
class LoRAConfig:
    targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    rank: int = 8
    alpha: float | None = None  # None -> alpha = rank (scale 1)
    dropout: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        from .limits import check_lora

        object.__setattr__(self, "targets", tuple(self.targets))
        check_lora(self)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["targets"] = list(self.targets)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoRAConfig:
        return cls(**{**d, "targets": tuple(d["targets"])})


def _peft_keys(name: str) -> tuple[str, str]:
    """PEFT's (A key, B key) for a parameter; the embedding uses lora_embedding_A/B, which store
    our B.T (r, v) and A.T (d, r)."""
    module = "base_model.model." + (name.rsplit(".", 1)[0] if name.endswith(".weight") else name)
    if name == EMBEDDINGS:
        return module + ".lora_embedding_A", module + ".lora_embedding_B"
    return module + ".lora_A.weight", module + ".lora_B.weight"


def _matrix_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    return (shape[0], int(np.prod(shape[1:])))


@dataclass
class Adapter:
    name: str  # full parameter name
    A: np.ndarray  # (r, cols)
    B: np.ndarray  # (rows, r)
    scale: float

    def delta(self) -> np.ndarray:
        return (self.B @ self.A) * np.float32(self.scale)


@dataclass
class LoRATrainable:
    """Adapters over ``params``; keeps a frozen copy of each target's base weight and writes the
    merged weight into ``params`` (so evaluation and generation always see the adapted model)."""

    params: Params
    cfg: LoRAConfig
    adapters: dict[str, Adapter] = field(default_factory=dict)
    base: Params = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._extra: dict[int, dict[str, np.ndarray]] = {}  # per part, gathered by the hooks
        rng = np.random.default_rng(self.cfg.seed)
        for name, w in self.params.items():
            sn = short_name(name)
            if sn not in self.cfg.targets:
                continue
            rows, cols = _matrix_shape(w.shape)
            r = min(self.cfg.rank, rows, cols)
            if r < self.cfg.rank:
                self.notices.append(f"{name}: rank clamped to {r} (matrix is {rows}x{cols})")
            alpha = self.cfg.alpha if self.cfg.alpha is not None else self.cfg.rank
            A = rng.uniform(-1, 1, size=(r, cols)).astype(w.dtype) / np.float32(np.sqrt(cols))
            B = np.zeros((rows, r), dtype=w.dtype)
            self.adapters[name] = Adapter(name, A, B, float(alpha) / r)
            self.base[name] = w.copy()
        if not self.adapters:
            raise ValueError(f"LoRA targets {list(self.cfg.targets)} matched no parameter")
        from .export.peft import peft_notices  # measured per transformers line

        self.notices.extend(peft_notices(sorted({short_name(n) for n in self.adapters})))
        self._index_tensors()

    def _index_tensors(self) -> None:
        """``tensors`` (what AdamW updates) are the adapters' own A and B arrays."""
        self.tensors = {}
        for name, ad in self.adapters.items():
            self.tensors[name + "::lora_A"] = ad.A
            self.tensors[name + "::lora_B"] = ad.B

    # -------------------------------------------------------------- Trainable protocol
    def effective(self) -> Params:
        return self.params

    def grads(self, model_grads: Params) -> Params:
        """Adapter gradients: projections from the low-rank terms the hooks gathered since the
        last call (the model never forms their dW); other targets (conv1d, A_log, embeddings),
        or any target whose merged-weight gradient is in ``model_grads``, by projecting it."""
        out: Params = {}
        for name, ad in self.adapters.items():
            if name not in model_grads:
                continue
            G = model_grads[name].reshape(ad.B.shape[0], ad.A.shape[1])
            s = ad.B.dtype.type(ad.scale)
            out[name + "::lora_A"] = (ad.B.T @ G) * s
            out[name + "::lora_B"] = (G @ ad.A.T) * s
        for part in sorted(self._extra):  # in a fixed order: the same bits every time
            for key, g in self._extra[part].items():
                out[key] = out[key] + g if key in out else g
        for key, t in self.tensors.items():  # a target no micro-batch reached
            if key not in out:
                out[key] = np.zeros_like(t)
        self._extra = {}
        return out

    def dropout_hooks(self, step: int, micro: int, part: int = 0,
                      first_row: int = 0) -> _LoRAHooks | None:
        """Linear hooks for one micro-batch: low-rank gradients of the projection adapters and,
        with dropout > 0, the adapter-input dropout. None when no projection is adapted. For the
        halves a micro-batch runs as (at once in two threads, or one after the other): ``part``
        (0, 1) keeps each half's terms apart until ``grads`` adds them in order;
        ``first_row``, the half's first row of the micro-batch's (b l, in) inputs, so its
        dropout masks are those rows of the whole's.
        (The two halves' threads may call this at once: each makes its own part's store, with
        one ``dict.setdefault``, atomic in CPython.)"""
        if not any(short_name(n) in _PROJECTIONS for n in self.adapters):
            return None
        return _LoRAHooks(self, step, micro, self._extra.setdefault(part, {}), first_row)

    def refresh(self) -> None:
        self.merge()

    def needs(self) -> list[str]:
        """Only the non-projection targets need their full merged-weight gradient."""
        return [n for n in self.adapters if short_name(n) not in _PROJECTIONS]

    def decays(self, name: str) -> bool:
        return True

    def describe(self) -> str:
        return (f"LoRA r={self.cfg.rank}: {len(self.adapters)} modules adapted, "
                f"{self.n_trainable:,} trainable parameters")

    @property
    def n_trainable(self) -> int:
        return int(sum(a.size for a in self.tensors.values()))

    # -------------------------------------------------------------- merge / unmerge
    def merge(self) -> None:
        """params[name] = base + s B @ A for every target, formed in place (no temporaries; the
        same operations, so the same bits, as ``base + ad.delta()``)."""
        for name, ad in self.adapters.items():
            w = self.params[name]
            if not w.flags.c_contiguous:
                w[...] = self.base[name] + ad.delta().reshape(w.shape)
                continue
            flat = w.reshape(ad.B.shape[0], ad.A.shape[1])  # a view
            np.matmul(ad.B, ad.A, out=flat)
            flat *= np.float32(ad.scale)
            w += self.base[name]

    def unmerge(self) -> None:
        """Put the exact base weights back into ``params``."""
        for name in self.adapters:
            self.params[name][...] = self.base[name]

    # -------------------------------------------------------------- state (for resume)
    def state_tensors(self) -> dict[str, np.ndarray]:
        out = {f"lora_base.{n}": w for n, w in self.base.items()}
        for n, ad in self.adapters.items():
            out[f"lora.{n}.A"] = ad.A
            out[f"lora.{n}.B"] = ad.B
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"tensors": {lora_base.<name>, lora.<name>.A, lora.<name>.B}}`` (live arrays)."""
        return {"tensors": self.state_tensors()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_state_tensors(state["tensors"])

    def load_state_tensors(self, tensors: dict[str, np.ndarray]) -> None:
        for n, ad in self.adapters.items():
            for key, dst in ((f"lora.{n}.A", ad.A), (f"lora.{n}.B", ad.B)):
                if key not in tensors or tensors[key].shape != dst.shape:
                    raise CheckpointError(f"adapter state {key} missing or of the wrong shape")
                dst[...] = tensors[key]
            self.base[n][...] = tensors[f"lora_base.{n}"]
        self.merge()

    # -------------------------------------------------------------- PEFT format
    def save_adapter(self, folder: str | Path, base_model: str = "") -> list[str]:
        """Write ``adapter_config.json`` + ``adapter_model.safetensors``; returns warnings."""
        folder = Path(folder)
        tensors: dict[str, np.ndarray] = {}
        for n, ad in self.adapters.items():
            a_key, b_key = _peft_keys(n)
            if n == EMBEDDINGS:
                tensors[a_key], tensors[b_key] = ad.B.T.copy(), ad.A.T.copy()
            else:
                tensors[a_key], tensors[b_key] = ad.A, ad.B
        ranks = {ad.A.shape[0] for ad in self.adapters.values()}
        config = {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_model,
            "r": self.cfg.rank,
            "lora_alpha": self.cfg.alpha if self.cfg.alpha is not None else self.cfg.rank,
            "lora_dropout": self.cfg.dropout,
            "target_modules": sorted({short_name(n) for n in self.adapters}),
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "init_lora_weights": True,
            "modules_to_save": None,
            "rank_pattern": {} if ranks == {self.cfg.rank} else {
                short_name(n): ad.A.shape[0] for n, ad in self.adapters.items()
                if ad.A.shape[0] != self.cfg.rank},
            "alpha_pattern": {},
            "use_rslora": False,
            "use_dora": False,
        }
        ckpt.atomic_write_json(folder / "adapter_config.json", config)
        ckpt.atomic_write_tensors(folder / "adapter_model.safetensors", tensors)
        return [m for m in self.notices if "PEFT" in m]


_PROJECTIONS = ("in_proj", "x_proj", "dt_proj", "out_proj")
_ROWS = 128  # row block of the adapter-gradient products (128-512 measured; 128 best)


class _LoRAHooks:
    """engine.model.LinearHooks for one micro-batch (see the module docstring): with
    G = dy.T @ x never formed, dB = s * dy.T @ (x A.T) and dA = s * (dy B).T @ x, i.e.
    2 r (rows + cols) flops per row instead of rows * cols; plus LoRA dropout when configured."""

    def __init__(self, lt: LoRATrainable, step: int, micro: int,
                 extra: dict[str, np.ndarray], first_row: int = 0) -> None:
        self.lt = lt
        self.step = step
        self.micro = micro
        self.extra = extra  # this part's adapter-gradient terms (``LoRATrainable.grads`` adds)
        self.first_row = first_row
        self.cache: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _add(self, key: str, g: np.ndarray) -> None:
        extra = self.extra
        extra[key] = extra[key] + g if key in extra else g

    def weight_grad(self, name: str, dy: np.ndarray, x: np.ndarray) -> None:
        """dB = s dy.T (x A.T), dA = s (dy B).T x over blocks of ``_ROWS`` rows, so each block of
        dy (M, out) and x (M, in) is read by both of its products while in cache (these thin
        products are memory-bound: 20-33 % faster than four whole-M products, measured)."""
        ad = self.lt.adapters.get(name)
        if ad is None:
            return
        s = dy.dtype.type(ad.scale)
        dB = np.zeros(ad.B.shape, dy.dtype)  # (out, r)
        dA = np.zeros(ad.A.shape, dy.dtype)  # (r, in)
        for i in range(0, dy.shape[0], _ROWS):
            xb, dyb = x[i : i + _ROWS], dy[i : i + _ROWS]
            dB += dyb.T @ (xb @ ad.A.T)
            dA += (dyb @ ad.B).T @ xb
        dB *= s
        dA *= s
        self._add(name + "::lora_B", dB)
        self._add(name + "::lora_A", dA)

    def forward(self, name: str, x: np.ndarray) -> np.ndarray | None:
        ad = self.lt.adapters.get(name)
        p = self.lt.cfg.dropout
        if ad is None or p <= 0.0 or short_name(name) not in _PROJECTIONS:
            return None
        bits = np.random.PCG64([self.lt.cfg.seed, self.step, self.micro, zlib.crc32(name.encode())])
        bits.advance(self.first_row * x.shape[1])  # one draw per float64 of ``random``
        keep = np.random.Generator(bits).random(x.shape) >= p
        mm = (keep / (1.0 - p) - 1.0).astype(x.dtype)  # m - 1
        xp = x * mm  # (M, in)
        h = xp @ ad.A.T  # (M, r)
        self.cache[name] = (mm, xp, h)
        return (h @ ad.B.T) * x.dtype.type(ad.scale)

    def backward(self, name: str, dy: np.ndarray) -> np.ndarray | None:
        if name not in self.cache:
            return None
        ad = self.lt.adapters[name]
        mm, xp, h = self.cache.pop(name)
        s = dy.dtype.type(ad.scale)
        dyB = dy @ ad.B  # (M, r)
        self._add(name + "::lora_B", (dy.T @ h) * s)
        self._add(name + "::lora_A", (dyB.T @ xp) * s)
        return (dyB @ ad.A) * mm * s


def load_adapter(params: Params, folder: str | Path) -> LoRATrainable:
    """Apply a PEFT-format adapter folder onto ``params`` (merged); ``.unmerge()`` undoes it."""
    folder = Path(folder)
    from .limits import check_lora
    from .safeio import read_json

    try:
        conf = read_json(folder / "adapter_config.json", what="adapter_config.json")
        if not isinstance(conf, dict):
            raise CheckpointError(f"{folder / 'adapter_config.json'}: not a JSON object")
        cfg = LoRAConfig(tuple(conf["target_modules"]), int(conf["r"]), float(conf["lora_alpha"]))
        check_lora(cfg, str(folder / "adapter_config.json"))
    except MambaStudioError as exc:
        raise CheckpointError(f"{folder}: no usable adapter_config.json ({exc})") from None
    except (KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{folder}: no usable adapter_config.json ({exc!r:.200})") from None
    tensors = {k.replace(".default", ""): v for k, v in
               ckpt.read_tensors(folder / "adapter_model.safetensors").items()}
    lt = LoRATrainable(params, cfg)
    for n, ad in lt.adapters.items():
        a_key, b_key = _peft_keys(n)
        if a_key not in tensors or b_key not in tensors:
            raise CheckpointError(f"{folder}: adapter tensor {a_key} missing")
        if n == EMBEDDINGS:
            B, A = tensors[a_key].T, tensors[b_key].T
        else:
            A, B = tensors[a_key], tensors[b_key]
        if A.shape[1] != ad.A.shape[1] or B.shape[0] != ad.B.shape[0]:
            raise CheckpointError(
                f"{folder}: adapter for {n} has shapes A{A.shape} B{B.shape}, which do not fit "
                f"the base tensor {lt.base[n].shape}"
            )
        r = A.shape[0]
        ad.A = np.ascontiguousarray(A, np.float32)
        ad.B = np.ascontiguousarray(B, np.float32)
        ad.scale = float(conf["lora_alpha"]) / r  # r per tensor: rank_pattern clamps are honoured
    lt._index_tensors()  # the loaded arrays replaced the freshly initialised ones
    lt.merge()
    return lt


def count_trainable(cfg, lora: LoRAConfig | None = None, wsla: bool = False) -> int:
    """Trainable parameters of a run, from the config alone (for a live GUI readout)."""
    from .params import param_shapes

    shapes = param_shapes(cfg)
    if lora is None:
        from .trainable import WSLA_TARGETS

        names = [n for n in shapes if not wsla or short_name(n) in WSLA_TARGETS]
        return int(sum(int(np.prod(shapes[n])) for n in names))
    total = 0
    for name, shape in shapes.items():
        if short_name(name) in lora.targets:
            rows, cols = _matrix_shape(shape)
            total += min(lora.rank, rows, cols) * (rows + cols)
    return total
