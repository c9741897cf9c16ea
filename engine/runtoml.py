"""Run settings as a TOML file, the one format shared by ``python -m engine train --config`` and
the app's File > Save settings as… / Open settings…

    [run]                       # RunSpec fields (preset, tokenizer, bpe_vocab, holdout, init,
                                # init_scheme, ...)
    corpus = ["notes/", "a.txt"]  # optional; paths relative to the TOML file
    [model]                     # optional explicit sizes: d_model, n_layer, d_state, ...
    [train]                     # TrainConfig fields (epochs, lr, batch_size, seq_len, ...)
    [train.lora]                # optional LoRA: targets, rank, alpha, dropout
    [early_stopping]            # optional: patience, target_loss, min_delta (kept by the run)

TOML has no null: a missing key means the RunSpec/TrainConfig default. The keys each table
allows and their types are those of the dataclass behind it (``_CLASSES``); an unknown key or a
wrongly typed value is one error naming the file and the table.key. A lone string where an array
of strings is expected (``corpus = "notes.txt"``, ``targets = "in_proj"``) is a one-element
array; an integer passes where a number is expected, a bool never passes as an integer."""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from datetime import date, datetime, time
from pathlib import Path
from typing import Any, Literal

import tomli_w

from .checkpoint import atomic_write_bytes
from .config import MambaConfig
from .defaults import PRESET_DEFAULTS, follow_preset
from .earlystop import EarlyStopping
from .errors import MambaStudioError
from .limits import Problems, listed
from .lora import LoRAConfig
from .runspec import RunSpec
from .safeio import read_bytes
from .trainer import TrainConfig

MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RunSettings:
    spec: RunSpec
    corpus: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # the settings a loaded file set ("train.lr"); the rest are defaults

    @property
    def early_stopping(self) -> EarlyStopping:
        """The file's ``[early_stopping]`` table: the run's (``RunSpec.early_stopping``)."""
        return self.spec.early_stopping


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (_drop_none(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v)
            for k, v in d.items() if v is not None}


def settings_to_toml(s: RunSettings) -> str:
    d = s.spec.to_dict()
    train = d.pop("train")
    model = d.pop("model")
    del d["early_stopping"]  # its own table
    run = _drop_none(d)
    if s.corpus:
        run["corpus"] = list(s.corpus)
    doc: dict[str, Any] = {"run": run}
    if model:
        doc["model"] = dict(model)
    doc["train"] = _drop_none({**train, "max_steps": train["max_steps"] or 0})  # 0: no limit
    # (left out, a file laid over other settings could not lift their limit)
    es = s.early_stopping
    if es.enabled:
        doc["early_stopping"] = _drop_none({"patience": es.patience, "target_loss": es.target_loss,
                                            "min_delta": es.min_delta or None})
    return tomli_w.dumps(doc)


def save_settings(path: str | Path, s: RunSettings) -> None:
    atomic_write_bytes(Path(path), settings_to_toml(s).encode("utf-8"))


class _Table(dict[str, Any]):
    """The keys one TOML table allows: key -> the type its value must have, or a _Table."""


# the dataclass behind each table and the fields it leaves out (with what to do instead); the
# allowed keys and their types come from the dataclass itself, so a new field is a new key
_CLASSES: dict[str, tuple[type, dict[str, str]]] = {
    "run": (RunSpec, {"model": "use a [model] table", "train": "use a [train] table",
                      "early_stopping": "use an [early_stopping] table"}),
    "model": (MambaConfig, {"vocab_size": "the tokenizer sets it (bpe_vocab in [run]); drop it"}),
    "train": (TrainConfig, {}),
    "train.lora": (LoRAConfig, {}),
    "early_stopping": (EarlyStopping, {"best": "", "bad": "", "reason": ""}),  # run state
}
_EXTRA: dict[str, dict[str, Any]] = {"run": {"corpus": tuple[str, ...]},
                                      "model": {"dt_rank": int | Literal["auto"]}}  # as HF's
_LEFT_OUT: dict[str, str] = {}  # "table.key" -> why it is not a key of that table
_SCHEMA: _Table | None = None


def _schema() -> _Table:
    global _SCHEMA
    if _SCHEMA is None:
        tables = {}
        for name, (cls, left_out) in _CLASSES.items():
            hints = typing.get_type_hints(cls, localns={"LoRAConfig": LoRAConfig})
            tables[name] = _Table({f.name: hints[f.name] for f in fields(cls)
                                   if f.init and f.name not in left_out})
            tables[name].update(_EXTRA.get(name, {}))
            _LEFT_OUT.update({f"{name}.{k}": why for k, why in left_out.items() if why})
        tables["train"]["lora"] = tables.pop("train.lora")
        _SCHEMA = _Table(tables)
    return _SCHEMA


