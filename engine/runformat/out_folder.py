"""The folder a run is written to: checks before step 1 (writable, room on its disk), a run killed
while it was being prepared, and unique run folder names under a runs root.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import os
import shlex
import shutil
from pathlib import Path

from .. import checkpoint as ckpt
from ..errors import CheckpointError, MambaStudioError
from ..safeio import read_json
from .names import LOCK, RUN_JSON


def prepared_only(folder: Path) -> bool:
    """A run killed while it was being prepared (tokenizer training, encoding): its lock (and
    perhaps data/), no run.json, nothing to load or resume."""
    return (folder / LOCK).is_file() and not (folder / RUN_JSON).exists()


def prepared_only_note(folder: Path, lost: str) -> str:
    """What a run ``prepared_only`` is said to be, and the one way on (``lost``: what there is
    not: a model, anything to resume)."""
    return (f"{folder}: a run ended while it was being prepared, before its first save; {lost}: "
            f"start it again on its corpus with --out {shlex.quote(str(folder))} --force")


def _not_writable(folder: Path) -> OSError | None:
    """Why a file cannot be written in ``folder`` (a probe file written and removed), or None."""
    probe = folder / f".write-test-{os.getpid()}.tmp"
    try:
        probe.write_bytes(b"x")
    except OSError as exc:
        return exc
    finally:  # (a write that failed on a full disk left the probe behind)
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def _full(exc: OSError) -> bool:
    """A write refused for want of space or quota (a full disk is no permission problem)."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def check_can_create(folder: Path) -> None:
    """Before the corpus is read: a ``folder`` that does not exist yet can be made, as far as
    its nearest existing parent tells (a folder there, writable). ``check_out_dir`` makes it
    later; "a.txt/sub" or a read-only disk was said only after minutes of tokenizing."""
    parent = next((p for p in (folder, *folder.parents) if p.exists() or p.is_symlink()), None)
    if parent is None:
        return
    if parent == folder:  # there already (an empty folder): written into, so writable
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise CheckpointError(f"{folder}: not writable; choose another --out")
        return
    if not parent.is_dir():
        raise CheckpointError(f"{folder}: cannot create the run folder ({parent} is not a "
                              "folder); choose another --out")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CheckpointError(f"{folder}: cannot create the run folder ({parent} is not "
                              "writable); choose another --out")


def check_out_dir(folder: Path, need_bytes: int) -> None:
    """Before step 1: ``folder`` exists or can be created, is writable, and its disk has room for
    ``need_bytes``. Raises CheckpointError naming the folder and the fix."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"{folder}: cannot create the run folder ({exc.strerror or exc}); "
                              "choose another --out") from None
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder; choose another --out")
    if (denied := _not_writable(folder)) is not None:
        fix = "free space" if _full(denied) else "choose another --out"
        raise CheckpointError(f"{folder}: not writable ({denied.strerror or denied}); {fix}"
                              f"{' or choose another --out' if _full(denied) else ''}")
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise CheckpointError(
            f"{folder}: only {free / 2**20:,.1f} MiB free, a run needs {need_bytes / 2**20:,.1f} MiB "
            "(two snapshots and the token ids); free space or choose another --out")


def check_resume_dir(folder: Path, need_bytes: int) -> None:
    """Before a resume's step 1: the run folder is writable and its disk has room for one more
    snapshot (``need_bytes``). A read-only folder failed later naming a hidden temporary file
    (".samples.jsonl.<hex>.tmp: Permission denied"), a full disk as "could not write
    metrics.csv", neither with a fix."""
    if (denied := _not_writable(folder)) is not None:
        if _full(denied):  # (it said "make it writable (chmod u+w)" of a full disk)
            raise CheckpointError(
                f"{folder}: cannot write into the run folder ({denied.strerror or denied}); free "
                "some space, then resume (nothing was lost: the run is at its last snapshot)")
        raise CheckpointError(
            f"{folder}: cannot write into the run folder ({denied.strerror or denied}); make it "
            f"writable (chmod u+w), or copy it somewhere writable (cp -a "
            f"{shlex.quote(str(folder))} NEW) and resume that")
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise CheckpointError(
            f"{folder}: only {free / 2**20:,.1f} MiB free, the next snapshot needs "
            f"{need_bytes / 2**20:,.1f} MiB; free some space, then resume (nothing was lost: the "
            "run is at its last snapshot)")


RUN_NUMBERS = ".run-numbers.json"  # in a runs root: the last n given to each <date>-<label>


def _numbers_given(root: Path) -> dict[str, int]:
    try:
        given = read_json(root / RUN_NUMBERS, 64 * 1024, RUN_NUMBERS)
    except (MambaStudioError, OSError, ValueError):
        return {}
    return {k: v for k, v in given.items() if isinstance(k, str) and type(v) is int
            } if isinstance(given, dict) else {}


def unique_run_folder(root: Path, label: str) -> Path:
    """``root/<date>-<label>-<n>`` with n past every number a run under ``root`` was given
    (``note_run_number`` keeps them in ``root/.run-numbers.json``): a deleted run's name is not
    given to a later run, whose exports and samples would be taken for the deleted one's."""
    stem = f"{_dt.date.today().isoformat()}-{label}"
    n = max(_numbers_given(root).get(stem, 0), 0) + 1
    while (root / f"{stem}-{n}").exists() or (root / f"{stem}-{n}").is_symlink():
        n += 1
    return root / f"{stem}-{n}"


def reserve_run_folder(root: Path, label: str, tries: int = 1000) -> Path:
    """A new, empty ``unique_run_folder`` made now, by a mkdir that fails where the name was
    taken meanwhile (then the next number): the name a Start picked before reading its corpus
    (minutes with BPE) could be given to a second Start meanwhile, whose run was then refused
    as "in use by process N"."""
    for _ in range(tries):
        folder = unique_run_folder(root, label)
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError as exc:
            raise CheckpointError(f"{folder}: cannot create the run folder "
                                  f"({exc.strerror or exc}); choose another runs folder") from None
        return folder
    raise CheckpointError(f"{root}: no free run name after {tries:,} tries; choose another "
                          "runs folder")


def note_run_number(folder: Path) -> None:
    """Remember ``folder``'s n (a name ``unique_run_folder`` gave) in its root's book of today's
    numbers; best effort: without it a deleted newest run's name is given again."""
    stem, _, n = folder.name.rpartition("-")
    if not n.isdigit():
        return
    root = folder.parent
    given = _numbers_given(root)
    today = {k: v for k, v in given.items() if k[:10] == stem[:10]}
    today[stem] = max(today.get(stem, 0), int(n))
    with contextlib.suppress(OSError, CheckpointError):
        ckpt.atomic_write_json(root / RUN_NUMBERS, today)
