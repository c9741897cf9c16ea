"""Cooperative pause/stop of a training loop, shared between the trainer and whoever drives it
(the CLI's signal handlers, the app's buttons)."""

from __future__ import annotations

import threading


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
