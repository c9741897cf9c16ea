"""``metrics.csv``, ``samples.jsonl`` and ``status.json``: appended rows, bounded reads, rows past a
resumed snapshot dropped, and the run's state for listings and other processes.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from .. import checkpoint as ckpt
from ..errors import CheckpointError, MambaStudioError
from ..safeio import check_regular, open_append, open_regular, read_bytes
from ..samples import SAMPLES, read_samples
from ..words import plural
from .names import METRIC_FIELDS, METRICS, METRICS_LIMIT, STATUS, fsync_dir, now_iso, read_entry
from .run_lock import RunLock
from .snapshot_dirs import expected_snapshot


def append_metric(folder: Path, row: dict[str, Any]) -> None:
    path = folder / METRICS
    new = not path.exists()
    try:
        with open_append(path, METRICS) as f:
            w = csv.DictWriter(f, METRIC_FIELDS, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow({k: ("" if row.get(k) is None else row[k]) for k in METRIC_FIELDS})
    except OSError as exc:  # a write or close on a full disk names no file
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def _metrics_text(folder: str | Path) -> str | None:
    path = Path(folder) / METRICS
    if not path.exists() and not path.is_symlink():
        return None
    try:  # bounded, and never a FIFO or device (a link to /dev/zero grew to 6.9 GB)
        text = read_bytes(path, METRICS_LIMIT, METRICS).decode("utf-8", errors="replace")
    except MambaStudioError as exc:
        raise CheckpointError(f"{exc}; delete or replace {path} (the snapshots do not need it)"
                              ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark an editor's "CSV UTF-8" save adds


def _metric_columns(header: str) -> tuple[str, ...]:
    """The columns a metrics.csv header names: its own names when they are all ours (an older
    file may have fewer; empty names after a last comma dropped), else ours in order (a
    damaged header lost every row)."""
    names = [n.strip() for n in header.split(",")]
    while names and not names[-1]:
        names.pop()
    ok = "kind" in names and "step" in names and set(names) <= set(METRIC_FIELDS)
    return tuple(names) if ok else METRIC_FIELDS


def _is_header(line: str) -> bool:
    """Whether a first line is a header (a file whose header was lost starts with a row)."""
    return _metric_row(line, METRIC_FIELDS) is None


def _metric_row(line: str, columns: tuple[str, ...]) -> dict[str, Any] | None:
    """One metrics.csv line as a row, or None when it is not one of ours. Lines are split on
    commas, not parsed as CSV: every field is a word or a number, and a stray quote swallowed
    every row after it (a line past the csv module's field limit raised)."""
    cells = line.rstrip("\r").split(",")
    while len(cells) > len(columns) and len(cells) > len(METRIC_FIELDS) and not cells[-1]:
        cells.pop()  # empty cells after a last comma
    if len(cells) == len(METRIC_FIELDS) and len(columns) < len(METRIC_FIELDS):
        columns = METRIC_FIELDS  # a row of today's under an older file's shorter header
    if len(cells) != len(columns):
        return None
    raw = dict(zip(columns, cells, strict=True))
    try:
        row: dict[str, Any] = {"kind": raw["kind"], "step": int(raw["step"]),
                               "epoch": int(raw.get("epoch") or 0)}
        for k in METRIC_FIELDS[3:]:
            v = raw.get(k)
            row[k] = float(v) if v not in (None, "") else None
    except (KeyError, ValueError, TypeError):
        return None
    return row if row["kind"] in ("step", "eval") else None


def _metric_lines(text: str) -> tuple[tuple[str, ...], list[str]]:
    """A metrics.csv text's columns and its lines after the header (all of them when the
    header was lost)."""
    lines = text.split("\n")
    if not _is_header(lines[0]):
        return METRIC_FIELDS, lines
    return _metric_columns(lines[0]), lines[1:]


def read_metrics(folder: str | Path) -> list[dict[str, Any]]:
    """metrics.csv as dicts (kind: str, step/epoch: int, the rest float or None); a line that is
    not a row (a torn last line from a crash, an edit) is skipped."""
    text = _metrics_text(folder)
    if not text:
        return []
    columns, lines = _metric_lines(text)
    return [row for line in lines if (row := _metric_row(line, columns)) is not None]


def read_kept_metrics(folder: str | Path) -> list[dict[str, Any]]:
    """``read_metrics`` as the run will go on from it: a run no process holds drops the rows
    after its latest snapshot, the work a crash lost (a resume truncates them; a window showed
    steps 1-28 of a run it said continues from step 16). A run in training keeps them all."""
    rows = read_metrics(folder)
    last = _kept_step(Path(folder)) if rows else None
    return rows if last is None else [r for r in rows if int(r.get("step", 0)) <= last]


def _kept_step(folder: Path) -> int | None:
    """The step a run no process holds goes on from (``expected_snapshot``'s: latest.json's,
    when its snapshot is gone, kept the rows of the lost work after it), or None: a run in
    training keeps all it wrote, a run with no snapshot all there is."""
    if RunLock(folder).held_elsewhere():
        return None
    kept = expected_snapshot(folder)
    return kept[1] if kept is not None else None


def read_kept_samples(folder: str | Path) -> list[dict[str, Any]]:
    """``read_samples`` as the run will go on from it: like ``read_kept_metrics``, a run no
    process holds drops the samples after the snapshot a resume takes; and of the samples of one
    step with one prompt only the newest is kept (a resume from an older snapshot samples those
    steps again: the Gallery listed step 165 twice)."""
    rows = read_samples(folder)
    kept = _kept_step(Path(folder))
    if kept is not None:
        rows = [r for r in rows if int(r.get("step", 0)) <= kept]
    last = {(r.get("step"), r.get("prompt")): i for i, r in enumerate(rows)}
    return [r for i, r in enumerate(rows) if last[(r.get("step"), r.get("prompt"))] == i]


def truncate_metrics(folder: Path, step: int) -> int:
    """Drop the rows after ``step`` (they belong to work lost in a crash) and an unfinished last
    line (the next row would be glued to it) -- atomic rewrite. Every other line is kept as it
    is, rows or not (a byte-order mark or a damaged header had the rewrite keep only the rows it
    could read: 60 steps of history went without a word). Returns how many lines were kept that
    are not rows."""
    text = _metrics_text(folder)
    if text is None:
        return 0
    columns, lines = _metric_lines(text)
    if lines:
        lines.pop()  # "" after the last newline, or a torn last line (no row can follow it)
    keep, odd = [",".join(METRIC_FIELDS)], 0
    for line in lines:
        row = _metric_row(line, columns)
        if row is None:
            odd += 1
            keep.append(line)
        elif row["step"] <= step:  # in today's column order (an older file's too)
            keep.append(",".join("" if row.get(k) is None else str(row[k]) for k in METRIC_FIELDS))
    ckpt.atomic_write_bytes(folder / METRICS, "\n".join([*keep, ""]).encode())
    return odd


def truncate_samples(folder: Path, step: int) -> int:
    """Drop the sample records after ``step``, samples of work a crash lost (a resume from
    ``step`` trains those steps again and samples them anew: a lost step-39 sample came back in
    the Gallery once the run had passed it), as ``truncate_metrics`` drops their rows. Streamed
    into a temporary file (the file may be large), then an atomic replace; lines that are no
    record are kept as they are. Returns how many were dropped."""
    path = folder / SAMPLES
    if path.is_symlink():
        return 0  # not the run's own file (appending refuses it): left as it is
    try:
        f = open_regular(path, SAMPLES)
    except MambaStudioError:
        return 0  # none (or not a plain file: appending refuses it too)
    dropped = 0
    fd, tmp = ckpt.create_temp(path)  # (a crash leaves it: clean_stale removes it)
    try:
        with f, os.fdopen(fd, "wb") as out:
            for line in iter(lambda: f.readline(1 << 24), b""):  # (a longer line: in pieces)
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    row = None
                s = row.get("step") if isinstance(row, dict) else None
                if isinstance(s, int) and not isinstance(s, bool) and s > step:
                    dropped += 1
                    continue
                out.write(line)
            if dropped:
                out.flush()
                os.fsync(out.fileno())
        if dropped:
            os.replace(tmp, path)
            fsync_dir(folder)
    except OSError as exc:  # (a file-size limit: a resume said only "File too large")
        raise CheckpointError(f"could not write {path}: {exc.strerror or exc}") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)  # (gone once it replaced the file)
    return dropped


