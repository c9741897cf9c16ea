"""The training loop: batches, gradient accumulation, AdamW, schedule, evaluation, callbacks,
cooperative pause/stop, and exact resume.

Randomness is a pure function of (seed, epoch): the row order of epoch ``e`` is
``default_rng([seed, e]).permutation(rows)``, so a checkpoint needs only (step, epoch, cursor)
to continue exactly as an uninterrupted run would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .control import LoopControl
from .data import make_rows
from .defaults import DEFAULT_EPOCHS, DEFAULT_PRESET, PRESET_DEFAULTS
from .errors import CorpusError, StepVoid, TrainingError
from .eta import Eta
from .evaluation import HELDOUT_SAMPLE_TOKENS, EvalReport, EvalStopped, eval_guess_s, evaluate
from .halves import HalfWorker
from .lm import MambaLM
from .model import loss_and_grad
from .optim import AdamW, AdamWConfig, ShardSpec, effective_warmup, lr_at
from .reports import EpochReport, StepReport, format_duration  # noqa: F401  (re-exported)
from .signals import continues
from .threads import ThreadTuner
from .trainable import Trainable, TrainableKind, make_trainable, trainable_kind
from .words import plural

if TYPE_CHECKING:
    from .lora import LoRAConfig

SHORT_RUN = 50  # optimizer steps: a shorter run's warmup note says it learns little
_D = PRESET_DEFAULTS[DEFAULT_PRESET]  # the per-preset table (engine/defaults.py) is the one source


def epoch_steps(n_rows: int, rows_per_step: int) -> int:
    """Optimizer steps of one epoch over ``n_rows`` rows taken ``rows_per_step`` at a time (the
    last step may be smaller): the count ``Trainer`` walks and the estimates show."""
    return -(-n_rows // rows_per_step)


def epochs_end_first(steps_per_epoch: int, epochs: int, max_steps: int | None
                     ) -> tuple[str, int] | None:
    """When a run's ``epochs`` end it before its ``max_steps``: ("3 epochs end at step 33,
    before max steps 60", the epochs that reach them), else None. The CLI's note, the window's
    Log and its estimate say it (a Continue to max steps 60 ended at step 33 without a word)."""
    by_epochs = steps_per_epoch * epochs
    if not (by_epochs and max_steps and max_steps > by_epochs):
        return None
    said = (f"{plural(epochs, 'epoch')} {'ends' if epochs == 1 else 'end'} at step "
            f"{by_epochs:,}, before max steps {max_steps:,}")
    return said, -(-max_steps // steps_per_epoch)


WSLA_MAX_DELTA = 0.05  # WSLA's AdamW trust region: no weight moves more than this a step


@dataclass(frozen=True)
class TrainConfig:
    """Training settings; the defaults are the default preset's row of ``PRESET_DEFAULTS``
    (``TrainConfig.for_preset`` picks another row)."""

    epochs: int = DEFAULT_EPOCHS
    batch_size: int = _D.batch_size
    seq_len: int = _D.seq_len
    grad_accum: int = 1
    lr: float = _D.lr
    min_lr_ratio: float = _D.min_lr_ratio
    decay_fraction: float = _D.decay_fraction  # the lr decays over this last part of the run
    warmup_steps: int = _D.warmup_steps
    weight_decay: float = _D.weight_decay
    max_grad_norm: float = 1.0
    max_delta: float = 0.0  # trust region; WSLA defaults it to WSLA_MAX_DELTA
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
    eval_every: int = 0  # also measure held-out loss every N optimizer steps (0: auto, under
    # 10 % of training time: ``engine.evaluation.auto_eval_every``; and at every epoch's end)

    @classmethod
    def for_preset(cls, name: str, tokenizer: str = "bytes", **overrides: Any) -> TrainConfig:
        """The preset's training defaults (``engine.defaults``) for a ``tokenizer`` ("bytes" /
        "bpe") run, with ``overrides`` applied."""
        if name not in PRESET_DEFAULTS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESET_DEFAULTS)}")
        return cls(**{**PRESET_DEFAULTS[name].training(tokenizer), **overrides})

    def adamw(self) -> AdamWConfig:
        max_delta = self.max_delta if (self.max_delta > 0 or not self.wsla) else WSLA_MAX_DELTA
        return AdamWConfig(self.lr, self.beta1, self.beta2, self.eps, self.weight_decay,
                           self.max_grad_norm, max_delta)

    @property
    def trainable(self) -> TrainableKind:
        return trainable_kind(self.wsla, self.lora)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["lora"] = self.lora.to_dict() if self.lora is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Inverse of ``to_dict`` (unknown keys: TypeError; ranges are checked by limits.check_train)."""
        d = dict(d)
        lora = d.pop("lora", None)
        if lora is not None:
            from .lora import LoRAConfig

            d["lora"] = LoRAConfig.from_dict(lora)
        return cls(**d)


