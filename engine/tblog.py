"""TensorBoard event files for a run (``tensorboard --logdir runs/``), written by tensorboardX.

Scalars: ``loss/train`` and ``loss/heldout`` in nats per token, ``bpb/*`` in bits per byte,
``grad_norm``, ``lr`` and ``tokens_per_s``, all against the optimizer step. tensorboardX is imported
when a logger is made, never at engine import."""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .runformat import TB as TB_DIR
from .units import bits_per_byte

if TYPE_CHECKING:
    from .run import Run
    from .trainer import EpochReport, StepReport

_MARK = "mamba-studio flush "  # a flush's marker event (taken out before the file: _wrap_writes)


def keeps_tensorboard(folder: str | Path) -> bool:
    """Whether a resumed run logs TensorBoard events: where it did before (its tb/ exists), so a
    run started without them (``train --no-tensorboard``) stays without (a plain resume wrote
    them)."""
    tb = Path(folder) / TB_DIR
    return tb.exists() or tb.is_symlink()


def run_logger(run: Run, resumed: bool, wanted: bool | None = None,
               on_error: Callable[[str], None] | None = None) -> TBLogger | None:
    """The TensorBoard logger of an open ``run`` for the CLI and the window alike, or None: a new
    run logs unless ``wanted`` is False; a resumed one (``resumed``) logs where it did before
    (``keeps_tensorboard``) unless ``wanted`` says otherwise. Its step is the run's, so the
    events a crash left after it are hidden."""
    on = wanted if wanted is not None else (not resumed or keeps_tensorboard(run.folder))
    if not on:
        return None
    return TBLogger(run.folder, run.data.tokens_per_byte or 1.0, on_error=on_error, step=run.step,
                    heldout_tokens_per_byte=run.data.heldout_tokens_per_byte)


