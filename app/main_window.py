"""MainWindow: composes the panels, owns the training worker's lifecycle, no maths.

Every Start makes a new run folder under the runs folder unless the user chose Continue (Runs
tab); the "Next Start" line always says which. Closing while training stops after the current
step, saves, and only then closes ("saving…"), with no time-out."""

from __future__ import annotations

import gc
import math
import re
import time
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QThread, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QIcon,
    QKeyEvent,
    QKeySequence,
    QShortcut,
)
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
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

from . import default_runs_root, settings
from .estimate_flow import EstimateFlow
from .export_flow import EXPORT_KINDS, NO_RUN_SHOWN, ExportFlow
from .follow import RunFollower
from .gc_thread import collect_on_gui_thread, release
from .model_flow import ModelFlow, _inside
from .panels.corpus_panel import CorpusPanel, skip_line, skip_lines, told_apart
from .panels.elided_label import ElidedLabel
from .panels.gallery_panel import GalleryPanel
from .panels.playground_panel import BACKEND_TIPS, PlaygroundPanel
from .panels.plots_panel import PlotsPanel
from .panels.preview_panel import PreviewPanel
from .panels.runs_panel import RunsPanel, adapter_problem
from .panels.train_panel import TrainPanel
from .settings_flow import SettingsFlow
from .step_times import StepTimes, estimate_key
from .words import in_window_terms, plural
from .workers import TrainJob, TrainWorker

ROOT = Path(__file__).resolve().parent.parent
ICON = ROOT / "assets" / "icon.svg"
MEASURE_AFTER_MS = 1200  # settings left alone this long get their step timed for the estimate
PREPARING = "preparing"  # the status line until step 1; engine progress lines follow it
LABELS = {"epochs": "epochs", "max_steps": "max steps", "lr": "learning rate",
          "eval_every": "held-out eval every"}  # the Continue overrides, as the Next Start line says


def _run_value(spec: engine.RunSpec | None, key: str, default: float = 0) -> float:
    """A continued run's own value of a setting with no box: its training's (warmup_steps), else
    its run's (autosave_minutes), else ``default``."""
    return default if spec is None else getattr(spec.train, key, getattr(spec, key, default))


def _early_text(es: engine.EarlyStopping) -> str:
    """An early stopping setting in words ("patience 3, target loss 1.2", "off")."""
    parts = ([f"patience {es.patience}"] if es.patience else []) + (
        [f"target loss {es.target_loss:g}"] if es.target_loss is not None else [])
    return ", ".join(parts) or "off"


ELSEWHERE = "trains in another process"
NEW_RUN_SAMPLE = ("the new run's first sample, of its untrained weights, is made while it "
                  "trains")  # (it said "comes before its first step", still shown at step 20)


def _about(folder: str, exc: BaseException) -> str:
    """"FOLDER: why", the folder said once (an engine message that starts with it read
    "cannot continue F: F: no run.json, ...")."""
    why = str(exc)
    return why if why.startswith(f"{folder}: ") else f"{folder}: {why}"


def _how_it_ended(run: engine.RunInfo) -> str:
    """The idle line's "last run: ..." of a listed run (its state and last snapshot's step)."""
    if run.status in ("running", "paused"):
        return f"{run.name} {ELSEWHERE}"
    return f"{run.name} {run.status} at step {run.steps:,}"


def _names_run(line: str, name: str) -> bool:
    """Whether the idle line's "last run: ..." (``_how_it_ended``) is about the run ``name``
    (a prefix match took "a b stopped at step 5" for run "a")."""
    return line in (f"{name} {ELSEWHERE}", f"{name} (deleted)") or re.fullmatch(
        rf"{re.escape(name)} ([a-z-]+ at step [\d,]+( \(.*\))?|failed \(see the Log tab\))",
        line) is not None  # (the worker's: "NAME finished at step 2 (held-out loss 7.59)")


STEPS_FORMAT = "%v / %m steps"  # the step bar while a run trains
PREPARING_FORMAT = "preparing…"  # ... and before its first step
STEP_UI_S = 0.2  # the status line, step bar and Runs row follow the steps at most this often
IDLE_FORMAT = "no run training"  # ... and while none trains
CORPUS_KEY = "corpus/paths"  # the corpus of the last session (app settings)
RECORDS_KEY = "corpus/records"  # ... and its Examples choice


