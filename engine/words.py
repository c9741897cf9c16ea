"""Counts in words, for every message the engine and the window show ("1 token", "2 tokens":
"1 tokens" and "1 ranks" were printed where each message spelled its own plural)."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and ``noun``, with an s unless ``n`` is 1."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
