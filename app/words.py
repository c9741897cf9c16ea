"""Words the window shows: counts ("1 file", "2 files": the app printed "1 files") and the
engine's command-line advice said in the window's terms."""

from __future__ import annotations

import re
import shlex

import engine

plural = engine.plural  # the engine's own: one spelling of counts everywhere

__all__ = ["in_window_terms", "plural"]


# the engine's advice names the CLI's flags; in the window the same choice is another place
_CLI_ADVICE = (
    (", or train into another --out", ", or start a new run instead of continuing this one"),
    ("choose another --out", "start the app with --runs-root FOLDER to train elsewhere"),
    ("if it is text, name the file itself to read it",  # (a folder's .zip / .png skipped)
     "if it is text, add the file itself with Add files…"),
    ("; pass --epochs ", "; set Epochs to "),  # (epochs that end a run before its max steps)
    ("; check the --config path", "; check the settings file's path"),  # (a settings file)
    ("; pass a run folder (runs/...) or a model folder",  # (a model gone from disk: the
     "; choose a run in the Runs tab, or a model folder"),  # Playground said "pass")
    ("; pass a run folder (runs/...)", "; choose a run in the Runs tab"),
    ("unless --patience or --target-loss change", "unless Patience or Target loss change"),
    ("no such file or folder; check the name, or leave it out of the corpus",  # (a corpus file
     "no such file or folder (moved or deleted since it was added); select it in the Corpus "
     "list and Remove it, or add it from where it is now"),  # gone since it was added)
    ("choose a new file name (--force replaces only an earlier GGUF export)",  # (an export
     "choose a new file name (only an earlier GGUF export is ever replaced)"),  # error)
    ("start a new run (--init takes any other model folder)",  # (no intact snapshot)
     "start a new run (File > Open model… starts one from any other model folder)"),
    ("use the merged export (python -m engine export --merged)",  # (PEFT refuses a target)
     "use File > Export model (merged)…"),
    ("; export --merged still writes its weights",
     "; File > Export model (merged)… still writes its weights"),
    ("start a new run with --init from its snapshot",  # (an older run format)
     "open one of its snapshots with File > Open model… and Start a new run from it"),
)
# a path as the engine writes it into advice: one shell word (``shlex.quote``: quoted when it
# holds a space; "(\\S+)" cut "/home/u/My Runs/run-3" at its space)
_PATH = r"((?:'[^']*'|\"[^\"]*\"|[^\s'\"])+)"
_EVAL_FOR_IT = re.compile(r"; run `python -m engine eval [^`]+` for it")  # (an export's card:
# its held-out loss not measured)
_RESTART = re.compile(rf"start it again on its corpus with --out {_PATH} --force")  # (a kill
# while a run was prepared)
_GIVE_OR_INIT = re.compile(rf"give {_PATH} to generate, eval or export, or --init it to a new run")
_TO_TRAIN_ON = re.compile(rf"to train on, start a new run with --init {_PATH}")
_INIT_ADVICE = re.compile(rf"start a new run on the corpus with --init {_PATH} to keep its weights")
_WEIGHTS_LOAD = re.compile(rf"still load: generate, or start a new run with --init {_PATH} to "
                           "keep them")


def _sub(pattern: re.Pattern[str], words: str, msg: str) -> str:
    """``pattern`` replaced by ``words``, whose ``{path}`` is the matched shell word unquoted
    (the window names a folder as it is; the command line needs it quoted)."""
    def said(m: re.Match[str]) -> str:
        try:
            path = " ".join(shlex.split(m.group(1)))
        except ValueError:
            path = m.group(1)
        return words.format(path=path)
    return pattern.sub(said, msg)


def in_window_terms(msg: str) -> str:
    """An engine message with its command-line advice (``--out``, ``--init``) said as the
    window does it (a window user was told to "train into another --out")."""
    for cli, window in _CLI_ADVICE:
        msg = msg.replace(cli, window)
    msg = _EVAL_FOR_IT.sub("; the Train tab's held-out curve has the run's losses as it "
                           "trained", msg)
    msg = _RESTART.sub("delete it in the Runs tab and Start the run again", msg)
    msg = _sub(_GIVE_OR_INIT, "open {path} with File > Open model… (the Playground generates "
               "from it) and Start a new run from it", msg)
    msg = _sub(_TO_TRAIN_ON, "to train on, open {path} with File > Open model… and Start a new "
               "run", msg)
    msg = _sub(_WEIGHTS_LOAD, "still load: open {path} with File > Open model… (the Playground "
               "generates from it) and Start a new run to keep them", msg)
    return _sub(_INIT_ADVICE, "open {path} with File > Open model… and Start a new run to keep "
                "its weights", msg)
