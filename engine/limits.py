"""Validation of every user-supplied setting before anything is allocated, and the memory estimate.

* ``check_hf_config(d, source)``: a ``config.json`` dict (types and ranges) -- runs before
  ``MambaConfig`` is built, so ``num_hidden_layers: 1e8`` is refused before any shape exists.
* ``check_model(cfg)``, ``check_train(tc)``, ``check_lora(lc)``: ranges of the dataclasses.
* ``estimate(spec) -> MemoryEstimate``: bytes for parameters, gradients, AdamW moments,
  activations (for batch x seq_len, with or without activation checkpointing), logits, the
  selective-scan backward workspace and the corpus ids; ``check_fits(spec)`` refuses what does not
  fit in the machine's available memory with the estimate in the message.

The activation model follows ``engine.model.layer_forward``'s ``LayerCache`` (float32, per token
per layer: h, xn (d each), xz (2e), xc, u, dt_pre, delta, y (e each), x_dbl (r + 2n), rstd (1)) and
the backward's largest transient (the scan's per-thread state history and decays and its
per-channel rows, ((2 l + 2) n + 4 l) x 128 floats).
It is an estimate within about 25 % of the measured peak RSS, not a bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import MambaStudioError
from .threads import splits

F32 = 4
SCAN_PAD = 64  # engine.ops.selective_scan.CHUNK: the scan kernels pad e to a multiple of it
SCAN_WIDTHS = (64, 128)  # engine.ops.selective_scan.BWD_CHUNKS' values: the scan backward's job
# width is one of them, by the CPU; the estimate takes the larger need of the two
BASELINE = 300 * 2**20  # interpreter + NumPy + Numba + compiled kernels


class ConfigError(MambaStudioError, ValueError):
    """A setting is of the wrong type or out of range, or the run cannot fit in memory."""


class Problems(ConfigError):
    """Several settings out of range at once: ``problems``, one line each (the message is them
    ``listed``); ``problems_of`` takes them one by one, so a list inside a list never reads
    "(7) 4 problems: (1) ..."."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__(listed(problems))
        self.problems = list(problems)


# (min, max) for the model sizes; generous for a CPU trainer, small enough that shapes are cheap.
MODEL_RANGES: dict[str, tuple[int, int]] = {
    "vocab_size": (1, 1 << 22),
    "d_model": (1, 1 << 16),
    "n_layer": (1, 1024),
    "d_state": (1, 1024),
    "d_conv": (1, 64),
    "expand": (1, 64),
    "dt_rank": (1, 1 << 16),
    "pad_vocab_size_multiple": (1, 1 << 12),
}


class Range(NamedTuple):
    """A setting's allowed values: [lo, hi], or (lo, hi] where ``lo_open``; whole numbers where
    both ends are ints."""

    lo: float
    hi: float
    lo_open: bool = False

    @property
    def whole(self) -> bool:
        """Whether only whole numbers are in it (both ends ints)."""
        return isinstance(self.lo, int) and isinstance(self.hi, int)


