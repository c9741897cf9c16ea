"""A training run: the one object that owns a run folder (format: ``engine.runformat``).

    run = start(RunSpec(preset="small"), ["corpus/"])      # new folder runs/<date>-small-<n>
    with run, stop_on_signals(control):
        result = run.train(on_step=..., control=control)    # autosaves; result.snapshot
    run = resume("runs/2026-12-03-small-1", max_steps=500) # needs no corpus
    view = open_run("runs/2026-12-03-small-1")             # read-only, checksums verified

What a run is made from is a ``RunSpec`` (``engine.runspec``). Resume overrides
(``RESUME_OVERRIDES``) change the schedule from the saved step on (and the preview ``prompts``,
kept in run.json so previews keep them after a resume): ``epochs`` and ``max_steps`` are totals
(not "more"), and the warmup + cosine schedule is recomputed over the new total, so the learning
rate continues from where the new curve is at the saved step. Deleting a run:
``engine.runformat.delete_run``.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from . import checkpoint as ckpt
from . import runformat as rf
from .config import MambaConfig
from .control import PauseReporting, RunControl, TrainControl
from .corpuswalk import summary
from .data import encode_corpus, id_dtype, load_corpus, require_present, split_holdout
from .defaults import BPE_MIN_BYTES
from .documents import encode_documents, split_documents
from .earlystop import EarlyStopping
from .errors import CheckpointError, MambaStudioError, TrainingError, one_line
from .evaluation import HELDOUT_SAMPLE_TOKENS
from .guard import DivergenceGuard
from .limits import (
    check_run,
    n_params,
)
from .lm import MambaLM
from .lora import count_trainable
from .packing import PackedRows, pack_documents
from .runspec import RESUME_OVERRIDES, RunSpec
from .safeio import resolved
from .signals import stop_on_signals
from .tokenizer import BPETokenizer, ByteTokenizer, bpe_sample_every, check_fits
from .trainer import EpochReport, StepReport, TrainConfig, Trainer, epoch_steps, epochs_end_first
from .words import listing, plural

UNSCORED = ("at its last step, before its final held-out evaluation was done: that step is saved "
            "without a held-out loss")


@dataclass(frozen=True)
class TrainResult:
    state: str  # finished | stopped
    step: int
    snapshot: Path
    val_loss: float | None = None  # the held-out loss measured at ``step``, if one was
    reason: str = ""  # why it stopped before its end when the run decided it ("early stopping: ...")
    unscored: bool = False  # stopped at its last step before (or during) its final evaluation


class Run:
    """An open, locked run folder with its model and trainer. Use as a context manager (or call
    ``close``) so the lock is released."""

    def __init__(self, folder: Path, spec: RunSpec, lm: MambaLM, data: rf.RunData,
                 lock: rf.RunLock) -> None:
        self.folder = folder
        self.spec = spec
        self.lm = lm
        self.data = data
        self.lock = lock
        self.trainer = _trainer(lm, data, spec.train)
        self.notices: list[str] = list(self.trainer.trainable.notices if self.trainer.trainable else [])
        self.warnings: list[str] = []  # damaged snapshots a resume passed over for an older one
        held = self.trainer.token_counts[1]
        if held > HELDOUT_SAMPLE_TOKENS:  # (the CLI and the window each said it their way)
            self.notices.append(f"held-out loss is measured on a fixed sample of about "
                                f"{HELDOUT_SAMPLE_TOKENS:,} of the {held:,} held-out tokens (rows "
                                "spread evenly over the held-out documents)")
        if spec.holdout > 0 and held < SMALL_HELD_OUT:
            self.notices.append(
                f"the held-out set is only {plural(held, 'token')}, too few for "
                "its loss to mean much; add text to the corpus" if held else
                "nothing is held out: the corpus is too small to split; its held-out loss is not "
                "measured")
        self.notices += self._beyond_the_corpus(spec.train)
        if first := epochs_end_first(self.trainer.steps_per_epoch, spec.train.epochs,
                                     spec.train.max_steps):
            self.notices.append(f"{first[0]}; pass --epochs {first[1]} to reach it")
        self.saved_step = -1
        self.saved_val: float | None = None  # the held-out loss kept with that save (its step's)
        self.saved_eval_stopped = False  # that save's step's evaluation was cut short by a stop
        self.best_val: float | None = None
        self.early_bad = 0  # held-out evaluations since the best (EarlyStopping.bad), saved

    def _beyond_the_corpus(self, tc: TrainConfig) -> list[str]:
        """Notes for settings the training corpus cannot fill (they were cut without a word:
        a sequence length of 100,000 trained rows of 17,815 tokens, and an accumulation of
        1,000 x 4 rows trained each step on the 81 rows there were)."""
        rows, notes = self.trainer.rows, []
        width = int(getattr(rows, "width", tc.seq_len))
        if width < tc.seq_len:
            notes.append(f"the training text fills rows of {width:,} tokens, not the sequence "
                         f"length of {tc.seq_len:,}: rows are that long")
        if self.trainer.rows_per_step > len(rows):
            notes.append(f"a step takes {self.trainer.rows_per_step:,} rows (batch "
                         f"{tc.batch_size:,} x accumulation {tc.grad_accum:,}), but the training "
                         f"text fills only {plural(len(rows), 'row')}: each step trains on all "
                         "of it once")
        return notes

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.lock.release()

    @property
    def step(self) -> int:
        return self.trainer.cursor.step

    @property
    def done(self) -> bool:
        """At the run's last step (its total steps or its epochs)."""
        tr = self.trainer
        return self.step >= tr.total_steps or tr.cursor.epoch >= self.spec.train.epochs

    @property
    def unscored(self) -> bool:
        """Done, holding out text, and its last save has no held-out loss of its step (stopped
        during its final evaluation): ``train`` scores it and trains nothing."""
        return (self.done and self.trainer.has_val
                and (self.saved_step != self.step or self.saved_val is None))

    @property
    def interrupted_eval(self) -> bool:
        """Not done, and saved at a step whose held-out evaluation a stop cut short (the
        snapshot says so: ``eval_stopped``): ``train`` measures it first (it was dropped for
        good, a gap in the curve and one evaluation fewer for early stopping than the run not
        stopped). Told by the snapshot, not guessed from the step: a save without a loss (the
        window's Save) and a changed ``eval_every`` are no such stop."""
        return (not self.done and self.trainer.has_val and self.step > 0
                and self.saved_step == self.step and self.saved_eval_stopped)

    @property
    def measuring_first(self) -> str | None:
        """What a resume says before it measures a held-out loss a stop left unmeasured (at the
        run's last step or inside it), after the run's name; None when there is none."""
        if self.unscored or self.interrupted_eval:
            return f"stopped before its held-out loss at step {self.step} was measured: measuring it"
        return None

    # ------------------------------------------------------------------ saving
    def save(self, val_loss: float | None = None) -> Path:
        """Publish a snapshot of the current state (refused if any weight is NaN/Inf)."""
        tr = self.trainer
        self._here()
        try:
            self.lm.check_finite(self.folder)
        except CheckpointError as exc:
            raise TrainingError(f"not saving: {exc}") from None
        stopped = val_loss is None and tr.eval_stopped_at == tr.cursor.step  # (a stop cut the
        # step's evaluation short: the resume measures it)
        tensors, meta = rf.trainer_state.pack(tr.state_dict(), self.early_bad, stopped)
        try:
            path = rf.write_snapshot(
                self.folder, tr.cursor.step,
                lambda d: ckpt.save_model_files(d, self.lm.config, self.lm.params,
                                                self.lm.tokenizer),
                tensors, meta, val_loss, self.spec.keep)
        except (OSError, MambaStudioError):
            ptr = rf.read_pointer(self.folder)  # published, then latest.json failed: the
            if ptr is not None and ptr.get("step") == tr.cursor.step:  # snapshot is the one a
                self.saved_step, self.saved_val = tr.cursor.step, val_loss  # resume takes (the
                self.saved_eval_stopped = stopped  # error said its steps were lost)
            raise
        self.saved_step = tr.cursor.step
        self.saved_val = val_loss
        self.saved_eval_stopped = stopped
        if val_loss is not None and (self.best_val is None or val_loss < self.best_val):
            self.best_val = val_loss
        return path

    def set_prompts(self, prompts: Sequence[str]) -> None:
        """Keep new preview prompts in run.json (the app's Preview edited during training), so
        the run's next resume previews with them."""
        spec = replace(self.spec, prompts=tuple(prompts))
        spec.check(new=False)
        rf.rewrite_run_spec(self.folder, spec.to_dict())
        self.spec = spec

    def _val_loss(self, control: RunControl) -> float | None:
        """Held-out loss for the last save: None without a held-out set, after a stop request,
        or when one comes during it (checked between batches: Stop / SIGTERM end promptly)."""
        local = getattr(control, "local", control)  # a collective control's own rank's flag
        if local.stopped:
            return None
        val = self.trainer.held_out(lambda: local.stopped)
        return val.loss if val is not None else None

    def typical_step_s(self, at_least: int = 5) -> float | None:
        """The median of this process's recent step times, once ``at_least`` were timed (the
        step time an estimate of this run's model keeps), else None."""
        eta = self.trainer.eta
        return eta.typical_step_s() if len(eta.recent) >= at_least else None

    def _here(self) -> None:
        """TrainingError when the run folder's path no longer leads to the folder this process
        locked (moved, or swapped for another run's): nothing more is written by that path."""
        if self.lock.moved():
            raise TrainingError(self._moved_message())

    def _moved_message(self) -> str:
        lost = (f"its steps after {self.saved_step} were not saved" if self.step !=
                self.saved_step else f"its last snapshot is step {self.step}")
        other = (" (another folder is at its path now: nothing was written there)"
                 if (self.folder / rf.RUN_JSON).exists() else "")
        return (f"{self.folder}: the run folder was moved or deleted while training{other}; "
                f"training stopped at step {self.step}, and {lost}; if it was moved, resume it "
                "where it is now")

    def _metric(self, row: dict[str, Any]) -> None:
        """One row of metrics.csv (after ``_here``)."""
        self._here()
        rf.append_metric(self.folder, row)

    def _status(self, state: str, reason: str = "") -> None:
        """status.json; ``reason``: why early stopping ended the run (the Runs list showed such a
        run "stopped", as one stopped by hand)."""
        self._here()  # (its step: the latest snapshot's, as its readers take it; a failed
        # save wrote the step trained, where latest.json named an earlier one)
        rf.write_status(self.folder, state, step=max(self.saved_step, 0),
                        total_steps=self.trainer.total_steps,
                        best_val_loss=self.best_val, **({"reason": reason} if reason else {}))

    @contextlib.contextmanager
    def _writes(self) -> Iterator[None]:
        """A write that fails (a save, a metrics row, the status file) raised as
        ``_write_failed`` says it: what failed, what was kept, how to go on."""
        try:
            yield
        except (OSError, MambaStudioError) as exc:
            raise self._write_failed(exc) from exc

    def _status_if_possible(self, state: str) -> None:
        """``_status`` on a path that is already failing: its own write error must not hide the
        error being raised."""
        with contextlib.suppress(OSError, MambaStudioError):
            self._status(state)

    def _write_failed(self, exc: BaseException) -> TrainingError:
        """The error for a write that failed while training (a save, a metrics row, the status
        file): what failed, what was kept, how to go on; status "stopped" where it can be
        written."""
        if self.lock.moved() or not (self.folder / rf.RUN_JSON).exists():  # it said "fix
            return TrainingError(self._moved_message())  # that, then resume" of a folder gone
        self._status_if_possible("stopped")
        kept, goes_on = f"the last snapshot is step {self.saved_step}", ""
        if self.saved_step != self.step:
            kept = f"the steps after {self.saved_step} could not be saved"
            goes_on = f" (it goes on from step {self.saved_step})"
        return TrainingError(f"{_what_failed(exc)}; training stopped at step {self.step} and "
                             f"{kept}: fix that, then resume {self.folder}{goes_on}")

    def _forget_diverged(self, reported: int) -> None:
        """After the guard rolled the run back to before steps it had reported (up to step
        ``reported``) or saved: their metric rows and samples are of undone steps (the retrained
        ones came after them: step 4 twice), and a snapshot saved since the step now holds
        weights it found bad (``rf.drop_after``); all are dropped, as a resume drops a crash's."""
        self._here()
        if self.saved_step > self.step:
            left = rf.drop_after(self.folder, self.step)
            self.saved_step, self.saved_val = left if left is not None else (-1, None)
            self.saved_eval_stopped = False
            best = rf.best_pointer(self.folder)  # as a resume reads it (the undone weights' best
            self.best_val = best.get("val_loss") if best else None  # held-out loss stayed: no
            # better step was saved as best after it, and status.json said the undone number)
            self._status_if_possible("running")  # (its step is the saved one's: it said the
            # dropped snapshot's until the next save)
        if max(reported, self.saved_step) > self.step:
            rf.truncate_metrics(self.folder, self.step)
            rf.truncate_samples(self.folder, self.step)

    def _save_what_can_be_saved(self, save: Callable[[], None]) -> None:
        """After a failed write outside the step (a metrics row or the status file on a full disk),
        publish the steps trained since the last snapshot if they fit; a failed save leaves the
        previous snapshot in place (``write_snapshot`` is atomic)."""
        if self.step != self.saved_step:
            with contextlib.suppress(OSError, MambaStudioError):
                save()
        self._status_if_possible("stopped")

    # ------------------------------------------------------------------ training
    def train(self, on_step: Callable[[StepReport], None] | None = None,
              on_epoch: Callable[[EpochReport], None] | None = None,
              control: RunControl | None = None,
              on_save: Callable[[Path], None] | None = None,
              on_notice: Callable[[str], None] | None = None,
              before_save: Callable[[], None] | None = None) -> TrainResult:
        """Train to the end (or until ``control.stop()``), autosaving; always ends with a saved
        snapshot of a good state. Divergence is rolled back (``on_notice`` hears about it); after
        three rollbacks the last good state is saved and TrainingError raised. The run's early
        stopping (``spec.early_stopping``, kept in run.json) is fed every held-out loss before
        the run's own end, counting from the run's best so far, and stops the run when it says
        so; the result's ``reason`` says why. ``before_save`` is called before each snapshot is
        written (TensorBoard's flush: events flushed after the snapshot was published were lost
        by a kill -9 between the two, and the resume went on after their steps)."""
        control = control or TrainControl()
        p = _Pass(self, control, on_step, on_epoch, on_save, on_notice, before_save)
        if p.early.enabled and not self.trainer.has_val and on_notice:
            on_notice("early stopping is off: the run holds out no text to measure (holdout 0, "
                      "or a corpus too small to hold any out)")  # it would never stop the run
        guard = DivergenceGuard(on_rollback=p.rolled_back)
        with self._writes():  # (a full disk at once said "could not write status.json" alone,
            self._status("running")  # with no fix, nor that the run exists)
        try:
            if self.interrupted_eval and (val := self._val_loss(control)) is not None:
                p.last_eval[self.step] = val  # (first: a stop had cut it short)
                p.eval_row(val)
                p.held_out(val)
                p.save(val)
            self.trainer.run(p.step_hook, p.epoch_hook, PauseReporting(control, self._status), guard)
        except TrainingError as exc:
            p.forget_undone()
            if self.step != self.saved_step:
                p.save()
            self._status("diverged")
            raise TrainingError(f"{exc}; kept {self.folder / rf.SNAPSHOTS / rf.snapshot_name(self.step)}"
                                ) from None
        except (OSError, MambaStudioError) as exc:  # a hook's write failed (a full disk...)
            self._save_what_can_be_saved(p.save)
            raise self._write_failed(exc) from exc
        except BaseException:
            self._status_if_possible("stopped")
            raise
        done = self.done
        last_eval = p.last_eval
        unmeasured = done and self.trainer.has_val and self.step not in last_eval  # (a resume
        # of a run stopped during its final evaluation trains nothing: it said "finished", unscored)
        if self.step != self.saved_step or unmeasured:
            with self._writes():  # the last save: the run's end or a Stop (it said only
                # "could not write <temp>"); a last step evaluated (an end mid-epoch): not again
                if self.step not in last_eval and (val := self._val_loss(control)) is not None:
                    last_eval.clear()
                    last_eval[self.step] = val
                    p.eval_row(val)  # (with the epoch its step is in, as the step's row)
                if self.step != self.saved_step or self.step in last_eval:
                    p.save(last_eval.get(self.step))
        val = last_eval.get(self.step)
        if guard.kept and val is not None and (
                why := guard.held_out_problem(self.trainer, val)) is not None:
            ruined = self.step  # (its weights: no later step's loss judged them)
            guard.restore(self.trainer)
            p.forget_undone()
            with self._writes():
                if self.step != self.saved_step:
                    p.save()
                self._status("diverged")
            raise TrainingError(
                f"training diverged at its last step, {ruined} ({why}); the model was rolled "
                f"back to step {self.step}: lower the learning rate; kept "
                f"{self.folder / rf.SNAPSHOTS / rf.snapshot_name(self.step)}")
        unscored = (done and p.local.stopped and self.trainer.has_val
                    and self.step not in last_eval)  # a stop during the final evaluation: the
        state = "finished" if done and not unscored else "stopped"  # run said "finished"
        with self._writes():  # (the folder moved during the last save)
            self._status(state, p.reason if state == "stopped" else "")
        return TrainResult(state, self.step, self.folder / rf.SNAPSHOTS / rf.snapshot_name(self.step),
                           last_eval.get(self.step), p.reason if state == "stopped" else "",
                           unscored)


