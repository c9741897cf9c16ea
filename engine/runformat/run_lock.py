"""``lock``: the one writer's exclusive lock on a run folder (``flock``; the kernel releases it when
the holder dies, so a stale lock is simply taken over).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import stat
import time
from pathlib import Path

from ..errors import CheckpointError
from .names import LOCK


class RunLock:
    """Exclusive writer lock on a run folder (``flock``; released by the kernel if we die)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK
        self.fd: int | None = None

    def _open(self, flags: int) -> int | None:
        """The lock file opened without following a link or blocking on a FIFO; None when it
        is missing (and ``flags`` does not create it); CheckpointError when it is not a plain
        file (a link could make the pid write clobber a file outside the run)."""
        bad = (f"{self.path}: not a plain file (a link, FIFO or device); a run's lock must be "
               "one: delete it and try again")
        try:
            fd = os.open(self.path, flags | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink / a FIFO without a writer
                raise CheckpointError(bad) from None
            if exc.errno == errno.EISDIR:  # (it said only "<run>/lock: Is a directory")
                raise CheckpointError(f"{self.path}: a folder where the run keeps its lock file; "
                                      "move it away, then try again") from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and flags & os.O_CREAT:
                folder = self.path.parent  # it said only "<run>/lock: Read-only file system"
                raise CheckpointError(
                    f"{folder}: cannot write into the run folder ({exc.strerror}); training and "
                    "resuming write there: copy it somewhere writable "
                    f"(cp -a {shlex.quote(str(folder))} NEW) and resume that (generate, eval and "
                    "export read it as it is)") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise CheckpointError(bad)
        return fd

    def acquire(self) -> RunLock:
        fd = self._open(os.O_RDWR | os.O_CREAT)
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            who = f"process {holder}" if holder is not None else "another process"
            # (SIGTERM: a job started in the background ignores SIGINT, and kill -INT did nothing)
            stop = f" (kill -TERM {holder}: it saves, then ends)" if holder is not None else ""
            raise CheckpointError(
                f"{self.path.parent}: the run is in use by {who}; wait for it to "
                f"finish or stop it{stop}, or train into another --out") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def moved(self) -> bool:
        """Whether the lock this process holds is no longer the file at its path: the run folder
        was moved, or renamed and another folder put at its path (``mv A A-old && mv B A``), or
        the link it was opened through re-pointed. Writes by path would land in that other
        folder (a swapped-in run lost its own snapshots, its best one too, to the trainer's)."""
        if self.fd is None:
            return False
        try:
            here = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return True
        held = os.fstat(self.fd)
        return (here.st_dev, here.st_ino) != (held.st_dev, held.st_ino)

    def held_elsewhere(self) -> bool:
        """True when another process holds the lock now (for listing runs)."""
        try:
            fd = self._open(os.O_RDONLY)
        except (CheckpointError, OSError):
            return False  # not a lock anyone can hold (the writer refuses it too)
        if fd is None:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)


def _holder(fd: int, wait_s: float = 0.5) -> int | None:
    """The pid the lock file names once it names a live process, waiting up to ``wait_s`` for a
    holder that has just taken the lock to write its own (two resumes started at once: the one
    refused named the pid of an earlier run, long ended, with "kill -TERM" advice, or none);
    None when it names no live process by then."""
    deadline = time.monotonic() + wait_s
    while True:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        if text.isdigit() and _alive(int(text)):
            return int(text)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0  # (another user's process: it exists)
    return pid > 0
