"""Settings remembered between launches (QSettings), as plain values; no engine import."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, QStandardPaths
from PySide6.QtWidgets import QAbstractButton, QComboBox, QWidget

ORG = "MambaStudio"
APP = "Mamba Studio"


_damaged: set[str] = set()  # settings files Qt could not parse (told to the first reader only)


def settings() -> QSettings:
    s = QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORG, APP)
    if s.status() == QSettings.Status.FormatError:  # the next objects read Qt's cache of the
        _damaged.add(s.fileName())  # file and say NoError: noted here, when it is told
    return s


def load(key: str, default: Any) -> Any:
    value: Any = settings().value(key, default)  # QSettings returns object
    if isinstance(default, bool):
        return value in (True, "true", "1", 1)
    if isinstance(default, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            return default
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            return default
    if isinstance(default, list):
        if value is None:
            return []
        return [str(v) for v in (value if isinstance(value, list) else [value])]
    return value


_ignored: list[str] = []  # saved values a box could not take, since the last take_ignored()


def restore(box: QWidget, key: str) -> None:
    """Set a spin box, combo box or check box from the saved ``key``, if there is one. A value
    the box cannot hold (not a number, out of its range, not one of its items) leaves the box at
    its default and is noted for ``take_ignored`` (a damaged settings file turned a learning
    rate of -5 into 1e-08, a preset "gigantic" into "tiny" and a temperature "nan" into 5.0,
    without a word)."""
    s = settings()
    if not s.contains(key):
        return
    raw = s.value(key)
    why = ""
    if isinstance(box, QComboBox):
        i = box.findText(str(raw))
        if i >= 0:
            box.setCurrentIndex(i)
        else:
            why = "not one of its choices"
    elif isinstance(box, QAbstractButton):
        if raw in (True, False, "true", "false", 1, 0, "1", "0"):
            box.setChecked(raw in (True, "true", 1, "1"))
        else:
            why = "not true or false"
    else:
        try:
            v = float(raw)
        except (TypeError, ValueError):
            v = math.nan
        is_int = isinstance(box.value(), int)  # type: ignore[attr-defined]
        lo, hi = box.minimum(), box.maximum()  # type: ignore[attr-defined]
        if not math.isfinite(v) or (is_int and not v.is_integer()):
            why = "not a number" if not is_int else "not a whole number"
        elif not lo <= v <= hi:
            why = f"outside {lo:,} to {hi:,}" if is_int else f"outside {lo:g} to {hi:g}"
        else:
            box.setValue(int(v) if is_int else v)  # type: ignore[attr-defined]
    if why:
        _ignored.append(f"{key} = {str(raw)[:40]!r} ({why})")


def save_box(box: QWidget, key: str) -> None:
    """Save a spin box's, combo box's or check box's value under ``key`` (``restore`` reads it)."""
    value = (box.currentText() if isinstance(box, QComboBox) else box.isChecked()
             if isinstance(box, QAbstractButton) else box.value())  # type: ignore[attr-defined]
    save(key, value)


def take_ignored() -> list[str]:
    """The values ``restore`` could not take since the last call, as "key = 'value' (why)"."""
    out = list(_ignored)
    _ignored.clear()
    return out


def set_aside_if_damaged() -> str | None:
    """When Qt reported the settings file damaged (it skips what it cannot parse), the file is
    renamed to ``<name>.damaged`` (``.damaged-2`` ... beside an older one), so the next save
    writes a clean one; returns that new name, else None."""
    name = settings().fileName()
    if name not in _damaged:
        return None
    _damaged.discard(name)
    path = Path(name)
    aside, n = path.with_name(path.name + ".damaged"), 2
    while aside.exists():  # (a second damaged file replaced the first one set aside)
        aside, n = path.with_name(f"{path.name}.damaged-{n}"), n + 1
    try:
        path.replace(aside)
    except OSError:
        return str(path)  # (said as damaged all the same)
    return str(aside)


def save(key: str, value: Any) -> None:
    settings().setValue(key, value)


def documents() -> Path:
    """Where a first export or settings file is suggested: the user's Documents folder, else
    their home (a settings file was offered a place among the run folders)."""
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return Path(docs) if docs and Path(docs).is_dir() else Path.home()


def last_folder(kind: str, default: str | None = None) -> str:
    """The folder a file dialog of ``kind`` ("corpus", "model", "settings", "export") last used,
    if it still exists; else ``default`` (None: ``documents()``; they all opened in the home or
    runs folder)."""
    folder = str(load(f"dialogs/{kind}", ""))
    return folder if folder and Path(folder).is_dir() else (
        str(documents()) if default is None else default)


def remember_folder(kind: str, picked: str) -> None:
    """Remember where a dialog of ``kind`` picked ``picked`` (a file's folder, or a folder's
    parent) for the next one."""
    p = Path(picked)
    save(f"dialogs/{kind}", str(p.parent if p.parent != p else p))
