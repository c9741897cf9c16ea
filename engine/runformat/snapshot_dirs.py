"""A run's snapshots (``snapshots/step-N/``) and the pointers to them (``latest.json``,
``best.json``): writing one so that a crash at any moment leaves the previous one intact, finding
and verifying the one to load, pruning, setting damaged ones aside, and undoing those newer than a
rollback point.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import checkpoint as ckpt
from ..errors import CheckpointError
from ..words import plural
from . import trainer_state
from .names import (
    BEST,
    DAMAGED,
    DATA,
    KEEP,
    LATEST,
    SNAP_MANIFEST,
    SNAP_NEEDS,
    SNAP_STATE,
    SNAP_TRAINER,
    SNAPSHOTS,
    STAGES,
    TB,
    TMP_PREFIX,
    fsync_dir,
    is_temp,
    read_entry,
    real_dir,
    slow_save,
    snapshot_step,
    write_json,
)


def snapshot_name(step: int) -> str:
    return f"step-{step}"


def write_snapshot(folder: Path, step: int, write_model: Callable[[Path], dict[str, str]],
                   tensors: dict[str, np.ndarray], trainer: dict[str, Any],
                   val_loss: float | None, keep: int = KEEP) -> Path:
    """Write, fsync and publish ``snapshots/step-<step>``; update latest/best; prune old ones.
    On any failure (disk full...) the temp folder is removed and the previous snapshot stays the
    published one. Returns the snapshot folder."""
    snaps = folder / SNAPSHOTS
    check_own_folders(folder)  # (swapped for a link mid-run: written and pruned through it)
    snaps.mkdir(exist_ok=True)
    name = snapshot_name(step)
    tmp = snaps / f"{TMP_PREFIX}{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        files = dict(write_model(tmp))
        slow_save()
        ckpt.atomic_write_tensors(tmp / SNAP_STATE, tensors)
        slow_save()
        ckpt.atomic_write_json(tmp / SNAP_TRAINER, {**trainer, "step": step, "val_loss": val_loss})
        for f in (SNAP_STATE, SNAP_TRAINER):
            files[f] = ckpt.sha256_file(tmp / f)
        ckpt.atomic_write_json(tmp / SNAP_MANIFEST, files)
        fsync_dir(tmp)
        slow_save()
        final = snaps / name
        if final.exists():  # the same step saved again (e.g. after a rollback): swap it out
            old = snaps / f"{TMP_PREFIX}old-{name}-{os.getpid()}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)
        fsync_dir(snaps)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointer = {"snapshot": name, "step": step, "val_loss": val_loss}
    write_json(folder / LATEST, pointer)
    best = best_pointer(folder)
    if val_loss is not None and math.isfinite(val_loss) and (
            best is None or best.get("val_loss") is None or val_loss <= best["val_loss"]):
        write_json(folder / BEST, pointer)
    elif best is not None and read_pointer(folder, BEST) is None:
        write_json(folder / BEST, best)  # a damaged best.json, rebuilt from the snapshots
    prune(folder, keep)
    return final


def read_pointer(folder: Path, which: str = LATEST) -> dict[str, Any] | None:
    """``latest.json`` or ``best.json`` ({"snapshot", "step", "val_loss"}); None when missing or
    damaged. For latest.json, a published snapshot newer than the one it names is the latest
    (a crash between publishing a snapshot and re-pointing, a first save included): resume takes
    it (``find_snapshot``), and the Runs list, Continue and exports had said the older step."""
    ptr = _pointer_file(folder, which)
    if which != LATEST:
        return ptr
    published = [(n, p) for n, p in snapshots(folder) if not p.is_symlink()]
    if not published or (ptr is not None and published[-1][0] <= ptr["step"]):
        return ptr
    step, snap = published[-1]
    try:
        if ptr is not None and (snap / SNAP_TRAINER).stat().st_mtime_ns <= (
                folder / LATEST).stat().st_mtime_ns:  # latest.json was written after it: a
            return ptr  # snapshot a resume passed over (damaged), not one a crash left behind
        trainer = read_entry(snap / SNAP_TRAINER, SNAP_TRAINER)
    except (CheckpointError, OSError):
        return ptr
    if not isinstance(trainer, dict) or trainer.get("step") != step:
        return ptr
    val = trainer.get("val_loss")
    return {"snapshot": snap.name, "step": step,
            "val_loss": val if isinstance(val, (int, float)) and not isinstance(val, bool) else None}


def _pointer_file(folder: Path, which: str) -> dict[str, Any] | None:
    path = folder / which
    if not path.exists():
        return None
    try:
        d = read_entry(path, which)
    except CheckpointError:
        return None
    ok = (isinstance(d, dict) and isinstance(d.get("snapshot"), str)
          and isinstance(d.get("step"), int) and not isinstance(d.get("step"), bool)
          and snapshot_step(d["snapshot"]) == d["step"])  # a name in snapshots/, no path: a
    # crafted "../../other/snapshots/step-600" was followed (and the run's own snapshots pruned
    # after a resume from another run's weights)
    if not ok:
        return None
    v = d.get("val_loss")  # "abc" stopped the window from opening (the Runs list formats it)
    finite = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return {**d, "val_loss": v if finite else None}


def best_if_not_latest(folder: Path, now: int | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The snapshot with the lowest held-out loss (``best.json``) when it is not the latest
    weights (the latest snapshot's, or ``now``: the step a run training now is at) and is still
    on disk: its folder and its pointer ({"snapshot", "step", "val_loss"})."""
    best, kept = best_pointer(folder), expected_snapshot(folder)  # (latest.json's step may
    last = now if now is not None else kept[1] if kept is not None else None  # be gone)
    if best is None or last is None or best["step"] == last:
        return None
    snap = folder / SNAPSHOTS / best["snapshot"]
    ok = snapshot_step(best["snapshot"]) is not None and real_dir(snap)
    return (snap, best) if ok and isinstance(best.get("val_loss"), (int, float)) else None


