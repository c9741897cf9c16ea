"""``python -m engine`` (and the ``mamba-studio-cli`` script): configure the process through
:mod:`engine.runtime`, then run the CLI."""

from __future__ import annotations

import contextlib
import sys


def run() -> int:
    code = _run()
    if (signals := sys.modules.get(f"{__package__ or 'engine'}.signals")) is not None:
        signals.exit_past_native_work(code)  # (an interrupted tokenizer training)
    return code


def _run() -> int:
    try:
        from .errors import MambaStudioError
        from .runtime import configure

        try:
            configure(tune_allocator=True)  # before the CLI imports the kernels (fixes their cache folder)
        except MambaStudioError as exc:
            print(f"error: {exc}", file=sys.stderr)  # noqa: T201  (the CLI's one-line error)
            return 2
        from .cli import main
        from .signals import ignore_after_stop
    except ModuleNotFoundError as exc:  # a Python without the dependencies (not the set-up .venv)
        from .errors import missing_dependency

        if (line := missing_dependency(exc, __package__ or "engine")) is None:
            raise
        print(line, file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:  # Ctrl-C while the libraries load (it printed a traceback)
        print("\ninterrupted (Ctrl-C)", file=sys.stderr)  # noqa: T201
        return 130
    try:
        return main()
    except KeyboardInterrupt:  # Ctrl-C while the parser imports the run's modules (a traceback;
        print("\ninterrupted (Ctrl-C)", file=sys.stderr)  # noqa: T201  # main() says the rest)
        return 130
    finally:
        with contextlib.suppress(KeyboardInterrupt):  # a late Ctrl-C here: main() said it
            ignore_after_stop()


if __name__ == "__main__":
    raise SystemExit(run())