class _Pass:
    """One ``Run.train`` call's bookkeeping and the hooks it gives the trainer: the metrics rows,
    the saves (autosave, a better held-out loss, each epoch's end), early stopping fed every
    held-out loss, and what a rollback undoes of them."""

    def __init__(self, run: Run, control: RunControl,
                 on_step: Callable[[StepReport], None] | None,
                 on_epoch: Callable[[EpochReport], None] | None,
                 on_save: Callable[[Path], None] | None,
                 on_notice: Callable[[str], None] | None,
                 before_save: Callable[[], None] | None = None) -> None:
        self.run = run
        self.on_step, self.on_epoch, self.on_save, self.on_notice = (on_step, on_epoch, on_save,
                                                                     on_notice)
        self.before_save = before_save
        self.early = run.spec.early_stopping.fresh(run.best_val, run.early_bad)
        self.last_save = time.monotonic()
        self.reason = ""  # why early stopping ended the run
        self.local = getattr(control, "local", control)  # (a collective control's `stopped` is
        # a collective: rank 0 alone evaluates, so it reads its own rank's flag)
        self.fed: list[tuple[int, float, int]] = []  # (step, best, bad) before each loss fed
        self.reported = run.step  # the last step in metrics.csv
        self.last_eval: dict[int, float] = {}  # the latest held-out loss measured, by its step
        if run.saved_val is not None and run.saved_step == run.step:  # (a resume's snapshot's)
            self.last_eval[run.step] = run.saved_val

    def held_out(self, val: float) -> None:
        """Early stopping, never at the run's own end (it would claim a natural finish)."""
        run, early = self.run, self.early
        if not early.enabled or self.local.stopped or run.step >= run.trainer.total_steps:
            return
        self.fed.append((run.step, early.best, early.bad))
        stop = early.update(val)
        run.early_bad = early.bad  # saved with the next snapshot
        if stop:
            self.reason = f"early stopping: {early.reason}"
            self.local.stop()

    def save(self, val: float | None = None) -> None:
        if self.before_save is not None:
            self.before_save()
        path = self.run.save(val)
        self.run._status("running")  # status.json's step follows the saved snapshots
        self.last_save = time.monotonic()
        if self.on_save is not None:
            self.on_save(path)

    def eval_row(self, val: float) -> None:
        """The held-out loss of the current step in metrics.csv, with its step's epoch."""
        cur = self.run.trainer.cursor
        epoch = cur.epoch - 1 if cur.group == 0 and cur.step > 0 else cur.epoch
        self.run._metric({"kind": "eval", "step": self.run.step, "epoch": epoch, "val_loss": val})

    def step_hook(self, r: StepReport) -> None:
        run, spec = self.run, self.run.spec
        run._metric({"kind": "step", **asdict(r)})
        self.reported = r.step
        if r.val_loss is not None:
            self.last_eval.clear()
            self.last_eval[r.step] = r.val_loss
            run._metric({"kind": "eval", "step": r.step, "epoch": r.epoch, "val_loss": r.val_loss})
        if self.on_step is not None:
            self.on_step(r)
        if r.val_loss is not None:
            self.held_out(r.val_loss)
        due_steps = spec.autosave_steps > 0 and r.step % spec.autosave_steps == 0
        due_time = (spec.autosave_minutes > 0
                    and time.monotonic() - self.last_save >= 60 * spec.autosave_minutes)
        better = r.val_loss is not None and (run.best_val is None or r.val_loss < run.best_val)
        if (due_steps or due_time or better) and not run.trainer.at_epoch_end:  # the epoch's
            self.save(r.val_loss)  # hook saves this step next, with the epoch's report (it was
            # saved twice)

    def epoch_hook(self, rep: EpochReport) -> None:
        run = self.run
        val = rep.val.loss if rep.val is not None else None
        fresh = run.step not in self.last_eval  # not measured by the step's own evaluation
        if val is not None and fresh:  # once per step in metrics.csv
            run._metric({"kind": "eval", "step": run.step, "epoch": rep.epoch, "val_loss": val})
            self.last_eval.clear()
            self.last_eval[run.step] = val
        if self.on_epoch is not None:
            self.on_epoch(rep)
        if val is not None and fresh:  # (the step's evaluation fed it already: fed twice, the
            self.held_out(val)  # same loss counted as one without improvement, and a run still
        self.save(val)  # improving stopped at its first epoch's end with patience 1)

    def forget_undone(self) -> None:
        """After a rollback: the files of the steps it undid (``_forget_diverged``), and their
        held-out losses: measured on weights thrown away, they are neither the step's (its end
        is measured again) nor early stopping's."""
        run, early = self.run, self.early
        run._forget_diverged(self.reported)
        for step in [s for s in self.last_eval if s > run.step]:
            del self.last_eval[step]
        undone = [f for f in self.fed if f[0] > run.step]
        if undone:
            _, early.best, early.bad = undone[0]
            run.early_bad = early.bad
            del self.fed[len(self.fed) - len(undone):]

    def rolled_back(self, message: str) -> None:
        self.forget_undone()
        if self.on_notice is not None:
            self.on_notice(message)


