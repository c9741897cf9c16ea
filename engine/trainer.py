"""The training loop: batches, gradient accumulation, AdamW, schedule, evaluation, callbacks,
cooperative pause/stop, and exact resume.

Randomness is a pure function of (seed, epoch): the row order of epoch ``e`` is
``default_rng([seed, e]).permutation(rows)``, so a checkpoint needs only (step, epoch, cursor)
to continue exactly as an uninterrupted run would.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as ckpt
from .data import make_rows
from .errors import CheckpointError, CorpusError, TrainingError
from .limits import read_trainer_state
from .lm import MambaLM
from .lora import LoRAConfig, LoRATrainable
from .model import logits_forward, loss_and_grad
from .optim import AdamW, AdamWConfig, ShardSpec, lr_at
from .threads import ThreadTuner
from .trainable import FullTrainable, Trainable, wsla_names


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 3
    batch_size: int = 4
    seq_len: int = 256
    grad_accum: int = 1
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_delta: float = 0.0  # trust region; WSLA defaults it to 0.05
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    seed: int = 0
    shuffle: bool = True
    activation_checkpointing: bool = False
    max_steps: int | None = None  # stop after this many optimizer steps (all epochs)
    wsla: bool = False
    lora: LoRAConfig | None = None
    max_bad_steps: int = 20  # abort after this many consecutive non-finite losses
    eval_every: int = 0  # also measure held-out loss every N optimizer steps (0: per epoch only)

    def adamw(self) -> AdamWConfig:
        max_delta = self.max_delta if (self.max_delta > 0 or not self.wsla) else 0.05
        return AdamWConfig(self.lr, self.beta1, self.beta2, self.eps, self.weight_decay,
                           self.max_grad_norm, max_delta)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora"] = self.lora.to_dict() if self.lora is not None else None
        return d


@dataclass(frozen=True)
class StepReport:
    step: int  # optimizer steps done (1-based)
    epoch: int  # 0-based
    total_steps: int
    loss: float
    grad_norm: float  # pre-clip
    lr: float
    tokens_per_s: float
    eta_s: float
    elapsed_s: float
    nonfinite: bool = False
    skipped_tensors: tuple[str, ...] = ()
    val_loss: float | None = None  # held-out loss, on steps where ``eval_every`` asks for it


def format_duration(seconds: float) -> str:
    """ETA text for progress displays: "MM:SS", "H:MM:SS" from an hour on, "--:--" if unknown."""
    if not math.isfinite(seconds):
        return "--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


@dataclass(frozen=True)
class EvalReport:
    loss: float
    perplexity: float
    bits_per_token: float
    bits_per_byte: float
    accuracy: float
    tokens: int


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    train_loss: float
    grad_norm: float
    val: EvalReport | None
    steps: int
    nonfinite_steps: int


class TrainControl:
    """Cooperative stop/pause, checked between optimizer steps (thread-safe)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._run = threading.Event()
        self._run.set()

    def stop(self) -> None:
        self._stop.set()
        self._run.set()

    def pause(self) -> None:
        self._run.clear()

    def resume(self) -> None:
        self._run.set()

    @property
    def paused(self) -> bool:
        return not self._run.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait_if_paused(self) -> None:
        while not self._run.wait(0.1):
            pass


def evaluate(lm: MambaLM, ids: np.ndarray, seq_len: int, batch_size: int = 8) -> EvalReport:
    """Held-out metrics over the whole stream ``ids`` (T,): every token after the first scored once."""
    if len(ids) < 2:
        raise CorpusError("evaluation text has fewer than 2 tokens")
    inputs, targets = make_rows(ids, seq_len)
    total, correct, n = 0.0, 0, 0
    for s in range(0, len(inputs), batch_size):
        x, y = inputs[s : s + batch_size], targets[s : s + batch_size]
        logits = logits_forward(lm.params, x, lm.config).astype(np.float64)
        keep = y >= 0
        lg = logits[keep]
        tg = y[keep]
        mx = lg.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(lg - mx).sum(axis=1))
        total += float((lse - lg[np.arange(len(tg)), tg]).sum())
        correct += int((lg.argmax(axis=1) == tg).sum())
        n += int(keep.sum())
    loss = total / n
    n_bytes = len(lm.tokenizer.decode(ids[1:]).encode("utf-8")) or 1
    return EvalReport(
        loss=loss,
        perplexity=math.exp(min(loss, 700.0)),
        bits_per_token=loss / math.log(2),
        bits_per_byte=total / math.log(2) / n_bytes,
        accuracy=correct / n,
        tokens=n,
    )


