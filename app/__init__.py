"""Mamba Studio desktop app (PySide6). Uses only ``engine``'s public API; all engine work runs
in worker threads (``app.workers``)."""

from pathlib import Path


def default_runs_root() -> str:
    """Where the window keeps its runs unless ``--runs-root`` names another folder (no Qt
    import here: ``python -m app`` checks it before Qt loads)."""
    return str(Path.home() / ".local" / "share" / "mamba-studio" / "runs")