def _what_failed(exc: BaseException) -> str:
    """One line for a failed write: the file and the system's reason (a snapshot's temporary
    folder named as the snapshot it was to become, a temporary file as the file it was to
    become); a full disk says so, and that it may be out of files (inodes) rather than bytes
    (the space check before a run counts bytes only)."""
    line = re.sub(rf"{re.escape(rf.TMP_PREFIX)}(step-\d+)-\d+", r"\1", one_line(exc))
    line = re.sub(r"/\.([^/]+)\.[0-9a-f]{12}\.tmp\b", r"/\1", line)  # ckpt.create_temp's names
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
        line += " (the disk is full: out of space or out of files)"
    return line


SMALL_HELD_OUT = 256  # held-out tokens below which a run says its held-out loss means little


# ---------------------------------------------------------------------- building blocks
def _megabytes(n: int) -> str:
    """A corpus size in the unit of BPE_MIN_BYTES (decimal MB); bytes below 0.01 MB, which
    would print as 0.00 MB."""
    return f"{n / 1e6:.2f} MB" if n >= 10_000 else plural(n, "byte")  # ("1 bytes")


def held_out_set(data: rf.RunData, seq_len: int, tokenizer: Any) -> np.ndarray | PackedRows | None:
    """The saved held-out split as training evaluates it: a stream run's held-out ids (T_val,),
    or the held-out documents packed into rows of ``seq_len``; None when a documents run holds
    nothing out."""
    if data.records == "stream":
        return np.asarray(data.val_ids)
    return pack_documents(data.ids, data.val_spans, seq_len, tokenizer) if len(data.val_spans) else None