def best_pointer(folder: Path) -> dict[str, Any] | None:
    """``best.json``; when it is missing, damaged or names a snapshot that is gone, the snapshot
    with the lowest held-out loss its own trainer.json records (a damaged best.json let the next
    save prune the best snapshot, step 273 at 1.9234, and point best.json at a worse one
    without a word)."""
    best = read_pointer(folder, BEST)
    if best is not None and real_dir(folder / SNAPSHOTS / best["snapshot"]):
        return best  # (one whose snapshot is gone showed its loss in the Runs list)
    found: dict[str, Any] | None = None
    for step, snap in snapshots(folder):
        try:
            val = read_entry(snap / SNAP_TRAINER, SNAP_TRAINER).get("val_loss")
        except (CheckpointError, AttributeError):
            continue
        if isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val) \
                and (found is None or val <= found["val_loss"]):
            found = {"snapshot": snap.name, "step": step, "val_loss": float(val)}
    return found


ANOTHER_SNAPSHOT = "use another snapshot of the run"


def verify_files(folder: Path, digests: dict[str, Any], manifest: str,
                 fix: str = ANOTHER_SNAPSHOT, unhashed: frozenset[str] = frozenset()) -> None:
    """``checkpoint.verify_files`` with a run's fix (use another snapshot)."""
    ckpt.verify_files(folder, digests, manifest, fix, unhashed)


def verify_snapshot(path: Path, weights: bool = True, model_only: bool = False) -> dict[str, Any]:
    """Check every file of a snapshot against its manifest; return its trainer.json. With
    ``weights`` False only trainer.json is hashed, the other files need only be there (a cheap
    look before a load: ``expected_snapshot``). With ``model_only`` the model's files alone are
    hashed and ``{}`` is returned: a load of its weights (generate, eval, --init) needs neither
    the optimizer state nor trainer.json (a damaged one locked intact weights out)."""
    files = read_entry(path / SNAP_MANIFEST, "snapshot manifest")
    if not isinstance(files, dict) or not SNAP_NEEDS.issubset(files):
        raise CheckpointError(f"{path / SNAP_MANIFEST}: not a snapshot manifest")
    unnamed = [n for n in ckpt.TOKENIZER_FILES if n not in files and (path / n).exists()]
    if unnamed:  # a manifest that left out a file the loader reads got it read unverified
        raise CheckpointError(f"{path / SNAP_MANIFEST}: does not name {', '.join(unnamed)}, "
                              f"which the snapshot holds; {ANOTHER_SNAPSHOT}")
    if model_only:
        verify_files(path, {k: v for k, v in files.items() if k not in (SNAP_STATE, SNAP_TRAINER)},
                     SNAP_MANIFEST)
        return {}
    verify_files(path, files, SNAP_MANIFEST,
                 unhashed=frozenset() if weights else frozenset(files) - {SNAP_TRAINER})
    trainer = read_entry(path / SNAP_TRAINER, "trainer state")
    why = trainer_state.problem(trainer)
    if why is not None:
        raise CheckpointError(f"{path / SNAP_TRAINER}: {why}")
    return trainer




