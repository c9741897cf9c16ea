"""Divergence guard: a step that blows up is undone in memory, never saved.

A step's loss is that of the weights the step before it left (it is measured before this step's
update), so the guard checks it there, between the gradients and the update
(``check_loss``), and calls those weights bad when

* the loss is NaN/Inf,
* the loss exceeds ``2 ln(vocab) + 1`` (far worse than guessing uniformly) and twice the first
  step's loss (an init with large logits, e.g. N(0, 1) tied embeddings, starts above the former),
* the loss exceeds twice the median of the last 20 good steps plus ``loss_margin`` nats;

bad weights roll the trainer back to the state kept before the previous step's update. Good ones
are kept there (the rollback point: weights, optimizer moments, cursor), and after the update
(``after``) the step itself is called diverged when

* the gradient norm exceeds ``norm_factor`` x the median of the last 20 good steps (after a
  collapse, whose median is ~0: the first step's norm),
* the update moved the trained weights by more than ``max_update`` of their norm
  (``||W_after - W_before|| / ||W_before||``: a finite step that wrecks the model, e.g. lr 1e3),

which rolls back that step alone. Each rollback is exact, halves the learning-rate scale and calls
``on_rollback(message)``; after ``max_rollbacks`` rollbacks the guard raises ``TrainingError``
with the trainer already back at its last good state.

A retry that leaves the symptom as it was shows it is the batch's, not the weights': a loss
jump that comes back within 5 % at weights one halved step from the last good ones, or a
gradient spike (the retried step's gradient is the same, at the same weights and rows). Such a
step is kept (a spike's update at the halved rate, still judged by the update rule), said once,
and the learning rate goes back to where it was. (A batch of other text, near-duplicate text
around it, was rolled back three times and ended a healthy run "diverged", with "lower the
learning rate", which could not help.) (The loss rules were checked after the
update and rolled back only that update: the weights that gave the loss stayed, every retry saw
the same loss, and the run kept a model "worse than guessing" as its last good state.)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import StepVoid, TrainingError

if TYPE_CHECKING:
    from .trainer import StepReport, Trainer

STALL_STEPS = 20  # steps of a ~zero gradient after which a run is said to have collapsed


def _copy_state(state: Any, into: Any = None) -> Any:
    """Deep copy of a ``state_dict()`` (arrays copied too), into the arrays of ``into`` (an
    earlier copy) where shapes and dtypes match: a new copy every step held two copies of the
    optimizer moments at once (a 51 M-parameter model's steps peaked 1 GB higher)."""
    if isinstance(state, np.ndarray):
        if isinstance(into, np.ndarray) and into.shape == state.shape \
                and into.dtype == state.dtype:
            np.copyto(into, state)
            return into
        return state.copy()
    if isinstance(state, dict):
        old = into if isinstance(into, dict) else {}
        return {k: _copy_state(v, old.get(k)) for k, v in state.items()}
    return deepcopy(state)


@dataclass
class DivergenceGuard:
    max_rollbacks: int = 3
    norm_factor: float = 100.0
    max_update: float = 0.5
    on_rollback: Callable[[str], None] | None = None
    rollbacks: int = 0
    _weights: dict[str, np.ndarray] = field(default_factory=dict)
    _state: dict[str, Any] | None = None
    loss_margin: float = 1.0  # nats
    _norms: list[float] = field(default_factory=list)
    _losses: list[float] = field(default_factory=list)
    _first_loss: float | None = None
    _first_norm: float | None = None
    _stall_said: bool = False
    # steps whose loss jump or gradient spike was rolled back: step -> (its loss or norm, the
    # lr scale and the rollbacks before it), so a retry that shows the same is the batch's;
    # and steps found so (step -> the loss kept; the spikes'), which later retries of the
    # same step (a rollback from the next one) take as they are
    _suspects: dict[int, tuple[float, float, int]] = field(default_factory=dict)
    _spikes: dict[int, tuple[float, float, int]] = field(default_factory=dict)
    _batch_losses: dict[int, float] = field(default_factory=dict)
    _batch_spikes: set[int] = field(default_factory=set)

    def check_loss(self, trainer: Trainer, loss: float) -> None:
        """``loss``: this step's loss, at the weights the step before it left (before this
        step's update). Good: those weights become the rollback point. Bad: the trainer goes
        back to the rollback point (before the previous step's update) and ``StepVoid`` is
        raised, or ``TrainingError`` (after ``max_rollbacks``, or with no good state yet: the
        weights the run started from give that loss)."""
        reason = self.loss_problem(trainer, loss)
        step = trainer.cursor.step + 1
        if reason is not None and self._jump_is_the_batchs(trainer, step, loss):
            reason = None
        if reason is None:
            self._keep(trainer)
            return
        if self._state is not None and self._losses:  # the undone step's loss and norm leave
            self._losses.pop()  # the history with it (its median counted them)
            self._norms.pop()
        if self._state is None:
            raise TrainingError(f"training diverged at step {step}: {reason}, at the weights it "
                                "started from (no update of this run had changed them yet): "
                                "resume from an earlier snapshot, or start from other weights")
        self._roll_back(trainer, step, f"{reason}, at the weights step {step - 1} left")
        raise StepVoid(reason)

    def _jump_is_the_batchs(self, trainer: Trainer, step: int, loss: float) -> bool:
        """Whether ``loss``, a jump (not NaN/Inf, nor worse than guessing) at ``step``, came
        back within 5 % after ``step``'s first jump was rolled back: the batch's, so kept (True,
        said once; the learning rate back to its scale before), else remembered (False)."""
        if self._absolute_problem(trainer, loss) is not None:
            return False
        kept = self._batch_losses.get(step)
        if kept is not None and abs(loss - kept) <= 0.05 * abs(kept):
            return True
        s = self._suspects.get(step)
        if s is None or abs(loss - s[0]) > 0.05 * abs(s[0]):
            self._suspects[step] = (loss, trainer.lr_scale, self.rollbacks)
            return False
        del self._suspects[step]
        self._batch_losses[step] = loss
        trainer.lr_scale, self.rollbacks = s[1], s[2]
        med = float(np.median(self._losses[-20:])) if self._losses else float("nan")
        self._new_text()
        self._say(f"step {step}'s batch is unlike the text before it: its loss {loss:.3g} (the "
                  f"run's median {med:.3g}) stayed within 5 % at weights a halved step from the "
                  "last good ones, so it is the text's, not a divergence: kept, and the learning "
                  f"rate is back to scale {trainer.lr_scale:g}")
        return True

    def _say(self, msg: str) -> None:
        if self.on_rollback is not None:
            self.on_rollback(msg)

    def _keep(self, trainer: Trainer) -> None:
        assert trainer.trainable is not None
        for n, a in trainer.trainable.tensors.items():
            if n in self._weights:
                np.copyto(self._weights[n], a)
            else:
                self._weights[n] = a.copy()
        self._state = _copy_state(trainer.state_dict(), self._state)

    def loss_problem(self, trainer: Trainer, loss: float) -> str | None:
        """Why the weights that gave ``loss`` are bad, or None."""
        problem = self._absolute_problem(trainer, loss)
        if problem is not None:
            return problem
        if len(self._losses) >= 5:
            limit = 2 * float(np.median(self._losses[-20:])) + self.loss_margin
            if loss > limit:
                return (f"the loss {loss:.3g} jumped above {limit:.3g} "
                        f"(2x its median + {self.loss_margin:g})")
        return None

    def _absolute_problem(self, trainer: Trainer, loss: float) -> str | None:
        """The rules no retry overrules: NaN/Inf, and worse than guessing."""
        if not math.isfinite(loss):
            return "the loss is NaN/Inf"
        if self._first_loss is None:
            self._first_loss = loss
        limit = max(2 * math.log(trainer.lm.config.vocab_size) + 1, 2 * self._first_loss)
        if loss > limit:
            return f"the loss {loss:.3g} is above {limit:.3g} (worse than guessing)"
        return None

    def held_out_problem(self, trainer: Trainer, loss: float) -> str | None:
        """Why the held-out loss of the run's last weights shows them bad (NaN/Inf, or worse
        than guessing), or None; only while a rollback point is kept (``kept``). No step's loss
        judges the last step's weights. (The jump rule is for training losses: a held-out loss
        sits above them.)"""
        if not math.isfinite(loss):
            return "the held-out loss is NaN/Inf"
        limit = max(2 * math.log(trainer.lm.config.vocab_size) + 1, 2 * (self._first_loss or 0))
        if loss > limit:
            return f"the held-out loss {loss:.3g} is above {limit:.3g} (worse than guessing)"
        return None

    @property
    def kept(self) -> bool:
        """A rollback point is kept (a step of this run passed the loss rules)."""
        return self._state is not None

    def update_problem(self, trainer: Trainer, report: StepReport) -> str | None:
        """Why ``report``'s step (its gradient, its update) diverged, or None. The gradient
        rules are left out for a step whose spike was rolled back once (``_spike``): its
        retry's gradient is the same, so it is judged by its update at the halved rate."""
        retried = report.step in self._spikes or report.step in self._batch_spikes
        if len(self._norms) >= 5 and not retried:
            med = max(float(np.median(self._norms[-20:])), 1e-12)
            g = report.grad_norm
            first = max(self._first(), 1e-12)
            if med <= 1e-6 * first:  # collapsed, or waking from it: up to the first step's norm
                if g > first:  # is no spike (1.09 was "1090579304178x its median": the run
                    return (f"the gradient norm {g:.3g} is {g / first:.0f}x the first step's "
                            "(its median is ~0: the model had collapsed)")  # ended "diverged")
            elif g > self.norm_factor * med:
                return f"the gradient norm {g:.3g} is {g / med:.0f}x its median"
        assert trainer.trainable is not None
        num = den = 0.0
        for n, a in trainer.trainable.tensors.items():
            w = self._weights[n]
            num += float(np.square(a - w, dtype=np.float64).sum())
            den += float(np.square(w, dtype=np.float64).sum())
        if not math.isfinite(num):
            return "the weights became NaN/Inf"
        ratio = math.sqrt(num / den) if den > 0 else 0.0
        if den > 0 and ratio > self.max_update:
            return f"one step changed the weights by {ratio:.3g} times their norm"
        return None

    def why(self, trainer: Trainer, report: StepReport) -> str | None:
        """Every rule on one step's report: its loss's, then its update's."""
        return self.loss_problem(trainer, report.loss) or self.update_problem(trainer, report)

    def after(self, trainer: Trainer, report: StepReport) -> bool:
        """After the step's update (its loss passed ``check_loss``): True when the step diverged
        and was rolled back."""
        reason = self.update_problem(trainer, report)
        if reason is None:
            spike = self._spikes.pop(report.step, None)
            if spike is not None:  # kept at the halved rate
                self._batch_spikes.add(report.step)
                trainer.lr_scale, self.rollbacks = spike[1], spike[2]
                self._say(f"step {report.step}'s gradient norm {report.grad_norm:.3g} came back "
                          "the same (its batch is unlike the text before it; a gradient does not "
                          "depend on the learning rate): kept at the halved rate, and the "
                          f"learning rate is back to scale {trainer.lr_scale:g}")
            self._forget_before(report.step - 2)
            if self._first_norm is None:
                self._first_norm = report.grad_norm
            self._norms.append(report.grad_norm)
            self._losses.append(report.loss)
            self._say_if_stalled(report)
            return False
        if reason.startswith("the gradient norm") and report.step not in self._spikes:
            self._spikes[report.step] = (report.grad_norm, trainer.lr_scale, self.rollbacks)
        self._roll_back(trainer, report.step, reason)
        return True

    def _first(self) -> float:
        """The run's first good step's gradient norm (kept apart from the history, which a
        batch of new text starts again)."""
        if self._first_norm is not None:
            return self._first_norm
        return self._norms[0] if self._norms else 0.0

    def _new_text(self) -> None:
        """A batch's loss jump was found the text's: the medians the jump and spike rules
        compare with start again from the steps after it (each step of the new text was
        rolled back and retried until its own losses made the median: ~4 lines a step). A
        spike alone does not: its evidence is one gradient, which a retry cannot change."""
        self._losses.clear()
        self._norms.clear()

    def _forget_before(self, step: int) -> None:
        """Drop what was kept of steps before ``step`` (no rollback goes back to them)."""
        for d in (self._suspects, self._spikes, self._batch_losses):
            for k in [k for k in d if k < step]:
                del d[k]
        self._batch_spikes = {k for k in self._batch_spikes if k >= step}

    def _roll_back(self, trainer: Trainer, step: int, reason: str) -> None:
        self.restore(trainer)
        self.rollbacks += 1
        if self.rollbacks >= self.max_rollbacks:
            raise TrainingError(
                f"training diverged {self.rollbacks} times (last at step {step}: {reason}); "
                "the model was rolled back to its last good state; lower the learning rate")
        trainer.lr_scale *= 0.5
        msg = (f"step {step} diverged ({reason}); rolled back to step {trainer.cursor.step} "
               f"and halved the learning rate (scale {trainer.lr_scale:g})")
        if self.on_rollback is not None:
            self.on_rollback(msg)

    def _collapsed(self) -> bool:
        """The gradient norm has been ~0 (a millionth of the first step's) for ``STALL_STEPS``
        good steps in a row."""
        recent = self._norms[-STALL_STEPS:]
        return len(recent) >= STALL_STEPS and max(recent) <= 1e-6 * max(self._first(), 1e-12)

    def _say_if_stalled(self, report: StepReport) -> None:
        """Once: the gradient has been ~0 for ``STALL_STEPS`` steps in a row. Nothing diverged,
        but the model collapsed to one output for every input (lr 1.0 did it: held-out loss
        flat at 5.58, grad norm 0.000 each epoch) and will not learn again by itself."""
        if self._stall_said or not self._collapsed():
            return
        self._stall_said = True
        if self.on_rollback is not None:
            self.on_rollback(f"the gradient norm has been ~0 for {STALL_STEPS} steps (step "
                             f"{report.step}): the model collapsed to one output for every "
                             "input, usually from too high a learning rate; it will not learn "
                             "again: stop, and start a new run with a lower learning rate")

    def restore(self, trainer: Trainer) -> None:
        """Put the trainer back to the rollback point (``check_loss`` kept it)."""
        assert trainer.trainable is not None and self._state is not None
        for n, a in trainer.trainable.tensors.items():
            np.copyto(a, self._weights[n])
        trainer.load_state_dict(_copy_state(self._state))  # (a rollback: rare)
