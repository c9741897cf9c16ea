"""Worker objects that run engine work off the GUI thread.

``TrainWorker`` lives in its own QThread for a whole run: it builds the tokenizer, model and
trainer, trains with cooperative pause/stop and autosaves after every epoch and on stop.
Generation previews (step-0 baseline, then every epoch) run on a second, single preview thread
from a snapshot of the weights, on the wgpu path with a CPU fallback, so training never waits
for them; that thread alone owns the GPU device.
Signals carry immutable engine reports or plain strings, never live arrays.
``run_in_thread`` runs one short job (load/save/export) on the thread pool.
"""

from __future__ import annotations

import queue
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

import engine


@dataclass
class TrainJob:
    paths: list[str]
    run_dir: str
    preset: str = "small"
    custom: dict[str, int] | None = None  # d_model, n_layer, d_state overrides
    tokenizer: str = "bytes"  # bytes | bpe
    bpe_vocab: int = 2048
    init_dir: str | None = None  # start from this model folder
    resume_dir: str | None = None  # continue this training checkpoint
    train: engine.TrainConfig = field(default_factory=engine.TrainConfig)
    holdout: float = 0.1
    use_gpu: bool = True


class TrainWorker(QObject):
    info = Signal(str)
    step_finished = Signal(object)  # engine.StepReport
    epoch_finished = Signal(object)  # engine.EpochReport
    preview_ready = Signal(str, str, str)  # tag, text, backend description
    saved = Signal(str)
    failed = Signal(str)
    finished = Signal(str)  # run folder

    def __init__(self, job: TrainJob, prompts: list[str], sampling: engine.SamplingConfig) -> None:
        super().__init__()
        self.job = job
        self.control = engine.TrainControl()
        self.prompts = list(prompts)  # replaced by the GUI thread between previews
        self.sampling = sampling
        self.trainer: engine.Trainer | None = None
        self._requests: queue.Queue[tuple[str, str]] = queue.Queue()
        self._stepper: Any = None  # created and used only on the preview thread
        self._preview_lm: engine.MambaLM | None = None
        self._backend = "cpu"
        self._previews = ThreadPoolExecutor(max_workers=1, thread_name_prefix="preview")

    # ---------------------------------------------------------------- requests from the GUI
    def request(self, kind: str, path: str) -> None:
        """Queue 'save' / 'adapter' / 'merged' to run between two steps."""
        self._requests.put((kind, path))

    def serve_requests(self) -> None:
        while not self._requests.empty():
            kind, path = self._requests.get()
            self._do(kind, path)

    def _do(self, kind: str, path: str) -> None:
        tr = self.trainer
        assert tr is not None
        try:
            if kind == "save":
                tr.save(path)
            elif kind == "merged":
                tr.lm.save(path)
            elif kind == "adapter":
                if not isinstance(tr.trainable, engine.LoRATrainable):
                    raise engine.MambaStudioError("this run has no LoRA adapter to export")
                for w in tr.trainable.save_adapter(path):
                    self.info.emit(f"warning: {w}")
            self.saved.emit(f"{kind} written to {path}")
        except Exception as exc:
            self.failed.emit(f"could not write {kind} to {path}: {exc}")

    # ---------------------------------------------------------------- the run
    def _build(self) -> engine.Trainer:
        j = self.job
        corpus = engine.load_corpus(j.paths)
        for p, why in corpus.rejected:
            self.info.emit(f"skipped {p}: {why}")
        if j.resume_dir:
            ids = engine.encode_corpus(corpus.texts, engine.load_tokenizer(j.resume_dir))
            tr_ids, va_ids = engine.split_holdout(ids, j.holdout, j.train.seq_len)
            trainer = engine.Trainer.resume(j.resume_dir, tr_ids, va_ids, epochs=j.train.epochs,
                                            max_steps=j.train.max_steps)
            self.info.emit(f"resumed {j.resume_dir} at step {trainer.cursor.step}")
            return trainer
        if j.init_dir:
            lm = engine.MambaLM.load(j.init_dir)
        else:
            if j.tokenizer == "bpe":
                self.info.emit(f"training a BPE tokenizer ({j.bpe_vocab} tokens) on the corpus")
                tok = engine.BPETokenizer.train(corpus.texts, vocab_size=j.bpe_vocab)
            else:
                tok = engine.ByteTokenizer()
            cfg = engine.preset(j.preset, tok.vocab_size)
            if j.custom:
                cfg = engine.MambaConfig(vocab_size=tok.vocab_size, **j.custom)
            lm = engine.MambaLM.create(cfg, tok, seed=j.train.seed)
        ids = engine.encode_corpus(corpus.texts, lm.tokenizer)
        tr_ids, va_ids = engine.split_holdout(ids, j.holdout, j.train.seq_len)
        return engine.Trainer(lm, tr_ids, va_ids, j.train)

    def _preview(self, tag: str) -> None:
        """Queue a preview of the current weights on the preview thread; training goes on."""
        tr = self.trainer
        assert tr is not None
        snapshot = {k: v.copy() for k, v in tr.lm.params.items()}
        self._previews.submit(self._render, tag, snapshot)

    def _render(self, tag: str, snapshot: dict) -> None:
        """Runs on the single preview thread, which alone owns the GPU stepper."""
        try:
            tr = self.trainer
            assert tr is not None
            if self._preview_lm is None:
                self._preview_lm = engine.MambaLM(tr.lm.config, snapshot, tr.lm.tokenizer)
                if self.job.use_gpu:
                    self._stepper, reason = engine.open_stepper(self._preview_lm)
                else:
                    self._stepper, reason = None, "GPU preview switched off"
                self._backend = reason if self._stepper is not None else f"CPU step — {reason}"
            else:
                for k, v in snapshot.items():
                    self._preview_lm.params[k][...] = v
            if self._stepper is not None:
                self._stepper.sync()
            texts = []
            for prompt in self.prompts:
                try:
                    pieces = self._preview_lm.generate(prompt, self.sampling, self._stepper)
                    texts.append(prompt + "".join(pieces))
                except FloatingPointError as exc:
                    texts.append(f"{prompt} [generation failed: {exc}]")
            self.preview_ready.emit(tag, "\n\n".join(texts), self._backend)
        except Exception:
            self.info.emit(f"preview failed: {traceback.format_exc()}")

    @Slot()
    def run(self) -> None:
        try:
            self.trainer = tr = self._build()
            assert tr.trainable is not None
            self.info.emit(
                f"{tr.lm.n_params:,} parameters; {tr.trainable.describe()}; optimizer state "
                f"{tr.optimizer.state_bytes():,} bytes; {len(tr.train_ids):,} training / "
                f"{len(tr.val_ids):,} held-out tokens; {tr.total_steps} steps"
            )
            for note in tr.trainable.notices:
                self.info.emit(f"note: {note}")
            self._preview("step 0")
            tr.run(on_step=self._on_step, on_epoch=self._on_epoch, control=self.control)
            self.serve_requests()
            tr.save(self.job.run_dir)
            self.saved.emit(f"checkpoint saved to {self.job.run_dir}")
            self._previews.shutdown(wait=True)  # pending previews land before `finished`
            self.finished.emit(self.job.run_dir)
        except Exception as exc:
            self._previews.shutdown(wait=True)
            if self.trainer is not None:
                try:  # never lose a run: keep the last state (training stops between steps)
                    self.trainer.save(self.job.run_dir)
                except Exception as save_exc:
                    self.info.emit(f"could not save after the error: {save_exc}")
            msg = str(exc) if isinstance(exc, engine.MambaStudioError) else traceback.format_exc()
            self.failed.emit(msg)
            self.finished.emit("")

    def _on_step(self, report: engine.StepReport) -> None:
        self.step_finished.emit(report)
        self.serve_requests()

    def _on_epoch(self, report: engine.EpochReport) -> None:
        assert self.trainer is not None
        self.epoch_finished.emit(report)
        self.trainer.save(self.job.run_dir)  # autosave
        self._preview(f"epoch {report.epoch + 1}")


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
            msg = str(exc) if isinstance(exc, engine.MambaStudioError) else traceback.format_exc()
            self.signals.failed.emit(msg)
            return
        self.signals.done.emit(result)


_jobs: set[_Job] = set()


def run_in_thread(fn: Callable[[], Any], on_done: Callable[[Any], None],
                  on_failed: Callable[[str], None]) -> None:
    job = _Job(fn)
    job.setAutoDelete(False)
    _jobs.add(job)

    def finish(result: Any) -> None:
        _jobs.discard(job)
        on_done(result)

    def fail(msg: str) -> None:
        _jobs.discard(job)
        on_failed(msg)

    job.signals.done.connect(finish)
    job.signals.failed.connect(fail)
    QThreadPool.globalInstance().start(job)


def default_run_dir() -> str:
    import time

    base = Path.home() / ".local" / "share" / "mamba-studio" / "runs"
    return str(base / time.strftime("%Y%m%d-%H%M%S"))