def write_status(folder: Path, state: str, **fields: Any) -> None:
    ckpt.atomic_write_json(folder / STATUS, {"state": state, "pid": os.getpid(),
                                             "updated": now_iso(), **fields}, make_parents=False)


def early_stop_note(folder: str | Path) -> str | None:
    """What a resume of a run its early stopping ended is told (None for any other run): it
    stops again at its next held-out check, with the same settings (such a Continue trained a
    few steps and stopped, unwarned, in the CLI and the window alike)."""
    why = read_status(folder).get("reason")
    if not isinstance(why, str) or not why:
        return None
    return (f"{Path(folder).name} was ended by its {why}; it stops again at its next held-out "
            "check unless --patience or --target-loss change")


_TAIL = 64 * 1024  # metrics.csv's rows are ~100 bytes: hundreds of them


def _last_step(folder: Path) -> int | None:
    """The step of metrics.csv's last training row (rows are in step order: a resume drops
    those past its snapshot), read from the file's end: a Continue in the window read a
    100,000-step run's whole file a second time for this (0.36 s). None when it has no such
    row; a file whose tail holds none (or that cannot be read so) is read whole."""
    path = folder / METRICS
    try:
        size = check_regular(path, METRICS, METRICS_LIMIT)
        if size > 2 * _TAIL:
            with open_regular(path, METRICS) as f:
                head = f.read(4096).decode("utf-8", errors="replace").removeprefix("\ufeff")
                f.seek(size - _TAIL)
                tail = f.read(_TAIL).decode("utf-8", errors="replace")
            first = head.split("\n", 1)[0]
            columns = _metric_columns(first) if _is_header(first) else METRIC_FIELDS
            for line in reversed(tail.split("\n")[1:]):  # (its first line may be cut)
                row = _metric_row(line, columns)
                if row is not None and row["kind"] == "step":
                    return int(row["step"])
    except (MambaStudioError, OSError):
        pass  # read whole below
    try:
        rows = read_metrics(folder)
    except (MambaStudioError, OSError):  # (a FIFO, a device: the note is left out; what shows
        return None  # the curves says what is wrong with the file)
    return max((int(r["step"]) for r in rows if r.get("kind") == "step"), default=None)


