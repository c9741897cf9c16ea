"""Deleting a run's own files: a whole run (``delete_run``, refused while another process
trains it or when it holds a user's files) or what an unfinished start wrote (``unmake``). run.json
goes last, so a delete cut short leaves a run that is still listed and can be deleted again.
Replacing a run (``train --force``): the new one is written beside it (``stage``), then the two
are swapped by renames (``swap_in``).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from ..errors import CheckpointError
from ..words import listing
from .names import (
    LOCK,
    REPLACED,
    REPLACING,
    REPLACING_IN,
    RUN_ENTRIES,
    RUN_JSON,
    STAGES,
    fsync_dir,
    is_temp,
    real_dir,
)
from .out_folder import prepared_only
from .run_file import foreign_entries
from .run_lock import RunLock


def remove_run_entries(folder: Path, ignore_errors: bool = False,
                        keep: frozenset[str] = frozenset()) -> None:
    """Delete a run's own entries in ``folder`` (``RUN_ENTRIES``), all but the held lock;
    run.json last, so one that fails half-way leaves a run that is still listed (and can be
    deleted again). ``keep``: paths in the run (``foreign_entries``'s, e.g.
    "snapshots/notes.txt") that stay, with the folders that hold them."""
    for p in sorted(folder.iterdir(), key=lambda p: p.name == RUN_JSON):
        if is_temp(p.name) and p.is_file() and not p.is_symlink():  # a write cut short (a
            p.unlink(missing_ok=ignore_errors)  # --force kept it; Delete stopped at it)
        elif p.name in RUN_ENTRIES and p.name != LOCK:
            _remove_except(p, p.name, keep, ignore_errors)


def _remove_except(p: Path, rel: str, keep: frozenset[str], ignore_errors: bool) -> None:
    """Delete ``p`` (``rel``: its path in the run) but the paths in ``keep`` at or under it
    (Delete's "keep those files" removed snapshots/ and data/ whole, a user's notes in them
    included; a snapshots/ that is a link is kept as the link)."""
    if rel in keep:
        return
    is_folder = real_dir(p)  # (a link to one is deleted as the link)
    if is_folder and any(k.startswith(rel + "/") for k in keep):
        for q in p.iterdir():
            _remove_except(q, f"{rel}/{q.name}", keep, ignore_errors)
        return  # the folder stays, holding what is kept
    if is_folder:
        shutil.rmtree(p, ignore_errors=ignore_errors)
    else:
        p.unlink(missing_ok=ignore_errors)


def stage(folder: Path) -> Path:
    """An empty ``folder/.replacing`` for the run that is to replace the one in ``folder`` (the
    caller holds its lock; a stage an earlier start left is cleared)."""
    path = folder / REPLACING
    for leftover in (folder / name for name in STAGES):
        if leftover.is_symlink() or leftover.is_file():
            leftover.unlink()
        elif leftover.exists():
            shutil.rmtree(leftover)
    path.mkdir()
    return path


def discard_stage(folder: Path) -> None:
    """Remove what an unfinished ``train --force`` staged in ``folder`` (its run stays)."""
    shutil.rmtree(folder / REPLACING, ignore_errors=True)


def swap_in(folder: Path) -> None:
    """Put the run staged in ``folder/.replacing`` (complete, its run.json written) in place of
    the run in ``folder``: the old run's entries are renamed into ``.replaced`` (run.json
    first: a folder caught half-way reads as a swap cut short, ``swap_cut_short``), the stage
    is renamed ``.replacing-in`` (every old entry is out), its entries are renamed into the
    folder (run.json last), then ``.replaced`` is deleted. Renames inside one folder: until they
    start the old run is whole, once they end the new one is, and ``finish_swap`` completes a
    swap a kill cut short (it is also this function's second half). The held lock stays."""
    new, old = folder / REPLACING, folder / REPLACED
    old.mkdir(exist_ok=True)
    if new.is_dir():
        for p in sorted(folder.iterdir(), key=lambda p: p.name != RUN_JSON):
            if is_temp(p.name) and p.is_file() and not p.is_symlink():  # a write cut short
                p.unlink()
            elif p.name in RUN_ENTRIES and p.name not in (LOCK, REPLACING, REPLACING_IN,
                                                          REPLACED):
                p.rename(old / p.name)
        fsync_dir(folder)
        new.rename(folder / REPLACING_IN)
    finish_swap(folder)


def swap_cut_short(folder: Path) -> bool:
    """A ``swap_in`` a kill cut short: no run.json in ``folder``, and the new run's whole in
    ``.replacing`` (run.json there) or on its way in (``.replacing-in``)."""
    folder = Path(folder)
    return not (folder / RUN_JSON).exists() and (
        (folder / REPLACING / RUN_JSON).is_file() or (folder / REPLACING_IN).is_dir())


def finish_swap(folder: Path) -> None:
    """Complete a ``swap_in`` (the caller holds the lock): the old run's entries still in
    ``folder`` out (when the stage was not yet all moved in), the new ones in, run.json last,
    ``.replaced`` deleted."""
    if (folder / REPLACING / RUN_JSON).is_file() and not (folder / REPLACING_IN).exists():
        swap_in(folder)  # cut short while the old run's entries went out
        return
    staged = folder / REPLACING_IN
    if staged.is_dir():
        for p in sorted(staged.iterdir(), key=lambda p: p.name == RUN_JSON):
            p.rename(folder / p.name)
        fsync_dir(folder)
        staged.rmdir()
    shutil.rmtree(folder / REPLACED, ignore_errors=True)


def unmake(folder: Path, remove_folder: bool) -> None:
    """Remove what an unfinished ``start`` wrote into ``folder`` (a run's own entries only)."""
    remove_run_entries(folder, ignore_errors=True)
    (folder / LOCK).unlink(missing_ok=True)  # still held by us: nobody else can be using it
    if remove_folder:
        with contextlib.suppress(OSError):
            folder.rmdir()


def why_not_delete(folder: str | Path, keep_others: bool = False) -> str | None:
    """Why ``delete_run`` would refuse ``folder`` now (None: it would not): it is no run, a
    process trains it, or (unless ``keep_others``) it holds files no run writes (named: a
    user's notes there were deleted with the run)."""
    folder = Path(folder)
    if swap_cut_short(folder):  # (both runs are there: Delete deleted them)
        return (f"{folder}: a train --force was cut short while it swapped its new run in; "
                "resume it first (that finishes the swap), then delete it")
    if (not (folder / RUN_JSON).is_file() and not prepared_only(folder)) or folder.is_symlink():
        return f"{folder} is not a run folder (no {RUN_JSON}); nothing deleted"
    if RunLock(folder).held_elsewhere():
        return f"{folder} is training in another process; stop it there first"
    return None if keep_others else _holds_foreign(folder)


def others_in_run(folder: str | Path) -> list[str]:
    """The entries of a run folder that no run writes (a user's notes), which ``delete_run``
    keeps with ``keep_others`` (and refuses to delete without)."""
    return foreign_entries(Path(folder))


def _holds_foreign(folder: Path) -> str | None:
    """What ``why_not_delete`` says of the files in ``folder`` no run writes (None: none)."""
    foreign = foreign_entries(folder)
    if not foreign:
        return None
    return (f"{folder} holds files that no run writes ({listing(foreign)}); move them out first, or "
            "delete the folder yourself")


def delete_run(folder: str | Path, keep_others: bool = False) -> None:
    """Delete a run folder, its snapshots and data: its own entries, then the folder. Refused
    (CheckpointError, ``why_not_delete``) while a process trains it or when it holds files no
    run writes; with ``keep_others`` those stay, in the folder, and only the run's own entries
    go (it is then no run). Its lock is held meanwhile, so no run starts in it half-deleted."""
    folder = Path(folder)
    why = why_not_delete(folder, keep_others)
    if why is not None:
        raise CheckpointError(why)
    lock = RunLock(folder).acquire()  # (one started since the check: refused here)
    try:
        if not keep_others and (why := _holds_foreign(folder)) is not None:  # written since
            raise CheckpointError(why)
        remove_run_entries(folder, keep=frozenset(foreign_entries(folder))
                            if keep_others else frozenset())
        (folder / LOCK).unlink()
    finally:
        lock.release()
    if not keep_others or not any(folder.iterdir()):
        folder.rmdir()