class _StreamRows:
    """Stream rows (``data.make_rows``) behind the ``PackedRows.batch`` interface (no reset)."""

    def __init__(self, ids: np.ndarray, seq_len: int) -> None:
        self.inputs, self.targets = make_rows(ids, seq_len)

    def __len__(self) -> int:
        return len(self.inputs)

    def batch(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
        return np.asarray(self.inputs[rows]), np.asarray(self.targets[rows]), None


@dataclass
class _Cursor:
    """Where the run is, plus the running sums of the current epoch (so an epoch interrupted by a
    save and a resume reports the same means as an uninterrupted one)."""

    step: int = 0
    epoch: int = 0
    group: int = 0  # optimizer-step index inside the epoch
    loss_sum: float = 0.0  # over the epoch's finite steps
    norm_sum: float = 0.0
    good: int = 0
    steps: int = 0  # all steps of the epoch, non-finite ones included


class StepGuard(Protocol):
    """Watches every optimizer step (``engine.guard.DivergenceGuard``): ``check_loss`` sees the
    step's loss before its update and may roll the trainer back and raise ``StepVoid``; ``after``
    returns True when it rolled the trainer back (the report is then void)."""

    def check_loss(self, trainer: Trainer, loss: float) -> None: ...
    def after(self, trainer: Trainer, report: StepReport) -> bool: ...


@dataclass
class Trainer:
    """Trains ``lm`` in place on ``train_ids`` (T,), evaluating on ``val_ids`` after each epoch.

    ``rows`` / ``val_rows`` (optional ``engine.packing.PackedRows``): document-packed rows with a
    reset mask, used instead of cutting ``train_ids`` / ``val_ids`` into stream rows."""

    lm: MambaLM
    train_ids: np.ndarray
    val_ids: np.ndarray
    cfg: TrainConfig = field(default_factory=TrainConfig)
    shard: ShardSpec | None = None
    trainable: Trainable | None = None
    rows: Any = None
    val_rows: Any = None

    def __post_init__(self) -> None:
        c = self.cfg
        if c.batch_size < 1 or c.grad_accum < 1 or c.seq_len < 2 or c.epochs < 1:
            raise ValueError("batch_size, grad_accum, epochs must be >= 1 and seq_len >= 2")
        if self.rows is None and len(self.train_ids) < c.seq_len + 1:
            raise CorpusError(
                f"the training text has {len(self.train_ids)} tokens, shorter than one sequence "
                f"(seq_len + 1 = {c.seq_len + 1}); add text or lower the sequence length"
            )
        if self.train_ids.max(initial=0) >= self.lm.config.vocab_size:
            raise CorpusError("token ids exceed the model's vocabulary (tokenizer/model mismatch)")
        if self.rows is None:
            self.rows = _StreamRows(self.train_ids, c.seq_len)
        if len(self.rows) == 0:
            raise CorpusError("no training rows; add text or lower the sequence length")
        if self.trainable is None:
            self.trainable = make_trainable(c.trainable, self.lm.params, c.lora)
        self.optimizer = AdamW(
            self.trainable.tensors, list(self.trainable.tensors), c.adamw(), self.shard,
            decay_fn=self.trainable.decays,
        )
        self.cursor = _Cursor()
        self.lr_scale = 1.0  # halved by each divergence rollback
        self.history: list[StepReport] = []
        self.epochs: list[EpochReport] = []
        self._last_eval: tuple[int, EvalReport] | None = None  # (step, its held-out evaluation)
        self._grads = {n: np.zeros_like(self.lm.params[n]) for n in self.trainable.needs()}
        self._grads_b: dict[str, np.ndarray] | None = None  # a second worker's (``accumulate``)
        self._halves = HalfWorker()
        self.thread_tuner = ThreadTuner()
        self.eta = Eta()  # seconds left, from the median of recent step times (engine/eta.py)
        self._should_stop: Callable[[], bool] | None = None  # the stop flag while ``run`` runs
        self.loss_check: Callable[[float], None] | None = None  # the guard's, while ``run`` runs
        self.eval_stopped_at: int | None = None  # the step whose evaluation a stop cut short
        self.on_evaluate: Callable[[], None] | None = None  # told as each evaluation starts
        # (seconds on a big held-out set, between two steps: the CLI says so on its progress line)
        self._gap_from = (0.0, 0)  # (perf_counter, continues()) at the end of the last step
        self._off_s = 0.0  # paused or stopped seconds of this stretch (``run``)
        self._gap_eval_s = 0.0  # seconds of evaluations the ETA counted since the last step

    # ------------------------------------------------------------------ sizes
    @property
    def rows_per_step(self) -> int:
        return self.cfg.batch_size * self.cfg.grad_accum

    @property
    def steps_per_epoch(self) -> int:
        return epoch_steps(len(self.rows), self.rows_per_step)

    @property
    def at_epoch_end(self) -> bool:
        """Whether the step just done was its epoch's last (the epoch's end comes next)."""
        return self.cursor.group >= self.steps_per_epoch

    @property
    def total_steps(self) -> int:
        return self._total_steps(self.cfg)

    @property
    def limited_by(self) -> str:
        """Which total ends the run: "epochs" (its epochs end first, or together with its max
        steps) or "max_steps"; the setting a user raises to train longer."""
        return "epochs" if self.total_steps == self.steps_per_epoch * self.cfg.epochs else "max_steps"

    def _total_steps(self, cfg: TrainConfig) -> int:
        """The optimizer steps of this run's data under ``cfg``'s epochs and max steps."""
        total = self.steps_per_epoch * cfg.epochs
        return min(total, cfg.max_steps) if cfg.max_steps else total

    def _lr_at(self, step: int, cfg: TrainConfig) -> float:
        """The learning rate of optimizer step ``step`` under ``cfg``'s schedule and totals."""
        return self.lr_scale * lr_at(step, self._total_steps(cfg), cfg.lr, cfg.warmup_steps,
                                     cfg.min_lr_ratio, cfg.decay_fraction)

    def trainable_count(self) -> int:
        assert self.trainable is not None
        return int(sum(a.size for a in self.trainable.tensors.values()))

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.rows)
        if not self.cfg.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.cfg.seed, epoch]).permutation(n)

    @property
    def warmup_steps(self) -> int:
        """The warmup this run uses: ``cfg.warmup_steps`` cut to a fifth of ``total_steps``."""
        return effective_warmup(self.cfg.warmup_steps, self.total_steps)

    def warmup_notice(self, fix: str) -> str | None:
        """The note the CLI and the app show when the configured warmup was cut to a fifth of this
        run (``effective_warmup``) and steps remain; ``fix`` names the setting to raise."""
        if (self.warmup_steps < self.cfg.warmup_steps and self.total_steps > self.cursor.step
                and self.cursor.step <= self.warmup_steps):  # (not after it: a continued run)
            note = (f"the {self.cfg.warmup_steps}-step warmup is cut to "
                    f"{plural(self.warmup_steps, 'step')}, a fifth of this "
                    f"{self.total_steps}-step run")
            # below SHORT_RUN steps it learns little (the sample corpus, small: held-out 2.93 nats
            # and noise after 33 steps); run.sh's 110 steps reach 1.96 and word-like text
            return (f"{note}; a run this short learns little: raise {fix}"
                    if self.total_steps < SHORT_RUN else note)
        return None

    def rate_notice(self, before: TrainConfig) -> str | None:
        """For a resumed run whose totals changed (``before``: its settings until now): a note
        when its rate goes back up, because the schedule is laid over the new total and the
        decay had begun (a finished run continued went from 5.2e-4 to 3.0e-3 unsaid)."""
        step = self.cursor.step
        if step == 0:
            return None
        # the old schedule's rate at this very step (its step before rose by warmup alone: a
        # resume at step 1 with its own totals was told its decay starts again)
        was, now = self._lr_at(step, before), self.current_lr()
        if now <= 1.5 * was:
            return None
        return (f"the learning rate goes back up from {was:.2g} to {now:.2g}: the schedule (warmup, "
                f"hold, decay over the last {100 * self.cfg.decay_fraction:g} %) now spans "
                f"{self.total_steps} steps, so its decay starts again (give a lower learning rate "
                "to keep it small)")

    def current_lr(self) -> float:
        """The learning rate of the next optimizer step (warmup, stable, decay)."""
        return self._lr_at(self.cursor.step, self.cfg)

    @cached_property
    def eval_every(self) -> int:
        """Held-out evaluation every this many optimizer steps: ``cfg.eval_every``, or for 0 the
        cadence that keeps it under 10 % of training time (from the held-out size, so a resume
        gets the same). Worked out once: it is read every step, and a trainer's settings and
        data do not change."""
        if self.cfg.eval_every > 0:
            return self.cfg.eval_every
        from .evaluation import auto_eval_every

        return auto_eval_every(self.token_counts[1], self.rows_per_step, self.cfg.seq_len)

    @property
    def token_counts(self) -> tuple[int, int]:
        """(training targets per epoch, held-out targets)."""
        val = (self.val_rows.n_targets if self.val_rows is not None
               else max(len(self.val_ids) - 1, 0))
        n = self.rows.n_targets if hasattr(self.rows, "n_targets") else len(self.train_ids) - 1
        return int(n), int(val)

    @property
    def has_val(self) -> bool:
        return len(self.val_rows) > 0 if self.val_rows is not None else len(self.val_ids) >= 2

    def evaluate(self, should_stop: Callable[[], bool] | None = None,
                 max_tokens: int | None = HELDOUT_SAMPLE_TOKENS) -> EvalReport:
        """Held-out metrics of the current weights (packed rows when given, else the stream),
        over a fixed sample of at most ``max_tokens`` targets (``engine.evaluation``; None: all).
        Raises ``EvalStopped`` when ``should_stop()`` turns True between batches."""
        val = self.val_rows if self.val_rows is not None else self.val_ids
        return evaluate(self.lm, val, self.cfg.seq_len, max_tokens=max_tokens,
                        should_stop=should_stop)

    def held_out(self, should_stop: Callable[[], bool] | None = None) -> EvalReport | None:
        """``evaluate`` when there is a held-out set; None without one or when stopped part-way
        (``should_stop``, default: the stop flag of the ``run`` in progress)."""
        if not self.has_val:
            return None
        if self.on_evaluate is not None:
            self.on_evaluate()
        t, seen = time.perf_counter(), continues()
        try:
            val = self.evaluate(should_stop or self._should_stop)
        except EvalStopped:
            self.eval_stopped_at = self.cursor.step
            return None
        if continues() == seen:  # (not a time the process was stopped in)
            self.eta.evaluated(took := time.perf_counter() - t)
            self._gap_eval_s += took
        return val

    def evals_left(self) -> int:
        """Held-out evaluations still to come in this run: at the steps after the current one
        that are multiples of ``eval_every`` or end an epoch, at the last step, and the one of
        the epoch's end that the current step starts (when it was not just evaluated)."""
        if not self.has_val:
            return 0
        s, total, e, p = self.cursor.step, self.total_steps, self.eval_every, self.steps_per_epoch
        if s > total:
            return 0
        both = e * p // math.gcd(e, p)
        n = (total // e - s // e) + (total // p - s // p) - (total // both - s // both)
        n += total > s and total % e != 0 and total % p != 0  # the last step's
        last = self._last_eval
        n += self.at_epoch_end and (last is None or last[0] != s)
        return int(n)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything beyond the model weights that an exact resume needs: the cursor (with the
        current epoch's running sums), the lr scale, finished epochs, and the optimizer's and the
        trainable's ``state_dict()`` (live arrays under their "tensors" keys, not copies)."""
        assert self.trainable is not None
        return {
            "cursor": asdict(self.cursor),
            "lr_scale": self.lr_scale,
            "epochs": [asdict(e) for e in self.epochs],
            "optimizer": self.optimizer.state_dict(),
            "trainable": self.trainable.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` (weights must already be in ``lm``). Arrays are copied in."""
        assert self.trainable is not None
        self.trainable.load_state_dict(state["trainable"])
        self.optimizer.load_state_dict(state["optimizer"])
        cursor = _Cursor(**state["cursor"])
        if cursor.group > self.steps_per_epoch:
            raise ValueError(f"cursor.group {cursor.group} is past this run's "
                             f"{self.steps_per_epoch} steps per epoch")
        self.cursor = cursor
        self.lr_scale = float(state["lr_scale"])
        self.epochs = [EpochReport(**{**e, "val": EvalReport(**e["val"]) if e["val"] else None})
                       for e in state["epochs"]]
        self.history = [h for h in self.history if h.step <= self.cursor.step]

    # ------------------------------------------------------------------ one step
    def accumulate(self, rows: np.ndarray, mine: np.ndarray | None = None, micro0: int = 0,
                   micro_stride: int = 1, workers: int | None = None) -> tuple[float, int]:
        """Zero the gradient buffers and add the gradients of the batch ``rows`` (R,) into them,
        in micro-batches of ``batch_size``, each scaled by 1 / (valid targets of all ``rows``).
        ``mine`` (optional, positions into ``rows``) limits the work to those rows (a data-parallel
        rank's share); micro-batch k draws its dropout masks as number ``micro0 + micro_stride * k``.
        Where the thread tuner has a two-worker choice (``max_workers``), a micro-batch of two
        rows or more runs as two halves of its rows, the second half's gradients gathered apart
        (``_other_grads``) and added at the end; ``workers`` 2 runs the halves at once in two
        threads (``engine.halves``), 1 one after the other (None: as the tuner's step in
        progress, or its last choice, says): the same operations, so the worker count (the
        tuner's timing-based choice) changes no result bit.
        Returns (summed loss of the rows done, valid targets of all ``rows``)."""
        assert self.trainable is not None
        trainable = self.trainable
        c = self.cfg
        params = trainable.effective()
        for g in self._grads.values():
            g.fill(0.0)
        tokens, targets, reset = self.rows.batch(rows)
        n_valid = int(np.count_nonzero(targets >= 0))
        self._last_tokens = n_valid
        step = self.cursor.step
        n = len(rows) if mine is None else len(mine)
        halves = self.thread_tuner.max_workers > 1 and min(n, c.batch_size) > 1
        if workers is None:
            workers = self.thread_tuner.current[2]
        if halves:
            other = self._other_grads()
            for g in other.values():
                g.fill(0.0)

        def part(mb: slice | np.ndarray, grads: dict[str, np.ndarray], micro: int, k: int = 0,
                 first: int = 0) -> float:
            return loss_and_grad(
                params, tokens[mb], targets[mb], self.lm.config, grads, 1.0 / n_valid,
                checkpoint=c.activation_checkpointing,
                hooks=trainable.dropout_hooks(step, micro, k, first * tokens.shape[1]),
                reset=None if reset is None else reset[mb],
            )[0]

        loss_sum = 0.0
        for micro, s in enumerate(range(0, n, c.batch_size)):
            e = min(s + c.batch_size, n)
            number = micro0 + micro_stride * micro
            h = (e - s) // 2 if halves else 0  # (0 also for a last micro-batch of one row)
            if h == 0:
                loss_sum += part(slice(s, e) if mine is None else mine[s:e], self._grads, number)
                continue
            mb_a, mb_b = ((slice(s, s + h), slice(s + h, e)) if mine is None
                          else (mine[s : s + h], mine[s + h : e]))
            first = partial(part, mb_a, self._grads, number)
            second = partial(part, mb_b, other, number, 1, h)
            ls = self._halves.both(first, second) if workers > 1 else (first(), second())
            loss_sum += ls[0] + ls[1]
        if halves:
            for k, g in other.items():
                self._grads[k] += g
        return loss_sum, n_valid

    def _other_grads(self) -> dict[str, np.ndarray]:
        """The second halves' gradient buffers (made at the first step that has halves)."""
        if self._grads_b is None:
            self._grads_b = {k: np.zeros_like(g) for k, g in self._grads.items()}
        return self._grads_b

    def train_step(self, rows: np.ndarray,
                   workers: int | None = None) -> tuple[float, float, bool, tuple[str, ...]]:
        """One optimizer step over ``rows`` (indices into the row table), in micro-batches, each
        in two halves at once with ``workers`` 2 (``accumulate``; None: as the thread tuner's
        step in progress, or its last choice, says; the count changes no result bit)."""
        assert self.trainable is not None
        loss_sum, n_valid = self.accumulate(rows, workers=workers)
        loss = loss_sum / n_valid
        grads = self.trainable.grads(self._grads)  # also consumes LoRA-dropout terms
        if self.loss_check is not None:
            self.loss_check(loss)  # (the guard: may roll back and raise StepVoid)
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
        control: LoopControl | None = None,
        guard: StepGuard | None = None,
    ) -> list[EpochReport]:
        """Train until done, ``max_steps``, or ``control.stop()``. Returns the epochs finished
        in this call. Stopping happens between optimizer steps, so the state is always consistent.
        ``guard`` (optional) sees every step and may roll it back (its report is then dropped)."""
        self._should_stop = (lambda: control.stopped) if control is not None else None
        self.loss_check = None if guard is None else partial(guard.check_loss, self)
        try:  # held-out evaluations inside the loop give up as soon as a stop is asked
            return self._loop(on_step, on_epoch, control, guard)
        finally:
            self._should_stop = None
            self.loss_check = None
            self._halves.close()  # its worker thread, if a step made one (a later step makes one)

    def _loop(self, on_step: Callable[[StepReport], None] | None,
              on_epoch: Callable[[EpochReport], None] | None, control: LoopControl | None,
              guard: StepGuard | None) -> list[EpochReport]:
        c = self.cfg
        t0 = time.perf_counter()
        self.eta = Eta()  # this stretch's step times (the time before it is not comparable)
        self._gap_from = (t0, continues())  # where the time between steps began, and continues
        self._off_s = 0.0  # seconds since t0 paused or stopped: not training time
        self._gap_eval_s = 0.0
        finished: list[EpochReport] = []
        bad_run = 0
        while self.cursor.step < self.total_steps and self.cursor.epoch < c.epochs:
            epoch = self.cursor.epoch
            order = self._order(epoch)
            while self.cursor.group < self.steps_per_epoch and self.cursor.step < self.total_steps:
                paused = 0.0
                if control is not None:
                    tp = time.perf_counter()
                    control.wait_if_paused()
                    paused = time.perf_counter() - tp
                    if control.stopped:
                        return finished
                try:
                    report = self._step(order, t0, paused)
                except StepVoid:  # the weights it started from were bad: rolled back further,
                    if self.cursor.epoch != epoch:  # across an epoch's end: that epoch's rows
                        epoch = self.cursor.epoch  # again (the next one's were taken), and its
                        order = self._order(epoch)  # end comes again
                        finished = [r for r in finished if r.epoch < epoch]
                    continue
                if guard is not None and guard.after(self, report):
                    continue  # rolled back: the cursor is where it was before the bad step
                self._count(report)
                bad_run = bad_run + 1 if report.nonfinite else 0
                if on_step is not None:
                    on_step(report)
                if bad_run >= c.max_bad_steps:
                    raise TrainingError(
                        f"loss was NaN/Inf for {bad_run} steps in a row; lower the learning "
                        "rate (weights were left at the last finite step)"
                    )
            if self.cursor.group < self.steps_per_epoch:
                break
            rep = self._end_epoch()
            finished.append(rep)
            if on_epoch is not None:
                on_epoch(rep)
        return finished

    def _step(self, order: np.ndarray, t0: float, paused: float = 0.0) -> StepReport:
        """Run the next optimizer step of the epoch whose row order is ``order``; advance the
        cursor. ``paused``: seconds the loop waited paused since the last step (not training).

        A stop (Ctrl-Z, SIGSTOP) since the end of the last step is told by ``continues()``
        having changed by the end of this step: the count is kept by a signal handler that may
        run late, after the main thread has gone on (the check before the step alone missed it
        now and then on a busy machine). Such a step and the time before it are left out, as
        neither step time nor elapsed time; its rate is the typical step's (it showed ~0
        tok/s)."""
        g = self.cursor.group
        rows = order[g * self.rows_per_step : (g + 1) * self.rows_per_step]
        since, seen = self._gap_from
        ts = time.perf_counter()
        lr = self.current_lr()
        with self.thread_tuner.step():  # thread and worker counts chosen by measurement
            loss, norm, bad, skipped = self.train_step(rows)
        step_s = max(time.perf_counter() - ts, 1e-9)
        self._gap_from = (ts + step_s, continues())
        rate_s = step_s
        if self._gap_from[1] == seen:
            self.eta.step(step_s)
            self._off_s += paused  # paused time counts in neither rate nor ETA
        else:  # stopped since the last step ended: before this step or during it (an
            # evaluation in between is the ETA's already: not left out twice)
            self._off_s += max(ts - since - self._gap_eval_s, paused) + step_s
            rate_s = self.eta.typical_step_s() or step_s
        self._gap_eval_s = 0.0  # (this step's own evaluation, below, is the next gap's)
        self.cursor.group += 1
        self.cursor.step += 1
        val_loss = None
        ends_run = (self.cursor.step >= self.total_steps  # the run's last step, mid-epoch (an
                    and self.cursor.group < self.steps_per_epoch)  # epoch's end evaluates anyway)
        if self.cursor.step % self.eval_every == 0 or ends_run:
            val = self.held_out()  # None when a stop came during it: the loop stops next
            val_loss = val.loss if val is not None else None
            self._last_eval = (self.cursor.step, val) if val is not None else None
        elapsed = time.perf_counter() - t0 - self._off_s
        evals, guess = self.evals_left(), 0.0
        if evals and not self.eta.evals:  # none measured yet: guessed from the step time
            guess = eval_guess_s(self.token_counts[1], self.eta.typical_step_s() or step_s,
                                 self.rows_per_step * self.cfg.seq_len)
        eta = self.eta.seconds_left(self.total_steps - self.cursor.step, elapsed, evals, guess)
        return StepReport(
            self.cursor.step, self.cursor.epoch, self.total_steps, loss, norm, lr,
            self._last_tokens / rate_s, eta, elapsed, bad, skipped, val_loss,
        )

    def _count(self, report: StepReport) -> None:
        self.history.append(report)
        cur = self.cursor
        cur.steps += 1
        if not report.nonfinite:
            cur.good += 1
            cur.loss_sum += report.loss
            cur.norm_sum += report.grad_norm

    def _end_epoch(self) -> EpochReport:
        cur = self.cursor
        last = self._last_eval  # the same weights were just evaluated at an eval_every step
        val = (last[1] if last is not None and last[0] == cur.step
               else self.held_out())  # None when stopped part-way: the epoch still ends, saved
        rep = EpochReport(
            cur.epoch,
            cur.loss_sum / cur.good if cur.good else float("nan"),
            cur.norm_sum / cur.good if cur.good else float("nan"),
            val, cur.steps, cur.steps - cur.good,
        )
        self.epochs.append(rep)
        self.cursor = _Cursor(cur.step, cur.epoch + 1, 0)
        return rep