def lost_steps_note(folder: str | Path, kept: int | None = None, passed_over: bool = False
                    ) -> str | None:
    """What a resume is told of steps a run trained after its last snapshot (``kept``: the step
    it goes on from, by default its latest snapshot's), lost when it ended without saving (kill
    -9, a crash, a power cut); None when there are none, when metrics.csv cannot be read, or
    while another process holds the run. A window relaunched after a kill said "interrupted at
    step 0", hid the 137 steps of curves and went on from step 0 without a word.
    ``passed_over``: a newer snapshot was there but could not be used (damaged), so the steps
    were not lost to a kill (it blamed "a kill or a crash" for a damaged snapshot)."""
    folder = Path(folder)
    kept = _kept_step(folder) if kept is None else kept
    if kept is None:
        return None
    last = _last_step(folder)
    if last is None or last <= kept:
        return None
    one = last - kept == 1
    if passed_over:
        return (f"{folder.name} trained to step {last:,} and goes on from its snapshot of step "
                f"{kept:,} (a newer one could not be used, as said above): "
                f"{plural(last - kept, 'step')} after it {'is' if one else 'are'} trained again")
    return (f"{folder.name} trained to step {last:,}, but its last snapshot is step {kept:,}: "
            f"{plural(last - kept, 'step')} after it {'was' if one else 'were'} lost when it "
            f"ended without saving (a kill or a crash) and {'is' if one else 'are'} trained "
            f"again from step {kept:,} (a run saves at each epoch's end, on its autosave "
            "settings, and when it is stopped)")


def read_status(folder: str | Path) -> dict[str, Any]:
    """status.json ({"state", "step", "total_steps", "best_val_loss", "pid", "updated"}, and
    "reason" when early stopping ended the run; its step is the latest saved one), or {} when
    it cannot be read."""
    folder = Path(folder)
    try:
        d = read_entry(folder / STATUS, STATUS)
    except CheckpointError:
        return {}
    return d if isinstance(d, dict) else {}
