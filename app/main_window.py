"""MainWindow: composes the panels, owns the training worker's lifecycle, no maths."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QThread, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QIcon
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

import engine

from . import settings
from .panels.corpus_panel import CorpusPanel
from .panels.plots_panel import PlotsPanel
from .panels.preview_panel import PreviewPanel
from .panels.train_panel import TrainPanel
from .workers import TrainJob, TrainWorker, default_run_dir, run_in_thread

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CORPUS = ROOT / "assets" / "sample_corpus"
ICON = ROOT / "assets" / "icon.svg"


class MainWindow(QMainWindow):
    state_changed = Signal(str)  # idle | running | paused | stopping

    def __init__(self, run_dir: str | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Mamba Studio")
        if ICON.exists():
            self.setWindowIcon(QIcon(str(ICON)))
        self.run_dir = run_dir or default_run_dir()
        self.errors: list[str] = []
        self.state = "idle"
        self.thread: QThread | None = None
        self.worker: TrainWorker | None = None
        self._finished_worker: TrainWorker | None = None  # the last run, for save/export
        self.init_dir: str | None = None
        self.resume_dir: str | None = None

        self.corpus = CorpusPanel(SAMPLE_CORPUS)
        self.train = TrainPanel()
        self.plots = PlotsPanel()
        self.preview = PreviewPanel()
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(2000)

        self.start_btn = QPushButton("Start")
        self.pause_btn = QPushButton("Pause")
        self.resume_btn = QPushButton("Resume")
        self.stop_btn = QPushButton("Stop")
        self.start_btn.clicked.connect(self.start_training)
        self.pause_btn.clicked.connect(self.pause)
        self.resume_btn.clicked.connect(self.resume)
        self.stop_btn.clicked.connect(self.stop)
        self.use_gpu = QCheckBox("GPU preview (wgpu)")
        self.use_gpu.setChecked(settings.load("preview/use_gpu", True))
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m steps")
        self.status = QLabel("idle")

        left = QTabWidget()
        left.addTab(self.corpus, "Corpus")
        scroll = QScrollArea()
        scroll.setWidget(self.train)
        scroll.setWidgetResizable(True)
        left.addTab(scroll, "Model && training")
        right = QTabWidget()
        right.addTab(self.preview, "Preview")
        right.addTab(self.log, "Log")
        center = QSplitter(Qt.Orientation.Vertical)
        center.addWidget(self.plots)
        center.addWidget(right)
        split = QSplitter()
        split.addWidget(left)
        split.addWidget(center)
        split.setSizes([420, 860])

        bar = QHBoxLayout()
        for w in (self.start_btn, self.pause_btn, self.resume_btn, self.stop_btn, self.use_gpu):
            bar.addWidget(w)
        bar.addWidget(self.progress, 1)
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.addLayout(bar)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)
        self.setCentralWidget(body)
        self._menus()
        self.corpus.rejected.connect(self._notice)
        self.preview.prompts.textChanged.connect(self._push_preview_settings)
        for knob in (self.preview.temperature, self.preview.top_k, self.preview.top_p,
                     self.preview.length):
            knob.valueChanged.connect(self._push_preview_settings)
        self.setAcceptDrops(True)  # files dropped anywhere on the window join the corpus
        self.corpus.load_sample()
        self._set_state("idle")
        geom = settings.load("window/geometry", None)
        if geom is not None:
            self.restoreGeometry(geom)
        else:
            self.resize(1280, 820)

    # ---------------------------------------------------------------- menus
    def _menus(self) -> None:
        m = self.menuBar().addMenu("&File")
        for text, slot in (("Open model or HF Mamba folder…", self._open_model_dialog),
                           ("Resume a training run…", self._resume_dialog),
                           ("Save checkpoint as…", self._save_dialog),
                           ("Export LoRA adapter (PEFT)…", lambda: self._export_dialog("adapter")),
                           ("Export merged model…", lambda: self._export_dialog("merged")),
                           ("New model (forget loaded weights)", self.new_model)):
            act = QAction(text, self)
            act.triggered.connect(slot)
            m.addAction(act)
        m.addSeparator()
        quit_act = QAction("Quit", self)
        quit_act.triggered.connect(self.close)
        m.addAction(quit_act)

    # ---------------------------------------------------------------- state
    def _set_state(self, state: str) -> None:
        self.state = state
        self.start_btn.setEnabled(state == "idle")
        self.pause_btn.setEnabled(state == "running")
        self.resume_btn.setEnabled(state == "paused")
        self.stop_btn.setEnabled(state in ("running", "paused"))
        self.train.setEnabled(state == "idle")
        self.corpus.setEnabled(state == "idle")
        if state != "running":
            self.status.setText(state if state != "idle" else f"idle — runs are saved to {self.run_dir}")
        self.state_changed.emit(state)

    def _notice(self, msg: str) -> None:
        self.log.appendPlainText(msg)

    def _error(self, msg: str) -> None:
        self.errors.append(msg)
        self.log.appendPlainText(f"ERROR: {msg}")
        box = QMessageBox(QMessageBox.Icon.Warning, "Mamba Studio", msg.splitlines()[-1][:500]
                          if len(msg) > 500 else msg, parent=self)
        box.setDetailedText(msg)
        box.open()  # non-blocking: training and the UI keep going

    # ---------------------------------------------------------------- training
    def make_job(self) -> TrainJob:
        return TrainJob(
            paths=self.corpus.paths(), run_dir=self.run_dir, preset=self.train.preset.currentText()
            if self.train.preset.currentText() != "custom" else "small",
            custom=self.train.custom_dims(), tokenizer=self.train.tokenizer.currentText(),
            bpe_vocab=self.train.bpe_vocab.value(), init_dir=self.init_dir,
            resume_dir=self.resume_dir, train=self.train.train_config(),
            use_gpu=self.use_gpu.isChecked(),
        )

    def start_training(self) -> None:
        if self.state != "idle":
            return
        if not self.corpus.paths():
            self._error("Add at least one text file to the corpus first.")
            return
        try:
            job = self.make_job()
        except ValueError as exc:
            self._error(str(exc))
            return
        self.train.remember()
        self.preview.remember()
        self.plots.clear()
        self.worker = TrainWorker(job, self.preview.prompt_list(), self.preview.sampling())
        self.thread = QThread(self)
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.run)
        self.worker.info.connect(self._notice)
        self.worker.saved.connect(self._notice)
        self.worker.step_finished.connect(self._on_step)
        self.worker.epoch_finished.connect(self._on_epoch)
        self.worker.preview_ready.connect(self.preview.show_preview)
        self.worker.failed.connect(self._error)
        self.worker.finished.connect(self._on_finished)
        self._set_state("running")
        self.status.setText("preparing (tokenizer, model, kernels)…")
        self.thread.start()

    def _push_preview_settings(self) -> None:
        if self.worker is not None:
            self.worker.prompts = self.preview.prompt_list()
            self.worker.sampling = self.preview.sampling()

    def pause(self) -> None:
        if self.worker is not None and self.state == "running":
            self.worker.control.pause()
            self._set_state("paused")

    def resume(self) -> None:
        if self.worker is not None and self.state == "paused":
            self.worker.control.resume()
            self._set_state("running")

    def stop(self) -> None:
        if self.worker is not None and self.state in ("running", "paused"):
            self.worker.control.stop()
            self._set_state("stopping")

    def _on_step(self, r: engine.StepReport) -> None:
        self.plots.add_step(r)
        self.progress.setMaximum(r.total_steps)
        self.progress.setValue(r.step)
        if self.state == "running":
            nan = "  (non-finite loss: step skipped)" if r.nonfinite else ""
            self.status.setText(
                f"step {r.step}/{r.total_steps} · epoch {r.epoch + 1} · loss {r.loss:.4f} · "
                f"grad norm {r.grad_norm:.3f} · lr {r.lr:.2e} · {r.tokens_per_s:,.0f} tok/s · "
                f"ETA {engine.format_duration(r.eta_s)}{nan}"
            )

    def _on_epoch(self, e: engine.EpochReport) -> None:
        step = self.plots.steps[-1] if self.plots.steps else 0
        self.plots.add_epoch(e, step)
        val = f", held-out {e.val.loss:.4f} (ppl {e.val.perplexity:.2f})" if e.val else ""
        self._notice(f"epoch {e.epoch + 1}: train {e.train_loss:.4f}, grad norm "
                     f"{e.grad_norm:.3f}{val}")

    def _on_finished(self, run_dir: str) -> None:
        if self.thread is not None:
            self.thread.quit()
            self.thread.wait()
        if run_dir:
            self.resume_dir = None
            self.init_dir = None
        self.thread = None
        self._finished_worker = self.worker
        self.worker = None
        self._set_state("idle")

    # ---------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str) -> None:
        """Save a resumable checkpoint of the running or the last run."""
        self.export("save", path)

    def export(self, kind: str, path: str) -> None:
        """'save' | 'adapter' | 'merged' into ``path``: queued between steps while training,
        else done on the thread pool from the last run's trainer."""
        if self.worker is not None:
            self.worker.request(kind, path)
            return
        src = self._finished_worker
        if src is None or src.trainer is None:
            self._error(f"Nothing to {'save' if kind == 'save' else 'export'} yet: train first.")
            return
        src.request(kind, path)
        run_in_thread(src.serve_requests, lambda _: None, self._error)

    def open_model(self, path: str) -> None:
        """Use a model folder (ours, or a local HF Mamba folder) as the starting point."""
        def load() -> engine.MambaLM:
            return engine.MambaLM.load(path)

        def done(lm: engine.MambaLM) -> None:
            self.init_dir = path
            self.resume_dir = None
            self.train.model_source.setText(f"{Path(path).name} ({lm.n_params:,} params)")
            self._notice(f"opened {path}: {lm.n_params:,} parameters, "
                         f"{lm.tokenizer.kind} tokenizer")

        run_in_thread(load, done, self._error)

    def resume_run(self, path: str) -> None:
        if not (Path(path) / "trainer_state.json").exists():
            self._error(f"{path} is not a training checkpoint (no trainer_state.json)")
            return
        self.resume_dir = path
        self.init_dir = None
        self.train.model_source.setText(f"resume {Path(path).name}")
        self._notice(f"next Start resumes {path} exactly where it stopped")

    def new_model(self) -> None:
        self.init_dir = self.resume_dir = None
        self.train.model_source.setText("new model")

    def _open_model_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a model folder")
        if path:
            self.open_model(path)

    def _resume_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Resume a training run", self.run_dir)
        if path:
            self.resume_run(path)

    def _save_dialog(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Save checkpoint into folder")
        if path:
            self.save_checkpoint(path)

    def _export_dialog(self, kind: str) -> None:
        path = QFileDialog.getExistingDirectory(self, f"Export {kind} into folder")
        if path:
            self.export(kind, path)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if self.state == "idle":
            self.corpus.drop.dragEnterEvent(event)
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.corpus.drop.dropEvent(event)

    # ---------------------------------------------------------------- shutdown
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.worker is not None and self.thread is not None:
            self.worker.control.stop()
            self.thread.quit()
            self.thread.wait(30000)  # the worker saves a consistent checkpoint on stop
        settings.save("window/geometry", self.saveGeometry())
        settings.save("preview/use_gpu", self.use_gpu.isChecked())
        self.train.remember()
        self.preview.remember()
        super().closeEvent(event)
