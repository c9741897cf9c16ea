"""The window's estimate line: the next run's parameters, steps per epoch (its packed rows,
counted in a worker once per corpus and split settings) and time (a step timed in a worker once
the settings stay a while, or a kept run's median). A mixin of ``MainWindow``, whose panels,
state and timers it reads."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from PySide6.QtCore import QObject

import engine

from .step_times import StepTimes, estimate_key
from .words import in_window_terms
from .workers import run_in_thread

if TYPE_CHECKING:
    from PySide6.QtCore import QTimer

    from .panels.corpus_panel import CorpusPanel
    from .panels.elided_label import ElidedLabel
    from .panels.train_panel import TrainPanel


class EstimateFlow:
    """The estimate line's upkeep (``MainWindow`` mixes it in). Needs the window's panels
    (``corpus``, ``train``), the Continue and Open choices (``continue_dir``, ``init_dir``), its
    ``state``, the ``estimate`` label and timers, and ``_release_memory``."""

    corpus: CorpusPanel
    train: TrainPanel
    continue_dir: str | None
    init_dir: str | None
    state: str
    estimate: ElidedLabel
    _est_timer: QTimer
    _settle_timer: QTimer
    _step_times: StepTimes
    _measuring: tuple | None
    _wanted: tuple | None  # the settings the estimate shows now (a timing of others is stopped)
    _closed: bool
    _rows: dict[tuple, int | str]
    _counting: tuple | None
    _settling: object
    _settled: object
    _release_memory: Callable[[], None]

    def _corpus_tokens(self) -> int:
        return sum(self.corpus.tokens.get(p, f.n_bytes) for p, f in self.corpus.files.items())

    def _schedule_estimate(self) -> None:
        self._est_timer.start()

    def _next_model_config(self) -> engine.MambaConfig:
        """The model the next Start trains: a Continue's run's own, whatever the panel's preset
        says; else the panel's."""
        return (engine.read_model_config(self.continue_dir) if self.continue_dir
                else self.train.model_config())

    def _refresh_estimate(self) -> None:
        self.corpus.set_split(self.train.holdout.value(), self.train.seed.value(),
                              self.train.seq_len.value() + 1)
        try:
            cfg = self._next_model_config()
            tc = self.train.train_config()
            spec = replace(self.train.run_spec(self.init_dir, tc.eval_every),
                           records=self.corpus.record_mode())
            rows = self._epoch_rows(spec)
            key = estimate_key(cfg, tc)
            self._wanted = key
            step_s = self._step_times.get(key)
            est = engine.estimate_run(cfg, tc, self._corpus_tokens(),  # (once: a second call,
                                      rows=rows if isinstance(rows, int) else None,  # outside
                                      step_s=step_s)  # this try, could raise past it)
        except (ValueError, engine.MambaStudioError) as exc:
            self._wanted = None
            self.estimate.set_full(f"settings: {exc}")
            return
        may_measure = self.state == "idle" and os.environ.get("MAMBA_STUDIO_NO_MEASURE") != "1"
        # a BPE tokenizer still to be trained may learn fewer tokens than its vocabulary asks
        # (one learned 369 of 2,048: 196,544 parameters said, 89,536 trained)
        head = ("Estimate: up to " if self.corpus.tokenizer is None and not self.continue_dir
                and engine.choose_tokenizer(spec.tokenizer, self.corpus.n_bytes()) == "bpe"
                else "Estimate: ")
        refused = engine.why_not_measured(cfg, tc) if step_s is None else None
        if refused is not None:  # too large to fit or to time: never built in the background
            self.estimate.set_full(head + est.human(
                no_steps=rows if isinstance(rows, str) else "counting…", no_time="not measured")
                + f" · {refused}")
            return
        self.estimate.set_full(head + est.human(
            no_steps=rows if isinstance(rows, str) else "counting…",
            no_time="measuring…" if may_measure else "measured while idle"))
        if step_s is None and self._measuring is None and may_measure:
            if key != self._settled:  # not timed until these settings stay a while
                if key != self._settling or not self._settle_timer.isActive():
                    self._settling = key
                    self._settle_timer.start()
                return
            self._measuring = key

            def unwanted() -> bool:
                """Asked by the timing thread before each step: Start pressed, the settings
                changed or the window closed (a timing of 65,536-token rows went on for
                minutes beside the run started meanwhile, at half its speed)."""
                return self.state != "idle" or self._wanted != key or self._closed

            def done(sec: float) -> None:
                self._step_times.timed(key, sec)
                self._measuring = None
                self._refresh_estimate()
                self._release_memory()  # (three medium steps left ~280 MB held while idle)

            def fail(msg: str) -> None:
                self._measuring = None
                self._release_memory()
                if unwanted():  # stopped: the settings shown now get their own timing
                    if self.state == "idle" and not self._closed:
                        self._refresh_estimate()
                    return
                self.estimate.set_full(f"Estimate: {est.human()} (timing failed: {msg[-200:]})")

            run_in_thread(lambda: engine.measure_step_seconds(cfg, tc, should_stop=unwanted),
                          done, fail, owner=cast(QObject, self))

    def _settled_now(self) -> None:
        """The settings the settle timer waited on were left alone: time their step."""
        self._settled = self._settling
        self._refresh_estimate()

    def _epoch_rows(self, spec: engine.RunSpec) -> int | str | None:
        """The packed training rows of one epoch of the next run, counted in a worker once per
        corpus and split settings: a new run's by ``engine.plan_epoch`` (the run's own encode,
        split and pack, so the estimate's steps per epoch are the run's), a continued run's from
        its saved ids (``engine.read_epoch_rows``). None while counting; a str says why there
        is no count."""
        paths = tuple(self.corpus.paths())
        tok = self.corpus.tokenizer  # an opened model's; None: a new run's own tokenizer
        folder = self.continue_dir  # a Continue trains on the run's saved ids, not the corpus
        if folder is not None:
            # a folder replaced since (train --force) is counted again
            key: tuple[object, ...] = ("continue", folder, engine.run_written_ns(folder))

            def count() -> int:
                return engine.read_epoch_rows(folder)
        else:
            if not paths:
                return "no corpus"
            if tok is None and engine.choose_tokenizer(spec.tokenizer, self.corpus.n_bytes()) == "bpe":
                return "after Start (the BPE tokenizer is trained on the corpus then)"
            key = (paths, spec.records, id(tok), spec.holdout, spec.train.seed, spec.train.seq_len)

            def count() -> int:
                return engine.plan_epoch(spec, paths, tok).rows
        if key in self._rows:
            return self._rows[key]
        if self.state != "idle":
            return "counted while idle"
        if self._counting is None:
            self._counting = key

            def done(rows: int) -> None:
                self._rows[key] = rows
                self._counting = None
                self._refresh_estimate()

            def fail(msg: str) -> None:
                # (cut at 200 characters it read "... start a new run on the corpus with )";
                # the line is elided, its whole text in the tooltip)
                self._rows[key] = f"not counted ({in_window_terms(msg.strip().splitlines()[-1])})"
                self._counting = None
                self._refresh_estimate()

            run_in_thread(count, done, fail, owner=cast(QObject, self))
        return None
