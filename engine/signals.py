"""SIGINT/SIGTERM/SIGHUP as a cooperative stop: the current step finishes, the run saves, the process
exits normally. A second signal while saving is reported and otherwise ignored, so it cannot
interrupt a snapshot half-way (a third one does nothing either; use kill -9 to abandon a run:
the previous snapshot stays intact)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

HANGUP = getattr(signal, "SIGHUP", None)  # a closed terminal or a dropped SSH session
STOP_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, HANGUP) if s is not None)


def detach_output() -> None:
    """Point stdout and stderr at the null device (what nohup does) where they are the terminal
    that is gone; a log file or pipe keeps the rest of the output."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            if os.isatty(fd):
                os.dup2(null, fd)
        os.close(null)


def _handled(signals: tuple[int, ...]) -> list[int]:
    """The signals not ignored by whoever started us (``nohup`` ignores SIGHUP: a run started
    with it must go on when the terminal closes, not stop and save)."""
    return [s for s in signals if signal.getsignal(s) is not signal.SIG_IGN]


CONTINUE = getattr(signal, "SIGCONT", None)  # Ctrl-Z then `fg`, or kill -STOP then -CONT
_CONTINUED = [0]  # continues seen while watched


def continues() -> int:
    """How many times this process was continued after being stopped (Ctrl-Z, SIGSTOP) while
    :func:`watch_continues` (or ``stop_on_signals``) watched: the trainer's step-time clock leaves
    out an interval in which this changed (a 10 s stop made the ETA ~3x too long)."""
    return _CONTINUED[0]


def _on_continue(signum: int, frame: Any) -> None:
    _CONTINUED[0] += 1