def snapshots(folder: Path) -> list[tuple[int, Path]]:
    """Published snapshots, oldest first."""
    out = []
    snaps = folder / SNAPSHOTS
    if snaps.is_dir():
        for p in snaps.iterdir():
            step = snapshot_step(p.name)
            if step is not None:
                out.append((step, p))
    return sorted(out)


def _light_check(p: Path) -> bool:
    """Whether snapshot ``p`` looks loadable without reading its weights: not a link, and
    ``verify_snapshot`` without hashing the weights passes (its manifest, the files it names,
    trainer.json against it and as a trainer state)."""
    if p.is_symlink():
        return False
    try:
        verify_snapshot(p, weights=False)
    except (CheckpointError, OSError):
        return False
    return True


def expected_snapshot(folder: Path, which: str = LATEST) -> tuple[Path, int, str] | None:
    """The snapshot a load of ``which`` will take, found without reading its weights (for the
    words before a load: "continues from step N", the export question, the Runs list): the one
    ``read_pointer`` names when it passes ``_light_check``, else the newest older one that does
    (``find_snapshot``'s next choice; any, when the pointer is missing). Returns (its folder,
    its step, a note when it is not the pointer's, e.g. "step-165 is missing"), or None when
    the run has no such snapshot. Weights whose bytes no longer match their manifest are found
    only by the load itself (``find_snapshot``), which then takes an older snapshot."""
    ptr = read_pointer(folder, which)
    for step, p in reversed(snapshots(folder)):
        if ptr is not None and step > ptr["step"]:  # (one a resume passed over: damaged)
            continue
        if not _light_check(p):
            continue
        note = ""
        if ptr is not None and p.name != ptr["snapshot"]:
            name = ptr["snapshot"]
            gone = folder / SNAPSHOTS / name
            aside = gone.with_name(name + DAMAGED)  # (set aside by a resume: not "missing")
            note = (f"{name} is damaged (kept as {aside.name})" if aside.is_dir() and not
                    gone.exists() else f"{name} is {'missing' if not gone.exists() else 'damaged'}")
        return p, step, note
    return None


def find_snapshot(folder: Path, which: str = LATEST, model_only: bool = False
                  ) -> tuple[Path, dict[str, Any], list[str]]:
    """The snapshot ``which`` points to, verified, or a newer one that verifies (latest.json
    only: a crash between publishing it and re-pointing); if it is missing or corrupt, the newest
    one that verifies. Returns (folder, trainer.json, the reasons the snapshots passed over were
    refused, and a newer one's notice). CheckpointError if none. ``model_only``: verified as
    ``verify_snapshot`` does for a load of the weights alone (trainer.json not returned)."""
    errors: list[str] = []
    ptr = _pointer_file(folder, which)  # as written: a newer snapshot is named below
    # a snapshot newer than latest.json names was published just before a crash (or a save in
    # progress re-points now): complete, and nothing after it was trained; it was passed over
    newer = [p for n, p in reversed(snapshots(folder))
             if which == LATEST and ptr is not None and n > ptr["step"]]
    if ptr is None and ((folder / which).exists() or (folder / which).is_symlink()):
        errors.append(f"{folder / which}: unreadable, damaged or naming no snapshot of this "
                      "run")  # (the newest snapshot was taken without a word)
    candidates = [*newer, *([folder / SNAPSHOTS / ptr["snapshot"]] if ptr else [])]
    candidates += [p for _, p in reversed(snapshots(folder)) if p not in candidates]
    for p in candidates:
        if p.is_symlink():  # it was followed, wherever it pointed
            errors.append(f"{p}: a link, not a snapshot folder of the run")
            continue
        try:
            trainer = verify_snapshot(p, model_only=model_only)
        except CheckpointError as exc:  # another one is tried: no "use another snapshot" here
            errors.append(str(exc).removesuffix(f"; {ANOTHER_SNAPSHOT}"))
            continue
        if p in newer and ptr is not None:
            errors.append(f"{folder / which} names {ptr['snapshot']}, but {p.name} is newer and "
                          "complete (a crash between publishing it and updating latest.json, "
                          "or a save in progress)")
        return p, trainer, errors
    if not errors:
        raise CheckpointError(f"{folder}: no snapshot in {folder / SNAPSHOTS}; the run was never "
                              "saved: start it again")
    present = len(snapshots(folder))  # (not the errors: latest.json's missing one counted,
    denied = any("Permission denied" in e for e in errors)  # (a file mode: "start a new run"
    fix = ("start a new run (--init takes any other model folder)" if not denied else  # led
           f"make its files readable (chmod -R u+rX {shlex.quote(str(folder))}) and try again")
    if not model_only and not denied:  # users to delete it)
        with contextlib.suppress(CheckpointError):  # only its training state is damaged
            weights = find_snapshot(folder, which, model_only=True)[0]
            fix = (f"its weights ({weights.name}) still load: generate, or start a new run with "
                   f"--init {shlex.quote(str(folder))} to keep them")
    if present == 0:  # "none of its 1 snapshot" with none there)
        raise CheckpointError(f"{folder}: no snapshot in {folder / SNAPSHOTS} ({errors[0]}); "
                              f"{fix}")
    raise CheckpointError(f"{folder}: none of its {plural(present, 'snapshot')} is complete "
                          f"({errors[0]}); {fix}")


