"""File > Open settings… goes through the same checks as ``train --config``: a wrong key or a
wrongly typed value is one line in the window, never an exception out of the slot."""

import pytest

from .helpers import close_window, small_window


@pytest.fixture
def win(qtbot, tmp_path):
    w = small_window(qtbot, tmp_path / "runs")
    yield w
    close_window(qtbot, w)


@pytest.mark.parametrize("text, key", [
    ('[model]\nd_model = "big"\n', "model.d_model"),
    ("[model]\nd_modell = 64\n", "model.d_modell"),
    ('[early_stopping]\npatience = "x"\n', "early_stopping.patience"),
    ("[train]\nepochs = 2.5\n", "train.epochs"),
    ("[run]\nrun = 5\n", "run.run"),
])
def test_bad_settings_file_is_one_line_in_the_window(win, tmp_path, text, key):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    before = win.train.patience.value(), win.train.epochs.value(), win.train.d_model.value()
    win.load_settings_file(str(bad))
    msg = win.errors[-1]
    assert str(bad) in msg and key in msg and "\n" not in msg
    assert (win.train.patience.value(), win.train.epochs.value(),
            win.train.d_model.value()) == before  # nothing half-applied
