"""The window's layout: on a small screen it fits 800x600 (its minimum was 903 px wide, and 1,011
once the plots' one-line key showed at its smallest height), and the Preview's line says which
step a sample is from (that label was 0 px wide at every window size); every control has a
tooltip."""

from PySide6.QtWidgets import QApplication


def _settle(qtbot) -> None:  # noqa: ANN001
    for _ in range(5):
        QApplication.processEvents()
        qtbot.wait(20)


def test_the_window_fits_800_by_600_with_the_plots_key_shown(win, qtbot):
    win.resize(800, 600)
    _settle(qtbot)
    assert win.width() <= 800 and win.height() <= 600, win.size()
    keys = " · ".join(["loss: ━ train step ● train epoch ■ held-out epoch ┅ held-out step"] * 3)
    win.plots.key_label.setText(keys)  # the key a small plot shows instead of its legend
    _settle(qtbot)
    win.resize(800, 600)
    _settle(qtbot)
    assert win.width() <= 800, win.size()
    assert win.minimumSizeHint().width() <= 800


def test_the_preview_says_which_sample_it_shows(win, qtbot):
    win.resize(1280, 760)
    win.preview.show_preview("after epoch 3", "some text", "CPU")
    _settle(qtbot)
    tag = win.preview.tag
    assert tag.width() >= min(tag.sizeHint().width(), 300), (tag.width(), tag.sizeHint())
    assert tag.toolTip() == "sample — after epoch 3"
    long = "the new run's first sample, of its untrained weights, is made while it trains " * 3
    win.preview.show_preview(long, "", "—")  # (cut mid-word, with no "…", at 1280 x 800)
    _settle(qtbot)
    assert tag.text().endswith("…") and tag.full == f"sample — {long}", tag.text()
    assert tag.fontMetrics().horizontalAdvance(tag.text()) <= tag.width()


def test_every_box_and_button_has_a_tooltip(win):
    """The README says every control has a tooltip; the Preview's sampling boxes had none."""
    from PySide6.QtWidgets import QAbstractButton, QAbstractSpinBox, QComboBox, QPlainTextEdit

    kinds = (QAbstractSpinBox, QComboBox, QAbstractButton, QPlainTextEdit)
    bare = [f"{type(w).__name__} {getattr(w, 'text', lambda: '')()!r} in "
            f"{type(w.parentWidget()).__name__}"
            for kind in kinds for w in win.findChildren(kind)
            if not w.toolTip() and not w.isHidden() and not w.objectName().startswith("qt_")
            and not (isinstance(w, QPlainTextEdit) and w.isReadOnly())]  # (outputs)
    assert not bare, bare