def unreadable_newer(folder: Path, chosen: Path) -> Path | None:
    """A file or folder of a snapshot newer than ``chosen`` that this user may not read, or
    None: such a snapshot was passed over as if it were damaged, and a resume went back to an
    older one and set the newer aside (every step since lost to a ``chmod`` that can be fixed)."""
    published = snapshots(folder)
    step = next((n for n, p in published if p == chosen), -1)
    for n, p in published:
        if n <= step:
            continue
        if not os.access(p, os.R_OK | os.X_OK):
            return p
        try:
            names = sorted(e.name for e in os.scandir(p))
        except OSError:
            return p
        for name in names:
            if not os.access(p / name, os.R_OK):
                return p / name
    return None


def latest_snapshot(folder: Path, which: str = LATEST) -> tuple[Path, dict[str, Any]]:
    """``find_snapshot`` without the list of refused snapshots."""
    path, trainer, _ = find_snapshot(folder, which)
    return path, trainer


OWN_FOLDERS = (DATA, SNAPSHOTS, TB)  # a run's folders that training writes and deletes in


def check_own_folders(folder: Path) -> None:
    """A run's data/, snapshots/ and tb/ are folders of its own, not links nor files: training
    writes, prunes and cleans inside them (a snapshots/ linked to another folder had a resume
    delete a user's step-1/ and .tmp files there). CheckpointError naming the entry and the
    fix."""
    for name in OWN_FOLDERS:
        p = folder / name
        if p.is_symlink() or (p.exists() and not p.is_dir()):
            link = p.is_symlink()
            raise CheckpointError(
                f"{p}: {'a link' if link else 'a file'} where the run keeps its {name} folder; "
                "training writes and deletes files in it, so it must be the run's own: "
                + ("put the folder itself there (move what the link points to back in)" if link
                   else "move the file away and put the run's folder back")
                + ", then resume (generate, eval and export read the run as it is)")


def set_aside_passed_over(folder: Path, used: Path) -> list[str]:
    """Snapshots newer than ``used`` (the one a resume loads) are the ones it passed over as
    damaged: each is renamed ``step-N.damaged`` so that the run, going on from ``used``, neither
    prunes it nor saves its own step N over it (a trainer.json damaged by hand had 24 trained
    steps, whose weights were intact, deleted for good). Returns the new names."""
    used_step = snapshot_step(used.name)
    out = []
    for step, p in snapshots(folder):
        if used_step is None or step <= used_step or p.is_symlink():
            continue
        target = p.with_name(p.name + DAMAGED)
        n = 2
        while target.exists():
            target = p.with_name(f"{p.name}{DAMAGED}-{n}")
            n += 1
        os.rename(p, target)
        out.append(target.name)
    if out:
        fsync_dir(folder / SNAPSHOTS)
        best = read_pointer(folder, BEST)
        if best is not None and best["snapshot"] not in {n.name for _, n in snapshots(folder)}:
            (folder / BEST).unlink()  # it named one set aside: the run saves its own step N
            # there, and Best would have exported those weights under the old loss
    return out


