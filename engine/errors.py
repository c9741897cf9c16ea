"""Errors the engine raises for bad input; each message says what was wrong and where."""

import errno


class MambaStudioError(Exception):
    """Base class: anything the user can fix (bad files, bad settings)."""


class CorpusError(MambaStudioError):
    """A corpus file is empty, binary, not UTF-8, or the corpus is too short."""


class CheckpointError(MambaStudioError):
    """A checkpoint is missing, corrupt, truncated or does not match the model."""


class TokenizerError(MambaStudioError):
    pass


class TrainingError(MambaStudioError):
    """Training cannot continue (for example the loss became NaN for too many steps)."""


class StepVoid(Exception):  # noqa: N818  (control flow, not an error)
    """Raised out of an optimizer step by the divergence guard, before the step's update, when
    the weights it started from are bad: the trainer is already back at its last good state."""


class Stopped(MambaStudioError):
    """A stop was asked while a new run was being prepared (reading and tokenising the corpus,
    training its tokenizer): nothing was trained, and the run's folder was removed. Also the end
    of a step timing no one waits for any more (``estimate.measure_step_seconds``)."""


def missing_dependency(exc: ModuleNotFoundError, package: str) -> str | None:
    """The one-line error for a Python without the dependencies (not the set-up .venv), or None
    when ``exc`` is a module of ``package`` itself (a real bug: its traceback is wanted)."""
    import sys

    if not exc.name or exc.name.split(".")[0] == package:
        return None
    return (f"error: {exc.name} is not installed for {sys.executable}; run `bash scripts/setup.sh` "
            "once, then use .venv/bin/python (or `source .venv/bin/activate` first)")


def one_line(exc: BaseException) -> str:
    """What went wrong, in one line, as the CLI prints it after ``error:`` and the window shows
    it: a file error as "FILE: reason" (the window said "[Errno 13] Permission denied: 'FILE'"),
    running out of memory with what to make smaller, anything else its message on one line
    (at most 2,000 characters)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        if exc.errno == errno.ENAMETOOLONG:  # (a 300-letter --out: the name, then no fix)
            name = str(exc.filename or "")
            where = f"{name[:60]}...{name[-20:]}: " if len(name) > 100 else where
            return (f"{where}{exc.strerror} (most disks take names of at most 255 bytes and "
                    "paths of 4,096); choose a shorter one")
        return f"{where}{exc.strerror}"
    if isinstance(exc, MemoryError):
        return "out of memory; use a smaller model, batch or sequence length"
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:2000] + "..."
