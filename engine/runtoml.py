"""Run settings as a TOML file, the one format shared by ``python -m engine train --config`` and
the app's File > Save settings as… / Open settings…

    [run]                       # RunSpec fields (preset, tokenizer, bpe_vocab, holdout, init,
                                # init_scheme, ...)
    corpus = ["notes/", "a.txt"]  # optional; paths relative to the TOML file
    [model]                     # optional explicit sizes: d_model, n_layer, d_state, ...
    [train]                     # TrainConfig fields (epochs, lr, batch_size, seq_len, ...)
    [train.lora]                # optional LoRA: targets, rank, alpha, dropout
    [early_stopping]            # optional: patience, target_loss

TOML has no null: a missing key means the RunSpec/TrainConfig default."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from .checkpoint import atomic_write_bytes
from .earlystop import EarlyStopping
from .errors import MambaStudioError
from .run import RunSpec
from .trainer import TrainConfig

MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RunSettings:
    spec: RunSpec
    corpus: tuple[str, ...] = ()
    early_stopping: EarlyStopping = field(default_factory=EarlyStopping)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (_drop_none(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v)
            for k, v in d.items() if v is not None}


def settings_to_toml(s: RunSettings) -> str:
    d = s.spec.to_dict()
    train = d.pop("train")
    model = d.pop("model")
    run = _drop_none(d)
    if s.corpus:
        run["corpus"] = list(s.corpus)
    doc: dict[str, Any] = {"run": run}
    if model:
        doc["model"] = dict(model)
    doc["train"] = _drop_none(train)
    es = s.early_stopping
    if es.enabled:
        doc["early_stopping"] = _drop_none({"patience": es.patience, "target_loss": es.target_loss})
    return tomli_w.dumps(doc)


def save_settings(path: str | Path, s: RunSettings) -> None:
    atomic_write_bytes(Path(path), settings_to_toml(s).encode("utf-8"))


def load_settings(path: str | Path) -> RunSettings:
    """Parse and check a settings file; any problem is one MambaStudioError naming the file."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise MambaStudioError(f"{path}: larger than 1 MiB; is this a settings file?")
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MambaStudioError(f"{path}: cannot read ({exc.strerror}); check the --config path") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MambaStudioError(f"{path}: not valid TOML ({exc}); fix the file or save it again "
                               "from the app") from None
    unknown = sorted(set(doc) - {"run", "model", "train", "early_stopping"})
    if unknown:
        raise MambaStudioError(f"{path}: unknown section(s) {unknown}; expected [run], [model], "
                               "[train], [early_stopping]")
    try:
        run = dict(doc.get("run", {}))
        corpus = tuple(str((path.parent / c).resolve()) if not Path(c).is_absolute() else c
                       for c in run.pop("corpus", []))
        train = TrainConfig.from_dict(doc.get("train", {}))
        spec = RunSpec(model=dict(doc["model"]) if "model" in doc else None, train=train, **run)
        spec.check()
        es_doc = doc.get("early_stopping", {})
        extra = sorted(set(es_doc) - {"patience", "target_loss", "min_delta"})
        if extra:
            raise ValueError(f"unknown early_stopping key(s) {extra}")
        es = EarlyStopping(**es_doc)
    except (TypeError, ValueError) as exc:
        raise MambaStudioError(f"{path}: {exc}; fix that setting in the file") from None
    return RunSettings(spec, corpus, es)