def _train_rows(data: rf.RunData, seq_len: int, tokenizer: Any) -> PackedRows | None:
    """A documents run's training rows (its documents packed into rows of ``seq_len`` with
    resets); None for a stream run (the trainer cuts its ids into rows)."""
    if data.records == "stream":
        return None
    return pack_documents(data.ids, data.train_spans, seq_len, tokenizer)


def _trainer(lm: MambaLM, data: rf.RunData, cfg: TrainConfig) -> Trainer:
    """A trainer over the saved data: stream rows, or documents packed into rows with resets."""
    val = held_out_set(data, cfg.seq_len, lm.tokenizer)
    rows = _train_rows(data, cfg.seq_len, lm.tokenizer)
    if rows is None:  # a stream run
        return Trainer(lm, np.asarray(data.train_ids), np.asarray(val), cfg)
    return Trainer(lm, data.ids, data.ids[:0], cfg, rows=rows, val_rows=val)


@dataclass(frozen=True)
class EpochPlan:
    """What one epoch of a new run on a corpus holds, counted before anything is trained."""

    rows: int  # packed training rows (the ``Trainer``'s ``len(rows)``)
    train_tokens: int  # training targets per epoch
    held_out_tokens: int
    gone: tuple[tuple[Path, str], ...] = ()  # files that vanished since the scan: skipped

    def steps(self, cfg: TrainConfig) -> int:
        """Optimizer steps per epoch at ``cfg``'s batch size and accumulation."""
        return epoch_steps(self.rows, cfg.batch_size * cfg.grad_accum)


def plan_epoch(spec: RunSpec, corpus_paths: Sequence[str | Path], tokenizer: Any = None) -> EpochPlan:
    """Count the rows of one epoch of a new run of ``spec`` on ``corpus_paths``, through the same
    encode -> split -> pack as ``start`` and ``resume`` (so a run's ``steps_per_epoch`` is
    ``plan.steps(spec.train)``). ``tokenizer``: an opened model's; None means ``spec.init``'s
    when it is set (as ``start`` uses), else the tokenizer ``start`` picks, which must be bytes
    (a BPE one is only known once it is trained on the corpus, at ``start``). Reads the corpus;
    memory as ``start``'s encoding (about 2 bytes per corpus byte for bytes)."""
    if spec.records == "stream":
        raise ValueError("plan_epoch counts document rows; records 'stream' has none")
    corpus = load_corpus(corpus_paths)
    if tokenizer is None and spec.init:  # start trains with the starting model's tokenizer
        tokenizer = load_model(spec.init).tokenizer
    if tokenizer is None:
        if spec.for_corpus(corpus.n_bytes).tokenizer != "bytes":
            raise ValueError("a BPE tokenizer is trained on the corpus when the run starts; "
                             "its rows are counted then")
        tokenizer = ByteTokenizer()
    arrays, _ = _encode(spec, corpus, tokenizer)
    rows = pack_documents(arrays["ids"], arrays["train_spans"], spec.train.seq_len, tokenizer)
    held = int(arrays["val_spans"][:, 1].sum()) if len(arrays["val_spans"]) else 0
    return EpochPlan(len(rows), rows.n_targets, held, tuple(corpus.gone))


HELDOUT_RATIO_IDS = 1 << 22  # held-out ids decoded to measure its tokens per byte (~1-2 s)
HELDOUT_RATIO_SPANS = 1 << 14  # held-out documents decoded for it at most