class TBLogger:
    """A run's TensorBoard writer that never takes the run down: when writing fails (a full
    disk), logging stops, ``on_error`` hears why once, and nothing is printed or left blocking
    (tensorboardX's writer thread died with a traceback, and its bounded queue would then block
    the next ``add_scalar`` for good)."""

    def __init__(self, folder: str | Path, tokens_per_byte: float = 1.0,
                 on_error: Callable[[str], None] | None = None, step: int = 0,
                 heldout_tokens_per_byte: float | None = None) -> None:
        """``step``: the run's step now (a resume's snapshot); the events of later steps that an
        earlier process logged before it ended (a kill, a crash: their steps were not saved and
        are trained again) are hidden from TensorBoard (its purge mark), not drawn twice.
        ``heldout_tokens_per_byte``: the held-out text's (``RunData``), for its bits/byte
        (default: ``tokens_per_byte``, the corpus's)."""
        from tensorboardX import SummaryWriter

        self.tokens_per_byte = tokens_per_byte
        self.heldout_tokens_per_byte = heldout_tokens_per_byte or tokens_per_byte
        self.on_error = on_error
        self.failed: str | None = None
        self.writer: Any = None
        self._eval_step: int | None = None  # the step of the last held-out loss logged
        self._last_step: int | None = None  # the step of the last training loss logged
        self._events: Any = None  # tensorboardX's EventFileWriter (its thread and exit hook)
        self._worker: Any = None
        self._marking = False  # a flush queues a marker and waits for its write (_wrap_writes)
        self._marks = self._marks_seen = 0  # markers queued / written (by the writer thread)
        logdir = Path(folder) / TB_DIR
        if logdir.is_symlink():  # a run's own files are never followed out of its folder (it
            self._fail(f"{logdir} is a link; remove it to log here")  # wrote through one)
            return
        try:
            self.writer = SummaryWriter(logdir=str(logdir), flush_secs=5,  # (its file is named
                                        filename_suffix=f".{time.time_ns()}",  # by the second
                                        purge_step=step + 1 if step > 0 else None)
            # and host alone: a resume within the same second truncated the run's earlier
            # events; the suffix keeps the files apart, in the order they were made)
        except OSError as exc:  # its first event is written at once
            self._fail(exc.strerror or str(exc))
            return
        self._events = getattr(getattr(self.writer, "file_writer", None), "event_writer", None)
        self._worker = getattr(self._events, "_worker", None)
        self._wrap_writes()
        _watch(self)

    def _wrap_writes(self) -> None:
        """Let a flush know when tensorboardX's writer thread has written every event queued
        before it: the flush queues a marker, which this wrapper of the thread's writes takes
        out (it never reaches the file) and counts. The queue is first in, first out, so the
        marker's turn means the events before it are written. (A flush waited for an empty queue
        and then 10 ms more, a guess: a slower write of the last event was lost by a kill -9,
        and every save paid the 10 ms.) Where tensorboardX's internals differ nothing is
        wrapped, and a flush waits for nothing (the tests catch that)."""
        writer: Any = getattr(self._worker, "_record_writer", None)
        write = getattr(writer, "write_event", None)
        if write is None or not hasattr(self._events, "_event_queue"):
            return

        def marked_write(event: Any) -> Any:
            if event.file_version.startswith(_MARK):
                self._marks_seen = int(event.file_version[len(_MARK):])
                return None
            return write(event)

        writer.write_event = marked_write
        self._marking = True

    def _ok(self) -> bool:
        if self.failed is None and self._worker is not None and not self._worker.is_alive():
            self._fail("its writer thread stopped")
        return self.failed is None

    def _fail(self, why: str) -> None:
        if self.failed is None:
            self.failed = why
            if self.on_error is not None:
                self.on_error(f"TensorBoard logging stopped ({why}); training goes on, and "
                              "metrics.csv keeps every step")

    def step(self, step: int, loss: float, grad_norm: float, lr: float, tokens_per_s: float) -> None:
        if not math.isfinite(loss) or not self._ok():
            return
        if self._last_step is not None and step <= self._last_step:  # the guard rolled back
            self._hide_from(step)  # past logged steps: theirs are hidden (they were drawn twice)
        self._last_step = step
        w = self.writer
        w.add_scalar("loss/train", loss, step)
        w.add_scalar("bpb/train", bits_per_byte(loss, self.tokens_per_byte), step)
        w.add_scalar("grad_norm", grad_norm, step)
        w.add_scalar("lr", lr, step)
        w.add_scalar("tokens_per_s", tokens_per_s, step)

    def on_step(self, r: StepReport) -> None:
        """A training step's report: its scalars, and its held-out loss when it was scored."""
        self.step(r.step, r.loss, r.grad_norm, r.lr, r.tokens_per_s)
        if r.val_loss is not None:
            self.eval(r.step, r.val_loss)

    def on_epoch(self, step: int, rep: EpochReport) -> None:
        """An epoch's end at the run's ``step``: its held-out loss, when it was scored."""
        if rep.val is not None:
            self.eval(step, rep.val.loss)

    def _hide_from(self, step: int) -> None:
        """TensorBoard's purge mark: the events of ``step`` and after, logged before it, are
        hidden (as a resume's ``purge_step`` hides a crash's)."""
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self.writer._get_file_writer().add_event(
            Event(step=step, session_log=SessionLog(status=SessionLog.START)))
        if self._eval_step is not None and self._eval_step >= step:
            self._eval_step = None

    def eval(self, step: int, val_loss: float) -> None:
        """A held-out loss, once per step (an evaluation at an epoch's end reaches both the
        step's and the epoch's report: it was logged twice)."""
        if step == self._eval_step:
            return
        if math.isfinite(val_loss) and self._ok():
            self._eval_step = step
            self.writer.add_scalar("loss/heldout", val_loss, step)
            self.writer.add_scalar("bpb/heldout",
                                   bits_per_byte(val_loss, self.heldout_tokens_per_byte), step)

    def flush(self) -> None:
        """Write what is buffered: called at each save, so a kill -9 after it loses no event
        of a step the snapshot holds (up to 5 s of them were never written, and a resume goes
        on after them: a gap in the curves)."""
        if self._marking and self._ok() and not self._events._closed:  # tensorboardX's flush
            from tensorboardX.proto.event_pb2 import Event  # writes only what its thread has

            self._marks += 1  # written: wait for it to reach a marker queued after the events
            deadline = time.monotonic() + 2.0  # (never blocked for good by a full queue of a
            with contextlib.suppress(queue.Full):  # thread that died just now)
                self._events._event_queue.put(Event(file_version=f"{_MARK}{self._marks}"),
                                              timeout=2.0)
                while self._ok() and self._marks_seen < self._marks \
                        and time.monotonic() < deadline:
                    time.sleep(0.0005)
        try:
            if self._ok():
                self.writer.flush()
        except (OSError, ValueError) as exc:
            self._fail(str(exc))

    def close(self) -> None:
        try:
            if self._ok():
                self.writer.close()
        except (OSError, ValueError) as exc:
            self._fail(str(exc))
        finally:
            if self._events is not None:
                self._events._closed = True  # its exit hook would write (and fail) again
            self._stop_worker()
            if self._worker is None or not self._worker.is_alive():
                _LOGGERS.discard(self)

    def _stop_worker(self) -> None:
        """End the writer thread of a logger that failed (its close was skipped): left waiting
        on its queue, it raised "handle is closed" at the interpreter's exit, a traceback after
        the run's one-line error on a full disk. Its shutdown mark goes on the queue, with no
        event written after it."""
        w = self._worker
        if w is None or not w.is_alive():
            return
        try:
            w._queue.put(w._shutdown_signal, timeout=1.0)
        except Exception:  # noqa: BLE001  (a queue already closed: the thread ends with it)
            return
        w.join(timeout=2.0)


_LOGGERS: weakref.WeakSet[TBLogger] = weakref.WeakSet()
_previous_hook: list[Callable[[Any], Any]] = []  # the hook current when ours was installed


def _watch(logger: TBLogger) -> None:
    """Route an error of a logger's writer thread to the logger instead of a printed traceback;
    any other thread's error goes to the hook that was current when this one was installed (one
    captured at import would skip a hook installed in between)."""
    _LOGGERS.add(logger)
    if threading.excepthook is not _quiet_writer_errors:
        _previous_hook[:] = [threading.excepthook]
        threading.excepthook = _quiet_writer_errors


def _quiet_writer_errors(args: Any) -> None:
    for logger in list(_LOGGERS):
        if args.thread is not None and args.thread is logger._worker:
            logger._fail(str(args.exc_value) or type(args.exc_value).__name__)
            return
    (_previous_hook[0] if _previous_hook else threading.__excepthook__)(args)
