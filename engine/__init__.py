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
    from .data import Corpus, CorpusFile, encode_corpus, iter_text, load_corpus, split_holdout
    from .docstore import load_documents, save_documents
    from .documents import RECORDS, Documents, encode_documents, split_documents
    from .earlystop import EarlyStopping
    from .errors import (
        CheckpointError,
        CorpusError,
        MambaStudioError,
        TokenizerError,
        TrainingError,
    )
    from .estimate import estimate_run, measure_step_seconds
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
    from .packing import PackedRows, iter_batches, line_end_table, pack_spans
    from .run import RunSpec
    from .runtime import configure
    from .runtoml import RunSettings, load_settings, save_settings
    from .samples import append_sample, read_samples, sample_seed
    from .sampling import SamplingConfig
    from .tblog import TBLogger
    from .tokenizer import BPETokenizer, ByteTokenizer, load_tokenizer
    from .trainer import (
        EpochReport,
        EvalReport,
        StepReport,
        TrainConfig,
        TrainControl,
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
    "encode_corpus": "data",
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
    "configure": "runtime",
    "SamplingConfig": "sampling",
    "BPETokenizer": "tokenizer",
    "ByteTokenizer": "tokenizer",
    "load_tokenizer": "tokenizer",
    "EpochReport": "trainer",
    "EvalReport": "trainer",
    "StepReport": "trainer",
    "TrainConfig": "trainer",
    "TrainControl": "trainer",
    "Trainer": "trainer",
    "evaluate": "trainer",
    "format_duration": "trainer",
    "EarlyStopping": "earlystop",
    "RunSettings": "runtoml",
    "RunSpec": "run",
    "TBLogger": "tblog",
    "append_sample": "samples",
    "estimate_run": "estimate",
    "iter_text": "data",
    "load_settings": "runtoml",
    "measure_step_seconds": "estimate",
    "pick_backend": "gpu",
    "read_samples": "samples",
    "sample_seed": "samples",
    "save_settings": "runtoml",
}
__all__ = [
    "AdamWConfig",
    "AdaptReport",
    "BPETokenizer",
    "ByteTokenizer",
    "CheckpointError",
    "Corpus",
    "CorpusError",
    "CorpusFile",
    "Documents",
    "EarlyStopping",
    "EpochReport",
    "EvalReport",
    "FastAdapter",
    "GpuUnavailable",
    "LORA_TARGETS",
    "LoRAConfig",
    "LoRATrainable",
    "MambaConfig",
    "MambaLM",
    "MambaStudioError",
    "PEFT_REFUSES",
    "PRESETS",
    "PackedRows",
    "RECORDS",
    "RunSettings",
    "RunSpec",
    "SamplingConfig",
    "ShardSpec",
    "StepReport",
    "TBLogger",
    "TokenizerError",
    "TrainConfig",
    "TrainControl",
    "Trainer",
    "TrainingError",
    "append_sample",
    "atomic_write_bytes",
    "configure",
    "count_trainable",
    "encode_corpus",
    "encode_documents",
    "estimate_run",
    "evaluate",
    "format_duration",
    "iter_batches",
    "iter_text",
    "line_end_table",
    "load_adapter",
    "load_corpus",
    "load_documents",
    "load_settings",
    "load_tokenizer",
    "measure_step_seconds",
    "open_stepper",
    "pack_spans",
    "pick_backend",
    "preset",
    "read_samples",
    "sample_seed",
    "save_documents",
    "save_settings",
    "split_documents",
    "split_holdout",
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
