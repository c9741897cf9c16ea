"""Seconds left of a training run, from its recent step times.

The ETA is ``steps left x (median of the last ETA_WINDOW step times + the other time so far per
step)``. A median, not the last step or the mean since the start: on a shared machine one step in
a few runs 2-10x slower (another process's burst, the thread tuner trying a setting), and the
median ignores such steps while following a lasting change of speed within half a window. The
other time (held-out evaluations, epoch-end samples and saves: everything between steps but
pauses) comes every so many steps, so it is spread over all steps instead. The first step of a
stretch is left out of the median (it compiles or loads the kernels and starts the thread tuner:
on a cold cache it said "ETA 43:46" for a 40-second run); until a second step the ETA is unknown.
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

    def step(self, seconds: float) -> None:
        if self.steps:  # not the first: see the module's docstring
            self.recent.append(seconds)
        self.steps += 1
        self.step_s += seconds

    def typical_step_s(self) -> float | None:
        """The median of the recent step times (None before a second step)."""
        return median(self.recent) if self.recent else None

    def seconds_left(self, steps_left: int, elapsed_s: float) -> float:
        """``elapsed_s``: wall seconds since the first step of this stretch began, pauses and
        stops excluded (the trainer leaves out a step or the time between steps in which the
        process was stopped: ``engine.signals.continues``); what the steps did not take of it is
        the other time. inf before a second step."""
        typical = self.typical_step_s()
        if typical is None:
            return math.inf
        other = max(elapsed_s - self.step_s, 0.0) / self.steps
        return steps_left * (typical + other)
