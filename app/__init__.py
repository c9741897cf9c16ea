"""Mamba Studio desktop app (PySide6). Uses only ``engine``'s public API; all engine work runs
in worker threads (``app.workers``)."""
