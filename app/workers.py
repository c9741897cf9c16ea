"""Worker objects that run engine work off the GUI thread.

``TrainWorker`` lives in its own QThread for a whole run and goes through ``engine.run``: a new
run folder (``start``) or the continuation of one (``resume``); the run autosaves, and ends with a
saved snapshot on stop, on error and on close. Generation previews (step 0, then every epoch) run
on a second, single preview thread from a copy of the weights, so training never waits for them;
every preview is appended to the run's samples.jsonl. ``GenerateWorker`` streams one generation
for the Playground. Signals carry immutable engine reports or plain values, never live arrays.
``run_in_thread`` runs one short job (load/save/export/measure) on the thread pool.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

import engine

from .words import plural


@dataclass
class TrainJob:
    spec: engine.RunSpec
    paths: list[str]
    runs_root: str
    continue_folder: str | None = None  # resume this run instead of starting a new one
    overrides: dict[str, Any] = field(default_factory=dict)  # RESUME_OVERRIDES for Continue
    backend: str = "auto"  # preview decoding: auto | cpu | gpu


def describe_error(exc: BaseException) -> str:
    """One line for our errors (a file's as the CLI says it, "FILE: reason"; running out of
    memory with what to make smaller); the traceback only for bugs."""
    if isinstance(exc, (OSError, MemoryError)):
        return engine.one_line(exc)
    return str(exc) if isinstance(exc, (engine.MambaStudioError, ValueError)) \
        else traceback.format_exc()


class TrainWorker(QObject):
    info = Signal(str)
    opened = Signal(str, bool)  # run folder, continued (True) or new (False)
    step_finished = Signal(object)  # engine.StepReport
    epoch_finished = Signal(object)  # engine.EpochReport
    preview_ready = Signal(str, str, str)  # tag, text, backend description
    saved = Signal(str)
    failed = Signal(str)
    finished = Signal(str)  # run folder ("" when none was made)
    ended = Signal(str)  # how the run ended, for the status line ("stopped at step 12 (...)")

    def __init__(self, job: TrainJob, prompts: list[str], sampling: engine.SamplingConfig,
                 every: int = engine.SAMPLE_EVERY) -> None:
        super().__init__()
        self.job = job
        self.control = engine.TrainControl()
        # (prompts, sampling): replaced whole by the GUI thread (``set_preview``) and read whole,
        # so a preview never pairs new sampling with the old prompts
        self.preview_settings: tuple[tuple[str, ...], engine.SamplingConfig] = (
            tuple(prompts), sampling)
        self.run_obj: engine.Run | None = None
        self.folder: str = ""
        self._requests: queue.Queue[tuple[str, str, bool, str | None]] = queue.Queue()
        self._stepper: Any = None  # created and used only on the preview thread
        self._preview_lm: engine.MambaLM | None = None
        self._backend = "CPU step"
        self._previews = ThreadPoolExecutor(max_workers=1, thread_name_prefix="preview")
        self._tb: engine.TBLogger | None = None
        self.sample_every = every  # steps between previews inside an epoch (set_preview)
        self._schedule: engine.SampleSchedule | None = None  # made when the run opens
        self._queued: Future[None] | None = None  # the latest preview queued
        self._unsaved = False  # a preview that could not be kept in the Gallery was said
        self.refused = False  # the run could not be opened (a Continue's totals, a moved folder)
        self.nothing_left = False  # a Continue of a run already at its last step

    # ---------------------------------------------------------------- requests from the GUI
    def set_preview(self, prompts: list[str], sampling: engine.SamplingConfig,
                    every: int) -> None:
        """New preview prompts and settings from the GUI thread, as one value; ``every``: steps
        between previews inside an epoch (0: epoch ends only), from the next step on."""
        self.preview_settings = (tuple(prompts), sampling)
        self.sample_every = every

    def request(self, kind: str, path: str, force: bool = False, source: str | None = None
                ) -> None:
        """Queue 'save' / 'adapter' / 'merged' / 'gguf' to run between two steps (``force``:
        replace an earlier export in ``path``; ``source``: one of the run's snapshots instead of
        its current weights, read while no save can prune it)."""
        self._requests.put((kind, path, force, source))

    def _serve_requests(self) -> None:
        while not self._requests.empty():
            kind, path, force, source = self._requests.get()
            try:
                assert self.run_obj is not None
                if kind == "save" or source is None:  # a snapshot of the open run (an export
                    self._before_save()  # of it saves one first): its steps' events first
                if kind == "save":
                    snap = self.run_obj.save()
                    self.saved.emit(f"snapshot saved: {snap}")
                elif source is not None:
                    for w in export_run(source, kind, path, force):
                        self.info.emit(f"warning: {w}")
                    self.saved.emit(f"{kind} written to {path} (from run "
                                    f"{self.run_obj.folder.name}, snapshot {Path(source).name})")
                else:
                    for w in export_from(self.run_obj, kind, path, force):
                        self.info.emit(f"warning: {w}")
                    self.saved.emit(f"{kind} written to {path} (from run "
                                    f"{self.run_obj.folder.name}, step {self.run_obj.step})")
            except Exception as exc:
                self.failed.emit(f"could not write {kind} to {path}: {describe_error(exc)}")

    # ---------------------------------------------------------------- the run
    def _open(self) -> engine.Run:
        j = self.job
        if j.continue_folder:
            over = {k: v for k, v in j.overrides.items() if k in engine.RESUME_OVERRIDES}
            run = engine.resume_run(j.continue_folder, **over)
            changed = ", ".join(f"{k} {'no limit' if k == 'max_steps' and not v else v}"
                                for k, v in over.items())
            self.info.emit(f"continuing {run.folder} from step {run.step}"
                           + (f" with {changed}" if changed else ""))
            return run
        return engine.start_run(j.spec, j.paths, root=j.runs_root, progress=self.info.emit,
                                should_stop=lambda: self.control.stopped)

    @Slot()
    def run(self) -> None:
        try:
            self.run_obj = run = self._open()
        except engine.Stopped as exc:  # Stop before step 0: nothing kept, not an error
            self._previews.shutdown(wait=False)
            self.saved.emit(str(exc))
            self.ended.emit("stopped while preparing; nothing was kept")
            self.finished.emit("")
            return
        except Exception as exc:
            self._previews.shutdown(wait=False)
            self.refused = True  # the run was never opened: the window keeps what was chosen
            self.failed.emit(describe_error(exc))
            self.ended.emit("not started (see the Log tab)")
            self.finished.emit("")
            return
        self.folder = str(run.folder)
        self.opened.emit(self.folder, bool(self.job.continue_folder))
        try:
            with run:
                tr = run.trainer
                self._tb = engine.run_logger(run, resumed=bool(self.job.continue_folder),
                                             on_error=self.info.emit)
                self.info.emit(
                    f"run {run.folder.name}: {tr.lm.n_params:,} parameters; "
                    f"{tr.trainable.describe() if tr.trainable else ''}; "
                    f"{tr.token_counts[0]:,} training / {tr.token_counts[1]:,} held-out tokens; "
                    f"{plural(tr.total_steps, 'step')}")
                for warning in run.warnings:
                    self.info.emit(f"warning: {warning}")
                for note in run.notices:
                    self.info.emit(f"note: {note}")
                fix = {"epochs": "Epochs", "max_steps": "Max steps"}[tr.limited_by]
                if (warmup_note := tr.warmup_notice(fix)) is not None:
                    self.saved.emit(f"note: {warmup_note}")
                if tr.cursor.step >= tr.total_steps and not run.unscored:  # Continue on a
                    # finished run: say what to do (one stopped during its final evaluation: score it)
                    self.saved.emit(f"{run.folder.name} is already at step {tr.cursor.step} of "
                                    f"{tr.total_steps}: raise Epochs or Max steps (Model & training),"
                                    " then Start (it stays the run Start continues)")
                    self.nothing_left = True
                    return
                if run.measuring_first:  # (measured first by run.train)
                    self.info.emit(f"{run.folder.name} {run.measuring_first}")
                self._schedule = schedule = engine.SampleSchedule(self.sample_every, run.step)
                if engine.last_sampled_step(run.folder) != run.step:  # (from the file's end)
                    # (a finished run continued had its last epoch's sample twice in the Gallery)
                    self._preview(engine.sample_tag(run.step),  # (step 0: "untrained")
                                  tr.cursor.epoch)  # epochs done (a Continue's said 0)
                result = run.train(on_step=self._on_step, on_epoch=self._on_epoch,
                                   control=self.control, on_save=self._on_save,
                                   on_notice=self.info.emit, before_save=self._before_save)
                self._serve_requests()
                if (result.state == "finished" or result.reason) and schedule.last != run.step:
                    self._preview(engine.sample_tag(run.step), run.trainer.cursor.epoch)  # a run ending
                    # inside an epoch showed no sample of its trained model at all
                self._previews.shutdown(wait=True)  # its samples written while the run is ours
                prompts = self.preview_settings[0]
                if prompts != run.spec.prompts:  # edited while training: kept
                    try:
                        run.set_prompts(prompts)
                    except ValueError as exc:  # (17 prompts reported a saved run as failed)
                        self.info.emit(f"note: the preview prompts are not kept with the run: "
                                       f"{exc}")
                notes = [f"{result.reason}; the best snapshot is kept"] if result.reason else []
                if result.unscored:  # (it said "finished")
                    notes.append(f"{engine.UNSCORED}; Continue scores it")
                if result.val_loss is not None:  # a run ending inside an epoch logged it nowhere
                    notes.append(f"held-out loss {result.val_loss:.4f}")
                why = f" ({'; '.join(notes)})" if notes else ""
                self.saved.emit(f"{result.state} at step {result.step}{why}; snapshot {result.snapshot}")
                self.ended.emit(f"{run.folder.name} {result.state} at step {result.step}{why}")
        except Exception as exc:
            self.failed.emit(describe_error(exc))
            self.ended.emit(f"{run.folder.name} failed (see the Log tab)")
        finally:
            if self._tb is not None:
                self._tb.close()
            self._previews.shutdown(wait=True)  # pending previews land before `finished`
            self.finished.emit(self.folder)  # also after the early return above

    def _before_save(self) -> None:
        if self._tb is not None:  # its events up to the snapshot: a kill -9 leaves no gap
            self._tb.flush()

    def _on_save(self, path: Path) -> None:
        self.info.emit(f"snapshot {path.name} saved")

    def _on_step(self, r: engine.StepReport) -> None:
        self.step_finished.emit(r)
        if self._tb is not None:
            self._tb.on_step(r)
        schedule, run = self._schedule, self.run_obj
        if schedule is not None and run is not None:
            schedule.every = self.sample_every
            busy = self._queued is not None and not self._queued.done()  # (the last one still
            if schedule.due(r.step, run.trainer.at_epoch_end) and not busy:  # runs: no queue
                self._preview(engine.sample_tag(r.step), run.trainer.cursor.epoch)  # grows behind it)
        self._serve_requests()

    def _on_epoch(self, report: engine.EpochReport) -> None:
        self.epoch_finished.emit(report)
        if self._tb is not None and self.run_obj is not None:
            self._tb.on_epoch(self.run_obj.step, report)
        self._preview(engine.sample_tag(self.run_obj.step if self.run_obj else 0,
                                        report.epoch + 1), report.epoch + 1)

    # ---------------------------------------------------------------- previews
    def _preview(self, tag: str, epochs_done: int) -> None:
        """Queue a preview of the current weights on the preview thread; training goes on.
        Its samples are recorded with ``epoch`` = epochs completed (0: before the first)."""
        run = self.run_obj
        assert run is not None
        snapshot = {k: v.copy() for k, v in run.lm.params.items()}
        step, epoch = run.step, epochs_done
        if self._schedule is not None:
            self._schedule.shown(step)
        self._queued = self._previews.submit(self._render, tag, snapshot, step, epoch)

    def _render(self, tag: str, snapshot: dict, step: int, epoch: int) -> None:
        """Runs on the single preview thread, which alone owns the GPU stepper."""
        try:
            run = self.run_obj
            assert run is not None
            if self._preview_lm is None:
                self._preview_lm = engine.MambaLM(run.lm.config, snapshot, run.lm.tokenizer)
                self._stepper, self._backend = engine.pick_backend(self._preview_lm, self.job.backend)
            else:
                for k, v in snapshot.items():
                    self._preview_lm.params[k][...] = v
            if self._stepper is not None:
                self._stepper.sync()
            texts = []
            prompts, s = self.preview_settings
            for i, prompt in enumerate(prompts):
                cfg = replace(s, seed=engine.sample_seed(s.seed, i))
                try:
                    text = prompt + "".join(self._preview_lm.generate(prompt, cfg, self._stepper))
                except FloatingPointError as exc:
                    text = f"{prompt} [generation failed: {exc}]"
                texts.append(text)
                try:
                    engine.append_sample(run.folder, engine.sample_record(
                        tag, step, epoch, prompt, text, cfg, self._backend))
                except engine.MambaStudioError as exc:  # (a FIFO there: a traceback in the
                    if not self._unsaved:  # Log at every preview, and no preview shown)
                        self.info.emit(f"note: previews are shown but not kept in the "
                                       f"Gallery: {exc}")
                    self._unsaved = True
            self.preview_ready.emit(tag, "\n\n".join(texts), self._backend)
        except Exception as exc:  # (an OSError said "[Errno 13] ...", running out of memory a
            self.info.emit(f"preview failed: {describe_error(exc)}")  # traceback)


EXPORTERS = {"merged": "export_merged", "adapter": "export_peft", "gguf": "export_gguf"}


def export_from(run: engine.Run, kind: str, path: str, force: bool = False) -> list[str]:
    """Export an open (training) run: save a snapshot of its current state, then export that
    snapshot (``export_run``; read as the run folder, it was "training: the steps after it are
    not in the export", said of the very step it had just saved). Returns notices."""
    return export_run(str(run.save()), kind, path, force)


def export_run(folder: str, kind: str, path: str, force: bool = False) -> list[str]:
    """Export a run folder through ``engine.export``: 'merged' (transformers 4.x/5.x, any adapter
    merged), 'adapter' (PEFT adapter + its unmerged base in ``path/base``; refused for targets
    PEFT cannot apply) or 'gguf' (llama.cpp). Reads the latest verified snapshot; returns notices.
    ``path`` must be new or empty unless ``force`` (an earlier export there is replaced)."""
    if kind not in EXPORTERS:
        raise ValueError(f"unknown export kind {kind!r}")
    return list(getattr(engine, EXPORTERS[kind])(folder, path, force=force))


PIECE_EVERY_S = 0.05  # the Playground's text goes to the window at most this often (a batch)


class GenerateWorker(QObject):
    """Streams one generation for the Playground; ``stop`` ends it after the current token."""

    piece = Signal(str)
    progress = Signal(str)  # what it is doing (loading, reading the prompt, tokens so far)
    done = Signal(str)  # a summary: tokens, tok/s, backend
    failed = Signal(str)
    _said: set[str] = set()  # backend descriptions said in full this session

    def __init__(self, source: str, prompt: str, sampling: engine.SamplingConfig,
                 backend: str) -> None:
        super().__init__()
        self.source, self.prompt, self.sampling, self.backend = source, prompt, sampling, backend
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    @Slot()
    def run(self) -> None:
        import time

        try:
            passed_over: list[str] = []  # (a run whose latest snapshot was gone generated from
            lm = engine.load_model(self.source, notify=passed_over.append)  # an older one,
            lm.check_finite(self.source)  # unsaid: the CLI warns)
            for note in passed_over:
                self.progress.emit(f"warning: {note}")
            stepper, desc = engine.pick_backend(lm, self.backend)
            if " — " in desc and desc in GenerateWorker._said:  # the GPU note once a session
                desc = desc.split(" — ")[0]  # (each summary repeated it over two lines)
            GenerateWorker._said.add(desc)
            if self._stop.is_set():  # Stop while the model loaded: no prompt read (7-12 s for
                self.done.emit("stopped before generating")  # 200,000 tokens) after it
                return
            ids = lm.prompt_ids(self.prompt)  # (an end-of-text id first, as generate reads it)
            given = len(ids) - 1  # the prompt's own tokens
            reading_what = f"reading the prompt ({plural(given, 'token')})…"
            if given > 1:  # a long prompt took ~30 s under "loading the model…"
                self.progress.emit(reading_what)
            t0 = time.perf_counter()
            cut: list[int] = []  # the tokens read when Stop cut the prompt's reading
            said_at = [t0]

            def reading(read: int) -> bool:  # between pieces of a long prompt (engine's
                if self._stop.is_set():  # PROMPT_PIECE tokens each: ~0.1 s)
                    cut.append(read)
                    return True
                if (now := time.perf_counter()) - said_at[0] >= 0.5:
                    said_at[0] = now
                    self.progress.emit(f"{reading_what} {100 * read // len(ids)} %")
                return False
            first = t0  # when the first new token came (the prompt read)
            n, stopped, seen = 0, False, False  # seen: text other than blank space
            text = engine.GeneratedText(lm.tokenizer)  # as lm.generate, counting tokens
            shown = 0.0  # when the count of tokens was last said
            pending: list[str] = []  # text not yet sent to the window, and when it last was
            sent = 0.0
            for tok in lm.generate_ids(ids, self.sampling, stepper, reading):
                n += 1
                if n == 1:
                    first = time.perf_counter()
                if n % 64 == 0 and (now := time.perf_counter()) - shown > 1.0:
                    shown = now  # (a 100,000-token generation said only "generating…")
                    self.progress.emit(f"generating… {n:,} of "
                                       f"{plural(self.sampling.max_new_tokens, 'token')}")
                piece = text.step(tok)
                if piece:
                    seen = seen or not piece.isspace()
                    pending.append(piece)
                    if (now := time.perf_counter()) - sent >= PIECE_EVERY_S:
                        sent = now  # (one insert a token: 583 tokens/s on a long line, where
                        self.piece.emit("".join(pending))  # 1,800 with line breaks)
                        pending.clear()
                if self._stop.is_set():
                    stopped = True
                    break
            if cut:
                self.done.emit(f"stopped while reading the prompt ({cut[0] - 1:,} of "
                               f"{plural(given, 'token')} read)")
                return
            tail = "".join(pending) + text.flush()
            if tail:
                seen = seen or not tail.isspace()
                self.piece.emit(tail)
            end = time.perf_counter()
            why = ("stopped" if stopped else "ended at end of text"
                   if n < self.sampling.max_new_tokens else "reached the length")
            if n == 0 and not stopped and self.sampling.max_new_tokens:  # (a bare "0 tokens")
                why = ("ended at end of text at once: train it longer, give a prompt it can go "
                       "on from, or untick \"stop at end of text\"")
            elif n and not seen:  # (unticked as that says: 8,329 blank lines, unexplained)
                why += (": only end-of-text tokens (each shown as a line break) or blank space; "
                        "train it longer, or give a prompt it can go on from")
            run = str(Path(self.source)) + "/"  # the note's paths inside the run, shortened
            used = (f" · {Path(lm.source).name}, not the snapshot latest.json names "
                    f"({passed_over[0].replace(run, '')})" if passed_over and lm.source
                    and engine.is_run(Path(self.source)) else "")  # (a PEFT export's base note:
            # no snapshot was passed over)
            self.done.emit(generation_summary(n, first - t0, end - first, given, why,  # whose
                                              f"{desc} · {Path(self.source).name}{used}"))
            # the Model box may show another run by then (its run deleted meanwhile)
        except Exception as exc:
            self.failed.emit(describe_error(exc))
            self.done.emit("failed")


def generation_summary(n: int, prompt_s: float, rest_s: float, prompt_tokens: int, why: str,
                       backend: str) -> str:
    """The Playground's line after a generation: with the prompt's time said (0.5 s or more),
    the rate of the new tokens after the first (whose time is the prompt's reading: with a
    300 KB prompt "200 tokens in 30.11 s (7/s)" was mostly the prompt); else the tokens over
    the time said ("200 tokens in 0.08 s (2,787/s)" did not add up)."""
    read = (f"; the prompt ({plural(prompt_tokens, 'token')}) read in {prompt_s:.2f} s"
            if prompt_s >= 0.5 else "")
    if n <= 1 and read:  # (one token after a long prompt: "1 token in 11.00 s (0/s)" was noise)
        return f"{plural(n, 'token')}{read}, {why} — {backend}"
    rate = ((n - 1) / rest_s if read and n > 1 and rest_s > 0
            else n / max(prompt_s + rest_s, 1e-9))
    took = prompt_s + rest_s  # (to the ms under a second: "0.06 s (2,820/s)" did not add up)
    return (f"{plural(n, 'token')} in {took:.{3 if took < 1 else 2}f} s ({rate:,.0f}/s){read}, "
            f"{why} — {backend}")


class _JobSignals(QObject):
    done = Signal(object)
    failed = Signal(str)


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__()
        self.fn = fn
        self.signals = _JobSignals()

    def run(self) -> None:
        try:
            result = self.fn()
        except Exception as exc:
            self._emit("failed", describe_error(exc))
            return
        self._emit("done", result)

    def _emit(self, name: str, value: object) -> None:
        # RuntimeError: the app quit while this ran (the window closed in its first seconds, the
        # step timing still running) and deleted its signals; no one is waiting for them
        with contextlib.suppress(RuntimeError):
            getattr(self.signals, name).emit(value)


_jobs: set[_Job] = set()


def run_in_thread(fn: Callable[[], Any], on_done: Callable[[Any], None],
                  on_failed: Callable[[str], None], owner: QObject | None = None) -> None:
    """Run ``fn`` on the thread pool; its result goes to ``on_done`` on the GUI thread, unless
    ``owner`` (the widget the callbacks touch) has been deleted meanwhile."""
    job = _Job(fn)
    job.setAutoDelete(False)
    _jobs.add(job)

    def alive() -> bool:
        return owner is None or shiboken6.isValid(owner)

    def finish(result: Any) -> None:
        _jobs.discard(job)
        if alive():
            on_done(result)

    def fail(msg: str) -> None:
        _jobs.discard(job)
        if alive():
            on_failed(msg)

    job.signals.done.connect(finish)
    job.signals.failed.connect(fail)
    QThreadPool.globalInstance().start(job)
