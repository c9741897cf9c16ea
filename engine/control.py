"""Cooperative pause/stop of a training loop, shared between the trainer and whoever drives it
(the CLI's signal handlers, the app's buttons)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Protocol

from .errors import MambaStudioError


class LoopControl(Protocol):
    """What a training loop asks between optimizer steps: park while paused, then stop or go on."""

    @property
    def stopped(self) -> bool: ...

    def wait_if_paused(self) -> None: ...


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


class RunControl(LoopControl, Protocol):
    """What a run is driven by: ``TrainControl`` in one process, ``CollectiveControl`` across
    MPI ranks (a stop asked on any rank stops them all)."""

    @property
    def paused(self) -> bool: ...

    def stop(self) -> None: ...


class PauseReporting:
    """``inner`` as a training loop sees it, telling ``report`` when the loop parks on a pause
    ("paused") and when it goes on ("running"): a run's status file says "paused" while paused.
    Calls come from the training thread."""

    def __init__(self, inner: RunControl, report: Callable[[str], None]) -> None:
        self.inner = inner
        self._report = report

    @property
    def stopped(self) -> bool:
        return self.inner.stopped

    def wait_if_paused(self) -> None:
        if not self.inner.paused:
            return
        self._tell("paused")
        self.inner.wait_if_paused()
        if not self.inner.stopped:  # a stop while paused ends the run, which writes its own state
            self._tell("running")

    def _tell(self, state: str) -> None:
        """Report ``state``; a failed write (a full disk) must not end the run: the status file
        only describes the run, and the run's own saves say what failed."""
        with contextlib.suppress(OSError, MambaStudioError):
            self._report(state)
