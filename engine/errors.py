"""Errors the engine raises for bad input; each message says what was wrong and where."""


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
    training its tokenizer): nothing was trained, and the run's folder was removed."""


def missing_dependency(exc: ModuleNotFoundError, package: str) -> str | None:
    """The one-line error for a Python without the dependencies (not the set-up .venv), or None
    when ``exc`` is a module of ``package`` itself (a real bug: its traceback is wanted)."""
    import sys

    if not exc.name or exc.name.split(".")[0] == package:
        return None
    return (f"error: {exc.name} is not installed for {sys.executable}; run `bash scripts/setup.sh` "
            "once, then use .venv/bin/python (or `source .venv/bin/activate` first)")