class _Wrong(Exception):
    """A value of the wrong type; the message says what was expected."""


_KINDS = ((bool, "true/false"), (int, "an integer"), (float, "a number"), (str, "a string"),
          (list, "an array"), (dict, "a table"), ((datetime, date, time), "a date/time"))


def _kind(value: Any) -> str:
    return next((k for t, k in _KINDS if isinstance(value, t)), type(value).__name__)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    return repr(value)


def _shown(value: Any) -> str:
    """A TOML value as the file has it (cut to one short line) and its kind."""
    text = " ".join(_toml(value).split())
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({_kind(value)})"


def _expected(tp: Any) -> str:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return " or ".join(_expected(t) for t in typing.get_args(tp) if t is not type(None))
    if typing.get_origin(tp) is Literal:
        return " or ".join(json.dumps(v) for v in typing.get_args(tp))
    if typing.get_origin(tp) is tuple:
        item = typing.get_args(tp)[0]
        plural = {str: "strings", int: "integers", float: "numbers"}.get(item, "them")
        return f"{_expected(item)} or an array of {plural}"
    return dict(_KINDS).get(tp, getattr(tp, "__name__", str(tp)))


def _conform(value: Any, tp: Any) -> Any:
    """``value`` as type ``tp`` (an int where a float is expected becomes a float; a lone string
    where an array of strings is expected becomes a one-element tuple), else _Wrong. A bool is
    never an int."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for t in typing.get_args(tp):
            if t is not type(None):
                try:
                    return _conform(value, t)
                except _Wrong:
                    pass
    elif origin is tuple:
        item = typing.get_args(tp)[0]
        if isinstance(value, list):
            try:
                return tuple(_conform(v, item) for v in value)
            except _Wrong:
                pass
        if item is str and isinstance(value, str):  # corpus = "notes.txt": one file, not 9
            return (value,)
    elif origin is Literal:
        if value in typing.get_args(tp) and not isinstance(value, bool):
            return value
    elif tp is Any:
        return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise _Wrong(_expected(tp))


def _checked(doc: dict[str, Any], table: _Table, problems: list[str], where: str = ""
             ) -> dict[str, Any]:
    """``doc`` with every value conformed to ``table``; each unknown key or wrongly typed value
    is left out and named (as table.key, with the nearest valid key) in ``problems``."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        shown = key if key.replace("_", "a").replace("-", "a").isalnum() and key.isascii() \
            else json.dumps(key, ensure_ascii=False)  # a quoted key may hold a newline
        name = f"{where}.{shown}" if where else shown
        if key not in table:
            homes = [t for t, sub in table.items() if not where and not isinstance(value, dict)
                     and isinstance(sub, _Table) and key in sub]
            if homes:  # `lr = 0.001` above every [section] ("unknown section [lr]" misled)
                under = " or ".join(f"[{t}]" for t in homes)
                problems.append(f"{name} = {_shown(value)} is outside any section: it belongs "
                                f"under {under} (put a {under} line above it)")
                continue
            if name in _LEFT_OUT:
                problems.append(f"{name} is not a setting: {_LEFT_OUT[name]}")
                continue
            what = f"unknown key {name}" if where else f"unknown section [{name}]"
            near = difflib.get_close_matches(key, list(table), n=2)  # (two: "epoks" got only
            if near:  # "train.eps", before "train.epochs")
                hint = "did you mean " + " or ".join(
                    f"{where}.{n}" if where else f"[{n}]" for n in near) + "?"
            else:
                hint = (f"[{where}] keys are: {', '.join(table)}" if where else
                        f"expected {', '.join(f'[{t}]' for t in table)}")
            problems.append(f"{what}; {hint}")
            continue
        tp = table[key]
        if isinstance(tp, _Table):
            if not isinstance(value, dict):
                problems.append(f"{name} = {_shown(value)}; expected a [{name}] table")
            else:
                out[key] = _checked(value, tp, problems, name)
            continue
        try:
            out[key] = _conform(value, tp)
        except _Wrong as exc:
            problems.append(f"{name} = {_shown(value)}; expected {exc}")
    return out


def _train_config(run: dict[str, Any], train: dict[str, Any], lora: LoRAConfig | None
                  ) -> TrainConfig:
    """The file's [train] over its preset's training defaults, as ``--preset`` alone gives them
    (TrainConfig's own defaults are small's: a file naming only preset = "medium" got small's
    learning rate)."""
    preset = run.get("preset", RunSpec.preset)
    if preset not in PRESET_DEFAULTS:
        return TrainConfig(**train, lora=lora)
    kind = "bpe" if run.get("tokenizer") == "bpe" and not run.get("init") else "bytes"  # (a
    return TrainConfig.for_preset(preset, kind, **train, lora=lora)  # run from init: its rate)


