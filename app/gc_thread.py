"""Python's cyclic garbage collector kept on the GUI thread.

CPython runs the collector in whichever thread crosses an allocation threshold. When that was the
training thread or a pool job, garbage cycles holding Qt objects (a finished job's signals and
the closures connected to them) were finalised off the GUI thread while the GUI thread, inside
Qt, waited for the interpreter lock: the window hung (seen about once in eight runs of the panel
tests, both threads stopped in plain Python code). pyqtgraph's ``GarbageCollector`` turns the
automatic collector off and collects on a GUI-thread timer instead.
"""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

_holders: list[GarbageCollector] = []


def collect_on_gui_thread() -> GarbageCollector:
    """Start collecting on a timer of the GUI thread (call there); ``release`` undoes it."""
    collector = GarbageCollector(interval=0.5)
    _holders.append(collector)
    return collector


def release(collector: GarbageCollector) -> None:
    """Stop ``collector``'s timer; with no window left collecting, the automatic collector is
    on again (tests build and close many windows in one process)."""
    collector.timer.stop()
    if collector in _holders:
        _holders.remove(collector)
    if not _holders:
        gc.enable()


def release_all() -> None:
    """``release`` every collector still running (for tests that leave windows open)."""
    for collector in list(_holders):
        release(collector)
