"""Rules of the run follower and of the remembered settings that only a mutation of the code
showed untested: the follower redraws only when the run's files grow and says nothing after
``stop``; a box saved at the end of its range, a check box saved off and a list of one come
back as saved; a damaged settings file is set aside once, beside the earlier ones."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QCheckBox, QDoubleSpinBox, QSpinBox

import engine
from app import settings
from app.follow import RunFollower


def _held_run(tmp_path: Path) -> tuple[Path, engine.RunLock]:
    """A folder whose lock is held as a training process holds it, with a metrics file."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.csv").write_text("kind,step\n")
    return folder, engine.RunLock(folder).acquire()


def test_the_follower_redraws_only_when_the_runs_files_grow(qtbot, tmp_path):
    """A run another process trains was redrawn at every look (every 2 s, a long run's ~1 s
    read and draw each time) although nothing new had been written."""
    folder, lock = _held_run(tmp_path)
    f = RunFollower()
    grew: list[str] = []
    ended: list[str] = []
    f.grew.connect(grew.append)
    f.ended.connect(ended.append)
    try:
        assert f.follow(str(folder)) and f.timer.isActive()
        f._poll()
        assert grew == []  # nothing written since it was opened (and drawn)
        with (folder / "metrics.csv").open("a") as out:
            out.write("step,1\n")
        f._poll()
        f._poll()  # the same size again: no second redraw
        assert grew == [str(folder)] and ended == []
        assert f.changed == (True, False)  # the rows, not the samples: only the curves
        (folder / "samples.jsonl").write_text("{}\n")
        f._poll()
        assert f.changed == (False, True) and len(grew) == 2
    finally:
        lock.release()
    f._poll()
    assert ended == [str(folder)] and grew == [str(folder)] * 2
    assert f.folder is None and not f.timer.isActive()


def test_a_follower_stopped_while_redrawing_says_nothing_more(qtbot, tmp_path):
    """``stop`` from the redraw (the window shows another run by then): the follower still said
    the run had ended."""
    folder, lock = _held_run(tmp_path)
    f = RunFollower()
    ended: list[str] = []
    f.grew.connect(f.stop)  # what the window does when the run is no longer shown
    f.ended.connect(ended.append)
    assert f.follow(str(folder))
    (folder / "metrics.csv").write_text("kind,step\nstep,1\n")
    lock.release()  # its last rows, then the lock goes: both seen at the same look
    f._poll()
    assert f.folder is None and ended == []


def test_a_box_saved_at_the_end_of_its_range_comes_back(qtbot):
    """A value at a box's minimum or maximum (1 epoch, a temperature of 2.0) is the box's to
    hold: it must come back, not be named as out of range."""
    ints, floats = QSpinBox(), QDoubleSpinBox()
    qtbot.addWidget(ints)
    qtbot.addWidget(floats)
    ints.setRange(1, 10)
    ints.setValue(5)
    floats.setRange(0.0, 2.0)
    floats.setValue(1.0)
    for low, high in ((1, 2.0), (10, 0.0)):
        settings.save("t/int", low)
        settings.save("t/float", high)
        settings.restore(ints, "t/int")
        settings.restore(floats, "t/float")
        assert (ints.value(), floats.value()) == (low, high)
    assert settings.take_ignored() == []


def test_a_check_box_saved_off_comes_back_off(qtbot):
    """A check box that is on by default, saved off: the settings file holds "false" (as text,
    read back at the next launch), which must turn it off, and "true" must read as on."""
    path = Path(settings.settings().fileName())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[t]\nflag=false\nother=true\n")  # as a previous launch left it
    box = QCheckBox()
    qtbot.addWidget(box)
    box.setChecked(True)
    settings.restore(box, "t/flag")
    assert not box.isChecked() and settings.take_ignored() == []
    assert settings.load("t/flag", True) is False
    assert settings.load("t/other", False) is True


def _damage_settings() -> Path:
    path = Path(settings.settings().fileName())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[train]\nepochs=4\n[train\n")
    settings.settings()  # read at launch: Qt says it cannot parse it
    return path


def test_a_third_damaged_settings_file_keeps_the_two_set_aside_before(qtbot):
    """A damaged settings file set aside beside .damaged and .damaged-2 replaced .damaged-2."""
    path = _damage_settings()
    for older in (".damaged", ".damaged-2"):
        path.with_name(path.name + older).write_text(f"kept {older}")
    assert settings.set_aside_if_damaged() == str(path.with_name(path.name + ".damaged-3"))
    for older in (".damaged", ".damaged-2"):
        assert path.with_name(path.name + older).read_text() == f"kept {older}"


def test_a_damaged_settings_file_is_set_aside_once(qtbot):
    """Set aside, then written again clean: a second look must not set the clean file aside
    as damaged too."""
    path = _damage_settings()
    assert settings.set_aside_if_damaged() == str(path.with_name(path.name + ".damaged"))
    path.write_text("[train]\nepochs=4\n")
    assert settings.set_aside_if_damaged() is None
    assert path.read_text() == "[train]\nepochs=4\n"



def test_a_list_of_one_saved_at_the_last_launch_comes_back_as_that_one(qtbot):
    """A corpus of one folder is written to the settings file as a plain string (Qt's INI
    form of a one-element list); read back at the next launch it must be that one path, not a
    list of its characters."""
    path = Path(settings.settings().fileName())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("[corpus]\npaths=/data/one folder\n")  # as Qt wrote ["/data/one folder"]
    assert settings.load("corpus/paths", []) == ["/data/one folder"]