# The ranges of the training settings: the one table the engine's checks, the CLI's flags and
# the window's boxes read (the window's had drifted from the others: BPE vocab 300-32,000 and a
# gradient clip up to 1e6 where a settings file or the CLI took 257-1,048,576 and 1e12).
TRAIN_RANGES: dict[str, Range] = {
    "epochs": Range(1, 1_000_000),
    "batch_size": Range(1, 65_536),
    "seq_len": Range(2, 1 << 24),
    "grad_accum": Range(1, 65_536),
    "lr": Range(0.0, 10.0, lo_open=True),
    "min_lr_ratio": Range(0.0, 1.0),
    "decay_fraction": Range(0.0, 1.0),
    "warmup_steps": Range(0, 1 << 40),
    "weight_decay": Range(0.0, 1e3),
    "max_grad_norm": Range(0.0, 1e12),
    "max_delta": Range(0.0, 1e12),
    "beta1": Range(0.0, 0.999999),
    "beta2": Range(0.0, 0.999999999),
    "eps": Range(0.0, 1.0, lo_open=True),
    "seed": Range(0, (1 << 63) - 1),
    "max_steps": Range(1, 1 << 40),  # (None, or 0 where the CLI and the window take it: no limit)
    "eval_every": Range(0, 1 << 40),
    "max_bad_steps": Range(1, 1 << 20),
}
# ... and of a run's own settings and its early stopping, read alike (the window's patience
# took up to 1,000,000 and its target loss up to 1,000 where the CLI took 2^40 and 1e6, and the
# engine any number)
RUN_RANGES: dict[str, Range] = {
    "holdout": Range(0.0, 0.9),
    "autosave_steps": Range(0, 1 << 40),  # (0: off)
    "autosave_minutes": Range(0.0, 1e6),  # (0: off)
}
EARLY_RANGES: dict[str, Range] = {
    "patience": Range(0, 1_000_000),  # held-out evaluations (0: off)
    "target_loss": Range(0.0, 1000.0),  # nats per token (0: off; a loss is ~1-30)
    "min_delta": Range(0.0, 1000.0),
}
_TRAIN_NAMES = {"batch_size": "batch size", "seq_len": "sequence length",  # in messages
                "grad_accum": "gradient accumulation", "lr": "learning rate",
                "warmup_steps": "warmup steps", "weight_decay": "weight decay",
                "max_grad_norm": "gradient clip", "max_steps": "max steps"}
LORA_RANGES: dict[str, Range] = {"rank": Range(1, 4096), "alpha": Range(0.0, 1e6, lo_open=True),
                                 "dropout": Range(0.0, 0.999)}


def in_range(value: Any, name: str, rng: Range, source: str) -> float:
    """``value`` checked against ``rng`` (as an integer where its ends are ints); ConfigError
    naming ``source`` and ``name`` otherwise."""
    if rng.whole:
        return _int(value, name, int(rng.lo), int(rng.hi), source)
    return _float(value, name, rng.lo, rng.hi, source, lo_open=rng.lo_open)


MAX_PARAMS = 1 << 36  # 68 G parameters: no config beyond this is a plausible file
# HF config.json spellings -> MambaConfig field
HF_INT_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "d_model", "d_model": "d_model",
    "num_hidden_layers": "n_layer", "n_layer": "n_layer", "state_size": "d_state",
    "conv_kernel": "d_conv", "expand": "expand", "pad_vocab_size_multiple": "pad_vocab_size_multiple",
    "intermediate_size": "", "time_step_rank": "dt_rank",
}


