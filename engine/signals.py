"""SIGINT/SIGTERM as a cooperative stop: the current step finishes, the run saves, the process
exits normally. A second signal while saving is reported and otherwise ignored, so it cannot
interrupt a snapshot half-way (a third one does nothing either; use kill -9 to abandon a run:
the previous snapshot stays intact)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Stoppable(Protocol):
    def stop(self) -> None: ...


@contextmanager
def stop_on_signals(control: Stoppable, notify: Callable[[str], None] | None = None) -> Iterator[None]:
    """While active, SIGINT and SIGTERM call ``control.stop()`` instead of raising. Only the main
    thread can install handlers; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    say = notify or (lambda m: (sys.stderr.write(m + "\n"), sys.stderr.flush()))
    count = [0]

    def handler(signum: int, frame: Any) -> None:
        count[0] += 1
        name = signal.Signals(signum).name
        if count[0] == 1:
            say(f"\n{name}: finishing the current step, then saving (please wait)")
        else:
            say(f"\n{name} again: still saving; the run will exit as soon as the snapshot is safe")
        control.stop()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
