"""Shared pieces of the GUI tests: a small window, drops, and waiting for a run to end."""

from pathlib import Path

from PySide6.QtCore import QMimeData, QPointF, Qt, QThreadPool, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.main_window import MainWindow

RUN_TIMEOUT = 180_000


def small_window(qtbot, root: Path) -> MainWindow:
    """Not registered with qtbot: pytest-qt deletes registered widgets before fixture teardown,
    which would destroy a training thread still running; ``close_window`` ends it first."""
    w = MainWindow(runs_root=str(root))
    w.show()
    w.train.preset.setCurrentText("tiny")
    w.train.seq_len.setValue(64)
    w.train.batch.setValue(4)
    w.preview.length.setValue(12)
    return w


def train_until_idle(qtbot, w: MainWindow, max_steps: int | None = None) -> str:
    """Start, wait for the run's `finished` signal, return its folder."""
    if max_steps is not None:
        w.train.max_steps.setValue(max_steps)
    got: list[str] = []
    w.start_training()
    assert w.worker is not None, w.errors
    w.worker.finished.connect(got.append)
    qtbot.waitUntil(lambda: w.state == "idle" and w.worker is None, timeout=RUN_TIMEOUT)
    return w.last_folder or ""


def drop(widget, paths) -> None:
    mime = QMimeData()
    mime.setUrls([p if isinstance(p, QUrl) else QUrl.fromLocalFile(str(p)) for p in paths])
    center = widget.rect().center()
    enter = QDragEnterEvent(center, Qt.DropAction.CopyAction | Qt.DropAction.MoveAction, mime,
                            Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    assert enter.dropAction() == Qt.DropAction.CopyAction  # files are read, never moved
    ev = QDropEvent(QPointF(center), Qt.DropAction.CopyAction | Qt.DropAction.MoveAction, mime,
                    Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, ev)


def close_window(qtbot, w: MainWindow) -> None:
    """Stop any run, wait for its save, and close the window for good."""
    if w.worker is not None:
        w.stop()
        qtbot.waitUntil(lambda: w.state == "idle", timeout=RUN_TIMEOUT)
    QThreadPool.globalInstance().waitForDone(RUN_TIMEOUT)  # corpus reads, estimates, exports
    QApplication.processEvents()
    if w.isVisible():
        w.close()
    w.deleteLater()


def fake_model(monkeypatch, generate_ids, backend: str = "CPU step") -> None:  # noqa: ANN001
    """``engine.load_model`` gives a byte-tokenizer model whose ``generate_ids(ids, sampling)``
    is the one given, and ``engine.pick_backend`` the CPU step named ``backend``: a Playground
    generation without a model or its kernels."""
    import engine
    from engine.lm import MambaLM
    from engine.tokenizer import ByteTokenizer

    class FakeLM:
        tokenizer = ByteTokenizer()
        source = None
        prompt_ids = MambaLM.prompt_ids  # (reads only ``tokenizer``)

        def check_finite(self, source):  # noqa: ANN001, ANN202
            pass

        def generate_ids(self, ids, sampling, backend, reading=None):  # noqa: ANN001, ANN202
            return generate_ids(ids, sampling)

    monkeypatch.setattr(engine, "load_model", lambda src, notify=None: FakeLM())
    monkeypatch.setattr(engine, "pick_backend", lambda lm, b: (None, backend))
