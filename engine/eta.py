"""Seconds left of a training run, from its recent step times.

The ETA is ``steps left x (median of the last ETA_WINDOW step times + evaluation seconds so far
per step)``. A median, not the last step or the mean since the start: on a shared machine one
step in a few runs 2-10x slower (another process's burst, the thread tuner trying a setting), and
the median ignores such steps while following a lasting change of speed within half a window.
Held-out evaluations happen every so many steps, so their time is spread over all steps instead.
"""

from __future__ import annotations

from collections import deque
from statistics import median

ETA_WINDOW = 20  # recent steps the median is taken over


class Eta:
    """Collects step and evaluation durations (seconds); ``seconds_left(steps)`` estimates."""

    def __init__(self, window: int = ETA_WINDOW) -> None:
        self.recent: deque[float] = deque(maxlen=window)
        self.steps = 0
        self.eval_s = 0.0

    def step(self, seconds: float) -> None:
        self.recent.append(seconds)
        self.steps += 1

    def evaluation(self, seconds: float) -> None:
        self.eval_s += seconds

    def seconds_left(self, steps_left: int) -> float:
        """inf until a step was timed."""
        if not self.recent:
            return float("inf")
        return steps_left * (median(self.recent) + self.eval_s / self.steps)
