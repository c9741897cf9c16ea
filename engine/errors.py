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


class Stopped(MambaStudioError):
    """A stop was asked while a new run was being prepared (reading and tokenising the corpus,
    training its tokenizer): nothing was trained, and the run's folder was removed."""
