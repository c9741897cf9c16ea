"""Bounded, regular-file-only reads for everything the engine opens from a user.

Every file the engine reads (corpus text, config.json, tokenizer.json, trainer state, manifests)
goes through here so that a FIFO, a device (``/dev/zero``), a socket or a huge/sparse file is
refused with one line naming the file, before any byte is read; reads never exceed ``limit``
bytes; and a name taken from a run folder's own files never resolves outside that folder.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import IO, Any, BinaryIO

from .errors import MambaStudioError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

# Limits for the small structured files we read (generous: real ones are far smaller).
JSON_LIMIT = 64 * MiB  # config.json, trainer_state.json, manifests
TOKENIZER_LIMIT = 256 * MiB  # a 250k-token BPE tokenizer.json is ~20 MB


class UnsafeFileError(MambaStudioError):
    """A path is not a regular file, is too large, or escapes its folder."""


def _human(n: int) -> str:
    for unit, size in (("GB", GiB), ("MB", MiB), ("KB", KiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def check_regular(path: str | Path, what: str = "file", limit: int | None = None) -> int:
    """Return the size of ``path`` or raise: not found, not a regular file (FIFO, device, socket,
    folder), or larger than ``limit`` bytes. Never opens the file."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UnsafeFileError(f"{p}: no such {what}") from None
    except OSError as exc:
        raise UnsafeFileError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UnsafeFileError(f"{p}: is a folder, expected a {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise UnsafeFileError(f"{p}: is {kind}; give a regular {what}")
    if limit is not None and st.st_size > limit:
        raise UnsafeFileError(
            f"{p}: {_human(st.st_size)} is larger than the {_human(limit)} allowed for a {what}"
        )
    return int(st.st_size)


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """Read a regular file of at most ``limit`` bytes (checked before and while reading). A file
    of a kernel pseudo-filesystem (size 0 under /proc, /sys) is refused unread, as a corpus file
    is: reading /proc/kmsg consumed the kernel's log, then (a read that would wait, on a
    non-blocking descriptor) raised a TypeError."""
    size = check_regular(path, what, limit)
    if size == 0 and (why := kernel_file(path, what)):
        raise UnsafeFileError(why)
    try:
        with open_regular(path, what) as f:  # (swapped for a FIFO since the check: refused)
            # read(n) allocates n bytes up front: ask for the file's size (+1 to see growth)
            data = f.read(size + 1)
            if data is not None and size < len(data) <= limit:  # it grew since stat: read on,
                more = f.read(limit + 1 - len(data))  # bounded
                data = None if more is None else data + more
            if data is None:  # no byte yet, and reading would wait (a kernel or device file)
                raise UnsafeFileError(f"{path}: cannot be read without waiting (not a regular "
                                      f"file's contents); give a regular {what}")
    except OSError as exc:
        raise UnsafeFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:  # grew while we read it
        raise UnsafeFileError(f"{path}: larger than the {_human(limit)} allowed for a {what}")
    return data


def kernel_file(path: str | Path, what: str = "file") -> str | None:
    """Why ``path`` (a file of size 0) is refused unread: it lies on a kernel pseudo-filesystem
    (/proc, /sys), whose files claim no size, may block, never end or, read, are consumed
    (/proc/kmsg); None elsewhere (an empty file)."""
    from .corpuswalk import pseudo_fs  # (it imports the modules that import this one)

    fs = pseudo_fs(Path(path))
    if not fs:
        return None
    fix = "corpus; give text files" if what == "corpus file" else f"{what}; give a regular {what}"
    return f"{path}: a file of a kernel pseudo-filesystem ({fs}), not a {fix}"


def open_regular(path: str | Path, what: str = "file") -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file. Opened without blocking
    and checked on the open descriptor, so a FIFO or device in a file's place (put there after
    any stat) cannot hang the caller: a plain ``open()`` of a FIFO waits for a writer forever."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UnsafeFileError(f"{path}: no such {what}") from None
    except OSError as exc:
        raise UnsafeFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise UnsafeFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a folder"
                if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise UnsafeFileError(f"{path}: is {kind}; give a regular {what}")
    return os.fdopen(fd, "rb")


def read_head(path: str | Path, n: int, what: str = "file") -> bytes:
    """The first ``n`` bytes of a regular file, never blocking (``open_regular``: the window's
    corpus preview reads on the GUI thread)."""
    with open_regular(path, what) as f:
        try:
            return f.read(n)
        except OSError as exc:
            raise UnsafeFileError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_json(path: str | Path, limit: int = JSON_LIMIT, what: str = "JSON file") -> Any:
    """Parse a bounded JSON file; a parse error names the file and the position."""
    data = read_bytes(path, limit, what)
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UnsafeFileError(f"{path}: not UTF-8 text (byte {exc.start}); is it a {what}?") from None
    except json.JSONDecodeError as exc:
        raise UnsafeFileError(
            f"{path}: corrupt JSON at line {exc.lineno} column {exc.colno} ({exc.msg})"
        ) from None
    except RecursionError:
        raise UnsafeFileError(f"{path}: JSON nested too deeply") from None


def resolved(path: str | Path) -> Path:
    """``Path(path).resolve()``, a link that loops back to itself raised as an ``OSError``
    naming it (Python 3.11 raises RuntimeError there, past every ``except OSError``: `export`
    or `train --out` into such a link printed a traceback)."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, "a link that loops back to itself; point it at a folder or "
                      "file, or choose another path", str(path)) from None


def inside(folder: str | Path, name: str) -> Path:
    """``folder / name`` when it stays inside ``folder`` (no ``..``, absolute paths or symlinks
    leading out); raise otherwise. Use for every file name read from a run folder's own files."""
    base = resolved(folder)
    if not isinstance(name, str) or not name or "\x00" in name:
        raise UnsafeFileError(f"{folder}: invalid file name {name!r} in its state files")
    target = resolved(base / name)
    if target != base and base not in target.parents:
        raise UnsafeFileError(
            f"{folder}: its state files name {name!r}, which is outside the folder; refusing"
        )
    return target


def open_append(path: str | Path, what: str = "file") -> IO[str]:
    """``path`` opened for appending text (created if missing) without following a link or
    blocking on a FIFO: a link in a run folder must never make us write outside it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link (O_NOFOLLOW); a FIFO without reader
            fix = "it must be a plain file, not a link or pipe: delete it and try again"
        elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            fix = "let this user write to it (or its folder), or use another folder"
        elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
            fix = "free some disk space and try again"
        else:
            fix = "check the file and its folder"
        raise UnsafeFileError(f"{path}: cannot append to the {what} ({exc.strerror or exc}); "
                              f"{fix}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeFileError(f"{path}: the {what} is not a plain file; delete it and try again")
    return os.fdopen(fd, "a", encoding="utf-8", newline="")