def _measure_heldout_per_byte(tok: Any, arrays: dict[str, np.ndarray],
                              n_train: int) -> float | None:
    """Token ids per byte of the held-out text, what ``eval``'s bits/byte divides by (the whole
    corpus's ratio put a BPE run's held-out bits/byte 36 % above eval's, its held-out file
    being other text): a stream run's ids after ``n_train``, a documents run's ``val_spans``
    ((start, length) in the ids). Decodes them whole up to ``HELDOUT_RATIO_IDS`` ids, else 64
    windows spread evenly over them; None without a held-out set."""
    ids, spans = arrays["ids"], arrays["val_spans"]
    if not len(spans):
        spans = np.array([[n_train, len(ids) - n_train]], np.int64)
    spans = spans[spans[:, 1] > 0]
    if not len(spans):
        return None
    ends = np.cumsum(spans[:, 1])  # where each span ends in the held-out ids laid end to end
    total = int(ends[-1])
    size = max(1, HELDOUT_RATIO_IDS // 64)
    if total <= HELDOUT_RATIO_IDS:  # all of them (of many short documents, every k-th: a
        every = -(-len(spans) // HELDOUT_RATIO_SPANS)  # decode each took seconds), in windows
        pieces = [(int(a) + o, min(size, int(n) - o)) for a, n in spans[::every]
                  for o in range(0, n, size)]
    else:  # 64 windows spread over them (one a span's end cuts short)
        pieces = []
        for pos in np.linspace(0, total - size, 64).astype(np.int64):
            i = int(np.searchsorted(ends, pos, side="right"))  # the span holding it
            offset = int(pos) - (int(ends[i - 1]) if i else 0)
            pieces.append((int(spans[i, 0]) + offset, min(size, int(spans[i, 1]) - offset)))
    counted = n_bytes = 0
    for start, n in pieces:
        counted += n
        n_bytes += len(tok.decode(ids[start : start + n]).encode("utf-8"))
    return counted / n_bytes if n_bytes else None


def _encode(spec: RunSpec, corpus: Any, tok: Any) -> tuple[dict[str, np.ndarray], int]:
    """Token ids, document offsets and the held-out split of a new run (``runformat.DATA_FILES``)."""
    no_spans = np.zeros((0, 2), np.int64)
    if spec.records == "stream":
        ids = encode_corpus(corpus, tok)
        n = len(split_holdout(ids, spec.holdout, spec.train.seq_len)[0])
        offsets = np.concatenate([[0], np.flatnonzero(ids == tok.eos_id), [len(ids) - 1]])
        val = np.array([[n, len(ids) - n - 1]], np.int64) if len(ids) - n > 1 else no_spans
        return {"ids": ids, "offsets": offsets.astype(np.int64),
                "train_spans": np.array([[0, n - 1]], np.int64), "val_spans": val}, n
    docs = encode_documents(corpus, tok, spec.records)
    train, val = split_documents(docs, spec.holdout, spec.train.seed, spec.train.seq_len + 1)
    return {"ids": docs.ids, "offsets": docs.offsets, "train_spans": train, "val_spans": val}, len(docs.ids)


def load_model(path: str | Path, which: str = rf.LATEST,
               notify: Callable[[str], None] | None = None) -> MambaLM:
    """A model from a run folder (its latest/best snapshot), a snapshot folder, a plain model
    folder (ours or HF) or a PEFT adapter folder (base + adapter, merged); checksums are verified
    wherever the folder has them. ``notify`` hears about corrupt snapshots of a run that were
    passed over."""
    path = Path(path)
    if rf.is_run(path):
        rf.read_run_json(path)
        snap, _, refused = rf.find_snapshot(path, which, model_only=True)
        for e in refused:
            if notify is not None:
                notify(f"{e}; using {snap.name} instead")
        path = snap
    elif (path / rf.SNAP_MANIFEST).exists():
        rf.verify_snapshot(path, model_only=True)
    elif (path / "trainer_state.json").exists():
        from .legacy import read_trainer_state

        ckpt.verify_hashes(path, read_trainer_state(path)["files"])
    elif (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").exists():
        lm = _load_peft(path, notify)
        lm.source = path
        return lm
    return MambaLM.load(path)


ADAPTER_CONFIG = "adapter_config.json"


def _load_peft(path: Path, notify: Callable[[str], None] | None = None) -> MambaLM:
    """A PEFT adapter folder (our ``export --peft`` or PEFT's own): its base, from ``path/base``
    when there (our export) else ``base_model_name_or_path`` (a local folder), with the adapter
    merged in; ``notify`` hears which base a folder without ``base/`` took (a moved export whose
    base/ was deleted took whatever model sat at the old path, without a word)."""
    from .lora import load_adapter
    from .safeio import read_json

    base = path / "base"
    if not (base / "config.json").exists():
        conf = read_json(path / ADAPTER_CONFIG, what=ADAPTER_CONFIG)
        named = conf.get("base_model_name_or_path") if isinstance(conf, dict) else None
        if not isinstance(named, str) or not (Path(named) / "config.json").exists():
            raise CheckpointError(f"{path}: a PEFT adapter whose base model {named!r} is not a "
                                  "local model folder; load the base and the adapter with PEFT, or "
                                  "export the run merged (python -m engine export --merged)")
        base = Path(named)
        if notify is not None:
            notify(f"{path} has no base/ folder: its adapter is applied to {named}, the base its "
                   f"{ADAPTER_CONFIG} names (if that folder now holds another model, so does "
                   "this)")
    lm = MambaLM.load(base)
    load_adapter(lm.params, path)
    return lm


def _label(spec: RunSpec) -> str:
    return "custom" if spec.model else ("init" if spec.init else spec.preset)


def _inside(folder: Path, paths: Sequence[Path]) -> Path | None:
    """The first of ``paths`` that lies inside ``folder`` (links resolved), else None."""
    root = resolved(folder)
    return next((p for p in paths if resolved(p).is_relative_to(root)), None)


def start(spec: RunSpec, corpus_paths: Sequence[str | Path], out: str | Path | None = None,
          force: bool = False, root: str | Path = "runs",
          progress: Callable[[str], None] | None = None,
          should_stop: Callable[[], bool] | None = None) -> Run:
    """Create a new run folder (``out``, or a unique ``root/<date>-<preset>-<n>``) from ``spec``
    and the corpus; everything is checked (settings, memory, output folder, lock) before any
    training. An ``out`` that holds a run is refused unless ``force`` (then it is replaced); one
    holding anything a run does not write is refused even with ``force``. Once
    ``should_stop()``, preparing ends between corpus pieces with ``Stopped`` and the new folder
    is removed (a Stop during minutes of tokenising waited for all of it, then left a step-0
    run)."""
    say = progress or (lambda m: None)
    spec.check()
    label = _label(spec)  # (the spec loses its model sizes below, with --init)
    folder = Path(out) if out is not None else rf.unique_run_folder(Path(root), label)
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder}: exists and is not a folder; choose another --out")
    if folder.is_symlink() and not folder.exists():  # (after the corpus: "cannot create the
        resolved(folder)  # (a loop: said so)
        raise CheckpointError(f"{folder}: a link to {os.readlink(folder)}, which does not "  # run
                              "exist; create that folder, remove the link, or choose another "
                              "--out")  # folder (File exists)")
    around = rf.run_around(folder)
    if around is not None:  # (it made a run inside another's snapshots/ or beside its files:
        fix = "choose another --out" if out is not None else "choose another runs folder"  # a
        raise CheckpointError(f"{folder}: inside the run folder {around}; {fix}")  # --force of
        # that run was refused from then on)
    rf.check_can_create(folder)
    if folder.is_dir() and rf.RunLock(folder).held_elsewhere():  # being made or trained now: it
        rf.RunLock(folder).acquire().release()  # said "replace it with --force" (then refused)
    if folder.is_dir():
        _finish_swap(folder)  # (the advice for its half-swapped folder was --force: it deleted
    if folder.is_dir() and any(folder.iterdir()):  # both runs)
        foreign = rf.foreign_entries(folder)
        if foreign:  # never offered to --force: it would delete the user's files
            raise CheckpointError(f"{folder} holds files that are not a run's "
                                  f"({listing(foreign)}); choose "
                                  "another --out (--force replaces only a run folder)")
        if force and spec.init and _inside(folder, [Path(spec.init)]) is not None:  # the model
            raise CheckpointError(  # was to start from went with the run it replaced (and
                f"{spec.init}: the model to start from is inside {folder}, which "  # run.json
                "--force would replace; copy it out first, or choose another --out")  # named the
        if not force:  # new run's own snapshot as its source)
            if rf.is_run(folder):
                raise CheckpointError(f"{folder} holds a run; continue it with --resume {folder}, "
                                      "replace it with --force, or choose another --out")
            raise CheckpointError(f"{folder} holds an unfinished run (no {rf.RUN_JSON}); replace "
                                  "it with --force, or choose another --out")
    require_present(corpus_paths)
    corpus = load_corpus(corpus_paths, say=say)
    corpus.should_stop = should_stop
    corpus.check_stop()
    inside = _inside(folder, [f.path for f in corpus.files])
    if inside is not None:  # a new run empties its folder, and the corpus is read again later
        raise CheckpointError(f"{inside}: a corpus file inside the run folder {folder}; choose "
                              "another --out")
    for line in summary(corpus.rejected):  # a walk of / skips thousands: 11 lines at most
        say(line)
    init_from: dict[str, Any] | None = None  # where a run from a model got its weights
    if spec.init:  # a damaged latest snapshot passed over is said (it started from an older
        lm = load_model(spec.init, notify=lambda m: say(f"warning: {m}"))  # one, step 0 too)
        lm.check_finite(spec.init)  # before the folder is made (it blamed the new run's folder)
        init_from = rf.init_source(lm.source) if lm.source is not None else None
        if init_from is not None and init_from["step"] is not None:  # (run.json named the run
            say(f"starting {rf.init_described(init_from)}")  # alone)
        if spec.tokenizer not in ("auto", lm.tokenizer.kind):  # it was dropped without a word
            say(f"note: tokenizer {spec.tokenizer} not used: a run from {spec.init} keeps that "
                f"model's {lm.tokenizer.kind} tokenizer")
        if spec.model:  # (kept in run.json, the Runs list called the run "custom")
            say(f"note: model sizes not used: a run from {spec.init} keeps that model's shape "
                f"(d_model {lm.config.d_model}, {lm.config.n_layer} layers)")
        spec = replace(spec, tokenizer=lm.tokenizer.kind, model=None)
    else:
        auto, before = spec.tokenizer == "auto", spec.train.lr
        spec = spec.for_corpus(corpus.n_bytes)
        if auto:
            say(f"tokenizer: {spec.tokenizer} (auto: BPE from {BPE_MIN_BYTES / 1e6:g} MB of text; "
                f"this corpus has {_megabytes(corpus.n_bytes)}), learning rate {spec.train.lr:g}")
        elif spec.tokenizer == "bpe":  # a chosen BPE's (doubled) rate was said nowhere
            say(f"tokenizer: bpe, learning rate {spec.train.lr:g}" + (
                f" (BPE's: {spec.train.lr / before:g}x the preset's byte rate {before:g})"
                if spec.train.lr != before else ""))
        if spec.tokenizer == "bpe":
            every = bpe_sample_every(corpus.n_bytes)
            share = (f"a seeded sample of the corpus (about one piece in {every}, "
                     f"{_megabytes(corpus.n_bytes // every)})" if every > 1 else "the corpus")
            say(f"training a {spec.bpe_vocab:,}-token BPE tokenizer on {share}...")
        tok = (BPETokenizer.train(corpus.texts, vocab_size=spec.bpe_vocab)
               if spec.tokenizer == "bpe" else ByteTokenizer())
        if spec.tokenizer == "bpe" and tok.vocab_size < spec.bpe_vocab:  # (the estimates said
            say(f"note: the BPE tokenizer learned {tok.vocab_size:,} tokens of the "  # 2,048)
                f"{spec.bpe_vocab:,} asked: the corpus has no more pairs worth merging")
        lm = MambaLM(spec.model_config(tok.vocab_size), {}, tok)
    est = check_run(lm.config, spec.train, corpus.n_bytes)
    say(f"memory: {est.human()}")
    trained = count_trainable(lm.config, spec.train.lora, spec.train.wsla)
    need = 2 * rf.snapshot_bytes(n_params(lm.config), trained) + corpus.n_bytes * id_dtype(
        lm.config.vocab_size).itemsize
    if out is None:  # the name picked above, taken now (another Start may have had it since)
        folder = rf.reserve_run_folder(folder.parent, label)
    made = out is None or not folder.exists()  # or empty: an unfinished start leaves it as it was
    made_entries = made or not any(folder.iterdir())
    replaced = force and not made_entries  # --force removes the run there before anything else
    try:
        rf.check_out_dir(folder, need)
    except BaseException:  # refused (no room, not writable): leave no empty folder behind
        if made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    try:
        lock = rf.RunLock(folder).acquire()
    except (OSError, CheckpointError) as exc:  # (a full disk at the lock's pid: a raw OSError,
        if made:                               # and the new empty folder stayed)
            rf.unmake(folder, True)
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{_what_failed(exc)}; the new run was not made: fix that or "
                              "choose another run folder") from None
    swapping = False  # whether --force has begun to swap the new run for the old one
    try:  # (the old run stays whole until the new one is complete beside it: a kill -9 while
        if not lm.params:  # tokenizing, encoding or saving step 0 left neither run)
            lm = MambaLM.create(lm.config, lm.tokenizer, seed=spec.train.seed, init=spec.init_scheme)
        if corpus.n_bytes >= BPE_MIN_BYTES:  # minutes for hundreds of MB: say what is going on
            say(f"tokenizing {_megabytes(corpus.n_bytes)} of text...")
        arrays, n_train = _encode(spec, corpus, lm.tokenizer)
        for path, why in corpus.gone[:10]:  # vanished or unreadable between scan and read
            say(f"note: skipped {path}: {why}")
        if corpus.gone:
            say(f"note: {len(corpus.gone):,} corpus file(s) skipped after the scan; training on "
                f"the other {len(corpus.files):,}")
        corpus.check_stop()  # the last moment a stop keeps nothing
        if out is None:  # a name unique_run_folder gave: never given again
            rf.note_run_number(folder)
        into = rf.stage(folder) if replaced else folder  # --force: beside the run it replaces
        rf.write_data(into, arrays, n_train,
                      rf.file_sources([(f.path, f.n_bytes) for f in corpus.files]),
                      {"records": spec.records, "holdout": spec.holdout, "seed": spec.train.seed,
                       "seq_len_at_split": spec.train.seq_len, "tokenizer": lm.tokenizer.kind,
                       "heldout_tokens_per_byte": _measure_heldout_per_byte(
                           lm.tokenizer, arrays, n_train),
                       "skipped_after_scan": [{"path": str(p), "reason": r}
                                              for p, r in corpus.gone]})
        run = Run(into, spec, lm, rf.read_data(into), lock)
        run.save()  # step 0: the folder is a complete, resumable run from the start
        rf.write_run_json(into, spec.to_dict(), folder.name,  # last: marks the run complete
                          init_from)
        if replaced:
            swapping = True
            rf.swap_in(folder)
            run.folder = folder
    except (OSError, CheckpointError) as exc:  # a full disk: it named a temporary file, no fix
        if swapping:  # (renames in one folder: not seen to fail)
            lock.release()
            raise CheckpointError(
                f"{_what_failed(exc)} while swapping the new run into {folder}; fix that, then "
                f"`train --resume {folder}` finishes the swap") from exc
        _unmake(folder, made, made_entries, replaced)
        lock.release()
        left = (f"the run it was to replace is kept in {folder}" if replaced
                else f"nothing kept in {folder}")
        raise CheckpointError(f"{_what_failed(exc)}; the new run was not made ({left}): fix that "
                              "or choose another run folder") from exc
    except BaseException:
        if not swapping:  # Ctrl-C while tokenizing, a full disk, a non-finite --init model: the
            _unmake(folder, made, made_entries, replaced)  # next start needed --force to get
        lock.release()  # past what was left
        raise
    return run


def _finish_swap(folder: Path) -> bool:
    """Complete a ``train --force`` swap a kill cut short in ``folder`` (the new run was
    whole beside the old one, and resume, Delete and --force said "killed while it was being
    prepared": following that advice deleted both); whether there was one."""
    if not rf.swap_cut_short(folder):
        return False
    lock = rf.RunLock(folder).acquire()
    try:
        rf.finish_swap(folder)
    finally:
        lock.release()
    return True


def _unmake(folder: Path, made: bool, made_entries: bool, replaced: bool) -> None:
    """What an unfinished ``start`` wrote goes: the stage beside the run it was to replace
    (which stays), or the new run's entries (and the folder it made)."""
    if replaced:
        rf.discard_stage(folder)
    elif made_entries:
        rf.unmake(folder, made)


def _open(folder: Path, which: str = rf.LATEST, model_only: bool = False
          ) -> tuple[RunSpec, Path, dict[str, Any], list[str]]:
    spec = read_run_spec(folder)
    snap, trainer, refused = rf.find_snapshot(folder, which, model_only=model_only)
    return spec, snap, trainer, [f"{e}; using {snap.name} instead" for e in refused]


def _check_given_now(run_kw: dict[str, Any], stored: RunSpec) -> None:
    """The run settings a resume is given now that differ from ``stored`` (its run.json), held
    to today's range ends (a run.json is held to the lower ends only, so that a run an earlier
    version made still opens: a resume given autosave_minutes=5e9 wrote it there)."""
    from .limits import RUN_RANGES, Problems, in_range

    for key in ("autosave_steps", "autosave_minutes"):
        if key in run_kw and run_kw[key] != getattr(stored, key):
            in_range(run_kw[key], key, RUN_RANGES[key], "resume")
    early, old = run_kw.get("early_stopping"), stored.early_stopping
    if isinstance(early, EarlyStopping):
        changed = [f"early_stopping.{k} " for k in ("patience", "target_loss", "min_delta")
                   if getattr(early, k) != getattr(old, k, None)]
        if bad := [p for p in early.problems() if p.startswith(tuple(changed))]:
            raise Problems(bad)


NO_LIMIT = 0  # resume(max_steps=NO_LIMIT): lift a run's max-steps limit (train all its epochs)


def resume(folder: str | Path, **overrides: Any) -> Run:
    """Reopen ``folder`` for training at its latest good snapshot. ``overrides``: any of
    ``RESUME_OVERRIDES`` (None values are ignored; ``max_steps=NO_LIMIT`` (0) removes the run's
    max-steps limit). Needs no corpus: the folder has its token ids."""
    folder = Path(folder)
    bad = sorted(set(overrides) - set(RESUME_OVERRIDES))
    if bad:
        raise ValueError(f"cannot change {bad} when resuming; only {list(RESUME_OVERRIDES)}")
    finished_swap = _finish_swap(folder)
    rf.read_run_json(folder)
    lock = rf.RunLock(folder).acquire()
    try:
        rf.check_own_folders(folder)
        rf.clean_stale(folder)
        for name in (rf.LATEST, rf.BEST, rf.STATUS, rf.METRICS):  # found at the first save,
            if (folder / name).is_dir():  # after training time was spent
                raise CheckpointError(f"{folder / name}: a folder where the run keeps a file; "
                                      "move it away, then resume")
        spec, snap, meta, refused = _open(folder)
        if refused and (denied := rf.unreadable_newer(folder, snap)) is not None:
            raise CheckpointError(f"{denied}: cannot read it (permission denied); fix its "
                                  "permissions, then resume (nothing was changed: going on "
                                  f"from {snap.name} would have lost the steps after it)")
        before = spec.train
        train_kw = {k: v for k, v in overrides.items() if v is not None and hasattr(spec.train, k)}
        if train_kw.get("max_steps") == NO_LIMIT:
            train_kw["max_steps"] = None  # all epochs
        run_kw = {k: v for k, v in overrides.items() if v is not None and not hasattr(spec.train, k)}
        stored = spec
        spec = replace(spec, train=replace(spec.train, **train_kw), **run_kw)
        spec.check(new=False)
        _check_given_now(run_kw, stored)
        lm = MambaLM.load(snap)
        lm.check_finite(snap)  # a diverged snapshot would be "rolled back" to itself
        check_fits(lm.tokenizer, lm.config.vocab_size, snap / "tokenizer.json")
        run = Run(folder, spec, lm, rf.read_data(folder), lock)
        run.warnings = refused  # (said as "note:" on a resume, "warning:" everywhere else)
        if finished_swap:
            run.warnings.append(f"a train --force was cut short while it swapped its new run "
                                f"into {folder}: the swap is finished (the run it replaced is "
                                "gone)")
        state = rf.trainer_state.unpack(meta, ckpt.read_tensors(snap / rf.SNAP_STATE))
        try:
            run.trainer.load_state_dict(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{snap}: unusable trainer state ({exc})") from None
        run.saved_step = run.step
        val = meta.get("val_loss")
        run.saved_eval_stopped = meta.get("eval_stopped") is True
        run.saved_val = (float(val) if isinstance(val, (int, float)) and not isinstance(val, bool)
                         and math.isfinite(val) else None)
        tr = run.trainer
        if ("epochs" in train_kw or "max_steps" in train_kw) and tr.total_steps < run.step:
            need = run.step // tr.steps_per_epoch + 1  # (it was kept, and said "step 60 of
            # 39"; at step 55 of 11-step epochs, 5 epochs end at 55: a sixth trains on)
            kept = {k: "" if k in train_kw else " (kept from the run)"
                    for k in ("epochs", "max_steps")}  # (a value given at an earlier resume
            cuts, fixes = [], []  # read as this one's: "past the 45 steps of epochs 1")
            if spec.train.epochs < need:  # only what cuts it short is named
                cuts.append(f"{plural(spec.train.epochs, 'epoch')}{kept['epochs']} of "
                            f"{plural(tr.steps_per_epoch, 'step')}")
                fixes.append(f"at least {need} epochs")
            if spec.train.max_steps and spec.train.max_steps <= run.step:
                cuts.append(f"max steps {spec.train.max_steps:,}{kept['max_steps']}")
                fixes.append(f"max steps above {run.step:,} (or no limit)")
            raise ValueError(f"{folder} is already at step {run.step:,}, and {' and '.join(cuts)} "
                             f"would end it at step {tr.total_steps:,}: give "
                             f"{' and '.join(fixes)} to train on")
        if run.step < tr.total_steps or run.unscored or run.interrupted_eval:  # (work to do:
            rf.check_resume_dir(folder, rf.snapshot_bytes(  # a finished run says so instead)
                n_params(lm.config), count_trainable(lm.config, spec.train.lora, spec.train.wsla)))
        if rf.read_status(folder).get("state") == "diverged" and not (
                train_kw.get("lr") is not None and train_kw["lr"] < before.lr):  # (its own
            # rate given again, as its command line with --resume holds it, went on unsaid)
            run.warnings.append(  # (a plain resume went on at the rate that diverged, unsaid)
                f"{folder.name} ended diverged: it goes on at the learning rate it diverged at "
                f"({tr.current_lr():.2g} now, {spec.train.lr:g} x {tr.lr_scale:g} after its "
                "rollbacks); if it diverges again, resume it with a lower learning rate")
        totals = "epochs" in train_kw or "max_steps" in train_kw
        if totals and "lr" not in train_kw and (rate := tr.rate_notice(before)) is not None:
            run.notices.append(rate)
        aside = rf.set_aside_passed_over(folder, snap) if refused else []  # (once every
        if aside:  # check has passed: a refused resume renamed them without a word)
            run.warnings.append(f"kept {listing(aside)} in {folder / rf.SNAPSHOTS} as "
                                f"{'it was' if len(aside) == 1 else 'they were'}: its weights "
                                f"may be intact (the run goes on from {snap.name})")
        best = rf.best_pointer(folder)
        run.best_val = best.get("val_loss") if best else None
        run.early_bad = rf.trainer_state.early_bad(meta)
        lost = rf.lost_steps_note(folder, run.step, passed_over=bool(aside))  # (a newer
        # snapshot set aside; a damaged latest.json alone passed over nothing)
        if lost:  # (before the truncation drops them)
            run.notices.append(lost)
        try:
            rf.truncate_samples(folder, run.step)  # (the lost work's came back in the Gallery)
            odd = rf.truncate_metrics(folder, run.step)
        except (OSError, CheckpointError) as exc:  # (a file-size limit: "could not write
            raise CheckpointError(  # metrics.csv: File too large", and no fix)
                f"{_what_failed(exc)}; fix that, then resume (nothing was lost: the run is at "
                f"its snapshot of step {run.step})") from None
        if odd:
            run.notices.append(f"{folder / rf.METRICS}: {odd:,} line(s) that are not metric rows "
                               "kept as they are (the plots skip them)")
        early = rf.early_stop_note(folder)
        if early and overrides.get("early_stopping") is None and run.step < tr.total_steps:
            run.notices.append(early)
        if train_kw or run_kw:
            rf.rewrite_run_spec(folder, spec.to_dict())
    except BaseException:
        lock.release()
        raise
    return run


def read_run_spec(folder: str | Path) -> RunSpec:
    """A run's saved settings (run.json), without opening its snapshots."""
    return RunSpec.from_dict(rf.read_run_json(Path(folder))["spec"],
                             str(Path(folder) / rf.RUN_JSON))


def read_model_config(folder: str | Path) -> MambaConfig:
    """The model shape of a run's latest snapshot (its config.json, not verified: for estimates
    before a Continue, whose model is the run's own whatever the settings panel shows)."""
    folder = Path(folder)
    kept = rf.expected_snapshot(folder)  # (latest.json's, when its snapshot was gone, had
    if kept is None:  # the estimate say "step-165: no such file or folder" for a whole run)
        raise CheckpointError(f"{folder}: no snapshot to read the model from")
    return ckpt.read_config(kept[0])


def read_epoch_rows(folder: str | Path) -> int:
    """The rows one epoch of a run trains on, from its saved token ids at its own sequence
    length (a Continue's steps per epoch are ``epoch_steps(rows, batch x accumulation)``: the
    corpus the window shows is not what it trains on). Reads the ids and the latest snapshot's
    tokenizer, not its weights."""
    from .data import make_rows
    from .tokenizer import load_tokenizer

    folder = Path(folder)
    seq_len = read_run_spec(folder).train.seq_len
    data = rf.read_data(folder)
    if data.records == "stream":
        return len(make_rows(np.asarray(data.train_ids), seq_len)[0])  # as Trainer cuts them
    kept = rf.expected_snapshot(folder)  # (latest.json's may be gone)
    if kept is None:
        raise CheckpointError(f"{folder}: no snapshot to read the tokenizer from")
    rows = _train_rows(data, seq_len, load_tokenizer(kept[0]))
    assert rows is not None
    return len(rows)


@dataclass(frozen=True)
class RunView:
    """A run opened read-only (no lock): for eval, generate, export and plots."""

    folder: Path
    spec: RunSpec
    lm: MambaLM
    snapshot: Path
    step: int
    data: rf.RunData
    notices: list[str] = field(default_factory=list)  # snapshots refused (corrupt) on the way

    def metrics(self) -> list[dict[str, Any]]:
        return rf.read_metrics(self.folder)


def open_run(folder: str | Path, which: str = rf.LATEST) -> RunView:
    """Open a run read-only at its latest (or ``which="best.json"``) snapshot, the model's
    checksums verified (its training state is not read: a damaged one locked eval out)."""
    folder = Path(folder)
    spec, snap, _, refused = _open(folder, which, model_only=True)
    return RunView(folder, spec, MambaLM.load(snap), snap, rf.snapshot_step(snap.name) or 0,
                   rf.read_data(folder), refused)


__all__ = ["NO_LIMIT", "RESUME_OVERRIDES", "EpochPlan", "Run", "RunSpec", "RunView", "TrainResult",
           "list_runs", "load_model", "open_run", "plan_epoch", "read_metrics", "read_run_spec",
           "resume", "start", "stop_on_signals"]
list_runs = rf.list_runs
read_metrics = rf.read_metrics
start_run = start  # the names engine exports (engine.start_run, engine.resume_run)
resume_run = resume
