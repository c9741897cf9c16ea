"""The run folder on disk: every file name and key lives in this package, nowhere else.

    run.json                  {"format": "mamba-studio-run", "version": 1, "spec": RunSpec dict,
                               "created": ISO time, "name": str}
    data/ids.npy              every token id of the corpus (T,), compact dtype (``data.id_dtype``)
    data/doc_offsets.npy      document starts (D + 1,) int64 (``engine.documents`` layout)
    data/train_spans.npy      the saved split: (k, 2) int64 [start, length] spans over ids.npy
    data/val_spans.npy        (held-out documents; unused by "stream" runs, which split at n_train)
    data/manifest.json        {"n_train": int, "records": str, "holdout": float, "seed": int,
                               "sha256": {file: digest}, "sources": [{"path", "bytes", "sha256"}]}
    snapshots/step-N/         config.json, model.safetensors, tokenizer.json (``checkpoint``),
                              state.safetensors (optimizer.* / trainable.* tensors),
                              trainer.json (trainer state without tensors, val_loss),
                              manifest.json ({file: sha256}, written last)
    latest.json / best.json   {"snapshot": "step-N", "step": N, "val_loss": float | null}
    metrics.csv               one row per optimizer step (kind "step") and per held-out evaluation
                              (kind "eval"); rows past the resumed snapshot are dropped on resume
    status.json               {"state": running|paused|stopped|finished|diverged, "step", "total_steps",
                               "best_val_loss", "pid", "updated", and "reason" when its early
                               stopping ended it}
    lock                      flock()ed by the one writer; holds its pid (a dead holder's lock is
                              released by the kernel, so a stale lock is simply taken over)
    tb/                       TensorBoard event files (``engine.tblog``)

A snapshot is written into ``snapshots/.tmp-step-N-<pid>/``, every file fsynced, the folder renamed
to ``step-N`` and the parent fsynced; only then is ``latest.json`` atomically replaced (and its
parent fsynced). A crash at any moment leaves the previous snapshot and pointer intact; leftovers
are removed by ``clean_stale`` when a run is opened for writing.

One module a part of the folder: ``names`` (file names, primitives), ``snapshot_dirs``,
``trainer_state`` (a snapshot's trainer.json and state.safetensors), ``data_files``,
``run_lock``, ``out_folder``, ``run_file`` (run.json), ``metrics_file`` (metrics.csv,
samples.jsonl, status.json), ``listing``, ``removal`` (deleting a run's files).
Callers use the names re-exported here.
"""

from __future__ import annotations

from . import trainer_state
from .data_files import (
    DATA_FILES,
    RunData,
    corpus_bytes,
    file_sources,
    npy_length,
    read_data,
    read_epochs_done,
    read_tokens_per_byte,
    write_data,
)
from .listing import (
    RunInfo,
    list_runs,
    model_label,
)
from .metrics_file import (
    append_metric,
    early_stop_note,
    lost_steps_note,
    read_kept_metrics,
    read_kept_samples,
    read_metrics,
    read_status,
    truncate_metrics,
    truncate_samples,
    write_status,
)
from .names import (
    BEST,
    DAMAGED,
    DATA,
    DATA_MANIFEST,
    FORMAT,
    IDS,
    KEEP,
    LATEST,
    LOCK,
    METRIC_FIELDS,
    METRICS,
    METRICS_LIMIT,
    RUN_ENTRIES,
    RUN_JSON,
    SLOW_SAVE_ENV,
    SNAP_MANIFEST,
    SNAP_NEEDS,
    SNAP_STATE,
    SNAP_TRAINER,
    SNAPSHOTS,
    STATUS,
    TB,
    TMP_PREFIX,
    VERSION,
    fsync_dir,
    is_temp,
    now_iso,
    read_entry,
    real_dir,
    set_aside_step,
    slow_save,
    snapshot_step,
    write_json,
)
from .out_folder import (
    RUN_NUMBERS,
    check_can_create,
    check_out_dir,
    check_resume_dir,
    note_run_number,
    prepared_only,
    reserve_run_folder,
    unique_run_folder,
)
from .removal import delete_run, others_in_run, remove_run_entries, unmake, why_not_delete
from .run_file import (
    foreign_entries,
    init_described,
    init_source,
    is_run,
    progress_mark,
    read_run_json,
    rewrite_run_spec,
    run_written_ns,
    snapshot_run,
    write_run_json,
)
from .run_lock import (
    RunLock,
)
from .snapshot_dirs import (
    ANOTHER_SNAPSHOT,
    OWN_FOLDERS,
    best_if_not_latest,
    best_pointer,
    check_own_folders,
    clean_stale,
    drop_after,
    expected_snapshot,
    find_snapshot,
    latest_snapshot,
    prune,
    read_pointer,
    set_aside_passed_over,
    snapshot_bytes,
    snapshot_name,
    snapshots,
    unreadable_newer,
    verify_files,
    verify_snapshot,
    write_snapshot,
)

__all__ = [
    "trainer_state",
    "ANOTHER_SNAPSHOT",
    "BEST",
    "DAMAGED",
    "DATA",
    "DATA_FILES",
    "DATA_MANIFEST",
    "FORMAT",
    "IDS",
    "KEEP",
    "LATEST",
    "LOCK",
    "METRICS",
    "METRICS_LIMIT",
    "METRIC_FIELDS",
    "OWN_FOLDERS",
    "RUN_ENTRIES",
    "RUN_JSON",
    "RUN_NUMBERS",
    "RunData",
    "RunInfo",
    "RunLock",
    "SLOW_SAVE_ENV",
    "SNAPSHOTS",
    "SNAP_MANIFEST",
    "SNAP_NEEDS",
    "SNAP_STATE",
    "SNAP_TRAINER",
    "STATUS",
    "TB",
    "TMP_PREFIX",
    "VERSION",
    "append_metric",
    "best_if_not_latest",
    "best_pointer",
    "check_can_create",
    "check_out_dir",
    "check_own_folders",
    "check_resume_dir",
    "clean_stale",
    "corpus_bytes",
    "delete_run",
    "drop_after",
    "expected_snapshot",
    "file_sources",
    "find_snapshot",
    "foreign_entries",
    "fsync_dir",
    "init_described",
    "init_source",
    "is_run",
    "is_temp",
    "latest_snapshot",
    "list_runs",
    "model_label",
    "note_run_number",
    "now_iso",
    "npy_length",
    "others_in_run",
    "prepared_only",
    "progress_mark",
    "prune",
    "read_data",
    "read_entry",
    "read_epochs_done",
    "read_kept_metrics",
    "read_kept_samples",
    "read_metrics",
    "read_pointer",
    "read_run_json",
    "early_stop_note",
    "lost_steps_note",
    "read_status",
    "read_tokens_per_byte",
    "real_dir",
    "remove_run_entries",
    "rewrite_run_spec",
    "run_written_ns",
    "set_aside_passed_over",
    "set_aside_step",
    "slow_save",
    "snapshot_bytes",
    "snapshot_name",
    "snapshot_run",
    "snapshot_step",
    "snapshots",
    "truncate_metrics",
    "truncate_samples",
    "reserve_run_folder",
    "unique_run_folder",
    "unmake",
    "unreadable_newer",
    "verify_files",
    "verify_snapshot",
    "why_not_delete",
    "write_data",
    "write_json",
    "write_run_json",
    "write_snapshot",
    "write_status",
]