def prune(folder: Path, keep: int = KEEP) -> None:
    """Delete all but the newest ``keep`` snapshots and the best one."""
    if not real_dir(folder / SNAPSHOTS):  # never through a link (check_own_folders)
        return
    best = best_pointer(folder)
    latest = read_pointer(folder, LATEST)
    protect = {p["snapshot"] for p in (best, latest) if p}
    for _, p in snapshots(folder)[:-keep]:
        if p.name not in protect:
            shutil.rmtree(p, ignore_errors=True)


def drop_after(folder: Path, step: int) -> tuple[int, float | None] | None:
    """Delete the snapshots after ``step``, and re-point latest.json (and a best.json that named
    one of them) at what is left: the divergence guard rolled the run back to ``step`` because
    their weights are bad (a step's loss tells of the weights the step before it left, so a save
    can come before its weights are found bad; such a snapshot was the newest, which generate,
    eval, export and resume take). Deleted first, so that a crash in between leaves latest.json
    naming a missing snapshot (an older one is taken), never a bad one. Returns the step and
    held-out loss of the snapshot latest.json names now, or None when none is left."""
    if not real_dir(folder / SNAPSHOTS):  # never through a link (check_own_folders)
        return None
    for n, p in snapshots(folder):
        if n > step:  # renamed first: a crash or a failed delete leaves no snapshot of the name
            gone = p.with_name(f"{TMP_PREFIX}{p.name}-{os.getpid()}")  # (clean_stale's to remove)
            try:
                os.rename(p, gone)
            except OSError as exc:
                raise CheckpointError(f"{p}: holds weights the divergence guard found bad, and "
                                      f"could not be removed ({exc.strerror}); delete it before "
                                      "using the run") from None
            shutil.rmtree(gone, ignore_errors=True)
    left = snapshots(folder)
    if not left:
        return None
    n, p = left[-1]
    try:
        val = read_entry(p / SNAP_TRAINER, SNAP_TRAINER).get("val_loss")
    except (CheckpointError, AttributeError):
        val = None
    val = float(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else None
    write_json(folder / LATEST, {"snapshot": p.name, "step": n, "val_loss": val})
    best = _pointer_file(folder, BEST)
    if best is not None and not real_dir(folder / SNAPSHOTS / best["snapshot"]):
        rebuilt = best_pointer(folder)
        if rebuilt is not None:
            write_json(folder / BEST, rebuilt)
        else:
            (folder / BEST).unlink(missing_ok=True)
    return n, val


def clean_stale(folder: Path) -> list[str]:
    """Remove temp folders/files left by a crashed save (call only while holding the lock)."""
    removed = []
    snaps = folder / SNAPSHOTS
    if real_dir(snaps):  # a crash between the two renames of a step saved again: the old copy
        for p in snaps.iterdir():  # is put back (both copies were deleted here)
            name = p.name.removeprefix(f"{TMP_PREFIX}old-").rsplit("-", 1)[0]
            if (p.name.startswith(f"{TMP_PREFIX}old-") and real_dir(p)
                    and snapshot_step(name) is not None and not (snaps / name).exists()):
                os.rename(p, snaps / name)
    for stage in STAGES:  # what a killed `train --force` left: a run whose
        p = folder / stage  # run.json is there is whole without it (the swap puts run.json
        if real_dir(p):  # last), and the stage of a new run may be as big as the run
            shutil.rmtree(p, ignore_errors=True)
            removed.append(stage)
    for base in (folder, folder / DATA, folder / SNAPSHOTS):
        if not base.is_dir() or base != folder and base.is_symlink():  # (a link's target is
            continue  # not the run's: a user's .tmp files there were deleted)
        for p in base.iterdir():
            stale_dir = p.name.startswith(TMP_PREFIX) and p.is_dir()
            stale_file = is_temp(p.name) and p.is_file()
            if stale_dir or stale_file:
                try:  # (a read-only folder: left, said by the writability check after this)
                    shutil.rmtree(p, ignore_errors=True) if stale_dir else p.unlink(missing_ok=True)
                except OSError:
                    continue
                removed.append(str(p.relative_to(folder)))
    return removed


def snapshot_bytes(n_params: int, n_trained: int) -> int:
    """Upper estimate of one snapshot: float32 weights + two moments (+ LoRA base) + slack."""
    return 4 * (n_params + 3 * n_trained) + (1 << 20)
