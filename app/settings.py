"""Settings remembered between launches (QSettings), as plain values; no engine import."""

from __future__ import annotations

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
