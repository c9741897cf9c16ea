"""Reading what to export: a run folder (its latest snapshot), one snapshot folder, a legacy
training checkpoint (trainer_state.json), a plain model folder or a PEFT adapter export (its
base with the adapter merged in, as ``generate`` reads it). Yields the model as trained,
a training summary for the model card and, for a LoRA run, the adapters over the exact unmerged
base. Every checksum the folder has is verified first (a half-written snapshot is never exported).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from .. import runformat as rf
from ..errors import CheckpointError, MambaStudioError
from ..lm import MambaLM
from ..lora import LoRAConfig, LoRATrainable
from ..safeio import read_head, resolved


@dataclass
class RunSource:
    folder: Path
    lm: MambaLM  # the weights as trained (LoRA merged in)
    lora: LoRATrainable | None  # adapters + the unmerged base (``lora.params``); None without LoRA
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig dict ({} for a bare model)
    step: int = 0  # the optimizer step of the exported weights
    val: dict[str, Any] | None = None  # the last held-out evaluation recorded (EvalReport dict)
    val_step: int | None = None  # the step ``val`` was measured at (an epoch's end)
    run_dir: Path | None = None  # the run folder (its saved held-out split), None outside a run
    spec: dict[str, Any] = field(default_factory=dict)  # the run's RunSpec dict ({} outside a run)
    snap_val_loss: float | None = None  # held-out loss of these very weights, saved with them
    notices: list[str] = field(default_factory=list)  # corrupt snapshots passed over
    state_problem: str | None = None  # why the training state (a LoRA's adapters) is unread


def _lora(lm: MambaLM, lora_cfg: dict[str, Any] | None, state: Path,
          prefix: str) -> LoRATrainable | None:
    if not lora_cfg:
        return None
    tensors = rf.trainer_state.prefixed(ckpt.read_tensors(state), prefix)
    params = {k: v.copy() for k, v in lm.params.items()}
    lora = LoRATrainable(params, LoRAConfig.from_dict(lora_cfg))
    try:
        lora.load_state_tensors(tensors)  # the base from the state, adapters applied (merged)
    except KeyError as exc:
        raise CheckpointError(f"{state}: no LoRA state for {exc}") from None
    lora.unmerge()  # lora.params now holds the exact base the adapters were trained on
    return lora


def _float_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


EXPORT_FILES = {"README.md", "config.json", "generation_config.json", ckpt.INDEX,
                "adapter_config.json", "adapter_model.safetensors", "base", *ckpt.TOKENIZER_FILES}


def _written_by_an_export(p: Path) -> bool:
    return p.name in EXPORT_FILES or (p.name.startswith("model") and p.name.endswith(".safetensors"))


def not_export_files(folder: str | Path) -> list[str]:
    """The names in ``folder`` no export writes (sorted): a folder holding any is never
    replaced by an export."""
    try:
        return sorted(p.name for p in Path(folder).iterdir() if not _written_by_an_export(p))
    except OSError:
        return []


def is_gguf(p: Path) -> bool:
    """Whether ``p`` (or the file a link ``p`` points to) is a regular file starting with the
    GGUF magic (an earlier --gguf export)."""
    try:
        p = resolved(p)
        return read_head(p, 4, "GGUF file") == b"GGUF"  # (a FIFO is refused, never waited on)
    except (OSError, MambaStudioError):
        return False


def check_out(src: str | Path, out: str | Path, *, file: bool = False, force: bool = False
              ) -> list[str]:
    """Refuse an output that would write into the source (or any run folder), an existing file
    (``file=True``: the .gguf) or a non-empty folder, unless ``force`` (then only a folder holding
    nothing but an earlier export's files is replaced; see ``staged_folder``). Missing parent folders
    are created later; the returned notices say so. Call before any work."""
    src_r, out_r = resolved(src), resolved(out)
    if out_r == src_r or src_r in out_r.parents or out_r in src_r.parents:
        raise CheckpointError(f"{out}: inside (or around) the folder being exported, {src}; "
                              "choose an output folder of its own")
    run = out_r if rf.is_run(out_r) else rf.run_around(out_r)
    if run is not None:  # (one inside snapshots/ of the run a snapshot came from was taken, then
        # passed over as a broken snapshot and pruned by the run's next save)
        raise CheckpointError(f"{out}: " + ("a run folder" if run == out_r else f"inside the run "
                              f"folder {run}") + "; choose an output folder of its own")
    return check_dest(out, file=file, force=force)


def check_dest(out: str | Path, *, file: bool = False, force: bool = False) -> list[str]:
    """``check_out``'s part about ``out`` alone (also checked before training by
    ``train --export-adapter``). First tidies what killed exports to ``out`` left beside it
    (``_clear_stale``: an export set aside by a killed --force comes back)."""
    out = Path(out)
    hidden = len((f".{out.name}{STAGING}12345678" if not file  # the name written first,
                  else ckpt.temp_name(out.name)).encode())  # then renamed
    if hidden > NAME_MAX:  # ("cannot write (File name too long)" for 240-254 bytes)
        most = NAME_MAX - (hidden - len(out.name.encode()))
        raise CheckpointError(f"{out.name[:40]}…: a name of {len(out.name.encode())} bytes; an "
                              f"export's name may have at most {most} bytes (it is written under a "
                              "longer hidden name first); choose a shorter name")
    if not file and out.parent.is_dir():
        _clear_stale(out)
    exists = out.exists() or out.is_symlink()
    if out.is_symlink() and not out.exists():
        raise CheckpointError(f"{out}: a link to {os.readlink(out)}, which does not exist; "
                              f"{'remove the link' if file else 'create that folder'} or "
                              "choose another output path")  # (a GGUF export's is a file)
    if file:
        if out.is_dir():
            raise CheckpointError(f"{out}: is a folder; give a file path, e.g. {out / 'model.gguf'}")
        if exists and not is_gguf(out):  # (before --force was offered, then refused)
            raise CheckpointError(f"{out}: exists and is not a GGUF file; choose a new file name "
                                  "(--force replaces only an earlier GGUF export)")
        if exists and not force:
            raise CheckpointError(f"{out}: exists; choose a new file name, or pass --force to "
                                  "replace an earlier GGUF export there")
    else:
        if exists and not out.is_dir():
            raise CheckpointError(f"{out}: exists and is not a folder; choose a new folder name "
                                  "(the export writes a folder)")
        if exists and not os.access(out, os.W_OK | os.X_OK):  # (an empty read-only folder was
            raise CheckpointError(f"{out}: cannot write in it (no permission, or a read-only "
                                  "file system); choose another output path")  # replaced)
        if exists and os.path.ismount(out):  # published by a rename, which a mount point refuses
            raise CheckpointError(f"{out}: the top of a mounted disk; export into a new folder "
                                  f"inside it, e.g. {out / 'model'}")
        if exists and any(out.iterdir()):
            if not force:
                raise CheckpointError(f"{out}: folder is not empty; choose a new folder name, or "
                                      "pass --force to replace an earlier export there")
            other = not_export_files(out)
            if other:
                names = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
                raise CheckpointError(f"{out}: holds files an export does not write ({names}); "
                                      "--force only replaces an earlier export: choose a new "
                                      "folder name")
    missing = [p for p in out.parents if not p.exists()]
    base = next((p for p in out.parents if p.exists()), Path("."))  # what the export writes in
    if not file and ckpt.is_model_folder(base):  # a save dialog that stepped into an earlier export wrote X/X
        raise CheckpointError(f"{out}: inside an earlier export, {base}; choose a folder of its "
                              f"own, or {base} itself to replace that export")
    if not base.is_dir():
        raise CheckpointError(f"{out}: {base} is a file, not a folder; choose another output path")
    if not os.access(base, os.W_OK | os.X_OK):
        raise CheckpointError(f"{out}: cannot write in {base} (no permission, or a read-only "
                              "file system); choose another output path")
    return [f"created the missing folder {missing[-1]}"] if missing else []


@contextmanager
def staged_folder(out: str | Path, force: bool = False) -> Iterator[Path]:
    """A fresh hidden folder beside ``out`` to write an export into; published as ``out`` by a
    rename when the block ends (``force``: replacing the earlier export there), and removed if it
    fails: an interrupted or failed export (a full disk) leaves no partial folder, and of two
    exports racing for one new ``out``, one wins and the other says so (one had printed "wrote"
    for a folder without its weights)."""
    out = Path(out)
    if out.is_symlink() and out.is_dir():  # a link to a folder: publish into that folder (a
        out = resolved(out)                # rename onto the link itself fails, ENOTDIR)
    made = make_parents(out.parent)
    try:
        _clear_stale(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGING}", dir=out.parent))
    except BaseException:
        remove_made(made)
        raise
    held = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)  # locked while this export lives: a
    fcntl.flock(held, fcntl.LOCK_EX)  # later export removes only unlocked (crashed) ones
    umask = os.umask(0)
    os.umask(umask)
    # mkdtemp's 0700 would publish a folder only we can read; an empty folder given as ``out``
    # keeps its own mode and group (it was replaced by one of the umask's and ours; its ACLs
    # are not copied)
    mode = 0o777 & ~umask
    if out.is_dir():
        st = out.stat()
        mode = stat.S_IMODE(st.st_mode)
        with suppress(OSError):  # a group this user is no member of: the mode still goes on
            os.chown(tmp, -1, st.st_gid)
    os.chmod(tmp, mode)
    try:
        yield tmp
        _publish(tmp, out, force)
    except OSError as exc:  # a full disk named the hidden staging folder's file, with no fix
        shutil.rmtree(tmp, ignore_errors=True)
        fix = write_fix(out, exc)  # (before the folders it made go: it reads their disk's space)
        remove_made(made)
        raise CheckpointError(f"{out}: cannot write the export ({exc.strerror or exc}); nothing "
                              f"new was written there; {fix}") from None
    except CheckpointError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        fix = write_fix(out, exc)
        remove_made(made)
        if tmp.name not in str(exc):
            raise
        raise CheckpointError(f"{out}: cannot write the export ({str(exc).rsplit(': ', 1)[-1]});"
                              f" nothing new was written there; {fix}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        remove_made(made)
        raise
    finally:
        os.close(held)


NAME_MAX = 255  # bytes of a file name on Linux's file systems (and APFS: 255 UTF-8 bytes)
STAGING = ".export-"  # ".<out>.export-XXXXXXXX": where an export is written before its rename
SET_ASIDE = ".old-"  # ".<out>.old-XXXXXXXX": the export --force replaces, until the new is in


def _clear_stale(out: Path) -> None:
    """Tidy what earlier exports to ``out`` killed before the end left beside it (each a full
    copy of the weights, hidden for good): an export set aside by --force comes back as ``out``
    if no new one took its place (a kill between the two renames left no ``out`` at all), else
    it goes; staging folders go. A live export's folders are locked and left alone."""
    for suffix in (SET_ASIDE, STAGING):  # (a set-aside export first: it may be restored)
        for p in sorted(out.parent.glob(f".{glob.escape(out.name)}{suffix}*")):
            try:
                fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError:
                continue  # not a folder of ours (a link, a file): left alone
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being written now
            else:
                restore = suffix == SET_ASIDE and not (out.exists() or out.is_symlink())
                if restore and any(p.iterdir()):
                    os.rename(p, out)
                else:
                    shutil.rmtree(p, ignore_errors=True)
            finally:
                os.close(fd)


