"""``python -m engine`` (and the ``mamba-studio-cli`` script): configure the process through
:mod:`engine.runtime`, then run the CLI."""

from __future__ import annotations


def run() -> int:
    from .runtime import configure

    configure(tune_allocator=True)  # before the CLI imports the kernels (it fixes their cache folder)
    from .cli import main

    return main()


if __name__ == "__main__":
    raise SystemExit(run())