def _dotted(d: dict[str, Any], prefix: str = "") -> tuple[str, ...]:
    """Every leaf key of a parsed TOML document, dotted ("train.lr", "train.lora.r")."""
    return tuple(k for key, v in d.items()
                 for k in (_dotted(v, f"{prefix}{key}.") if isinstance(v, dict) else (prefix + key,)))


def flat_settings(s: RunSettings) -> dict[str, Any]:
    """What a file saved from ``s`` holds, by dotted key ("train.lr": 0.003)."""
    def walk(d: dict[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, v in d.items():
            out.update(walk(v, f"{prefix}{key}.") if isinstance(v, dict) else {prefix + key: v})
        return out
    return walk(tomllib.loads(settings_to_toml(s)), "")


def defaulted(s: RunSettings) -> tuple[str, ...]:
    """The settings a file saved from ``s`` would hold that the loaded file did not name: they
    took their defaults (the preset's, for training)."""
    return tuple(k for k in flat_settings(s) if k not in s.named)


def load_settings(path: str | Path) -> RunSettings:
    """Parse and check a settings file; any problem (an unknown key, a value of the wrong type or
    out of range) is one MambaStudioError naming the file and the key."""
    path = Path(path)
    try:  # a regular file of at most 1 MiB: never a FIFO (it hung) or /dev/zero (13.7 GB)
        data = read_bytes(path, MAX_BYTES, "settings file")
    except MambaStudioError as exc:
        raise MambaStudioError(f"{exc}; check the --config path") from None
    utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff")  # a byte-order mark: Windows editors' "Unicode"
    try:  # (and their "UTF-8 with BOM": it was "not valid TOML (at line 1, column 1)")
        text = data.decode("utf-16" if utf16 else "utf-8-sig")
    except UnicodeDecodeError as exc:  # (it said "'utf-8' codec can't decode byte 0xd0")
        what = "looks binary" if b"\x00" in data[:4096] else "is not UTF-8 text"
        raise MambaStudioError(f"{path}: {what} (byte {exc.start:,}), not a settings file; give "
                               "a .toml file saved by the app or written as text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        if text.lstrip().startswith("{"):  # (a run's run.json: "not valid TOML" alone)
            raise MambaStudioError(
                f"{path}: JSON, not a settings file (TOML); a run's run.json is its record: "
                "train --resume RUN goes on with its settings, and the window's File > Save "
                "settings as… writes a .toml of the settings shown, for a new run") from None
        raise MambaStudioError(f"{path}: not valid TOML ({exc}{_quoted_line(text, exc)}); fix "
                               "the file or save it again from the app") from None
    except RecursionError:
        raise MambaStudioError(f"{path}: not valid TOML (nested too deeply); fix the file or save "
                               "it again from the app") from None
    problems: list[str] = []
    doc = _checked(doc, _schema(), problems)  # (the keys named here are left out of ``doc``)
    return _from_doc(doc, path, found=problems)  # with the ranges' problems: one message


def _quoted_line(text: str, exc: tomllib.TOMLDecodeError) -> str:
    """": `LINE`" for the line a TOML error names (tomllib says "Cannot overwrite a value (at
    line 20, column 11)" for a key set twice, without the key), or ""."""
    at = re.search(r"at line (\d+), column", str(exc))
    lines = text.splitlines()
    if at is None or not 1 <= int(at.group(1)) <= len(lines):
        return ""
    line = lines[int(at.group(1)) - 1].strip()
    return f": `{line[:60]}{'…' if len(line) > 60 else ''}`" if line else ""


def early_stopping_over(base: EarlyStopping, top: RunSettings) -> EarlyStopping:
    """``base`` with each early stopping key ``top`` names set to ``top``'s value (a window's
    or a run's own early stopping under a file naming only its target loss)."""
    for key in top.named:
        if key.startswith("early_stopping."):
            leaf = key.split(".", 1)[1]
            base = replace(base, **{leaf: getattr(top.early_stopping, leaf)})
    return base


def overlay_settings(base: RunSettings, top: RunSettings, where: str = "") -> RunSettings:
    """``base`` with each setting ``top`` names (``top.named``, a loaded file's) set to
    ``top``'s value: what the window does with a file that names only some settings (it reset
    the others to their defaults: Epochs 10 -> 3, the preview prompts to "The "). A file naming
    the preset or the model's dims replaces the other's model table whole; a new preset or
    tokenizer kind moves each training setting at the old one's default value to the new one's.
    A combination that cannot be (WSLA over a LoRA on other targets) is a MambaStudioError
    beginning with ``where`` (what was combined)."""
    doc = tomllib.loads(settings_to_toml(base))
    new = tomllib.loads(settings_to_toml(top))
    if any(k == "run.preset" or k.startswith("model.") for k in top.named):
        doc.pop("model", None)
        if "model" in new:
            doc["model"] = new["model"]
    was = base.spec.preset
    now = top.spec.preset if "run.preset" in top.named else was

    def kind(tokenizer: str, init: str | None) -> str:  # a run from init keeps its model's
        return "bpe" if tokenizer == "bpe" and not init else "bytes"  # tokenizer, and its rate

    was_kind = kind(base.spec.tokenizer, base.spec.init)
    now_kind = kind(top.spec.tokenizer if "run.tokenizer" in top.named else base.spec.tokenizer,
                    top.spec.init if "run.init" in top.named else base.spec.init)
    if (was, was_kind) != (now, now_kind) and was in PRESET_DEFAULTS \
            and now in PRESET_DEFAULTS:  # (a file with init may name any preset: it is unused)
        # a training setting at the shown preset's default follows the file's preset (and a
        # BPE tokenizer's doubled rate follows the tokenizer), as `train --config` gives it
        # (medium trained at small's rate; a bytes run at BPE's); one set by hand stays
        doc["train"] = follow_preset(doc.get("train", {}), was, now, was_kind, now_kind)
        # (a training setting the file names is set from it below)
    for key in top.named:
        *tables, leaf = key.split(".")
        src: Any = new
        for t in tables:
            src = src.get(t, {})
        if leaf not in src:
            continue
        dst = doc
        for t in tables:
            dst = dst.setdefault(t, {})
        dst[leaf] = src[leaf]
    merged = _from_doc(doc, Path("."), where or "these settings together")
    es = early_stopping_over(base.early_stopping, top)  # (patience = 0 is not in a saved text)
    return replace(merged, spec=replace(merged.spec, early_stopping=es),
                   corpus=top.corpus if "run.corpus" in top.named else base.corpus,
                   named=top.named)


MOST_NAMED = 20  # problems a settings file's message names (it stopped at 5: "and 3 more")


def _from_doc(doc: dict[str, Any], path: Path, where: str = "",
              found: Sequence[str] = ()) -> RunSettings:
    """The RunSettings of a checked settings document (relative corpus and init paths are taken
    from ``path``'s folder); an error names ``where`` (default: the file) and every problem,
    ``found`` (unknown keys, wrong types) first: a file's wrong types, then its values out of
    range, took two tries, and more than five problems were cut to "and 3 more"."""
    problems = list(found)
    try:
        run = dict(doc.get("run", {}))
        corpus = run.pop("corpus", ())
        if any(not c.strip() for c in corpus):
            problems.append("run.corpus holds an empty path; name the files or folders to train "
                            "on")
        corpus = tuple(os.path.abspath(path.parent / c) if not Path(c).is_absolute() else c
                       for c in corpus)  # (not resolve(): a link loop raised, a traceback; the
        # corpus reader says what is wrong with such a path)
        if isinstance(run.get("init"), str) and run["init"].strip() \
                and not Path(run["init"]).is_absolute():  # as the corpus: from the file's
            run["init"] = os.path.abspath(path.parent / run["init"])  # folder (it was the cwd)
        train_doc = dict(doc.get("train", {}))
        if type(train_doc.get("max_steps")) is int and train_doc["max_steps"] == 0:
            train_doc["max_steps"] = None  # 0: no limit, as --max-steps 0 (it was refused)
        lora = train_doc.pop("lora", None)
        adapter = None  # every problem at once: LoRA's or early stopping's came alone
        try:
            adapter = None if lora is None else LoRAConfig(**lora)
        except Problems as exc:  # (each, then the others: the run is checked without it)
            problems += exc.problems
        es_doc = dict(doc.get("early_stopping", {}))
        if type(es_doc.get("target_loss")) in (int, float) and es_doc["target_loss"] == 0:
            es_doc["target_loss"] = None  # 0: off, as --target-loss 0 (it was refused)
        early = EarlyStopping(**es_doc)
        train = _train_config(run, train_doc, adapter)
        spec = RunSpec(model=doc.get("model"), train=train, early_stopping=early, **run)
        problems += spec.problems()  # the model's sizes too, now rather than at Start
    except (TypeError, ValueError) as exc:
        problems += exc.problems if isinstance(exc, Problems) else [str(exc)]
    if problems:
        text = listed(problems, most=MOST_NAMED)
        fix = "those settings" if len(problems) > 1 else "that setting"
        raise MambaStudioError(f"{where}: {text}" if where else
                               f"{path}: {text}; fix {fix} in the file")
    return RunSettings(spec, corpus, _dotted(doc))