def clear_stale_temps(out: Path) -> None:
    """Remove the hidden ``.<name>.<hex>.tmp`` files that GGUF exports to ``out`` killed before
    their rename left beside it (each up to the model's size; every later export, ``--force``
    too, left them). A live export holds a lock on its own (``locked_temp``) and is skipped."""
    for p in out.parent.glob(f".{glob.escape(out.name)}.{'[0-9a-f]' * 12}.tmp"):  # (its names:
        try:  # a user's .k.gguf.backup.tmp is not one)
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue  # a link or gone: left alone
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # being written now (BlockingIOError), or not ours to lock
            continue
        else:
            with suppress(OSError):
                p.unlink()
        finally:
            os.close(fd)


def write_fix(out: Path, exc: BaseException, need: int | None = None) -> str:
    """What to do about a failed export write, for every export: a file-size limit (it said
    "free some space" with 48 GB free), a full disk (its free space said), a disk out of files
    (it said "5.3 MB free: free some space"), or another folder. ``need``: the bytes being
    written, for a short write that carries no error number (numpy's "8224 requested and 608
    written"): with under twice that free it is the disk, else a file-size limit."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__ or exc.__context__
    code = cause.errno if isinstance(cause, OSError) else None
    limit = ("a file-size limit stopped it (ulimit -f, or the filesystem's largest file): "
             "raise it or choose another folder")
    if code == errno.EFBIG or "File too large" in str(exc):
        return limit
    try:
        disk = os.statvfs(out.parent)
    except OSError:
        return "choose another folder"
    free = disk.f_bavail * disk.f_frsize
    if code in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(exc) or (
            code is None and need is not None and free < 2 * need):
        if disk.f_files and disk.f_favail == 0 and free > (need or 0):
            return ("its disk is out of files (inodes), with space left: delete some files or "
                    "choose another folder")
        return f"{free / 1e6:,.1f} MB free on its disk: free some space or choose another folder"
    if code is None and need is not None:
        return f"the disk has room, so {limit}"
    return "choose another folder"


@contextmanager
def locked_temp(out: Path) -> Iterator[str]:
    """A new hidden temporary file beside ``out`` (``checkpoint.create_temp``), locked while the
    block writes it, so that ``clear_stale_temps`` of another export leaves it alone."""
    fd, tmp = ckpt.create_temp(out)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
    finally:
        os.close(fd)


def _publish(tmp: Path, out: Path, force: bool) -> None:
    old, held = None, None
    if force and out.is_dir() and any(out.iterdir()):  # an earlier export (check_out saw it)
        held = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # locked before it moves aside, so
        fcntl.flock(held, fcntl.LOCK_EX)  # _clear_stale never takes it while we live
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}{SET_ASIDE}", dir=out.parent))
        os.rename(out, old)  # onto the empty folder just made
    try:
        os.rename(tmp, out)  # onto a missing or empty folder only
    except OSError as exc:
        if old is not None:
            os.rename(old, out)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):  # it appeared meanwhile
            raise CheckpointError(f"{out}: written by another export meanwhile ({exc.strerror}); "
                                  "export into a new folder") from None
        raise  # the caller names it with a fix by its cause
    finally:
        if held is not None:
            os.close(held)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def clear_out(out: str | Path) -> list[Path]:
    """Create the missing parent folders of an output file ``check_out`` accepted (the file is
    replaced atomically by its writer); returns those made (``make_parents``)."""
    return make_parents(Path(out).parent)


def make_parents(folder: Path) -> list[Path]:
    """``folder`` and its missing parents made; returns those made, outermost first, for
    ``remove_made`` to take back when the export fails (a failed export into a/b/c left a/ and
    a/b/ while it said "nothing new was written there")."""
    missing = []
    p = Path(folder)
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def remove_made(made: list[Path]) -> None:
    """The folders ``make_parents`` made, removed innermost first while each is empty."""
    for p in reversed(made):
        try:
            p.rmdir()
        except OSError:
            return


def open_source(folder: str | Path) -> RunSource:
    """Load ``folder`` for export (see the module docstring for what it may be)."""
    from ..legacy import read_trainer_state

    folder = Path(folder)
    if (bad := ckpt.not_a_folder(folder)) is not None:  # ("not a folder" for a missing one)
        raise bad
    if rf.is_run(folder) or (folder / rf.SNAP_MANIFEST).exists():
        refused: list[str] = []
        state_problem: str | None = None
        run_dir = folder if rf.is_run(folder) else folder.parent.parent
        def locate(model_only: bool) -> tuple[Path, dict[str, Any], list[str]]:
            if rf.is_run(folder):
                return rf.find_snapshot(folder, model_only=model_only)
            return folder, rf.verify_snapshot(folder, model_only=model_only), []

        try:
            snap, meta, refused = locate(model_only=False)
        except CheckpointError as exc:  # its weights may be intact (the training state damaged:
            try:  # they were locked out of every export)
                snap, _, refused = locate(model_only=True)
            except CheckpointError:
                raise exc from None
            meta, state_problem = {"step": rf.snapshot_step(snap.name) or 0}, str(exc)
        spec = rf.read_run_json(run_dir)["spec"] if rf.is_run(run_dir) else {}
        spec = spec if isinstance(spec, dict) else {}
        if spec:  # checked as eval and --resume check it (``train = true`` hand-edited in gave
            from ..runspec import RunSpec  # an AttributeError traceback here)

            RunSpec.from_dict(spec, str(run_dir / rf.RUN_JSON))
        train = spec.get("train", {})
        lm = MambaLM.load(snap)
        lm.check_finite(snap)
        val, val_step = rf.trainer_state.last_epoch_eval(meta.get("epochs", []))
        notices = [f"{e}; using {snap.name} instead" for e in refused]
        if state_problem is not None:
            notices.append(f"its training state is damaged ({state_problem}); its weights, "
                           f"{snap.name}, are intact and exported")
        if rf.is_run(folder) and rf.RunLock(folder).held_elsewhere():  # (it was said nowhere)
            notices.append(f"{folder} is training: this is its latest snapshot, {snap.name}; "
                           "the steps after it are not in the export")
        lora = None if state_problem else _lora(lm, train.get("lora"), snap / rf.SNAP_STATE,
                                                rf.trainer_state.TRAINABLE)
        return RunSource(folder, lm, lora, train, int(meta.get("step", 0)), val, val_step,
                         run_dir if rf.is_run(run_dir) else None, spec,
                         _float_or_none(meta.get("val_loss")), notices, state_problem)
    if (folder / "trainer_state.json").exists():  # a checkpoint from before run folders
        state = read_trainer_state(folder)
        ckpt.verify_hashes(folder, state["files"])
        lm = MambaLM.load(folder)
        lm.check_finite(folder)
        train = state.get("train_config", {})
        val, val_step = rf.trainer_state.last_epoch_eval(state.get("epochs", []))
        return RunSource(folder, lm, _lora(lm, train.get("lora"), folder / "optimizer.safetensors", ""),
                         train, int(state.get("step", 0)), val, val_step)
    from ..run import load_model  # a model folder, or a PEFT export: its base with the adapter

    said: list[str] = []  # (a PEFT export without base/: which base it took)
    lm = load_model(folder, notify=said.append)  # merged in, as generate and eval read it (it
    lm.check_finite(folder)  # was "no config.json")
    return RunSource(folder, lm, None, notices=said)


__all__ = ["RunSource", "check_dest", "check_out", "clear_out", "open_source", "staged_folder"]
