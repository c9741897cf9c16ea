"""The CLI when its readers go away: a closed stderr pipe does not end training, a reader of
``generate`` that stops early ends it quietly, a closed or full stdout is one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from tests.helpers import two_file_corpus

ROOT = Path(__file__).resolve().parent.parent


def _engine(*args: str, **kw) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    # (the signals a terminal gives: tests/conftest.py; a caller's preexec_fn is passed on)
    return subprocess.Popen([sys.executable, "-m", "engine", *args], cwd=ROOT, **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("out")
    out = tmp / "run"
    assert main(["train", str(two_file_corpus(tmp, 30)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "4", "--sample-tokens", "0", "--out", str(out)]) == 0
    return out


def test_training_goes_on_when_its_stderr_pipe_closes(run, tmp_path):
    """``train ... 2>&1 | head -n 2``: the first progress line after the pipe closed stopped the
    run (exit 1, nothing trained, status.json left at its old step)."""
    folder = tmp_path / "r"
    subprocess.run(["cp", "-a", str(run), str(folder)], check=True)
    p = _engine("train", "--resume", str(folder), "--max-steps", "40", "--epochs", "100",
                "--sample-tokens", "0", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    p.stderr.readline()  # what `head -n 1` reads, then it exits
    p.stderr.close()
    assert p.wait(timeout=600) == 0
    status = json.loads((folder / "status.json").read_text())
    assert (status["state"], status["step"]) == ("finished", 40)


def test_a_reader_that_stops_early_ends_generate_quietly(run):
    """``generate | head -c 10`` printed "error: Broken pipe" and exited 2 (0 with --no-stream)."""
    p = _engine("generate", str(run), "--max-new-tokens", "3000", "--no-stop",
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert len(p.stdout.read(10)) == 10
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=600) == 0 and "error" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["generate", "eval"])
@pytest.mark.parametrize("how", ["closed", "full"])
def test_a_closed_or_full_stdout_is_one_line_naming_it(run, how, command):
    """``generate ... >&-`` raised AttributeError from sys.stdout being None (a traceback);
    ``> /dev/full`` said "No space left on device" without saying where (eval still did)."""
    if how == "full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    more = ["--max-new-tokens", "5"] if command == "generate" else []
    with open("/dev/full" if how == "full" else os.devnull, "w") as full:
        p = _engine(command, str(run), *more, stderr=subprocess.PIPE,
                    text=True, stdout=full if how == "full" else None,
                    preexec_fn=(lambda: os.close(1)) if how == "closed" else None)
        _, err = p.communicate(timeout=600)
    assert p.returncode == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "standard output" in line, err


def test_a_closed_stdout_pipe_ends_eval_quietly(run):
    """`eval RUN | head -c 0`: "error: Broken pipe" (exit 2) or an error at the exit's flush."""
    p = _engine("eval", str(run), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the result is written
    err = p.stderr.read().decode()
    assert p.wait(timeout=600) == 0 and "rror" not in err, err


def test_a_full_stderr_pipe_for_now_loses_one_line_only():
    """A non-blocking stderr pipe momentarily full (BlockingIOError) gave up on stderr for
    good; it now drops that line and writes the next."""
    from engine.cliout import _Forgiving

    class Momentary:
        def __init__(self) -> None:
            self.lines: list[str] = []
            self.full = True

        def write(self, text: str) -> int:
            if self.full:
                self.full = False
                raise BlockingIOError(11, "Resource temporarily unavailable")
            self.lines.append(text)
            return len(text)

    inner = Momentary()
    s = _Forgiving(inner)  # type: ignore[arg-type]
    s.write("dropped\n")
    s.write("kept\n")
    assert inner.lines == ["kept\n"] and not s.lost


def test_bidirectional_controls_are_shown_by_their_code_on_a_terminal():
    """A sample holding U+202E drew the rest of the line reversed in the terminal (the window
    shows such controls as [U+202E]; a pipe or file still gets the exact text)."""
    from engine.cli import terminal_safe

    assert terminal_safe("ab\u202ecd\u2066e\x1b") == "ab[U+202E]cd[U+2066]e\ufffd"
    assert terminal_safe("\u202a\u2069") == "[U+202A][U+2069]"  # both ends of each range
    assert terminal_safe("\u05e9\u200f x") == "\u05e9\u200f x"  # a right-to-left mark stays


def test_train_with_stderr_closed_trains_to_the_end_and_writes_nothing_to_stdout(tmp_path):
    """``train ... 2>&-`` stopped after its first step with exit status 1 and no word (Python
    sets sys.stderr to None: isatty() raised, and print's lines for stderr went to stdout)."""
    corpus = two_file_corpus(tmp_path, 30)
    out = tmp_path / "run"
    p = _engine("train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                "--max-steps", "3", "--sample-tokens", "8", "--out", str(out),
                stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2))
    stdout, _ = p.communicate(timeout=300)
    assert p.returncode == 0 and stdout == b"", (p.returncode, stdout[-500:])
    assert json.loads((out / "status.json").read_text())["step"] == 3
