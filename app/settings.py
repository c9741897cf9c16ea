"""Settings remembered between launches (QSettings), as plain values; no engine import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings

ORG = "MambaStudio"
APP = "Mamba Studio"


def settings() -> QSettings:
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORG, APP)


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


def save(key: str, value: Any) -> None:
    settings().setValue(key, value)


def last_folder(kind: str, default: str) -> str:
    """The folder a file dialog of ``kind`` ("corpus", "model", "settings", "export") last used,
    if it still exists; else ``default`` (they all opened in the home or runs folder)."""
    folder = str(load(f"dialogs/{kind}", ""))
    return folder if folder and Path(folder).is_dir() else default


def remember_folder(kind: str, picked: str) -> None:
    """Remember where a dialog of ``kind`` picked ``picked`` (a file's folder, or a folder's
    parent) for the next one."""
    p = Path(picked)
    save(f"dialogs/{kind}", str(p.parent if p.parent != p else p))
