"""Honest estimates before a run starts: parameters (total and trained), peak memory (from
``limits.estimate``) and time per epoch: the steps of an epoch (``run.plan_epoch``) times the
median of three real training steps of the same shapes."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .config import MambaConfig
from .errors import Stopped
from .limits import ConfigError, MemoryEstimate, MemorySpec, check_run, estimate, human_bytes, n_params
from .lm import MambaLM
from .lora import count_trainable
from .trainer import TrainConfig, Trainer, epoch_steps, epochs_end_first
from .words import plural


@dataclass(frozen=True)
class RunEstimate:
    params: int
    trainable: int
    memory: MemoryEstimate
    steps_per_epoch: int | None  # from the packed rows (``run.plan_epoch``); None: not counted yet
    step_s: float | None = None  # measured seconds per optimizer step (None: not measured yet)
    epochs: int = 0  # the run's epochs and max steps (0 / None: no limit), to say when the
    max_steps: int | None = None  # epochs end it first (a Continue to max steps 60 ended at 33)

    def human(self, no_steps: str = "counting…", no_time: str = "measuring…") -> str:
        """One line; ``no_steps`` / ``no_time`` say why the steps per epoch / the step time are
        not known yet."""
        steps, step_s = self.steps_per_epoch, self.step_s
        if step_s is not None and steps is not None:
            about = "" if step_s * steps < 0.95 else "~"  # not "~under 1 s"
            t = f"{about}{_dur(step_s * steps)} per epoch ({step_s * 1e3:,.0f} ms/step × {steps:,})"
        elif step_s is not None:
            t = f"{step_s * 1e3:,.0f} ms/step; steps per epoch: {no_steps}"
        elif steps is not None:
            t = f"{plural(steps, 'step')} per epoch; step time: {no_time}"
        else:
            t = f"steps per epoch: {no_steps}; step time: {no_time}"
        return (f"{self.params:,} parameters ({self.trainable:,} trained) · memory "
                f"{human_bytes(self.memory.total)} · {t}{self._epochs_first()}")

    def _epochs_first(self) -> str:
        """" · 3 epochs end at step 33, before max steps 60 (6 epochs reach it)" when they
        do, else ""."""
        first = (epochs_end_first(self.steps_per_epoch, self.epochs, self.max_steps)
                 if self.steps_per_epoch else None)
        return f" · {first[0]} ({first[1]:,} epochs reach it)" if first else ""


def _dur(s: float) -> str:
    if s < 0.95:  # "~0 s" read as "no time at all"
        return "under 1 s"
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def estimate_run(cfg: MambaConfig, tc: TrainConfig, corpus_tokens: int, rows: int | None = None,
                 step_s: float | None = None) -> RunEstimate:
    """Sizes and memory from the settings alone (cheap: call on every change). ``rows``: the
    packed training rows of an epoch (``run.plan_epoch(...).rows``); the steps per epoch come
    from them as the trainer counts them (``trainer.epoch_steps``), None when not counted yet."""
    trained = count_trainable(cfg, tc.lora, tc.wsla)
    total = n_params(cfg)
    mem = estimate(MemorySpec(cfg, tc.batch_size, tc.seq_len, tc.activation_checkpointing,
                              trained if trained < total else None, corpus_tokens=corpus_tokens))
    steps = None if rows is None else epoch_steps(rows, tc.batch_size * tc.grad_accum)
    return RunEstimate(total, trained, mem, steps, step_s, tc.epochs, tc.max_steps)


# steps above this many FLOP (6 x parameters x tokens) are not timed: at the ~100 GFLOP/s two
# cores reach, each takes over 10 s of the machine in the background (sequence length 65,536 on
# a small model, 1.56 TFLOP a step, was timed for 5.5 minutes at 5-7 GB)
MEASURE_MAX_FLOP = 1e12
MEASURE_BUDGET_S = 20.0  # no step is begun this long after the timing's start (one is timed)


def why_not_measured(cfg: MambaConfig, tc: TrainConfig) -> str | None:
    """None when timing a few steps of ``cfg`` / ``tc`` is safe; else why not: the run would not
    fit in the memory available now (the message ``check_run`` gives at Start), or one step is
    too costly to time in the background."""
    try:
        check_run(cfg, tc)
    except ConfigError as exc:
        return str(exc)
    flop = 6 * n_params(cfg) * tc.batch_size * tc.grad_accum * tc.seq_len
    if flop > MEASURE_MAX_FLOP:
        return (f"step time not measured: one step is about {flop / 1e12:,.1f} TFLOP, over 10 s "
                "of CPU a step on a desktop")
    return None


def measure_step_seconds(cfg: MambaConfig, tc: TrainConfig, steps: int = 3,
                         should_stop: Callable[[], bool] | None = None,
                         budget_s: float = MEASURE_BUDGET_S) -> float:
    """Seconds per optimizer step: a random model of ``cfg`` trained ``steps`` steps (after one
    untimed warm-up step that compiles the kernels) on random tokens; the median is returned
    (of 3: one step slowed by another process's burst does not move it, as it would a mean).
    Steps stop once ``budget_s`` seconds have gone by (the median of those timed, one at
    least), and ``should_stop()`` (asked before each step: the settings changed, a run
    started) ends the timing with ``Stopped``: a timing nothing waited for any more ran on for
    minutes beside the run started meanwhile, at half its speed.
    Raises ConfigError (``why_not_measured``) for a run too large to time or to fit."""
    why = why_not_measured(cfg, tc)
    if why is not None:
        raise ConfigError(why)
    lm = MambaLM.create(cfg, seed=0)
    tc = replace(tc, epochs=1, max_steps=None, eval_every=0, shuffle=False)
    rows = tc.batch_size * tc.grad_accum
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=rows * (steps + 1) * tc.seq_len + 1)
    tr = Trainer(lm, ids, ids[:0], tc)
    times = []
    start = time.perf_counter()
    for s in range(steps + 1):
        if should_stop is not None and should_stop():
            raise Stopped("step timing stopped")
        if s >= 2 and time.perf_counter() - start > budget_s:
            break
        t0 = time.perf_counter()
        tr.train_step(np.arange(s * rows, (s + 1) * rows))
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))
