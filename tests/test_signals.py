"""Stop signals outside training (``engine.signals.interrupt_on_signals``)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable

import pytest

from engine.signals import Interrupted, in_c_callback, interrupt_on_signals


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