def _int(value: Any, name: str, lo: int, hi: int, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: {name} must be an integer, got {value!r:.60}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ConfigError(f"{source}: {name} must be an integer, got {value!r}")
    v = int(value)
    if not lo <= v <= hi:
        raise ConfigError(f"{source}: {name} = {v:,} is out of range [{lo:,}, {hi:,}]")
    return v


def _float(value: Any, name: str, lo: float, hi: float, source: str, lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{source}: {name} must be a number, got {value!r:.60}")
    v = float(value)
    if not math.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        bracket = "(" if lo_open else "["
        raise ConfigError(f"{source}: {name} = {v!r} is out of range {bracket}{lo:g}, {hi:g}]")
    return v


def _params_of(d: int, n_layer: int, d_state: int, d_conv: int, expand: int, dt_rank: int,
               vocab: int) -> int:
    e = expand * d
    per_layer = d + 2 * e * d + e * d_conv + e + (dt_rank + 2 * d_state) * e + e * dt_rank + e \
        + e * d_state + e + d * e
    return vocab * d + n_layer * per_layer + d


def check_hf_config(d: Any, source: str = "config.json") -> None:
    """Types and ranges of a ``config.json`` dict, before any MambaConfig or shape is built."""
    if not isinstance(d, dict):
        raise ConfigError(f"{source}: expected a JSON object, got a JSON {type(d).__name__}")
    if d.get("hidden_size", d.get("d_model")) is None:
        raise ConfigError(f"{source}: has neither hidden_size nor d_model (not a Mamba config)")
    if "vocab_size" not in d:
        raise ConfigError(f"{source}: has no vocab_size (not a Mamba config)")
    got: dict[str, int] = {}
    for key, field in HF_INT_KEYS.items():
        if key not in d:
            continue
        if key == "time_step_rank" and d[key] == "auto":
            continue
        lo, hi = MODEL_RANGES.get(field, (1, 1 << 22))
        v = _int(d[key], key, lo, hi, source)
        if field:
            got[field] = v
    if "layer_norm_epsilon" in d:
        _float(d["layer_norm_epsilon"], "layer_norm_epsilon", 0.0, 1.0, source, lo_open=True)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if d.get(key) is not None:  # an id outside the vocabulary was taken without a word
            _int(d[key], key, 0, got.get("vocab_size", MODEL_RANGES["vocab_size"][1] + 1) - 1,
                 source)
    for key in ("use_bias", "use_conv_bias", "tie_word_embeddings", "rms_norm", "residual_in_fp32"):
        if key in d and not isinstance(d[key], bool):
            raise ConfigError(f"{source}: {key} must be true or false, got {d[key]!r:.60}")
    if "model_type" in d and not isinstance(d["model_type"], str):
        raise ConfigError(f"{source}: model_type must be a string, got {d['model_type']!r:.60}")
    dm = got.get("d_model", 1)
    n = _params_of(dm, got.get("n_layer", 1), got.get("d_state", 16), got.get("d_conv", 4),
                   got.get("expand", 2), got.get("dt_rank", math.ceil(dm / 16)),
                   got.get("vocab_size", 1))
    if n > MAX_PARAMS:
        raise ConfigError(f"{source}: describes {n:,} parameters, more than the {MAX_PARAMS:,} allowed")


def check_model(cfg: Any, source: str = "model config") -> None:
    """Ranges of a ``MambaConfig`` (e.g. custom sizes from the app)."""
    for name, (lo, hi) in MODEL_RANGES.items():
        _int(getattr(cfg, name), name, lo, hi, source)
    _float(cfg.norm_eps, "norm_eps", 0.0, 1.0, source, lo_open=True)
    n = n_params(cfg)
    if n > MAX_PARAMS:
        raise ConfigError(f"{source}: {n:,} parameters, more than the {MAX_PARAMS:,} allowed")


def n_params(cfg: Any) -> int:
    """Parameter count of a MambaConfig from its sizes alone (no shapes are built)."""
    return _params_of(cfg.d_model, cfg.n_layer, cfg.d_state, cfg.d_conv, cfg.expand, cfg.dt_rank,
                      cfg.vocab_size)


def lora_problems(targets: Any, rank: Any, alpha: Any, dropout: Any, source: str = "LoRA"
                  ) -> list[str]:
    """Each LoRA setting out of range, one line each: the one rule ``LoRAConfig``, a settings
    file and an adapter_config.json are checked by."""
    from .lora import LORA_TARGETS

    out = []
    if not targets:
        out.append(f"{source}: needs at least one target, from {list(LORA_TARGETS)}")
    unknown = sorted(set(targets) - set(LORA_TARGETS))
    if unknown:
        out.append(f"{source}: unknown target(s) {unknown}; choose from {list(LORA_TARGETS)}")
    return out + problems_of([
        lambda: in_range(rank, "rank", LORA_RANGES["rank"], source),
        lambda: alpha is None or in_range(alpha, "alpha", LORA_RANGES["alpha"], source),
        lambda: in_range(dropout, "dropout", LORA_RANGES["dropout"], source)])


def check_lora(lc: Any, source: str = "LoRA") -> None:
    """ConfigError naming every problem of a ``LoRAConfig`` (``lora_problems``)."""
    problems = lora_problems(lc.targets, lc.rank, lc.alpha, lc.dropout, source)
    if problems:
        raise Problems(problems)


def _no_limit_hint(check: Callable[[], Any]) -> Any:
    """``check`` with "0 means no limit" added to its refusal (``max_steps = -5`` was told
    "[1, ...]" where a file, the CLI and the window take 0 for no limit)."""
    try:
        return check()
    except ConfigError as exc:
        raise ConfigError(f"{exc} (0: no limit)") from None


def train_problems(tc: Any, source: str = "training settings") -> list[str]:
    """Every type or range problem of a ``TrainConfig``, one line each (a settings file with
    four values out of range took four Opens to fix, one named each time)."""
    def wsla_lora() -> None:
        from .trainable import WSLA_TARGETS

        if tc.wsla and set(tc.lora.targets) - set(WSLA_TARGETS):
            raise ConfigError(f"{source}: WSLA + LoRA allows only the x_proj target")

    def ranged(key: str) -> Callable[[], Any]:
        def check() -> float:
            return in_range(getattr(tc, key), _TRAIN_NAMES.get(key, key), TRAIN_RANGES[key],
                            source)

        if key == "max_steps":  # None: no limit
            return lambda: tc.max_steps is None or _no_limit_hint(check)
        return check

    checks: list[Callable[[], Any]] = [ranged(key) for key in TRAIN_RANGES]
    if tc.lora is not None:
        checks += [lambda: check_lora(tc.lora), wsla_lora]
    return problems_of(checks)


def problems_of(checks: Sequence[Callable[[], Any]]) -> list[str]:
    """The message of each check that raises ConfigError / ValueError, in order."""
    out = []
    for check in checks:
        try:
            check()
        except ValueError as exc:  # (ConfigError is one)
            out += exc.problems if isinstance(exc, Problems) else [str(exc)]
    return out


def listed(problems: Sequence[str], most: int = 5) -> str:
    """One line naming the problems: the one, or "N problems: (1) ... (2) ..." (the first
    ``most``, then how many more)."""
    if len(problems) == 1:
        return problems[0]
    shown = " ".join(f"({i}) {p}" for i, p in enumerate(problems[:most], 1))
    more = f" and {len(problems) - most} more" if len(problems) > most else ""
    return f"{len(problems)} problems: {shown}{more}"


def check_train(tc: Any, source: str = "training settings") -> None:
    """Types and ranges of a ``TrainConfig``: ConfigError naming every problem."""
    problems = train_problems(tc, source)
    if problems:
        raise Problems(problems)


# ------------------------------------------------------------------------------ memory
@dataclass(frozen=True)
class MemorySpec:
    """What a run needs memory for. ``trainable`` is the number of trained parameters (None: all;
    LoRA/WSLA train fewer); ``corpus_tokens``/``id_bytes`` size the token array."""

    config: Any  # MambaConfig
    batch_size: int = 1
    seq_len: int = 256
    activation_checkpointing: bool = False
    trainable: int | None = None
    corpus_tokens: int = 0
    id_bytes: int = 2
    training: bool = True
    threads: int | None = None


@dataclass(frozen=True)
class MemoryEstimate:
    params: int
    grads: int
    optimizer: int
    activations: int
    workspace: int
    corpus: int
    baseline: int = BASELINE
    rollback: int = 0  # the divergence guard's copy of the trained tensors and their moments

    @property
    def total(self) -> int:
        return (self.params + self.grads + self.optimizer + self.rollback + self.activations
                + self.workspace + self.corpus + self.baseline)

    def parts(self) -> dict[str, int]:
        return {"parameters": self.params, "gradients": self.grads, "optimizer": self.optimizer,
                "rollback copy": self.rollback, "activations": self.activations,
                "workspace": self.workspace, "corpus": self.corpus, "runtime": self.baseline}

    def human(self) -> str:
        shown = ", ".join(f"{k} {human_bytes(v)}" for k, v in self.parts().items() if v)
        return f"about {human_bytes(self.total)} ({shown})"


def human_bytes(n: float) -> str:
    for unit, size in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _scan_workspace(spec: MemorySpec, e: int, n: int, threads: int, width: int) -> int:
    """Bytes of the scan backward with ``width``-channel jobs: each running job's state history
    and decays (2 l + 2 planes of (n, width)) and its (l, width) rows (dy, delta u, gb, dd), and
    the dB/dC partial sums, (e / width, b, l, n) each; e as the kernels pad it (``SCAN_PAD``)."""
    e = -(-e // SCAN_PAD) * SCAN_PAD
    chunks = -(-e // width)
    tokens = spec.batch_size * spec.seq_len
    jobs = min(threads, spec.batch_size * chunks)
    return (jobs * ((2 * spec.seq_len + 2) * n + 4 * spec.seq_len) * min(e, width) * F32
            + 2 * chunks * tokens * n * F32)


def estimate(spec: MemorySpec) -> MemoryEstimate:
    """Bytes each part of a run needs at its peak (float32 everywhere, as the engine trains)."""
    c = spec.config
    d, e, n, r, v, k = c.d_model, c.d_inner, c.d_state, c.dt_rank, c.vocab_size, c.d_conv
    p = n_params(c)
    t = p if spec.trainable is None else spec.trainable
    tokens = spec.batch_size * spec.seq_len
    threads = spec.threads or os.cpu_count() or 1
    per_layer = (2 * d + 7 * e + r + 2 * n + 1) * F32 * tokens  # the LayerCache of one layer
    head = (v + 3 * d) * F32 * tokens  # logits (dlogits in place) + final norm in/out/grad
    if not spec.training:
        # logits_forward keeps one layer's tensors alive at a time
        return MemoryEstimate(p * F32, 0, 0, per_layer + head, 0,
                              spec.corpus_tokens * spec.id_bytes)
    if spec.activation_checkpointing:
        acts = c.n_layer * d * F32 * tokens + per_layer
    else:
        acts = c.n_layer * per_layer
    # backward of one layer: dxz, du, ddelta, dx_dbl, dy... (~8e floats per token), the scan's
    # per-thread state history and decays, its (l, width) rows (dy, delta u, gb, dd) and its
    # dB/dC partial sums
    scan = max(_scan_workspace(spec, e, n, threads, width) for width in SCAN_WIDTHS)
    workspace = 8 * e * F32 * tokens + scan + k * e * F32 * spec.batch_size
    lora_weights = p * F32 if spec.trainable is not None and spec.trainable < p else 0
    # with 2 or 3 threads a micro-batch's second half gathers its gradients apart
    halves = 2 if spec.batch_size > 1 and splits(threads) else 1
    return MemoryEstimate(
        params=p * F32 + lora_weights,  # LoRA also keeps the merged copy of its targets
        grads=halves * t * F32,
        optimizer=2 * t * F32,
        activations=acts + head,
        workspace=workspace,
        corpus=spec.corpus_tokens * spec.id_bytes,
        rollback=3 * t * F32,  # the state before each step, kept to undo a diverged one
    )  # (uncounted, a 51 M-parameter model's run peaked 0.6 GB above the estimate)


def memory_room() -> tuple[int, str]:
    """(bytes, what limits them): the least of the RAM the OS can give now (MemAvailable; total
    RAM if unknown), what the address-space limit (``ulimit -v``) leaves this process, and what
    its cgroup's memory limit (a container's) leaves. Only MemAvailable was read: runs
    estimated at 5.8 and 7.7 GB started under a 6 GB ``ulimit -v`` and failed allocating, and
    in a container the kernel kills such a run without a word. ``MAMBA_STUDIO_MEMORY`` (bytes)
    overrides them all."""
    env = os.environ.get("MAMBA_STUDIO_MEMORY")
    if env:
        try:
            return int(float(env)), "MAMBA_STUDIO_MEMORY"
        except ValueError:
            pass
    rooms = [(_ram_available(), "")]
    rooms += [(n, "what ulimit -v leaves") for n in [_address_space_left()] if n is not None]
    rooms += [(n, "what the cgroup (container) memory limit leaves")
              for n in [_cgroup_left()] if n is not None]
    return min(rooms)


def _ram_available() -> int:
    available = _proc_kb("/proc/meminfo", "MemAvailable")
    if available is not None:
        return available
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def _proc_kb(path: str, key: str) -> int | None:
    """Bytes of a ``key:  N kB`` line of a /proc file (``/proc/meminfo``, ``/proc/self/status``);
    None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            for line in f.read(1 << 16).decode().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _address_space_left() -> int | None:
    """RLIMIT_AS less this process's virtual size now; None without a limit."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    if limit == resource.RLIM_INFINITY or limit <= 0:
        return None
    return max(0, limit - (_proc_kb("/proc/self/status", "VmSize") or 0))


def _cgroup_left(proc: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """What the memory limits of this process's cgroup and of each group above it (v2
    ``memory.max``, v1 ``memory.limit_in_bytes``; a Slurm job, a pod or a systemd slice sets
    them on a parent) leave: the least limit less its usage, page cache the kernel can drop
    (``inactive_file``) not counted as used; None without a limit or where none is read."""
    try:
        with open(proc, "rb") as f:
            lines = f.read(1 << 16).decode().splitlines()
    except OSError:
        return None
    rooms: list[int] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            base, files = root, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in parts[1].split(","):
            base, files = root + "/memory", ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                             "total_inactive_file")
        else:
            continue
        path = parts[2].strip("/")
        levels = [path.split("/")[:n] for n in range(len(path.split("/")) if path else 0, -1, -1)]
        for level in levels:  # this group, then each one above it (a container sees its own
            room = _group_room(os.path.join(base, *level), files)  # as the root)
            if room is not None:
                rooms.append(room)
    return min(rooms) if rooms else None


def _group_room(folder: str, files: tuple[str, str, str]) -> int | None:
    try:
        with open(os.path.join(folder, files[0]), "rb") as f:
            limit_text = f.read(64).decode().strip()
        with open(os.path.join(folder, files[1]), "rb") as f:
            used = int(f.read(64).decode().strip())
    except (OSError, ValueError):
        return None
    if limit_text == "max" or not limit_text.isdigit() or int(limit_text) >= 1 << 60:
        return None  # no limit here (v1 writes a huge number)
    try:
        with open(os.path.join(folder, "memory.stat"), "rb") as f:
            for stat_line in f.read(1 << 16).decode().splitlines():
                key, _, value = stat_line.partition(" ")
                if key == files[2]:
                    used -= int(value)
                    break
    except (OSError, ValueError):
        pass
    return max(0, int(limit_text) - used)


def check_fits(spec: MemorySpec, available: int | None = None) -> MemoryEstimate:
    """Return the estimate, or raise ConfigError (with the estimate) when it exceeds the memory
    available now. ``MAMBA_STUDIO_MEMORY`` (bytes) overrides what the OS reports."""
    est = estimate(spec)
    avail, what = memory_room() if available is None else (available, "")
    if est.total > avail:
        hint = ("lower the batch size or sequence length"
                + ("" if spec.activation_checkpointing else ", or turn on activation checkpointing")
                + ", or choose a smaller model") if spec.training else (
            "give a shorter --seq-len")  # (an evaluation: it has no batch size to lower)
        raise ConfigError(
            f"this {'run' if spec.training else 'evaluation'} needs {est.human()}, but only "
            f"{human_bytes(avail)} of memory is available"
            + (f" ({what})" if what else "") + "; "
            + hint
        )
    return est


def check_run(cfg: Any, tc: Any, corpus_bytes: int = 0, threads: int | None = None) -> MemoryEstimate:
    """Everything a training run is checked for before it allocates: the model's and the
    training settings' ranges, then the memory estimate against the memory available now (the
    corpus counted at its upper bound of one token per byte)."""
    from .data import id_dtype
    from .lora import count_trainable

    check_model(cfg)
    check_train(tc)
    trainable = count_trainable(cfg, tc.lora, tc.wsla) if (tc.lora is not None or tc.wsla) else None
    return check_fits(MemorySpec(
        cfg, tc.batch_size, tc.seq_len, tc.activation_checkpointing, trainable,
        corpus_tokens=corpus_bytes, id_bytes=id_dtype(cfg.vocab_size).itemsize, threads=threads,
    ))
