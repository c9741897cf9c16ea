"""Stop signals outside training (``engine.signals.interrupt_on_signals``)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.signals import Interrupted, answerable, in_c_callback, interrupt_on_signals


def _as_ctypes_callback(fn: Callable[[], str]) -> object:
    """Run ``fn`` inside a function named and placed as llvmlite's object-cache callback, which
    drops an exception as ctypes does ("Exception ignored on calling ctypes callback")."""
    src = ("def _raw_object_cache_notify(fn):\n    try:\n        return fn()\n"
           "    except BaseException as exc:\n        return exc\n")
    ns: dict[str, object] = {}
    exec(compile(src, "/x/site-packages/llvmlite/binding/executionengine.py", "exec"), ns)
    return ns["_raw_object_cache_notify"](fn)  # type: ignore[operator]


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGTERM, Interrupted),
                                                 (signal.SIGINT, KeyboardInterrupt)])
def test_a_stop_inside_a_compilers_callback_is_sent_again_after_it(signum, raised):
    """Ctrl-C / SIGTERM while Numba compiled landed in llvmlite's ctypes callback: the exception
    was printed and dropped there, and the command went on (a half-made run folder was left)."""
    seen: list[bool] = []

    def inside() -> str:
        seen.append(in_c_callback(sys._getframe()))
        signal.raise_signal(signum)  # the handler runs here
        return "callback done"

    with pytest.raises(raised) as info, interrupt_on_signals():
        assert _as_ctypes_callback(inside) == "callback done"  # nothing raised in it
        time.sleep(5)  # sent again: raised out here
        pytest.fail("the stop was not sent again")
    assert type(info.value) is raised
    assert seen == [True] and not in_c_callback(sys._getframe())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_bpe_training_runs_where_the_main_thread_still_answers_signals():
    """HF tokenizers trains without the GIL in native code, and a signal handler runs only
    between the main thread's Python steps: Ctrl-C / SIGTERM during BPE training went unanswered
    for 13-19 s on a 150 MB corpus. The training runs in a helper thread while the main thread
    waits in slices; off the main thread (the window's worker) it runs where it is called."""
    import threading

    from engine.tokenizer import BPETokenizer

    seen: list[threading.Thread] = []

    def texts():
        seen.append(threading.current_thread())
        yield "the cat sat on the mat. " * 50

    tok = BPETokenizer.train(texts(), vocab_size=300)
    assert tok.vocab_size > 257
    assert seen and seen[0] is not threading.main_thread()  # consumed by the helper thread

    with pytest.raises(ValueError, match="broke"):  # its error is raised in the caller
        answerable(lambda: (_ for _ in ()).throw(ValueError("broke")))

    where: list[threading.Thread] = []
    t = threading.Thread(target=lambda: answerable(lambda: where.append(
        threading.current_thread())))
    t.start()
    t.join()
    assert where == [t]  # off the main thread: inline

    got: list[str] = []
    with pytest.raises(KeyboardInterrupt), interrupt_on_signals():  # the wait answers Ctrl-C
        threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,)).start()
        answerable(lambda: time.sleep(3) or got.append("done"), poll_s=0.05)
    assert got == []  # answered before the work ended


def test_a_second_signal_before_the_first_step_says_it_waits_for_that_step():
    """A second Ctrl-C while the first step compiled the kernels (14-26 s) said "still saving",
    with nothing saved yet: it read as a hang."""
    import os

    from engine.control import TrainControl
    from engine.signals import stop_on_signals

    said: list[str] = []
    stepped = [False]
    with stop_on_signals(TrainControl(), notify=said.append, stepped=lambda: stepped[0]):
        for done in (False, False, True):
            stepped[0] = done
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # (the handler runs between bytecodes of this thread)
    assert len(said) == 3, said
    assert said[0].endswith("SIGTERM: finishing the current step, then saving (please wait)")
    assert "again: still finishing the first step (it compiles the kernels" in said[1]
    assert "again: still saving; the run will exit as soon as the snapshot is safe" in said[2]


DRIVER = """
import os, signal, sys, threading, time
import engine.tokenizer as tokenizer
pieces = tokenizer._chunks
def slow(texts):  # the tokenizers library's Rust threads call back for each piece, without end
    yield from pieces(texts)
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C while they do
    while True:
        time.sleep(0.002)
        yield "the cat sat on the mat"
tokenizer._chunks = slow
sys.argv = ["engine", "train", sys.argv[1], "--tokenizer", "bpe", "--out", sys.argv[2]]
from engine.__main__ import run
raise SystemExit(run())
"""


def test_ctrl_c_while_the_bpe_tokenizer_trains_exits_130_not_an_abort(tmp_path):
    """Ctrl-C while the BPE tokenizer trained said "interrupted", then the process aborted
    ("FATAL: exception not rethrown", exit 134): at shutdown the library's thread, still
    calling back into Python for the corpus's pieces, was ended by force through Rust frames."""
    import random
    import subprocess

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 7))) for _ in range(500)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(" ".join(rng.choices(words, k=12)) for _ in range(2_000)))
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(corpus), str(out)], env=env,
                          capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parents[1])
    assert "training a 2,048-token BPE tokenizer" in proc.stderr + proc.stdout, proc.stderr
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert "FATAL" not in proc.stderr and "interrupted (Ctrl-C)" in proc.stderr
    assert not out.exists()  # the half-made run folder is removed
