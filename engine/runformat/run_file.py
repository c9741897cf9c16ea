"""``run.json`` (a run's settings, name, creation time and where its weights came from) and what
belongs in a run folder at all (``foreign_entries``: what ``--force`` must never delete).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from ..safeio import resolved
from ..samples import SAMPLES
from .data_files import DATA_FILES
from .names import (
    DATA,
    DATA_MANIFEST,
    FORMAT,
    METRICS,
    RUN_ENTRIES,
    RUN_JSON,
    SNAPSHOTS,
    STAGES,
    TB,
    TMP_PREFIX,
    VERSION,
    is_temp,
    now_iso,
    read_entry,
    real_dir,
    set_aside_step,
    snapshot_step,
    write_json,
)
from .out_folder import prepared_only, prepared_only_note
from .snapshot_dirs import snapshots


def is_run(folder: Path) -> bool:
    return (Path(folder) / RUN_JSON).is_file()


def run_around(path: str | Path) -> Path | None:
    """The run folder ``path`` lies inside (links resolved), else None. A run is a folder with
    its run.json and snapshots/ (a folder above holding some other file named run.json, a
    project's own, refused every new run under it)."""
    from ..safeio import resolved

    return next((p for p in resolved(Path(path)).parents
                 if is_run(p) and (p / SNAPSHOTS).is_dir()), None)


def snapshot_run(path: str | Path) -> Path | None:
    """The run folder ``path`` is a snapshot of (``RUN/snapshots/step-N``), else None."""
    p = Path(path)
    return p.parent.parent if p.parent.name == SNAPSHOTS and is_run(p.parent.parent) else None


def run_written_ns(folder: str | Path) -> int:
    """When a run's run.json was last written (ns; 0 if it cannot be read): a folder replaced
    since (``train --force``) is another run."""
    try:
        return (Path(folder) / RUN_JSON).stat().st_mtime_ns
    except OSError:
        return 0


def progress_mark(folder: str | Path) -> tuple[int, int]:
    """(bytes of metrics.csv, bytes of samples.jsonl), -1 where one cannot be read: it changes as
    a run trains, so a view of a run another process trains reads the run again when it does."""
    def size(name: str) -> int:
        try:
            return (Path(folder) / name).stat().st_size
        except OSError:
            return -1

    return size(METRICS), size(SAMPLES)


def _run_made(p: Path) -> list[str]:
    """Names under the run entry ``p`` that a run does not write ([] when ``p`` is all ours)."""
    name = p.name
    if name in STAGES:  # a run (or part of one) being swapped in or out
        return [f"{name}/{q}" for q in foreign_entries(p)] if real_dir(p) else [name]
    if name not in (DATA, SNAPSHOTS, TB):
        return [] if p.is_file() and not p.is_symlink() else [name]
    if not real_dir(p):
        return [name]
    if name == SNAPSHOTS:
        bad = []
        for q in p.iterdir():
            if not (real_dir(q) and (snapshot_step(q.name) is not None
                                      or set_aside_step(q.name) is not None
                                      or q.name.startswith(TMP_PREFIX))):
                bad.append(f"{name}/{q.name}")
                continue
            bad += [f"{name}/{q.name}/{f.name}" for f in q.iterdir()
                    if not (f.is_file() and f.suffix in (".json", ".safetensors") or is_temp(f.name))]
        return bad
    if name == DATA:
        ok = {Path(f).name for f in (*DATA_FILES.values(), DATA_MANIFEST)}
        return [f"{name}/{q.name}" for q in p.iterdir()
                if not (q.is_file() and (q.name in ok or is_temp(q.name)))]
    return [f"{name}/{q.name}" for q in p.iterdir()  # tb/
            if not (q.is_file() and q.name.startswith("events.out.tfevents."))]


def foreign_entries(folder: Path) -> list[str]:
    """Paths in ``folder`` (relative, sorted) that no run writes: anything outside
    ``RUN_ENTRIES`` and ``.*.tmp`` leftovers, or inside data/, snapshots/ and tb/ anything but
    the files a run puts there. What ``--force`` must never delete."""
    bad: list[str] = []
    for p in Path(folder).iterdir():
        if p.name in RUN_ENTRIES:
            bad += _run_made(p)
        elif not (is_temp(p.name) and p.is_file()):
            bad.append(p.name)
    return sorted(bad)


def write_run_json(folder: Path, spec: dict[str, Any], name: str,
                   init_from: dict[str, Any] | None = None) -> None:
    """A new run's run.json: its settings (``spec``) and, for a run from a model
    (``RunSpec.init``), the folder its weights came from (``init_from``: ``init_source``)."""
    d = {"format": FORMAT, "version": VERSION, "name": name, "created": now_iso(), "spec": spec}
    write_json(folder / RUN_JSON, {**d, "init_from": init_from} if init_from else d)


def rewrite_run_spec(folder: Path, spec: dict[str, Any]) -> None:
    """A run's run.json with new settings (a resume's new totals, new preview prompts); the
    rest as it was (name, creation time, where its weights came from)."""
    write_json(folder / RUN_JSON, {**read_run_json(folder), "spec": spec})


def init_source(model: Path) -> dict[str, Any]:
    """What a run started from: ``model``, the folder its weights were read from (a run's
    snapshot rather than the run, whose latest snapshot moves on), and that snapshot's step."""
    model = resolved(model)
    step = snapshot_step(model.name) if snapshot_run(model) is not None else None
    return {"path": str(model), "step": step}


def init_described(init_from: Any) -> str:
    """``init_from`` of a run.json in words ("" when it has none or it is not ours)."""
    if not isinstance(init_from, dict) or not isinstance(init_from.get("path"), str):
        return ""
    step = init_from.get("step")
    at = f" (step {step})" if type(step) is int else ""
    return f"from {init_from['path']}{at}"


def read_run_json(folder: Path) -> dict[str, Any]:
    """run.json with its format and version checked (a clear error for other versions)."""
    path = Path(folder) / RUN_JSON
    if not path.exists():
        if not Path(folder).is_dir():
            what = "a file, not a folder" if Path(folder).exists() else "no such folder"
            if not Path(folder).exists():  # (a loop, or a path through one, said "no such
                from ..safeio import resolved  # folder")

                resolved(Path(folder))  # a loop: said so, as everywhere
                if Path(folder).is_symlink():
                    what = f"a link to {os.readlink(folder)}, which does not exist"
            raise CheckpointError(f"{folder}: {what}; pass a run folder (runs/...)")
        hint = (" (an old single-folder checkpoint: it loads for generate/eval/--init but cannot "
                "be resumed as a run)") if (Path(folder) / "trainer_state.json").exists() else ""
        here = Path(folder)
        if run := snapshot_run(here):
            hint = f" but a snapshot of the run {run}: resume that"
        elif found := snapshots(here):
            hint = (f" (lost or deleted): its snapshots still load for generate/eval/export; to "
                    f"train on, start a new run with --init {shlex.quote(str(found[-1][1]))}")
        elif prepared_only(here):
            raise CheckpointError(prepared_only_note(here, "nothing of it can be resumed"))
        raise CheckpointError(f"{folder}: no {RUN_JSON}, not a run folder{hint}")
    found = snapshots(Path(folder))
    use = (f"; its snapshots still load: give {shlex.quote(str(found[-1][1]))} to generate, "
           "eval or export, or --init it to a new run" if found else "")  # (damaged: the file and no way on)
    try:
        d = read_entry(path, RUN_JSON)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc}{use}") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT or not isinstance(d.get("version"), int):
        raise CheckpointError(f"{path}: not a Mamba Studio run file{use}")
    if d["version"] > VERSION:
        raise CheckpointError(f"{path}: written by a newer Mamba Studio (run format {d['version']}, "
                              f"this one reads {VERSION}); upgrade Mamba Studio to open it")
    if d["version"] < VERSION:
        raise CheckpointError(f"{path}: run format {d['version']} is older than {VERSION} and "
                              "cannot be opened; start a new run with --init from its snapshot")
    if not isinstance(d.get("spec"), dict):
        raise CheckpointError(f"{path}: has no 'spec' object{use}")
    return d
