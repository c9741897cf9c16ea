"""Counts in words: "1 file", "2 files" (the app printed "1 files")."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and ``noun``, with an s unless ``n`` is 1."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
