"""Mamba Studio engine: a headless Mamba-1 language model trainer for the CPU.

Importing ``engine`` only defines names: the public API below is loaded lazily on first use, and
nothing in the process (environment, allocator, umask, threads) changes. Entry points call
:func:`engine.runtime.configure` first (see its docstring for each setting and why).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapt import AdaptReport, FastAdapter
    from .checkpoint import atomic_write_bytes
    from .config import PRESETS, MambaConfig, preset
    from .control import TrainControl
    from .data import (
        Corpus,
        CorpusFile,
        count_tokens,
        encode_corpus,
        file_identity,
        first_of_each_file,
        iter_text,
        load_corpus,
        split_holdout,
    )
    from .defaults import BPE_MIN_BYTES, DEFAULT_PRESET, PRESET_DEFAULTS, choose_tokenizer, follow_preset
    from .docstore import load_documents, save_documents
    from .documents import RECORDS, Documents, encode_documents, split_documents
    from .earlystop import EarlyStopping
    from .errors import (
        CheckpointError,
        CorpusError,
        MambaStudioError,
        Stopped,
        TokenizerError,
        TrainingError,
    )
    from .estimate import estimate_run, measure_step_seconds, why_not_measured
    from .evaluation import HELDOUT_SAMPLE_TOKENS
    from .export import export_gguf, export_merged, export_peft, not_export_files
    from .gpu import GpuUnavailable, open_stepper, pick_backend
    from .lm import MambaLM
    from .lora import (
        LORA_TARGETS,
        PEFT_REFUSES,
        LoRAConfig,
        LoRATrainable,
        count_trainable,
        load_adapter,
    )
    from .optim import AdamWConfig, ShardSpec
    from .packing import PackedRows, iter_batches, line_end_table, pack_documents, pack_spans
    from .params import INITS
    from .run import (
        NO_LIMIT,
        RESUME_OVERRIDES,
        EpochPlan,
        Run,
        RunSpec,
        list_runs,
        load_model,
        open_run,
        plan_epoch,
        read_epoch_rows,
        read_metrics,
        read_model_config,
        read_run_spec,
        resume_run,
        start_run,
    )
    from .runformat import (
        RunInfo,
        RunLock,
        best_if_not_latest,
        read_epochs_done,
        read_kept_metrics,
        read_pointer,
        read_tokens_per_byte,
    )
    from .runtime import configure
    from .runtoml import (
        RunSettings,
        defaulted,
        flat_settings,
        load_settings,
        overlay_settings,
        save_settings,
    )
    from .safeio import read_head
    from .samples import append_sample, read_samples, sample_record, sample_seed, samples_cut
    from .sampling import GENERATION_DEFAULTS, SamplingConfig
    from .signals import watch_continues
    from .tblog import TBLogger, keeps_tensorboard
    from .tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer
    from .trainer import (
        EpochReport,
        EvalReport,
        StepReport,
        TrainConfig,
        Trainer,
        evaluate,
        format_duration,
    )

# public name -> the module under engine/ that defines it (imported on first access)
_EXPORTS: dict[str, str] = {
    "AdaptReport": "adapt",
    "FastAdapter": "adapt",
    "atomic_write_bytes": "checkpoint",
    "PRESETS": "config",
    "MambaConfig": "config",
    "preset": "config",
    "Corpus": "data",
    "CorpusFile": "data",
    "count_tokens": "data",
    "encode_corpus": "data",
    "file_identity": "data",
    "first_of_each_file": "data",
    "load_corpus": "data",
    "split_holdout": "data",
    "load_documents": "docstore",
    "save_documents": "docstore",
    "RECORDS": "documents",
    "Documents": "documents",
    "encode_documents": "documents",
    "split_documents": "documents",
    "CheckpointError": "errors",
    "CorpusError": "errors",
    "MambaStudioError": "errors",
    "TokenizerError": "errors",
    "Stopped": "errors",
    "TrainingError": "errors",
    "GpuUnavailable": "gpu",
    "open_stepper": "gpu",
    "MambaLM": "lm",
    "LORA_TARGETS": "lora",
    "PEFT_REFUSES": "lora",
    "LoRAConfig": "lora",
    "LoRATrainable": "lora",
    "count_trainable": "lora",
    "load_adapter": "lora",
    "AdamWConfig": "optim",
    "ShardSpec": "optim",
    "PackedRows": "packing",
    "iter_batches": "packing",
    "line_end_table": "packing",
    "pack_spans": "packing",
    "pack_documents": "packing",
    "configure": "runtime",
    "SamplingConfig": "sampling",
    "GENERATION_DEFAULTS": "sampling",
    "BPETokenizer": "tokenizer",
    "ByteTokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
    "EpochReport": "trainer",
    "EvalReport": "trainer",
    "StepReport": "trainer",
    "TrainConfig": "trainer",
    "TrainControl": "control",
    "Trainer": "trainer",
    "evaluate": "trainer",
    "HELDOUT_SAMPLE_TOKENS": "evaluation",
    "format_duration": "trainer",
    "RunSpec": "run",
    "Run": "run",
    "RESUME_OVERRIDES": "run",
    "NO_LIMIT": "run",
    "load_model": "run",
    "read_metrics": "run",
    "read_kept_metrics": "runformat",
    "read_run_spec": "run",
    "read_model_config": "run",
    "read_epoch_rows": "run",
    "INITS": "params",
    "PRESET_DEFAULTS": "defaults",
    "BPE_MIN_BYTES": "defaults",
    "choose_tokenizer": "defaults",
    "follow_preset": "defaults",
    "read_head": "safeio",
    "DEFAULT_PRESET": "defaults",
    "list_runs": "run",
    "open_run": "run",
    "start_run": "run",
    "plan_epoch": "run",
    "EpochPlan": "run",
    "resume_run": "run",
    "RunLock": "runformat",
    "RunInfo": "runformat",
    "read_pointer": "runformat",
    "best_if_not_latest": "runformat",
    "read_tokens_per_byte": "runformat",
    "read_epochs_done": "runformat",
    "EarlyStopping": "earlystop",
    "watch_continues": "signals",
    "pick_backend": "gpu",
    "append_sample": "samples",
    "read_samples": "samples",
    "sample_seed": "samples",
    "sample_record": "samples",
    "samples_cut": "samples",
    "TBLogger": "tblog",
    "keeps_tensorboard": "tblog",
    "estimate_run": "estimate",
    "measure_step_seconds": "estimate",
    "why_not_measured": "estimate",
    "RunSettings": "runtoml",
    "defaulted": "runtoml",
    "flat_settings": "runtoml",
    "overlay_settings": "runtoml",
    "load_settings": "runtoml",
    "save_settings": "runtoml",
    "iter_text": "data",
    "export_gguf": "export",
    "export_merged": "export",
    "export_peft": "export",
    "not_export_files": "export",
}
__all__ = [
    "AdamWConfig",
    "AdaptReport",
    "append_sample",
    "sample_record",
    "samples_cut",
    "atomic_write_bytes",
    "BPETokenizer",
    "ByteTokenizer",
    "CheckpointError",
    "configure",
    "Corpus",
    "CorpusError",
    "CorpusFile",
    "count_tokens",
    "count_trainable",
    "defaulted",
    "flat_settings",
    "overlay_settings",
    "Documents",
    "EarlyStopping",
    "watch_continues",
    "encode_corpus",
    "file_identity",
    "first_of_each_file",
    "encode_documents",
    "EpochPlan",
    "EpochReport",
    "estimate_run",
    "EvalReport",
    "evaluate",
    "export_gguf",
    "export_merged",
    "export_peft",
    "not_export_files",
    "FastAdapter",
    "format_duration",
    "GENERATION_DEFAULTS",
    "GpuUnavailable",
    "HELDOUT_SAMPLE_TOKENS",
    "INITS",
    "PRESET_DEFAULTS",
    "BPE_MIN_BYTES",
    "choose_tokenizer",
    "follow_preset",
    "read_head",
    "DEFAULT_PRESET",
    "iter_batches",
    "iter_text",
    "line_end_table",
    "list_runs",
    "load_adapter",
    "load_corpus",
    "load_documents",
    "load_model",
    "load_settings",
    "load_tokenizer",
    "LORA_TARGETS",
    "LoRAConfig",
    "LoRATrainable",
    "MambaConfig",
    "MambaLM",
    "MambaStudioError",
    "measure_step_seconds",
    "why_not_measured",
    "NO_LIMIT",
    "open_run",
    "open_stepper",
    "pack_spans",
    "pack_documents",
    "PackedRows",
    "PEFT_REFUSES",
    "pick_backend",
    "plan_epoch",
    "preset",
    "PRESETS",
    "read_epochs_done",
    "read_metrics",
    "read_kept_metrics",
    "read_pointer",
    "best_if_not_latest",
    "read_run_spec",
    "read_model_config",
    "read_epoch_rows",
    "read_samples",
    "RECORDS",
    "read_tokens_per_byte",
    "RESUME_OVERRIDES",
    "resume_run",
    "Run",
    "RunInfo",
    "RunLock",
    "RunSettings",
    "RunSpec",
    "sample_seed",
    "SamplingConfig",
    "save_documents",
    "save_settings",
    "ShardSpec",
    "split_documents",
    "split_holdout",
    "start_run",
    "StepReport",
    "TBLogger",
    "keeps_tensorboard",
    "TokenizerError",
    "TrainConfig",
    "TrainControl",
    "Trainer",
    "Stopped",
    "TrainingError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