def watch_continues() -> Any:
    """Count SIGCONTs (main thread only; elsewhere, and where there is no SIGCONT, nothing).
    Returns the handler it replaced (None when it installed nothing), for ``signal.signal``."""
    if CONTINUE is None or threading.current_thread() is not threading.main_thread():
        return None
    old = signal.signal(CONTINUE, _on_continue)
    signal.siginterrupt(CONTINUE, False)  # SA_RESTART: a `fg` must not make a blocking call in
    return old  # C code (BLAS, MPI, TensorBoard's writer) fail with EINTR


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside training: handled where Ctrl-C is (a new run's half-made folder
    is removed, an export's staging folder too); it killed the process with nothing said."""


_CALLBACKS = ("llvmlite/binding/executionengine.py", "_raw_")  # (file, function prefix)
REDELIVER_S = 0.05


def in_c_callback(frame: Any) -> bool:
    """``frame`` runs inside a ctypes callback (llvmlite's object cache, which LLVM calls while
    Numba compiles), where an exception is printed as "Exception ignored on calling ctypes
    callback function" and dropped: a stop raised there was lost, the command went on."""
    while frame is not None:
        code = frame.f_code
        if (code.co_filename.replace("\\", "/").endswith(_CALLBACKS[0])
                and code.co_name.startswith(_CALLBACKS[1])):
            return True
        frame = frame.f_back
    return False


def _again_soon(signum: int) -> None:
    """Send ``signum`` to this process again in ``REDELIVER_S`` (out of the callback by then)."""
    timer = threading.Timer(REDELIVER_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def answerable(work: Callable[[], None], poll_s: float = 0.1) -> None:
    """Run ``work`` (native code that releases the GIL) so that the main thread still answers
    Ctrl-C / SIGTERM: there, in a helper thread while the main thread waits on it in
    ``poll_s`` slices (a signal handler runs only between the main thread's Python steps: BPE
    training left Ctrl-C unanswered for 13-19 s); elsewhere (the window's worker), inline. An
    interrupted wait leaves the helper to finish on its own (a daemon thread: the process does
    not wait for it, ``exit_past_native_work``); its exception is raised here."""
    if threading.current_thread() is not threading.main_thread():
        work()
        return
    failed: list[BaseException] = []
    finished = threading.Event()  # (not the thread's is_alive: after a join that an interrupt cut
    # short, CPython may call the thread stopped while its work still runs)

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # (raised in the main thread below)
            failed.append(exc)
        finally:
            finished.set()

    threading.Thread(target=run, name="answerable", daemon=True).start()
    try:
        while not finished.wait(poll_s):
            pass
    except BaseException:
        _LEFT_RUNNING.append(finished)  # see exit_past_native_work
        raise
    if failed:
        raise failed[0]


_LEFT_RUNNING: list[threading.Event] = []  # the work of answerable's interrupted waits


def exit_past_native_work(code: int) -> None:
    """End the process now, with ``code``, if an interrupt cut an ``answerable`` wait short. Its
    native work may still run then: the tokenizers library trains in Rust threads that call back
    into Python for the corpus's pieces, and at the interpreter's shutdown such a thread is ended
    by force when it takes the GIL, which through Rust frames aborts the process ("FATAL:
    exception not rethrown", exit 134 after "interrupted (Ctrl-C)"). What the process had to do
    is done by then (the CLI said its last line and removed a half-made run folder)."""
    if not all(done.is_set() for done in _LEFT_RUNNING):
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


@contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """While active (main thread only), SIGTERM and SIGHUP raise ``Interrupted`` and Ctrl-C
    KeyboardInterrupt; one that lands inside a ctypes callback (``in_c_callback``: it would be
    dropped there) is sent again a moment later. ``stop_on_signals`` takes them over during
    training."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if signum == HANGUP:
            detach_output()
        if in_c_callback(frame):  # (Ctrl-C while the kernels compiled left a half-made run
            _again_soon(signum)  # folder, a traceback, and a process that went on)
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signal.Signals(signum).name)

    old = {s: signal.signal(s, handler) for s in _handled(STOP_SIGNALS)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Stoppable(Protocol):
    def stop(self) -> None: ...


@contextmanager
def stop_on_signals(control: Stoppable, notify: Callable[[str], None] | None = None,
                    lasting: bool = False,
                    stepped: Callable[[], bool] | None = None) -> Iterator[None]:
    """While active, SIGINT, SIGTERM and SIGHUP call ``control.stop()`` instead of raising. Only the main
    thread can install handlers; elsewhere this does nothing. ``lasting`` (a process that exits
    after the run): once a signal has stopped the run, later ones are reported and ignored after
    the block too (SIGHUP detaching the output), instead of the default handlers coming back: a
    second Ctrl-C just after the save killed the process by SIGINT, exit status 130, with nothing
    said. The process then calls :func:`ignore_after_stop` as it exits (the interpreter resets
    Python handlers to the default while it exits). ``stepped``: whether a step was done (a
    second signal before one is said to wait for the first step, which compiles the kernels:
    "still saving" read as a hang)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    say = notify or (lambda m: (sys.stderr.write(m + "\n"), sys.stderr.flush()))
    count = [0]

    def tell(signum: int, what: str) -> None:
        if signum == HANGUP:
            detach_output()  # the terminal is gone: a progress line written to it would fail
        with contextlib.suppress(OSError, ValueError):
            say(f"\n{signal.Signals(signum).name}{what}")

    def handler(signum: int, frame: Any) -> None:
        count[0] += 1
        control.stop()
        first = stepped is not None and not stepped()
        tell(signum, ": finishing the current step, then saving (please wait)" if count[0] == 1
             else " again: still finishing the first step (it compiles the kernels: up to a "
                  "minute), then saving" if first
             else " again: still saving; the run will exit as soon as the snapshot is safe")

    def late(signum: int, frame: Any) -> None:
        tell(signum, ": the run is saved; finishing (kill -9 ends the process at once)")

    old = {s: signal.signal(s, handler) for s in _handled(STOP_SIGNALS)}
    old_continue = watch_continues()
    try:
        yield
    finally:
        if CONTINUE is not None and old_continue is not None:
            signal.signal(CONTINUE, old_continue)
        stopped = lasting and count[0] > 0
        _STOPPED[0] = _STOPPED[0] or stopped
        for s, h in old.items():
            signal.signal(s, late if stopped else h)


_STOPPED = [False]  # a signal stopped a run of this process (``stop_on_signals(lasting=True)``)


def note_interrupted() -> None:
    """A Ctrl-C / SIGTERM ended the command (``Interrupted`` handled): the process is on its way
    out, and :func:`ignore_after_stop` keeps a second one from interrupting that (it printed a
    traceback from the exit path)."""
    _STOPPED[0] = True


def ignore_after_stop() -> None:
    """The last thing a process does whose run a signal stopped: ignore the stop signals from
    here (not a Python handler: those are reset to the default while the interpreter exits, and
    a late Ctrl-C then killed the process by SIGINT)."""
    if _STOPPED[0] and threading.current_thread() is threading.main_thread():
        for s in _handled(STOP_SIGNALS):
            signal.signal(s, signal.SIG_IGN)
