"""The CLI's output streams when whoever reads them goes away.

A run's progress and notes go to stderr; training is the job, its output is not. When stderr
cannot be written any more (``train ... 2>&1 | head -n 2``: the pipe closes; ``2>/dev/full``),
the lines from then on go to the null device and training goes on to its end and its save
(it stopped at once, exit status 1, nothing trained). ``generate``'s text on stdout is its
output: a reader that stops early (``| head -c 10``) ends it quietly, as with ``--no-stream``,
and a closed or full stdout is a one-line error naming it (a traceback, or "No space left on
device" without saying where). Text the model wrote goes out through ``terminal_safe``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from .errors import MambaStudioError
from .samples import BIDI_SHOWN


class _Forgiving:
    """A text stream that, after its first failed write or flush, sends the rest to the null
    device (its file descriptor too, so the interpreter's last flush does not fail either)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._stream.write(text)
            except BlockingIOError:  # a non-blocking pipe full for now: this line only
                return len(text)
            except (OSError, ValueError):
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._lose()

    def _lose(self) -> None:
        self.lost = True
        _to_null(self._stream)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding... of the stream
        return getattr(self._stream, name)


@contextmanager
def forgiving_stderr() -> Iterator[None]:
    """While active, a stderr that can no longer be written is let go (see the module)."""
    original = sys.stderr
    if original is None:  # started with stderr closed (2>&-): Python's None there sent print's
        with open(os.devnull, "w") as null:  # lines to stdout and made isatty() raise, which
            sys.stderr = null  # stopped a run after its first step with exit status 1
            try:
                yield
            finally:
                sys.stderr = original
        return
    sys.stderr = _Forgiving(original)
    try:
        yield
    finally:
        sys.stderr = original


def text_out() -> TextIO:
    """stdout for a command whose output is the text: a one-line error when it is closed."""
    if sys.stdout is None:
        raise MambaStudioError("standard output is closed: nowhere to write the text; redirect it "
                               "to a file (> out.txt) or leave it to the terminal")
    return sys.stdout


def write_text(out: TextIO, text: str, flush: bool = False) -> None:
    """Write (and flush) ``text`` to ``out``: a one-line MambaStudioError naming standard output
    for a failure (a full disk); a closed pipe's BrokenPipeError is left to the command's caller,
    which ends quietly when it is stdout's (``stdout_gone``)."""
    try:
        out.write(text)
        if flush:
            out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        _to_null(out)
        raise MambaStudioError(f"cannot write the text to standard output "
                               f"({exc.strerror or exc}); redirect it elsewhere") from None


def stdout_gone() -> bool:
    """Whether stdout's reader went away (``eval RUN | head -c 5``): its pipe reports an error
    to a writer (a broken pipe elsewhere, a socket, is not this); then stdout is pointed at the
    null device so the exit's flush does not fail too."""
    try:
        import select

        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no descriptor
        gone = True  # (the error came from writing our output: the likeliest reader)
    if gone:
        _to_null(sys.stdout)
    return gone


def _to_null(stream: Any) -> None:
    """Point the stream's file descriptor at the null device (the interpreter flushes stdout
    and stderr as it exits: that failed again, with a traceback). A stream without a descriptor
    (a test's capture) is left as it is. (io.UnsupportedOperation is an OSError.)"""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)


# C0 controls but tab, newline and carriage return; DEL; C1 controls (ESC starts a terminal escape);
# and the bidirectional embeddings, overrides and isolates, shown by their code (U+202E drew the
# rest of a sample reversed), as the window shows them
_CONTROLS: dict[int, str] = {c: "\ufffd" for c in [*range(32), *range(127, 160)]
                             if c not in (9, 10, 13)}
_CONTROLS |= BIDI_SHOWN


def terminal_safe(text: str) -> str:
    """``text`` with control characters (ESC, NUL, backspace, ...) shown as U+FFFD: a barely
    trained byte model samples them, and raw they move the cursor or restyle the terminal."""
    return text.translate(_CONTROLS)


LOG_EVERY_S = 10.0  # stderr not a terminal (a log file, a pipe): a progress line this often


def _terminal() -> bool:
    return sys.stderr.isatty()


class ProgressLine:
    """The one progress line on stderr that ``train`` rewrites in place (``\r``): whether it is
    open (no newline yet), its text, and the width it was last written at (padded over). When
    stderr is no terminal, whole lines instead, one each ``LOG_EVERY_S`` and each ``force``d
    one (a log got every redraw, joined by ``\r`` into a few very long lines)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.open, self.text, self.width = False, "", 0
        self.logged = -math.inf  # when a line last went to a log

    def write(self, line: str, force: bool = False) -> None:
        """Write ``line`` over the progress line, padded to cover a longer one before it; to a
        log, as a line of its own when it is ``force``d or ``LOG_EVERY_S`` have passed."""
        if not _terminal():
            now = time.monotonic()
            if force or now - self.logged >= LOG_EVERY_S:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
                self.logged = now
            return
        self.open = True
        sys.stderr.write("\r" + line.ljust(self.width))
        sys.stderr.flush()
        self.width = len(line)


PROGRESS = ProgressLine()