def _fingerprint(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


@dataclass
class _Cursor:
    step: int = 0
    epoch: int = 0
    group: int = 0  # optimizer-step index inside the epoch


@dataclass
class Trainer:
    """Trains ``lm`` in place on ``train_ids`` (T,), evaluating on ``val_ids`` after each epoch."""

    lm: MambaLM
    train_ids: np.ndarray
    val_ids: np.ndarray
    cfg: TrainConfig = field(default_factory=TrainConfig)
    shard: ShardSpec | None = None
    trainable: Trainable | None = None

    def __post_init__(self) -> None:
        c = self.cfg
        if c.batch_size < 1 or c.grad_accum < 1 or c.seq_len < 2 or c.epochs < 1:
            raise ValueError("batch_size, grad_accum, epochs must be >= 1 and seq_len >= 2")
        if len(self.train_ids) < c.seq_len + 1:
            raise CorpusError(
                f"the training text has {len(self.train_ids)} tokens, shorter than one sequence "
                f"(seq_len + 1 = {c.seq_len + 1}); add text or lower the sequence length"
            )
        if self.train_ids.max(initial=0) >= self.lm.config.vocab_size:
            raise CorpusError("token ids exceed the model's vocabulary (tokenizer/model mismatch)")
        self.inputs, self.targets = make_rows(self.train_ids, c.seq_len)
        if self.trainable is None:
            self.trainable = self._default_trainable()
        self.optimizer = AdamW(
            self.trainable.tensors, list(self.trainable.tensors), c.adamw(), self.shard,
            decay_fn=self.trainable.decays,
        )
        self.cursor = _Cursor()
        self.history: list[StepReport] = []
        self.epochs: list[EpochReport] = []
        self._grads = {n: np.zeros_like(self.lm.params[n]) for n in self.trainable.needs()}
        self.thread_tuner = ThreadTuner()

    def _default_trainable(self) -> Trainable:
        c = self.cfg
        if c.lora is not None:
            targets = c.lora.targets
            if c.wsla:
                bad = set(targets) - {"x_proj"}
                if bad:
                    raise ValueError(f"WSLA + LoRA allows only the x_proj target, not {sorted(bad)}")
            return LoRATrainable(self.lm.params, c.lora)
        if c.wsla:
            return FullTrainable(self.lm.params, wsla_names(self.lm.params), label="WSLA (x_proj)")
        return FullTrainable(self.lm.params)

    # ------------------------------------------------------------------ sizes
    @property
    def rows_per_step(self) -> int:
        return self.cfg.batch_size * self.cfg.grad_accum

    @property
    def steps_per_epoch(self) -> int:
        return -(-len(self.inputs) // self.rows_per_step)

    @property
    def total_steps(self) -> int:
        total = self.steps_per_epoch * self.cfg.epochs
        return min(total, self.cfg.max_steps) if self.cfg.max_steps else total

    def trainable_count(self) -> int:
        assert self.trainable is not None
        return int(sum(a.size for a in self.trainable.tensors.values()))

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.inputs)
        if not self.cfg.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.cfg.seed, epoch]).permutation(n)

    def current_lr(self) -> float:
        """The learning rate of the next optimizer step (warmup + cosine)."""
        c = self.cfg
        return lr_at(self.cursor.step, self.total_steps, c.lr, c.warmup_steps, c.min_lr_ratio)

    # ------------------------------------------------------------------ one step
    def train_step(self, rows: np.ndarray) -> tuple[float, float, bool, tuple[str, ...]]:
        """One optimizer step over ``rows`` (indices into the row table), in micro-batches."""
        assert self.trainable is not None
        c = self.cfg
        params = self.trainable.effective()
        for g in self._grads.values():
            g.fill(0.0)
        n_valid = int(np.count_nonzero(self.targets[rows] >= 0))
        loss_sum = 0.0
        for micro, s in enumerate(range(0, len(rows), c.batch_size)):
            mb = rows[s : s + c.batch_size]
            ls, _ = loss_and_grad(
                params, self.inputs[mb], self.targets[mb], self.lm.config, self._grads,
                1.0 / n_valid, checkpoint=c.activation_checkpointing,
                hooks=self.trainable.dropout_hooks(self.cursor.step, micro),
            )
            loss_sum += ls
        loss = loss_sum / n_valid
        grads = self.trainable.grads(self._grads)  # also consumes LoRA-dropout terms
        if not math.isfinite(loss):
            return loss, float("nan"), True, ()
        stats = self.optimizer.step(self.trainable.tensors, grads, self.current_lr())
        self.trainable.refresh()
        return loss, stats.grad_norm, False, tuple(stats.skipped)

    # ------------------------------------------------------------------ the loop
    def run(
        self,
        on_step: Callable[[StepReport], None] | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        control: TrainControl | None = None,
    ) -> list[EpochReport]:
        """Train until done, ``max_steps``, or ``control.stop()``. Returns the epochs finished
        in this call. Stopping happens between optimizer steps, so the state is always consistent."""
        c = self.cfg
        total = self.total_steps
        t0 = time.perf_counter()
        tokens_done = 0
        finished: list[EpochReport] = []
        bad_run = 0
        while self.cursor.step < total and self.cursor.epoch < c.epochs:
            order = self._order(self.cursor.epoch)
            while self.cursor.group < self.steps_per_epoch and self.cursor.step < total:
                if control is not None:
                    control.wait_if_paused()
                    if control.stopped:
                        return finished
                g = self.cursor.group
                rows = order[g * self.rows_per_step : (g + 1) * self.rows_per_step]
                ts = time.perf_counter()
                lr = self.current_lr()
                with self.thread_tuner.step():  # BLAS threads chosen by measurement
                    loss, norm, bad, skipped = self.train_step(rows)
                self.cursor.group += 1
                self.cursor.step += 1
                ntok = int(np.count_nonzero(self.targets[rows] >= 0))
                tokens_done += ntok
                elapsed = time.perf_counter() - t0
                rate = tokens_done / elapsed if elapsed > 0 else 0.0
                step_rate = ntok / max(time.perf_counter() - ts, 1e-9)
                remaining = (total - self.cursor.step) * self.rows_per_step * c.seq_len
                val_loss = None
                if c.eval_every > 0 and self.cursor.step % c.eval_every == 0 and len(self.val_ids) >= 2:
                    val_loss = evaluate(self.lm, self.val_ids, c.seq_len).loss
                report = StepReport(
                    self.cursor.step, self.cursor.epoch, total, loss, norm,
                    lr,
                    step_rate, remaining / rate if rate > 0 else float("inf"), elapsed,
                    bad, skipped, val_loss,
                )
                self.history.append(report)
                bad_run = bad_run + 1 if bad else 0
                if on_step is not None:
                    on_step(report)
                if bad_run >= c.max_bad_steps:
                    raise TrainingError(
                        f"loss was NaN/Inf for {bad_run} steps in a row; lower the learning "
                        "rate (weights were left at the last finite step)"
                    )
            if self.cursor.group >= self.steps_per_epoch:
                val = evaluate(self.lm, self.val_ids, c.seq_len) if len(self.val_ids) >= 2 else None
                # from the history, so an epoch interrupted by a save/resume reports the same
                mine = [h for h in self.history if h.epoch == self.cursor.epoch]
                good = [h for h in mine if not h.nonfinite]
                rep = EpochReport(
                    self.cursor.epoch,
                    float(np.mean([h.loss for h in good])) if good else float("nan"),
                    float(np.mean([h.grad_norm for h in good])) if good else float("nan"),
                    val, len(mine), len(mine) - len(good),
                )
                self.epochs.append(rep)
                finished.append(rep)
                self.cursor.epoch += 1
                self.cursor.group = 0
                if on_epoch is not None:
                    on_epoch(rep)
            else:
                break
        return finished

    # ------------------------------------------------------------------ checkpoints
    def save(self, folder: str | Path) -> Path:
        """Atomically write a resumable training checkpoint (weights + optimizer + cursor)."""
        folder = Path(folder)
        hashes = self.lm.save(folder)
        assert self.trainable is not None
        extra = {**self.optimizer.state_tensors(), **self.trainable.state_tensors()}
        ckpt.atomic_write_bytes(folder / "optimizer.safetensors", ckpt.tensors_to_bytes(extra))
        hashes["optimizer.safetensors"] = ckpt.sha256_file(folder / "optimizer.safetensors")
        state = {
            "format": "mamba-studio-trainer/1",
            "step": self.cursor.step,
            "epoch": self.cursor.epoch,
            "group": self.cursor.group,
            "optimizer_t": self.optimizer.t,
            "train_config": self.cfg.to_dict(),
            "data_fingerprint": _fingerprint(self.train_ids),
            "history": [asdict(h) for h in self.history[-5000:]],
            "epochs": [asdict(e) for e in self.epochs],
            "files": hashes,
        }
        ckpt.atomic_write_json(folder / "trainer_state.json", state)
        return folder

    def load_state(self, folder: str | Path, strict_data: bool = True) -> None:
        """Restore optimizer moments, cursor and history from ``folder`` (weights must already be
        loaded into ``lm``, e.g. via ``Trainer.resume``)."""
        folder = Path(folder)
        state = read_trainer_state(folder)  # bounded read, types checked
        ckpt.verify_hashes(folder, state["files"])
        if strict_data and state.get("data_fingerprint") != _fingerprint(self.train_ids):
            raise CheckpointError(
                f"{folder}: the checkpoint was trained on different data; resume with the same "
                "corpus and tokenizer (or start a new run from these weights)"
            )
        tensors = ckpt.read_tensors(folder / "optimizer.safetensors")
        assert self.trainable is not None
        self.trainable.load_state_tensors(tensors)
        try:
            self.optimizer.load_state_tensors(tensors, state["optimizer_t"])
        except ValueError as exc:
            raise CheckpointError(f"{folder}: {exc}") from exc
        self.cursor = _Cursor(state["step"], state["epoch"], state["group"])
        try:
            self.history = [StepReport(**{**h, "skipped_tensors": tuple(h["skipped_tensors"])})
                            for h in state.get("history", [])]
            self.epochs = [EpochReport(**{**e, "val": EvalReport(**e["val"]) if e["val"] else None})
                           for e in state.get("epochs", [])]
        except (TypeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"{folder}: trainer_state.json has a corrupt history ({exc})") from None

    @classmethod
    def resume(cls, folder: str | Path, train_ids: np.ndarray, val_ids: np.ndarray,
               cfg: TrainConfig | None = None, **overrides: Any) -> Trainer:
        """Rebuild a trainer from a training checkpoint; ``cfg`` defaults to the saved one, with
        ``overrides`` (e.g. ``epochs=10, max_steps=None``) applied. Without overrides the run
        continues exactly as if it had never stopped."""
        folder = Path(folder)
        state = read_trainer_state(folder)
        saved = dict(state["train_config"])
        lora_cfg = saved.pop("lora")
        if lora_cfg is not None:
            saved["lora"] = LoRAConfig.from_dict(lora_cfg)
        cfg = replace(cfg or TrainConfig(**saved), **overrides)
        lm = MambaLM.load(folder)
        if cfg.lora is not None:
            base = ckpt.read_tensors(folder / "optimizer.safetensors")
            lm.params.update({k[len("lora_base."):]: v for k, v in base.items()
                              if k.startswith("lora_base.")})
        tr = cls(lm, train_ids, val_ids, cfg)
        tr.load_state(folder)
        return tr


def with_overrides(cfg: TrainConfig, **kw: Any) -> TrainConfig:
    return replace(cfg, **{k: v for k, v in kw.items() if v is not None})