class MainWindow(EstimateFlow, ModelFlow, ExportFlow, SettingsFlow, QMainWindow):
    state_changed = Signal(str)  # idle | running | paused | stopping
    estimate_ready = Signal(str)

    def __init__(self, runs_root: str | None = None) -> None:
        super().__init__()
        self.setWindowTitle("Mamba Studio")
        if ICON.exists():
            self.setWindowIcon(QIcon(str(ICON)))
        self.runs_root = runs_root or default_runs_root()
        Path(self.runs_root).mkdir(parents=True, exist_ok=True)
        self._init_state()
        self._build_controls()
        self._build_layout()
        self._menus()
        self.statusBar()  # made now: made by the first message, it moved everything above it
        # up by its height (a click on the Runs tab's Continue landed between two buttons)
        self._shortcuts()
        self._connect_signals()
        self._make_timers()
        self._restore_session()

    def _init_state(self) -> None:
        """What the window keeps track of (the next Start's source, the shown run, the
        caches)."""
        self.errors: list[str] = []
        self._reopening: str | None = None  # the model opened last time, while it is reopened
        self.state = "idle"
        self.last_end = ""  # how the last run of this window ended, shown while idle
        self.train_thread: QThread | None = None
        self.worker: TrainWorker | None = None
        self.init_dir: str | None = None  # next Start: a new run from these weights
        self.continue_dir: str | None = None  # next Start: continue this run
        self.continue_spec: engine.RunSpec | None = None  # ... whose saved settings these are
        self.continue_shown: engine.TrainConfig | None = None  # the panel as Continue set it
        self.continue_early_shown = engine.EarlyStopping()  # ... and its early stopping
        self.notes_said: set[str] = set()  # the notes the Log has of the Continue chosen (its
        # early stopping, steps lost after its last snapshot), not said again at its Start
        self.current_run: str | None = None  # the run training now, or the last one
        self.compared_run: str | None = None  # the run whose curves are overlaid in grey
        self.last_report: engine.StepReport | None = None  # this run's latest step
        self._step_ui = QTimer(self)  # shows the latest step when the last one shown is recent
        self._step_ui.setSingleShot(True)
        self._step_ui.timeout.connect(self._show_step)
        self._step_ui_at = -math.inf  # when a step was last shown (time.monotonic)
        self._refocus = False  # the focus was on a control a Stop turned off: Start takes it
        self.last_folder: str | None = None
        # the run the window shows (Open, Continue, the run training, the last one finished):
        # File > Export acts on it; a run overlaid with Compare is not it
        self.shown_run: str | None = None
        self.export_actions: dict[str, QAction] = {}
        self.run_actions: dict[str, QAction] = {}  # the Run menu's, by their text
        self._closing = False
        self._step_times = StepTimes()  # seconds a step, by estimate_key
        self._measuring: tuple | None = None
        self._wanted: tuple | None = None
        self._closed = False
        self._rows: dict[tuple, int | str] = {}  # _epoch_rows: packed rows, or why not counted
        self._counting: tuple | None = None
        self.skip_box: QMessageBox | None = None  # the open "nothing was added" warning

    def _build_controls(self) -> None:
        """The panels, the run buttons, the preview backend box, the step bar and the three
        one-line labels."""
        self.corpus = CorpusPanel(engine.SAMPLE_CORPUS)
        self.train = TrainPanel()
        self.plots = PlotsPanel()
        self.preview = PreviewPanel()
        self.runs = RunsPanel(self.runs_root)
        self.runs.next_start_use = self._next_start_use
        self.playground = PlaygroundPanel(self.runs_root)
        self.gallery = GalleryPanel()
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(2000)

        self.start_btn = QPushButton("Start")
        self.start_btn.setToolTip("Start training (Ctrl+Enter): a new run, or the chosen Continue")
        self.pause_btn = QPushButton("Pause")
        self.pause_btn.setToolTip("Pause after the current step (Space, or Ctrl+P from anywhere)")
        self.resume_btn = QPushButton("Resume")
        self.resume_btn.setToolTip("Resume a paused run (Space, or Ctrl+P from anywhere)")
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("Stop after the current step and save a snapshot (Ctrl+.)")
        self.start_btn.clicked.connect(self.start_training)
        self.pause_btn.clicked.connect(self.pause)
        self.resume_btn.clicked.connect(self.resume)
        self.stop_btn.clicked.connect(self.stop)
        self.backend = QComboBox()
        self.backend.addItems(list(BACKEND_TIPS))
        settings.restore(self.backend, "preview/backend")
        self.backend.setToolTip("Preview decoding: " + "; ".join(f"{k}: {v}" for k, v in
                                                               BACKEND_TIPS.items()))
        self.progress = QProgressBar()
        self.progress.setToolTip("Optimizer steps done of this run's total")
        self._reset_progress()  # (an empty white box at launch read as a text field)
        self.status = ElidedLabel("idle")  # one line, as the estimate's and Next Start's: a
        # step line that wrapped at some steps and not at others moved the tabs while training
        self.next_label = ElidedLabel()  # one line (it wrapped to two or three on a Continue
        # and moved the tabs under the mouse: a click landed on the wrong tab); all of it is
        # its tooltip and Model & training's "Start from"
        self.estimate = ElidedLabel(
            "estimating…", tip="Parameters, peak memory and time per epoch: the run's steps per "
            "epoch (its packed rows) x the median of three real steps timed")

    def _build_layout(self) -> None:
        """The Train page (the side tabs, the curves over the Preview / Log), the main tabs,
        the button bar and the labels above them."""
        left = QTabWidget()
        left.addTab(self.corpus, "Corpus")
        scroll = QScrollArea()
        scroll.setWidget(self.train)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(  # only in a window under ~830 px wide, where the
            Qt.ScrollBarPolicy.ScrollBarAsNeeded)  # side pane is narrower than the panel
        scroll.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # (an unseen Tab stop; its boxes are
        self.train_scroll = scroll  # Tab stops, and the panel scrolls to the focused one)
        left.addTab(scroll, "Model && training")
        self.left_tabs = left
        bottom = QTabWidget()
        bottom.addTab(self.preview, "Preview")
        bottom.addTab(self.log, "Log")
        self.bottom_tabs = bottom
        center = QSplitter(Qt.Orientation.Vertical)
        center.addWidget(self.plots)
        center.addWidget(bottom)
        center.setSizes([520, 220])
        split = QSplitter()
        split.addWidget(left)
        split.addWidget(center)
        split.setSizes([430, 850])
        self.plots.setMinimumHeight(150)  # (at 700x500 the curves got 60 px: axes, no curve)
        self.splitters = {"window/center_split": center, "window/side_split": split}
        train_page = QWidget()
        tl = QVBoxLayout(train_page)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(split, 1)
        self.tabs = QTabWidget()
        self.tabs.addTab(train_page, "&Train")  # (Alt+letter: no tab had one)
        self.tabs.addTab(self.runs, "R&uns")
        self.tabs.addTab(self.playground, "Pl&ayground")
        self.tabs.addTab(self.gallery, "Gall&ery")
        self.tabs.currentChanged.connect(self._tab_shown)

        bar = QHBoxLayout()
        for w in (self.start_btn, self.pause_btn, self.resume_btn, self.stop_btn):
            w.setAutoDefault(w is not self.start_btn)  # Return presses the focused one (it did
            bar.addWidget(w)  # nothing); not Start, focused as a run ends (Ctrl+Enter starts)
            if w is not self.start_btn:  # but Ctrl+Return is Start's: while a run trains (Start
                w.installEventFilter(self)  # off) it paused or stopped the run it reached
        bar.addWidget(QLabel("preview"))
        bar.addWidget(self.backend)
        bar.addWidget(self.progress, 1)
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.addLayout(bar)
        lay.addWidget(self.next_label)
        lay.addWidget(self.estimate)
        lay.addWidget(self.status)
        lay.addWidget(self.tabs, 1)
        self.setCentralWidget(body)

    def _connect_signals(self) -> None:
        """The panels' signals to the window's slots."""
        self.corpus.rejected.connect(self._notice)
        self.corpus.added.connect(self._on_corpus_added)
        self.corpus.said.connect(self._say)
        self.corpus.changed.connect(self._schedule_estimate)
        self.corpus.changed.connect(lambda: self.train.set_corpus_bytes(self.corpus.n_bytes()))
        self.train.changed.connect(self._schedule_estimate)
        self.train.changed.connect(self._update_next)
        self.train.tokenizer.currentTextChanged.connect(self._tokenizer_changed)
        self._tokenizer_changed(self.train.tokenizer.currentText())
        self.preview.prompts.textChanged.connect(self._push_preview_settings)
        for knob in (self.preview.temperature, self.preview.top_k, self.preview.top_p,
                     self.preview.length, self.preview.every):
            knob.valueChanged.connect(self._push_preview_settings)
        self.runs.open_requested.connect(self.open_run_view)
        self.runs.continue_requested.connect(self.choose_continue)
        self.runs.compare_requested.connect(self.compare_run)
        self.runs.export_requested.connect(self._export_dialog)
        self.runs.message.connect(self._say)
        self.runs.deleted.connect(self._run_deleted)
        self.runs.listed.connect(self._listed)
        self.estimate_ready.connect(self.estimate.set_full)

    def _make_timers(self) -> None:
        """The estimate's debounce and settle timers, and the follower of a run another
        process trains."""
        self._est_timer = QTimer(self)
        self._est_timer.setSingleShot(True)
        self._est_timer.setInterval(300)
        self._est_timer.timeout.connect(self._refresh_estimate)
        # the step is timed only for settings left alone this long: typing d_model 1024 timed
        # the sizes on the way (one of 2.3 GB for ~15 s) before the one meant
        self._settle_timer = QTimer(self)
        self._settle_timer.setSingleShot(True)
        self._settle_timer.setInterval(MEASURE_AFTER_MS)
        self._settle_timer.timeout.connect(self._settled_now)
        self.follower = RunFollower(self)  # a shown run another process trains: kept up to date
        self.follower.grew.connect(self._followed_grew)
        self.follower.ended.connect(self._followed_ended)
        self._settling: object = None  # the settings key the settle timer waits on
        self._settled: object = None  # the last key left alone for MEASURE_AFTER_MS

    def _restore_session(self) -> None:
        """The last session back: the corpus, the opened model, the geometry, the splitters,
        the newest run shown, the tabs."""
        self.setAcceptDrops(True)  # files dropped anywhere on the window join the corpus
        self._gc = collect_on_gui_thread()  # never in the training thread: see app/gc_thread.py
        self._restore_corpus()
        self._reopen_model()
        self.corpus.changed.connect(self._remember_corpus)
        self._set_state("idle")
        self._update_next()
        geom = settings.load("window/geometry", None)
        if geom is not None:
            self.restoreGeometry(geom)
        else:
            self.resize(1280, 760)
        for key, splitter in self.splitters.items():  # where the user dragged them last time
            state = settings.load(key, None)
            if state is not None:
                splitter.restoreState(state)
            splitter.setChildrenCollapsible(False)  # a pane dragged to nothing stayed so at every
            # launch, behind a 6-px handle (after the restore: a saved state brings its own flag)
        newest = max((r for r in self.runs.runs if r.status != "broken"),  # (the table's
                     key=lambda r: (r.created, r.name), default=None)  # saved sort aside)
        if newest is not None:  # the newest run is shown as Open shows it, as the Gallery and
            self.open_run_view(str(newest.path))  # the Playground took it (the Train tab was
            self.last_end = _how_it_ended(newest)  # (empty, "idle", after a close while it
            self._set_state("idle")  # trained)
        for key, tabs in self._tab_keys().items():  # the tabs shown when the window closed (a
            index = settings.load(key, 0)  # relaunch opened on Train, Corpus, whatever was shown)
            if 0 <= index < tabs.count():
                tabs.setCurrentIndex(index)
        self._say_settings_problems()

    def _tab_keys(self) -> dict[str, QTabWidget]:
        """The tab widgets whose shown tab a relaunch restores, by settings key."""
        return {"window/tab": self.tabs, "window/side_tab": self.left_tabs,
                "window/bottom_tab": self.bottom_tabs}

    def _say_settings_problems(self) -> None:
        """Saved values the boxes could not take (kept at their defaults) and a settings file Qt
        could not read to its end are said in the Log and on the status bar (both went
        unsaid: a learning rate of -5 became 1e-08)."""
        bad, aside = settings.take_ignored(), settings.set_aside_if_damaged()
        lines = ([f"the settings file was damaged (kept as {aside}): settings Qt could not "
                  "read from it are back at their defaults"] if aside else [])
        if aside:  # what was read is written to a clean file now (a kill -9 lost it)
            self.train.remember()
            self.preview.remember()
            self.playground.remember()
            self._remember_corpus()
        if bad:
            lines.append(f"saved settings not used (the defaults are): {'; '.join(bad)}")
        for line in lines:
            self._log(line)
        if lines:
            self.statusBar().showMessage(lines[0], 20000)

    def _restore_corpus(self) -> None:
        """The corpus of the last session (as a settings file names it: a folder added whole as
        the folder), read again in a worker; the bundled sample the first time, or when none of
        it is left (each launch had shown the sample, so a Continue of a run on code showed the
        sample texts beside it)."""
        saved = settings.load(CORPUS_KEY, [])
        here = [p for p in saved if Path(p).exists()]
        if not here:
            self.corpus.load_sample()
        else:
            self.corpus.add_paths(here, quiet=True)  # (its skipped files were said last time)
            mode = self.corpus.records.findData(settings.load(RECORDS_KEY, ""))
            if mode >= 0:  # its Examples choice with it (a paragraphs corpus came back as
                self.corpus.records.setCurrentIndex(mode)  # "each file is one document")
        if len(here) < len(saved):
            gone = [p for p in saved if p not in here]
            self.statusBar().showMessage(
                f"{plural(len(gone), 'path')} of the last session's corpus no longer "
                f"exist{'s' if len(gone) == 1 else ''} ({Path(gone[0]).name}"
                f"{', …' if len(gone) > 1 else ''})" + ("" if here else "; the sample corpus is "
                                                         "loaded"), 15000)

    def _remember_corpus(self) -> None:
        """The corpus as it stands, for the next launch (at each change: a kill keeps it too)."""
        settings.save(CORPUS_KEY, self.corpus.settings_paths())
        settings.save(RECORDS_KEY, self.corpus.record_mode())

    # ---------------------------------------------------------------- menus
    def _menus(self) -> None:
        m = self.menuBar().addMenu("&File")
        for text, key, slot in (
                ("&Open model or HF Mamba folder…", "Ctrl+O", self._open_model_dialog),
                ("Show a &run folder…", "Ctrl+R", self._open_run_dialog),
                ("Open &settings…", "Ctrl+Shift+O", self._open_settings_dialog),
                ("Sa&ve settings as…", "Ctrl+S", self._save_settings_dialog),
                ("Save a snapshot &now", "", self.save_snapshot),
                *((EXPORT_KINDS[k][0], "", lambda _=False, k=k: self._export_dialog(None, k))
                  for k in EXPORT_KINDS),
                ("New mode&l (forget loaded weights)", "", self.new_model)):
            act = QAction(text, self)
            if key:
                act.setShortcut(QKeySequence(key))
            act.triggered.connect(slot)
            m.addAction(act)
            kind = next((k for k, (item, _) in EXPORT_KINDS.items() if item == text), None)
            if kind is not None:
                self.export_actions[kind] = act
        m.setToolTipsVisible(True)
        self._show_run(None)
        m.addSeparator()
        quit_act = QAction("&Quit", self)
        quit_act.setShortcut(QKeySequence.StandardKey.Quit)
        quit_act.triggered.connect(self.close)
        m.addAction(quit_act)
        run = self.menuBar().addMenu("&Run")  # the run's keys, from any box (Space typed a
        for text, key, slot in (  # space into the focused Prompts box: no key paused there)
                ("&Start", "Ctrl+Return", self.start_training),
                ("&Pause / resume", "Ctrl+P", self.toggle_pause),
                ("S&top (saves)", "Ctrl+.", self.stop),
                ("&Generate in the Playground", "Ctrl+G", self._generate_in_playground)):
            act = QAction(text, self)
            act.setShortcut(QKeySequence(key))
            act.triggered.connect(slot)
            run.addAction(act)
            self.run_actions[text.replace("&", "")] = act

    def _shortcuts(self) -> None:
        for key, slot in (("Ctrl+Enter", self.start_training),  # (keypad; Run menu: the rest)
                          ("Space", self.toggle_pause)):
            sc = QShortcut(QKeySequence(key), self)
            sc.activated.connect(slot)
            if key == "Space":  # pause / resume; when idle it took every Space from the
                self._space = sc  # focused button or checkbox (no keyboard use): see _space_on
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._focus_moved)  # (a bound slot: it goes with the window)

    # ---------------------------------------------------------------- state
    def _tab_shown(self, index: int) -> None:
        """The Playground's Model list is read again as it is shown (runs another process made
        were missing from it: 7 listed of 14; it was read at a run's end or deletion)."""
        if self.tabs.widget(index) is self.playground and self.playground.gen_thread is None:
            self.playground.refresh_runs()

    def _focus_moved(self, _old: object, _new: object) -> None:
        self._space_on()

    def _space_on(self) -> None:
        """Space pauses and resumes while a run trains (on a focused Stop it presses Stop); when
        idle it is the focused widget's, except on Start, which takes the focus when a run
        ends: a Space meant to pause a run that had just ended started a new one (Ctrl+Enter
        starts)."""
        if hasattr(self, "_space"):
            focus = QApplication.focusWidget()
            self._space.setEnabled((self.state in ("running", "paused")
                                    and focus is not self.stop_btn)  # (Space on Stop paused)
                                   or focus is self.start_btn)

    def _set_state(self, state: str) -> None:
        self._flush_step_ui()
        self.state = state
        had_focus = QApplication.focusWidget()
        self.start_btn.setEnabled(state == "idle")
        self.pause_btn.setEnabled(state == "running")
        self.resume_btn.setEnabled(state == "paused")
        self.stop_btn.setEnabled(state in ("running", "paused"))
        menu = self.run_actions  # the Run menu follows its buttons (Pause was offered while
        menu["Start"].setEnabled(self.start_btn.isEnabled())  # idle, Start while training)
        menu["Pause / resume"].setEnabled(self.pause_btn.isEnabled() or self.resume_btn.isEnabled())
        menu["Stop (saves)"].setEnabled(self.stop_btn.isEnabled())
        self.train.setEnabled(state == "idle")
        self.corpus.setEnabled(state == "idle")
        button = {"idle": self.start_btn, "running": self.pause_btn, "paused": self.resume_btn
                  }.get(state)
        lost = had_focus is not None and not had_focus.isEnabled()
        if lost and button is None:  # stopping: no button to take it until idle
            self._refocus = True
        elif (lost or (state == "idle" and self._refocus)) and button is not None:
            button.setFocus()  # Qt passed it on to the next box (End then set Preview to gpu)
            self._refocus = False
        self.runs.busy_folder = self.current_run if state != "idle" else None
        live = self.runs.live
        if live is not None and state in ("running", "paused", "stopping"):
            self.runs.update_live(live[0], live[1], state)
        elif state == "idle":
            self.runs.live = None  # the run's own files say how it ended
        if state != "running":
            idle = f"idle · last run: {self.last_end}" if self.last_end else "idle"
            self.status.set_full({"idle": idle, "paused": self._paused_line(),
                                 "stopping": "stopping after the current step, then saving…"
                                 if self.current_run else "stopping the preparation…"
                                 }.get(state, state))  # (before a run is opened: no step to save)
        self._space_on()
        self.state_changed.emit(state)

    def _paused_line(self) -> str:
        r = self.last_report
        keys = "Ctrl+P resumes; Space too, outside a text box"  # (in the Prompts box Space typed
        return (f"paused at step {r.step:,}/{r.total_steps:,} · loss {r.loss:.4f} nats ({keys})"
                if r is not None else f"paused ({keys})")  # a space into the previews' prompt)

    def _listed(self) -> None:
        """The Runs list was read again: a chosen Continue names its run's step as it is now
        (a run another process trains went from step 88 to 300 while the line said 88)."""
        if self.continue_dir and self.state == "idle":
            self._update_next()

    def _update_next(self) -> None:
        """The one line that says what the next Start does."""
        self.train.set_start("continue" if self.continue_dir else "opened" if self.init_dir
                             else "new")  # LoRA / WSLA only adapt opened weights
        if self.continue_dir and self.state != "idle":  # Continue is one-shot: used by this run
            text = (f"Next Start: a new run, once this continued run of "
                    f"{Path(self.continue_dir).name} ends (or choose Continue again in the Runs tab)")
        elif self.continue_dir:
            kept = engine.expected_snapshot(Path(self.continue_dir))  # (the Runs row's step,
            # latest.json's, said 165 when step-165 was gone and the run went on from 154)
            step = f" from step {kept[1]}" + (f" ({kept[2]})" if kept[2] else "") if kept else ""
            over = self.continue_overrides()
            saved = self.continue_spec.train if self.continue_spec is not None else None
            was_early = (self.continue_spec.early_stopping if self.continue_spec is not None
                         else engine.EarlyStopping())
            changes = ", ".join(
                f"early stopping {_early_text(v)} (was {_early_text(was_early)})"
                if isinstance(v, engine.EarlyStopping) else
                f"{LABELS[k]} {v or 'no limit'} (was "
                f"{getattr(saved, k) or 'no limit'})" if k == "max_steps" else
                f"{LABELS[k]} {v:g} (was {getattr(saved, k) or 'no limit'})" if k in LABELS else
                f"{k.replace('_', ' ')} {v:g} (was {_run_value(self.continue_spec, k):g})"
                for k, v in over.items())
            how = (f"with {changes}" if changes else
                   "with its own settings (change epochs, max steps, learning rate, held-out "
                   "eval or early stopping in the panel to override them)")
            text = (f"Next Start: continues run {Path(self.continue_dir).name}{step} in its folder, "
                    f"on its own saved text (not the Corpus tab's), {how}; New model to start "
                    "fresh")
        elif self.init_dir:
            lc, wsla = self.train.lora_config(), self.train.wsla.isChecked()
            trains = (f"a rank-{lc.rank} LoRA adapter on {', '.join(lc.targets)}"
                      f"{' (WSLA)' if wsla else ''}" if lc is not None else
                      "only each layer's x_proj (WSLA)" if wsla else "all weights")
            text = (f"Next Start: a new run starting from the weights of {self.init_dir}, "
                    f"training {trains}, saved under {self.runs_root}")
        else:
            name = self.train.preset.currentText()
            init = self.train.init_scheme.currentText()
            spec = self.train.run_spec(None, 0).for_corpus(self.corpus.n_bytes())
            auto = " (auto)" if self.train.tokenizer.currentText() == "auto" else ""
            text = (f"Next Start: a new run ({name} model, random weights, {init} init, "
                    f"{spec.tokenizer} tokenizer{auto}, lr {spec.train.lr:g}), saved "
                    f"under {self.runs_root}")
        self.next_label.set_full(text)
        self.train.model_source.setText(text.removeprefix("Next Start: "))

    def _log(self, msg: str) -> None:
        """Append to the Log and show its newest line (Qt follows only while the view sits at
        the bottom, which a layout change ended: new lines went unseen until scrolled to)."""
        self.log.appendPlainText(msg)
        bar = self.log.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _notice(self, msg: str) -> None:
        """A line from the engine while a run works (its preparation, warnings, notes), in the
        window's terms (the Log said "name the file itself" and "--out")."""
        msg = in_window_terms(msg)
        if msg in self.notes_said:  # said when the Continue was chosen (it was said twice)
            self.notes_said.discard(msg)
        else:
            self._log(msg)
        if self.status.full.startswith(PREPARING):  # before step 1, the latest stage shows
            self.status.set_full(f"{PREPARING}: {msg.splitlines()[0] if msg else ''}")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """Ctrl+Return / Ctrl+Enter on Pause, Resume or Stop is Start's key, never theirs."""
        if (event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent)
                and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
                and event.modifiers() & Qt.KeyboardModifier.ControlModifier
                and watched in (self.pause_btn, self.resume_btn, self.stop_btn)):
            if self.worker is not None:
                self._say("a run is training: Ctrl+Return starts the next one once it ends "
                          "(Ctrl+. stops it, Ctrl+P pauses)")
            return True
        return super().eventFilter(watched, event)

    def _generate_in_playground(self) -> None:
        """Ctrl+G: the Playground shown, and its generation started (from the Train tab it
        generated in the hidden tab, seen nowhere)."""
        self.tabs.setCurrentWidget(self.playground)
        self.playground.generate()

    def _say(self, msg: str) -> None:
        """A success/info message the user sees (status bar) and the log keeps."""
        self._log(msg)
        self.statusBar().showMessage(msg, 10000)

    def _on_corpus_added(self, added: str, rejected: list[tuple[str, str]]) -> None:
        """Say plainly what a drop or pick did not add: the status bar names the first file and
        why (the Corpus tab's notice names a few); when nothing at all was added, a warning names
        each file (up to 10), the reason and what to do, one line a file."""
        if not rejected:
            if added:  # (a "Nothing added" of the add before stayed on the status bar)
                self.statusBar().showMessage(f"Added {added}", 5000)
            return
        first = skip_line(*rejected[0])
        more = f" (and {len(rejected) - 1:,} more: Corpus tab)" if len(rejected) > 1 else ""
        if added:
            self.statusBar().showMessage(f"Added {added}; not added: {first}{more}", 15000)
            return
        self.statusBar().showMessage(f"Nothing added: {first}{more}", 15000)
        lines = skip_lines(rejected, 10)
        if len(rejected) > 10:
            lines.append(f"… and {len(rejected) - 10:,} more (listed under \"files skipped\" in "
                         "the Corpus tab)")
        if self.skip_box is not None:  # one warning at a time: the newest drop's
            self.skip_box.close()
            self.skip_box.deleteLater()
        box = QMessageBox(QMessageBox.Icon.Warning, "Nothing added to the corpus",
                          "\n".join(["Nothing was added to the corpus:", *lines]), parent=self)
        box.setTextFormat(Qt.TextFormat.PlainText)  # file names are not markup
        if any(engine.same_file_as(why) is None for _, why in rejected):  # (a link
            box.setInformativeText("The corpus takes text and code files in UTF-8.")  # is text)
        self.skip_box = box
        box.open()  # non-blocking, as errors are

    def _failed(self, msg: str) -> None:
        """A run that failed: its error, with the engine's command-line advice in the window's
        terms."""
        self._error(msg)  # (in the window's terms: _error says every message so)

    def unexpected_error(self, exc: BaseException) -> None:
        """An exception no handler expected (a bug that escaped a slot), in one line."""
        self._error(f"Unexpected error: {type(exc).__name__}: {' '.join(str(exc).split())}. "
                    "This is a bug: the details "
                    "were printed in the terminal that started Mamba Studio; please report them.")

    def _error(self, msg: str) -> None:
        msg = in_window_terms(msg)  # (an engine error shown as it is named the CLI's flags)
        self.errors.append(msg)
        self._log(f"ERROR: {msg}")
        self.statusBar().clearMessage()  # ("writing the export to …" stayed under its error)
        short = msg.strip().splitlines()[-1][:500] if msg.strip() else msg
        box = QMessageBox(QMessageBox.Icon.Warning, "Mamba Studio", short, parent=self)
        if short != msg:
            box.setDetailedText(msg)
        box.open()  # non-blocking: training and the UI keep going

    # ---------------------------------------------------------------- training
    def make_job(self) -> TrainJob:
        tc = self.train.train_config()  # (eval_every 0, "auto": the run's own cadence from its
        # held-out size, engine.Trainer.eval_every, as a CLI run of these settings gets)
        spec = replace(self.train.run_spec(self.init_dir, tc.eval_every),
                       records=self.corpus.record_mode(), prompts=tuple(self.preview.prompt_list()))
        spec.check()
        over = self.continue_overrides()
        if self.continue_dir and self.continue_spec is not None \
                and spec.prompts != self.continue_spec.prompts:
            over["prompts"] = spec.prompts  # edited after Continue showed the run's own: kept
        return TrainJob(spec=spec, paths=self.corpus.paths(), runs_root=self.runs_root,
                        continue_folder=self.continue_dir, overrides=over,
                        backend=self.backend.currentText())

    def continue_overrides(self) -> dict[str, object]:
        """What Continue passes to ``engine.resume_run``: the panel's epochs, max steps, learning
        rate, held-out cadence and early stopping that the user changed after choosing Continue
        (which showed the run's own values); "auto" keeps the run's cadence; max steps set back
        to "no limit" lifts the run's limit (``engine.NO_LIMIT``)."""
        if not self.continue_dir or self.continue_shown is None:
            return {}
        now, shown = self.train.train_config(), self.continue_shown
        over: dict[str, object] = {
            k: getattr(now, k) for k in LABELS if k in engine.RESUME_OVERRIDES
            and getattr(now, k) and getattr(now, k) != getattr(shown, k)}
        if now.max_steps is None and shown.max_steps is not None:  # set back to "no limit"
            over["max_steps"] = engine.NO_LIMIT
        spec = self.continue_spec
        if spec is not None:  # a settings file's warmup_steps, autosave_...: no box (dropped,
            for k, v in self.train.continue_extras.items():  # where --resume --config took them)
                if k in engine.RESUME_OVERRIDES and v != _run_value(spec, k, v):
                    over[k] = v
            early, was = self.train.early_stopping(), self.continue_early_shown
            had = spec.early_stopping.min_delta  # (no box: a file's, else the run's)
            md = self.train.continue_extras.get("min_delta", had)
            if (early.patience, early.target_loss) != (was.patience, was.target_loss) or md != had:
                over["early_stopping"] = replace(early, min_delta=md)
        return over

    def start_training(self) -> None:
        if self.state != "idle":
            return
        if self._reopening is not None:  # (a Start before it landed trained random weights)
            self._error(f"{self._reopening}, the model opened last time, is still being "
                        "opened; Start again when it is")
            return
        if not self.continue_dir and self.corpus.pending:
            self._error("The corpus is still being read; Start again when it is done.")
            return
        if not self.continue_dir:
            self._drop_vanished()
        if not self.continue_dir and not self.corpus.paths():
            self._error("Add at least one text file to the corpus first.")
            return
        try:
            job = self.make_job()
        except ValueError as exc:
            self._error(str(exc))
            return
        self.follower.stop()  # the plots are this run's from here (a refused Start keeps it)
        self.train.remember()
        self.preview.remember()
        self._reset_progress()
        self.progress.setFormat(PREPARING_FORMAT)  # until its first step
        self.plots.clear()
        self._clear_compare()
        if not self.continue_dir:  # a Continue shows its run's saved samples already
            self.preview.show_preview(NEW_RUN_SAMPLE, "", "—")  # (the previous run's stayed,
            # even after a Stop)
        self.worker = TrainWorker(job, self.preview.prompt_list(), self.preview.sampling(),
                                  self.preview.every.value())
        self.train_thread = QThread(self)
        self.worker.moveToThread(self.train_thread)
        self.train_thread.started.connect(self.worker.run)
        self.worker.info.connect(self._notice)
        self.worker.opened.connect(self._on_opened)
        self.worker.saved.connect(self._say)
        self.worker.ended.connect(self._on_ended)
        self.worker.step_finished.connect(self._on_step)
        self.worker.epoch_finished.connect(self._on_epoch)
        self.worker.preview_ready.connect(self._on_preview)
        self.worker.failed.connect(self._failed)  # (a bound method: run on this thread; a
        # lambda has no receiver and ran in the training thread, where a dialog crashed Qt)
        self.worker.finished.connect(self._on_finished)
        self.last_end = ""
        self.last_report = None
        self.current_run = None  # until the worker opens its run (a Delete of the previous run
        self._set_state("running")  # while preparing was refused as "training")
        self.statusBar().clearMessage()  # ("next Start continues RUN" stayed on after it had)
        self._update_next()
        self.status.set_full(f"{PREPARING} (corpus, tokenizer, model, kernels)…")
        self.train_thread.start()

    def _drop_vanished(self) -> None:
        """Files deleted or moved out of a folder added whole since it was read: left out of the
        corpus with a note (Start refused the whole corpus for them, and removing one by hand
        then saved the folder as its files of the day)."""
        gone = self.corpus.drop_vanished()
        if gone:
            names = engine.listing(told_apart(gone), 5)
            self._say(f"Left out of the corpus: {plural(len(gone), 'file')} deleted or moved "
                      f"from {'its folder' if len(gone) == 1 else 'their folders'} since "
                      f"{'it was' if len(gone) == 1 else 'they were'} added ({names})")

    def _on_opened(self, folder: str, continued: bool) -> None:
        self.current_run = folder
        self._show_run(folder)
        self.runs.busy_folder = folder
        if continued:
            self._draw_run(folder)  # the full history
        run = self.worker.run_obj if self.worker is not None else None
        if run is not None:
            self.progress.setFormat(STEPS_FORMAT)  # prepared: "preparing…" stayed through a
            self.progress.setMaximum(max(run.trainer.total_steps, 1))  # pause before step 1
            self.progress.setValue(run.step)
            tpb = run.data.heldout_tokens_per_byte  # (as the run shown later: read_tokens_per_byte)
            if tpb:
                self.plots.set_tokens_per_byte(tpb)
        self.gallery.show_run(folder)
        self.runs.refresh()
        self.runs.select(folder)
        if not continued:  # (a Continue is said by the run: "continuing RUN from step N")
            self._say(f"new run: {folder}")

    def _on_preview(self, tag: str, text: str, backend: str) -> None:
        self.preview.show_preview(tag, text, backend)
        if self.gallery.folder == self.current_run:
            self.gallery.reload()

    def _push_preview_settings(self) -> None:
        if self.worker is not None:
            self.worker.set_preview(self.preview.prompt_list(), self.preview.sampling(),
                                    self.preview.every.value())

    def toggle_pause(self) -> None:
        if self.state == "running":
            self.pause()
        elif self.state == "paused":
            self.resume()

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
        """A step's report: its curves' points at once (the plots redraw on their own clock);
        the status line, the progress bar and the Runs row at most every ``STEP_UI_S``, the
        latest step then. A small run makes ~25 steps a second on a 2-core Xeon: a status line
        rewritten that often cannot be read, and each rewrite is GUI work beside the training
        thread (the window's speed against the command line's: 0.92-0.96 before, 0.94-0.98
        after, 4 runs each interleaved; within that VM's noise)."""
        self.last_report = r
        self.plots.add_step(r)
        wait = self._step_ui_at + STEP_UI_S - time.monotonic()
        if wait <= 0 or r.nonfinite:  # (a skipped step is said, not overwritten unseen)
            self._show_step()
        elif not self._step_ui.isActive():
            self._step_ui.start(max(1, int(1000 * wait)))

    def _flush_step_ui(self) -> None:
        """The step shown now if one waits for ``_step_ui`` (before a state change, whose lines
        must not be overwritten by a late step)."""
        if self._step_ui.isActive():
            self._step_ui.stop()
            self._show_step()

    def _show_step(self) -> None:
        """The latest step on the status line, the progress bar and the Runs row."""
        self._step_ui_at = time.monotonic()
        r = self.last_report
        if r is None:
            return
        if self.current_run:  # the Runs tab's row of this run follows each step
            self.runs.update_live(self.current_run, r.step, self.state
                                  if self.state in ("paused", "stopping") else "running")
        self.progress.setFormat(STEPS_FORMAT)
        self.progress.setMaximum(r.total_steps)
        self.progress.setValue(r.step)
        if self.state == "paused":  # the step in flight at the pause ends after it
            self.status.set_full(self._paused_line())
        if self.state == "running":
            nan = "  (non-finite loss: step skipped)" if r.nonfinite else ""
            self.status.set_full(
                f"step {r.step:,}/{r.total_steps:,} · epoch {r.epoch + 1:,} · loss {r.loss:.4f} nats · "
                f"grad norm {r.grad_norm:.3f} · lr {r.lr:.2e} · {r.tokens_per_s:,.0f} tok/s · "
                f"ETA {engine.format_duration(r.eta_s)}{nan}"
            )

    def _on_epoch(self, e: engine.EpochReport) -> None:
        step = self.plots.steps[-1] if self.plots.steps else 0
        self.plots.add_epoch(e, int(step))
        val = (f", held-out {e.val.loss:.4f} (ppl {e.val.perplexity:.2f}, {e.val.describe()})"
               if e.val else "")
        self._notice(f"epoch {e.epoch + 1}: train {e.train_loss:.4f}, grad norm "
                     f"{e.grad_norm:.3f}{val}")

    def _on_ended(self, how: str) -> None:
        self.last_end = how

    def _release_memory(self) -> None:
        """Give the ended run's (or step timing's) memory back to the system (the window kept
        ~690 MB after a run until it was closed; 816 -> 500 MB after a medium run, measured)."""
        if self.worker is None:  # (not while another run trains)
            gc.collect()
            engine.release_freed_memory()

    def _on_finished(self, folder: str) -> None:
        if self.train_thread is not None:
            self.train_thread.quit()
            self.train_thread.wait()
        self.train_thread = None
        again = self.worker is not None and self.worker.nothing_left  # a Continue with no step
        run = self.worker.run_obj if self.worker is not None else None
        step_s = run.typical_step_s() if run is not None else None
        if run is not None and step_s is not None:
            # the run's median step: the estimate timed 3 steps once, on a machine busy then
            # (388 ms/step shown at a first launch for ~100 ms steps, until the settings
            # changed); kept across launches, under the model the run trained (a BPE run's
            # learned vocabulary, not the one asked: a 273-token run's time was shown for 2,048)
            self._step_times.from_run(estimate_key(run.lm.config, run.trainer.cfg), step_s)
        refused = bool(self.worker is not None and self.worker.refused)
        self.worker = None  # left: it stays chosen (Start after raising Epochs made a new run)
        QTimer.singleShot(1000, self, self._release_memory)  # once the worker is gone too
        if self.progress.format() == PREPARING_FORMAT:  # it ended before a step
            self._reset_progress()
        self.last_folder = folder or None
        if not refused:  # every Start is a new run unless the user chooses Continue again; a
            self.continue_dir = None  # Continue refused before it opened stays chosen (it fell
            self.train.end_resumable()  # back to a new run of random weights)
        self._set_state("idle")
        if again and folder:
            self.choose_continue(folder, quiet=True)
        if refused and self.continue_dir:  # its history again (Start had cleared the plots)
            self._draw_run(self.continue_dir)
        elif refused and self.shown_run:  # a new run refused before it opened: the run shown
            self._draw_run(self.shown_run)  # before its Start again (its curves stayed cleared)
            self._show_saved_preview(self.shown_run)
            if self.follower.follow(self.shown_run):  # (one another process trains: followed
                self._followed_progress(self.shown_run)  # again, as opening it does)
        self.runs.refresh()
        self.playground.refresh_runs()
        if folder:
            self._show_run(folder)
            self.playground.set_source(folder)
            self.gallery.show_run(folder)
        self._update_next()
        self._schedule_estimate()
        if self._closing:
            self.close()

    # ---------------------------------------------------------------- runs
    def _show_saved_preview(self, folder: str, kept: list[dict] | None = None) -> None:
        """The Preview pane shows ``folder``'s last saved samples (all prompts of its last
        preview), not the previous run's live ones. ``kept``: its kept samples, when read."""
        kept = engine.read_kept_samples(folder) if kept is None else kept
        samples = [r for r in kept if isinstance(r.get("text"), str)]
        name = Path(folder).name
        if not samples:
            self.preview.show_preview(f"none saved for {name}", "", "—")
            return
        last = samples[-1]
        group = [r for r in samples if (r.get("tag"), r.get("step")) == (last.get("tag"),
                                                                        last.get("step"))]
        self.preview.show_preview(f"{name}, {last.get('tag', '')}",
                                  "\n\n".join(r["text"] for r in group),
                                  str(last.get("backend", "—")))

    def open_run_view(self, folder: str) -> None:
        """Show a run: its full curves, its samples, and pick it in the Playground. While a run
        trains only that run is shown (another's curves had the live steps drawn over them)."""
        if self.worker is not None:
            name = Path(self.current_run or "").name or "a run"
            if folder != self.current_run:
                self._say(f"{name} is training: open {Path(folder).name} after it ends or is "
                          "stopped (Compare overlays its curves meanwhile).")
                return
            self.tabs.setCurrentIndex(0)  # the live run is what the Train tab shows
            self._say(f"{name} is training; its curves are on the Train tab")
            return
        try:  # a run.json that cannot be read is said now (it showed empty plots, no error)
            engine.read_run_spec(folder)
        except (OSError, ValueError, engine.MambaStudioError) as exc:
            self._error(f"cannot open {_about(folder, exc)}")
            return
        self._draw_run(folder)  # its history and its own bits/byte scale
        if folder == self.compared_run:  # not drawn over itself in grey
            self._clear_compare()
        self._reset_progress()
        self._show_saved_preview(folder)
        self.gallery.show_run(folder)
        self.playground.set_source(folder)
        self.tabs.setCurrentIndex(0)
        self._show_run(folder)
        if self.follower.follow(folder):  # (a command-line run's curves stood still)
            self._followed_progress(folder)
            self._say(f"showing {folder}: it is training in another process; its curves and "
                      "samples follow it")
        else:
            self._say(f"showing {folder}")
            lost = engine.lost_steps_note(folder)  # (said only at a Continue: a relaunch after
            if lost:  # a kill showed "interrupted at step 265" and no word of the steps after)
                self._log(f"note: {in_window_terms(lost)}")

    def _draw_run(self, folder: str) -> None:
        """The plots show ``folder``'s curves; a metrics.csv that cannot be read (a FIFO, a link
        to a device) is said, with the plots cleared (a traceback, and the previous run's curves
        stayed on screen)."""
        try:
            self.plots.show_run(folder)
        except (OSError, engine.MambaStudioError) as exc:
            self.plots.clear()
            self._error(f"cannot draw the curves of {folder}: {exc}")

    def _followed_grew(self, folder: str) -> None:
        """The shown run another process trains wrote more steps or samples: redraw what grew
        (each metrics row read samples.jsonl again, twice: the Preview's and the Gallery's)."""
        if self.worker is not None or folder != self.shown_run:
            self.follower.stop()
            return
        t0 = time.perf_counter()
        metrics, samples = self.follower.changed
        if metrics:
            self._draw_run(folder)
            self._followed_progress(folder)
        if samples and self.gallery.folder == folder:
            self.gallery.reload()
            self._show_saved_preview(folder, self.gallery.samples)
        elif samples:
            self._show_saved_preview(folder)
        self.follower.redrawn_in(time.perf_counter() - t0)

    def _followed_progress(self, folder: str) -> None:
        """The step bar of a run another process trains: its last step drawn of its total (it
        said "no run training")."""
        step, total = int(max(self.plots.steps, default=0)), engine.read_status(folder).get(
            "total_steps")
        name = Path(folder).name
        if _names_run(self.last_end, name) and self.last_end != f"{name} {ELSEWHERE}":
            self.last_end = f"{name} {ELSEWHERE}"  # (the idle line said "stopped at step 69"
            if self.state == "idle":               # while another window trained it on)
                self._set_state("idle")
        if isinstance(total, int) and total >= step:
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(step)
            self.progress.setFormat(f"{Path(folder).name} {ELSEWHERE}: step "
                                    f"{step:,} of {total:,}")

    def _followed_ended(self, folder: str) -> None:
        name = Path(folder).name
        if _names_run(self.last_end, name):  # the idle line names it: how it ended now
            ended = [r for r in engine.list_runs(Path(folder).parent) if r.path == Path(folder)]
            self.last_end = _how_it_ended(ended[0]) if ended else ""
            if self.state == "idle":
                self._set_state("idle")
        if folder == self.shown_run and self.worker is None:
            self._reset_progress()
            self._say(f"{name} is no longer training in another process")
            self.runs.refresh_soon()

    def _run_deleted(self, folder: str) -> None:
        """A deleted run leaves no view behind (its curves, samples, Gallery and Playground stayed
        on screen) and is no longer the next Start's Continue or starting weights."""
        if self.init_dir is not None and _inside(self.init_dir, folder):
            self._log(f"note: {self._opened_words()} went with {Path(folder).name}: the next "
                      "Start trains a new model from random weights")
            self.new_model()
        elif folder == self.continue_dir:
            self.new_model()
        if self.follower.folder == folder:
            self.follower.stop()
        if self.gallery.folder == folder:
            self.gallery.show_run(None)
        if self.playground.gen_thread is None:  # (mid-generation its locked Model box was
            if self.playground.source.currentText() == folder:  # swapped to another run while
                self.playground.set_source("")  # the deleted one's text streamed on)
            self.playground.refresh_runs()
        if _names_run(self.last_end, Path(folder).name):
            self.last_end = f"{Path(folder).name} (deleted)"  # not "finished at step N"
            if self.state == "idle":
                self._set_state("idle")
        if folder == self.compared_run:  # its grey curves stayed on the plot
            self._clear_compare()
        if folder == self.shown_run:
            self.plots.clear()
            self.preview.show_preview(f"{Path(folder).name} was deleted", "", "—")
            self._reset_progress()
            self._show_run(None)

    def _reset_progress(self) -> None:
        """Empty the step bar unless a run trains (it showed the previous run's 138 / 440 steps
        over another run's curves, or over a run stopped before its first step)."""
        if self.worker is None:  # (reset, the bar was an empty white box: a text field?)
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat(IDLE_FORMAT)

    def _show_run(self, folder: str | None) -> None:
        """The run File > Export acts on; its items are off (and say why) while there is none."""
        self.shown_run = folder or None
        why = adapter_problem(folder) if folder else None
        for kind, act in self.export_actions.items():
            act.setEnabled(self.shown_run is not None and (kind != "adapter" or why is None))
            act.setToolTip(NO_RUN_SHOWN if not folder else why
                           if kind == "adapter" and why is not None else
                           f"{EXPORT_KINDS[kind][0].replace('&', '').rstrip('…')} of run "
                           f"{Path(folder).name}")

    def choose_continue(self, folder: str, quiet: bool = False) -> None:
        if self.state != "idle":  # it did nothing, silently
            name = Path(self.current_run or "").name or "a run"
            what = ("it" if folder == self.current_run else Path(folder).name)
            self._say(f"{name} is {self.state}: Continue {what} after it ends or is stopped.")
            return
        try:
            spec = engine.read_run_spec(folder)
        except (OSError, ValueError, engine.MambaStudioError) as exc:
            self._error(f"cannot continue {_about(folder, exc)}")
            return
        if engine.RunLock(Path(folder)).held_elsewhere():  # (taken, then Start failed: "in use
            self._error(f"cannot continue {Path(folder).name}: another process is training it; "
                        "Open follows it as it trains, and Continue works once it ends")
            return  # by process N", with the status line saying "last run: not started")
        if self.init_dir is not None and not quiet:  # (dropped unsaid, LoRA set-up and all)
            self._log(f"note: {self._opened_words()} is no longer where the next Start begins: "
                      f"it continues {Path(folder).name} (File > Open model… opens it again)")
        self.continue_dir = folder
        self.continue_spec = spec
        self.continue_shown = None  # no overrides while the panel is being set
        self.init_dir = None
        self._forget_opened()
        self._drop_opened_model()  # nor is an opened model the next new run's start any more
        self.train.show_resumable(spec)  # the panel starts from the run's own values
        try:  # ... and its model (a run from opened weights has their shape, not its preset's)
            self.train.model_override = engine.read_model_config(folder)
        except (OSError, ValueError, engine.MambaStudioError):
            self.train.model_override = None
        self.train.refresh()
        self.preview.set_prompts(spec.prompts)  # ... and its preview prompts (run.json)
        self.continue_shown = self.train.train_config()
        self.continue_early_shown = self.train.early_stopping()
        self._draw_run(folder)
        self._reset_progress()
        self._show_saved_preview(folder)
        self.gallery.show_run(folder)
        self._show_run(folder)  # its curves are the ones shown
        self._update_next()
        self.tabs.setCurrentIndex(0)  # the Train tab: its curves and the Start it sets up
        if not quiet:
            self._say(f"next Start continues {folder}")
        self.notes_said = set()
        # (its Continue stopped again after a few steps, unwarned; a killed run went on from
        # its last snapshot without a word of the steps lost after it)
        for note in (engine.early_stop_note(folder), engine.lost_steps_note(folder)):
            if note and not quiet:
                said = f"note: {in_window_terms(note)}"
                self.notes_said.add(said)
                self._log(said)

    def compare_run(self, folder: str) -> None:
        """Overlay a run's curves (grey) on the shown run's; the shown run stays the one File >
        Export acts on."""
        if folder == self.shown_run:
            self._say(f"{Path(folder).name} is the run shown; Compare overlays another run")
            return
        rows = engine.read_kept_metrics(folder)
        if not rows:  # (a run deleted meanwhile: its grey label over no curve, unsaid)
            why = "is gone" if not Path(folder).is_dir() else "has no training steps to draw yet"
            self._error(f"cannot compare {Path(folder).name}: it {why}")
            return
        self.plots.set_compare(Path(folder).name, rows, engine.read_tokens_per_byte(Path(folder)))
        self.compared_run = folder
        self.tabs.setCurrentIndex(0)

    def _clear_compare(self) -> None:
        self.plots.set_compare("", [])
        self.compared_run = None

    def save_snapshot(self) -> None:
        if self.worker is None:
            self._say("Nothing is training: every run is saved in its folder already.")
            return
        self.worker.request("save", "")

    def _tokenizer_changed(self, kind: str) -> None:
        """A new run's tokenizer choice: the corpus summary says what it will be (token counts
        stay bytes until a BPE is trained at Start)."""
        if self.corpus.tokenizer is None:
            self.corpus.set_new_run_kind(kind)

    # ---------------------------------------------------------------- dialogs
    def _open_run_dialog(self) -> None:
        """Show a run from any folder (a CLI run under ./runs): its curves, samples (Gallery)
        and Playground, as the Runs tab's Open does for the runs folder's own."""
        path = QFileDialog.getExistingDirectory(self, "Show a run folder",
                                                settings.last_folder("run", self.runs_root))
        if path:
            settings.remember_folder("run", path)
            self.open_run_view(path)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802
        if self.state == "idle":
            self.corpus.drop.dragEnterEvent(event)
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802
        self.corpus.drop.dropEvent(event)

    # ---------------------------------------------------------------- shutdown
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.worker is not None and self.train_thread is not None:
            # finish the step in flight, save, then close (from _on_finished); never abort
            self._closing = True
            self.worker.control.stop()
            self._set_state("stopping")
            self.status.set_full("saving… the window closes when the current step ends and the "
                                "snapshot is written")
            self.statusBar().showMessage("saving…")
            event.ignore()
            return
        release(self._gc)  # first: a failed settings write below must not leave it off
        self._closed = True  # a step timing in the background stops before its next step
        self.playground.stop()
        if self.playground.gen_thread is not None:
            self.playground.gen_thread.quit()
            self.playground.gen_thread.wait()
        settings.save("window/geometry", self.saveGeometry())
        for key, splitter in self.splitters.items():
            settings.save(key, splitter.saveState())
        for key, tabs in self._tab_keys().items():
            settings.save(key, tabs.currentIndex())
        settings.save("preview/backend", self.backend.currentText())
        self.train.remember()
        self.preview.remember()
        self.playground.remember()
        super().closeEvent(event)
