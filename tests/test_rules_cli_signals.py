"""Rules of the command line's interrupts that only a mutation of the code showed untested: a
Ctrl-C before an export replaced an earlier one is "interrupted", and only llvmlite's callback
(not any code of its file) counts as the ctypes callback a stop is sent again after."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.cli import main
from engine.signals import in_c_callback


def test_ctrl_c_before_an_export_replaces_an_earlier_one_is_interrupted(tmp_path, capsys,
                                                                        monkeypatch):
    """`export --force` over an earlier export, Ctrl-C before the new one was published: it
    said "wrote OUT (the interrupt came once it was written)" and exit 0, over the old export."""
    out = tmp_path / "exp"
    out.mkdir()
    (out / "config.json").write_text("{}")  # the earlier export, still there

    def export(run, dest, force=False, progress=None):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt  # before its rename

    monkeypatch.setattr("engine.export.export_merged", export)
    code = main(["export", "--merged", str(tmp_path), str(out), "--force"])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted (Ctrl-C)" in err and "wrote" not in err, err
    assert (out / "config.json").read_text() == "{}"


def test_only_llvmlites_callback_counts_as_a_ctypes_callback():
    """Other code of llvmlite's executionengine.py (not called back from C) raises a stop at
    once: sent again later, a Ctrl-C there waited for nothing."""
    def check() -> bool:
        return in_c_callback(sys._getframe())

    src = "def add_module(fn):\n    return fn()\n"
    ns: dict[str, object] = {}
    exec(compile(src, "/x/site-packages/llvmlite/binding/executionengine.py", "exec"), ns)
    assert ns["add_module"](check) is False  # type: ignore[operator]


def test_an_export_written_before_its_ctrl_c_ignores_a_second_one_on_the_way_out(
        tmp_path, capsys, monkeypatch):
    """Ctrl-C once the export was published: the command says it was written and exits 0; a
    second Ctrl-C while the interpreter exits printed a traceback (the process had not noted
    the interrupt, so its stop signals were not ignored from there)."""
    from engine import signals

    monkeypatch.setattr(signals, "_STOPPED", [False])
    out = tmp_path / "exp"

    def export(run, dest, force=False, progress=None):  # type: ignore[no-untyped-def]
        Path(dest).mkdir()  # published
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.export.export_merged", export)
    assert main(["export", "--merged", str(tmp_path), str(out)]) == 0
    assert signals._STOPPED == [True]  # ignore_after_stop will ignore the stop signals


def test_the_cli_tells_its_signal_handler_whether_a_step_has_ended(tmp_path, monkeypatch):
    """A second Ctrl-C or SIGTERM before step 1 ends is said as "still finishing the first
    step", not "still saving": ``train`` passes ``stepped`` (False before step 1, True after)."""
    import contextlib

    import engine.run

    asked: list[bool] = []

    @contextlib.contextmanager
    def recording(control, lasting=False, stepped=None):  # noqa: ANN001, ANN202
        assert stepped is not None
        asked.append(stepped())
        yield
        asked.append(stepped())

    monkeypatch.setattr(engine.run, "stop_on_signals", recording)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 200)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "1", "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    assert asked == [False, True]
