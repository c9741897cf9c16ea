"""Walking a corpus folder: bounded, never opening anything, never leaving the folder's filesystem.

    files, rejected = walk(Path("notes/"))   # files: [Path] in sorted order (by path parts)
                                             # rejected: [(Path, reason)]

Only directory listings and ``lstat`` are used, so a FIFO, a device or a socket can never block
the walk (they are rejected, as are folders on another filesystem such as ``/proc`` or ``/sys``
under ``/``, links to folders, folders that cannot be listed and files of a non-text type).
Hidden entries (``.git``, ``.venv``, ...) are skipped without a reason. At most ``MAX_ENTRIES``
entries are looked at per folder given; the rest is one rejected line saying so.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from .checkpoint import is_model_folder

TEXT_SUFFIXES = {
    ".txt", ".md", ".rst", ".py", ".js", ".ts", ".c", ".h", ".cpp", ".hpp", ".rs", ".go",
    ".java", ".kt", ".swift", ".rb", ".sh", ".toml", ".yaml", ".yml", ".json", ".html",
    ".css", ".tex", ".csv", ".ini", ".cfg", ".sql", ".lua", ".jl", ".r", ".m", ".scala", "",
    ".text", ".log", ".markdown", ".org", ".adoc", ".tsv", ".jsonl", ".xml", ".srt", ".vtt",
    ".cc", ".cs", ".php", ".pl", ".hs", ".ml", ".el", ".jsx", ".tsx", ".vue", ".dart", ".zig",
    ".ex", ".exs", ".erl", ".clj", ".proto", ".conf", ".bat", ".ps1",
}
OTHER_TYPE = "not a text file type"  # + " (.suffix); ..." (``summary`` counts by this prefix)
RUN_FOLDER = "a training run's folder (its settings and logs are not text to train on)"
MODEL_FOLDER = "a model folder (its settings and tokenizer are not text to train on)"
# kernel pseudo-filesystems: a folder on one is refused as a corpus (walking /proc reads
# thousands of entries that are not anyone's text)
PSEUDO_FS = frozenset({"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs",
                       "tracefs", "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue",
                       "hugetlbfs", "binfmt_misc", "autofs"})
MOUNTS = "/proc/self/mounts"
MAX_ENTRIES = 100_000  # directory entries looked at per folder given (files, folders, others)
SPECIAL = "not a regular file (FIFO, device or socket)"


def walk(top: Path, max_entries: int | None = None) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Text-like files under ``top`` (recursively, depth first, names sorted) and the rejected
    entries with their reasons (see the module docstring)."""
    limit = MAX_ENTRIES if max_entries is None else max_entries
    files: list[Path] = []
    rejected: list[tuple[Path, str]] = []
    try:
        device = os.stat(top).st_dev
    except OSError as exc:
        return files, [(top, f"cannot read ({exc.strerror or exc})")]
    fs = pseudo_fs(top)
    if fs is not None:
        return files, [(top, f"a kernel pseudo-filesystem ({fs}), not a corpus; give folders "
                             "of text files")]
    why = not_text_folder(top) if os.path.isdir(top) else None
    if why is not None:  # a run folder dropped by itself trained on its run.json, metrics...
        return files, [(top, why)]
    seen = 0
    stack = [_listing(top, rejected)]  # one iterator per open folder: entries in name order
    while stack:
        e = next(stack[-1], None)
        if e is None:
            stack.pop()
            continue
        seen += 1
        if seen > limit:
            rejected.append((top, f"stopped after {limit:,} entries; give smaller folders "
                                  "(the files found so far are used)"))
            return files, rejected
        path = Path(e.path)
        try:
            st = e.stat(follow_symlinks=False)
        except OSError as exc:
            rejected.append((path, f"cannot read ({exc.strerror or exc})"))
            continue
        if stat.S_ISLNK(st.st_mode):
            reason = link_reason(path)
            if reason:
                rejected.append((path, reason))
                continue
        elif stat.S_ISDIR(st.st_mode):
            if st.st_dev != device:
                rejected.append((path, "on another filesystem (a mount point such as /proc); "
                                       "give it by name to read it"))
            elif (why := not_text_folder(path)) is not None:
                rejected.append((path, why))  # its run.json, metrics.csv, tokenizer...
            else:  # depth first: a/b.txt comes before a.txt, as sorted paths order them
                stack.append(_listing(path, rejected))
            continue
        elif not stat.S_ISREG(st.st_mode):
            rejected.append((path, SPECIAL))
            continue
        if path.suffix.lower() in TEXT_SUFFIXES:
            files.append(path)
        else:
            rejected.append((path, f"{OTHER_TYPE} ({path.suffix}); if it is text, name the "
                                   "file itself to read it"))
    return files, rejected


