"""Counts in words, for every message the engine and the window show ("1 token", "2 tokens":
"1 tokens" and "1 ranks" were printed where each message spelled its own plural)."""

from __future__ import annotations

from collections.abc import Sequence


def listing(names: Sequence[str], most: int = 3) -> str:
    """The first ``most`` of ``names`` and how many more: "a, b, c and 2 more"."""
    more = f" and {len(names) - most:,} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def plural(n: int, noun: str) -> str:
    """``n`` (with thousands separators) and ``noun``, with an s unless ``n`` is 1."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
