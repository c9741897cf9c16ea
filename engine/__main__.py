"""``python -m engine`` (and the ``mamba-studio-cli`` script): configure the process through
:mod:`engine.runtime`, then run the CLI."""

from __future__ import annotations

import sys


def run() -> int:
    from .errors import MambaStudioError
    from .runtime import configure

    try:
        configure(tune_allocator=True)  # before the CLI imports the kernels (fixes their cache folder)
    except MambaStudioError as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201  (the CLI's one-line error)
        return 2
    from .cli import main

    return main()


if __name__ == "__main__":
    raise SystemExit(run())