def not_text_folder(folder: Path) -> str | None:
    """Why a folder is not read as text: a run folder (run.json beside snapshots/) or a model
    folder (config.json beside weights: an export, a snapshot, a downloaded model); else None,
    also for a folder that cannot be looked into (its listing then says why: an unreadable
    subfolder stopped the whole corpus with "sub/run.json: Permission denied")."""
    try:
        if (folder / "run.json").is_file() and (folder / "snapshots").is_dir():
            return RUN_FOLDER
        if is_model_folder(folder):
            return MODEL_FOLDER
    except OSError:  # (Python 3.11's is_file raises EACCES where 3.12 says False)
        return None
    return None


def _listing(folder: Path, rejected: list[tuple[Path, str]]) -> Iterator[os.DirEntry[str]]:
    """The folder's non-hidden entries sorted by name (an unlistable folder is rejected)."""
    try:
        with os.scandir(folder) as it:
            entries = sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as exc:
        rejected.append((folder, f"cannot list the folder ({exc.strerror or exc})"))
        entries = []
    return iter(entries)


def link_reason(path: Path) -> str:
    """Why a symbolic link is rejected ("" when it points at a regular file, which is read)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return (f"a link that loops back to itself ({exc.strerror}); point it at a file or "
                    "folder")
        return f"a broken link ({exc.strerror or exc}); point it at a file or folder"
    if stat.S_ISDIR(st.st_mode):
        return "a link to a folder (not followed; give its target to read it)"
    return "" if stat.S_ISREG(st.st_mode) else SPECIAL


def pseudo_fs(path: Path) -> str | None:
    """The type of the kernel pseudo-filesystem (``PSEUDO_FS``) ``path`` lies on, else None
    (also when the mount table cannot be read: the walk's other bounds still hold)."""
    try:
        target = os.path.realpath(path)
        with open(MOUNTS, encoding="utf-8", errors="replace") as f:
            mounts = [line.split()[1:3] for line in f.read(1 << 20).splitlines()
                      if len(line.split()) >= 3]
    except OSError:
        return None
    best, kind = "", ""
    for point, fstype in mounts:
        point = point.replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # (the last of one point's mounts is on top)
            best, kind = point, fstype
    return kind if kind in PSEUDO_FS else None


def summary(rejected: list[tuple[Path, str]], show: int = 10) -> list[str]:
    """Lines for a terminal: a walk cut short first, then the first ``show`` rejected entries,
    then one count per reason."""
    cut = [(p, why) for p, why in rejected if why.startswith("stopped after")]
    rejected = [r for r in rejected if r not in cut]
    lines = [f"{p}: {why}" for p, why in cut] + [f"skipped {p}: {why}" for p, why in rejected[:show]]
    rest = rejected[show:]
    if rest:
        counts = Counter(why.split(" (")[0] for _, why in rest)
        lines.append(f"skipped {len(rest):,} more: " + "; ".join(
            f"{n:,} {why}" for why, n in counts.most_common(5)))
    return lines
