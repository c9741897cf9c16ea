"""Seconds left of a training run, from its recent step times.

The ETA is ``steps left x (median of the last ETA_WINDOW step times + the other time so far per
step) + held-out evaluations left x the time of one``. A median, not the last step or the mean
since the start: on a shared machine one step in a few runs 2-10x slower (another process's burst,
the thread tuner trying a setting), and the median ignores such steps while following a lasting
change of speed within half a window. The other time (epoch-end samples and saves: everything
between steps but evaluations and pauses) comes every so many steps, so it is spread over all steps
instead. The first step of a stretch is left out of the median (it compiles or loads the kernels
and starts the thread tuner: on a cold cache it said "ETA 43:46" for a 40-second run); until a
second step the ETA is unknown.

Held-out evaluations are counted apart: the ones still to come (the trainer knows their steps)
each take the mean of those measured, or before the first one the trainer's guess from the step
time. Spread over the steps as other time, a run's last evaluation came after "ETA 00:00" (32 s
with an 8,192-token vocabulary on a 30 MB corpus), and a short run's only one was not counted.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

ETA_WINDOW = 20  # recent steps the median is taken over


class Eta:
    """Step durations of one stretch of training (seconds); ``seconds_left`` estimates."""

    def __init__(self, window: int = ETA_WINDOW) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.steps = 0
        self.step_s = 0.0  # all steps' seconds
        self.evals = 0  # held-out evaluations measured, and their seconds
        self.eval_s = 0.0

    def step(self, seconds: float) -> None:
        if self.steps:  # not the first: see the module's docstring
            self.recent.append(seconds)
        self.steps += 1
        self.step_s += seconds

    def evaluated(self, seconds: float) -> None:
        """A held-out evaluation took ``seconds`` (between steps: not other time)."""
        self.evals += 1
        self.eval_s += seconds

    def typical_step_s(self) -> float | None:
        """The median of the recent step times (None before a second step)."""
        return median(self.recent) if self.recent else None

    def seconds_left(self, steps_left: int, elapsed_s: float, evals_left: int = 0,
                     eval_guess_s: float = 0.0) -> float:
        """``elapsed_s``: wall seconds since the first step of this stretch began, pauses and
        stops excluded (the trainer leaves out a step or the time between steps in which the
        process was stopped: ``engine.signals.continues``); what the steps and evaluations did
        not take of it is the other time. ``evals_left`` evaluations still to come take the mean
        measured one each, or ``eval_guess_s`` before one was measured. inf before a second
        step."""
        typical = self.typical_step_s()
        if typical is None:
            return math.inf
        other = max(elapsed_s - self.step_s - self.eval_s, 0.0) / self.steps
        each = self.eval_s / self.evals if self.evals else eval_guess_s
        return steps_left * (typical + other) + evals_left * each
