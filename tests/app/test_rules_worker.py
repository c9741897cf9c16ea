"""Rules of the window's training worker that only a mutation of the code showed untested: a
continued run keeps its TensorBoard curves going, the events are on disk at each save and the
file is closed at the end, every held-out loss reaches TensorBoard, a run stopped during its
final evaluation says Continue scores it, a preview that fails says why in one line, and an
export between steps names the step it wrote."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QObject, Slot

import engine
from app.workers import TrainJob, TrainWorker, describe_error
from engine import run as runapi
from engine.trainer import TrainConfig

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"
SHORT = replace(engine.GENERATION_DEFAULTS, max_new_tokens=2)


def _spec(steps: int | None, **train: object) -> engine.RunSpec:
    return runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64,
                                                           max_steps=steps, **train),
                          autosave_minutes=0)


def _worker(tmp_path: Path, spec: engine.RunSpec, prompts: list[str] | None = None,
            **job: object) -> TrainWorker:
    paths = [] if job.get("continue_folder") else [str(SAMPLE)]
    return TrainWorker(TrainJob(spec, paths, str(tmp_path / "runs"), **job),  # type: ignore[arg-type]
                       prompts or [], SHORT, every=0)


class _Lines(QObject):
    """Collects a worker's lines, those its preview thread says too (delivered on this one)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    @Slot(str)
    def add(self, line: str) -> None:
        self.lines.append(line)


def _tb(folder: str | Path, tag: str) -> list[int]:
    """The steps TensorBoard reads for ``tag`` in the run's events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(folder) / "tb"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def test_a_continued_run_keeps_logging_its_tensorboard_curves(qtbot, tmp_path):
    """Continue of a window run (one with tb/) must log its new steps: TensorBoard's curves
    stopped at the step the run was continued from."""
    first = _worker(tmp_path, _spec(2))
    first.run()
    assert _tb(first.folder, "loss/train") == [1, 2]
    again = _worker(tmp_path, _spec(2), continue_folder=first.folder,
                    overrides={"max_steps": 4})
    again.run()
    assert again.folder == first.folder
    assert sorted(_tb(first.folder, "loss/train")) == [1, 2, 3, 4]


def test_an_ended_runs_tensorboard_file_is_not_left_open(qtbot, tmp_path):
    """The window held each ended run's events file (and tensorboardX's thread) open for as
    long as it ran: a run deleted later kept its disk space."""
    w = _worker(tmp_path, _spec(2))
    w.run()
    tb = (Path(w.folder) / "tb").resolve()
    assert any(tb.iterdir())
    fds = Path("/proc/self/fd")

    def target(fd: str) -> str:
        try:
            return os.readlink(fds / fd)
        except OSError:  # closed since the listing (a queue's feeder thread ending: seen in CI)
            return ""

    still_open = [t for t in map(target, os.listdir(fds)) if t.startswith(str(tb))]
    assert still_open == []


def test_tensorboard_events_are_on_disk_when_their_snapshot_is_saved(qtbot, tmp_path):
    """Events were buffered for up to 5 s: a kill -9 just after a save lost the steps that
    snapshot holds, and the curves had a gap after the resume."""
    spec = replace(_spec(3), autosave_steps=1)
    w = _worker(tmp_path, spec)
    seen: dict[int, list[int]] = {}
    real = w._on_save

    def on_save(path: Path) -> None:  # what a kill -9 right after this save would leave
        real(path)
        seen[int(path.name.split("-")[1])] = _tb(path.parent.parent, "loss/train")

    w._on_save = on_save  # type: ignore[method-assign]
    w.run()
    assert sorted(seen) == [1, 2, 3]
    for step, logged in seen.items():
        assert step in logged, (step, logged)


def test_tensorboards_held_out_curve_has_every_evaluation_of_the_run(qtbot, tmp_path):
    """Each held-out loss metrics.csv has (every few steps, and the epoch's end) belongs on
    TensorBoard's loss/heldout curve too."""
    w = _worker(tmp_path, _spec(None, epochs=1, eval_every=7))
    w.run()
    evals = [r["step"] for r in engine.read_metrics(w.folder) if r["kind"] == "eval"]
    last = w.run_obj.step if w.run_obj else 0
    assert 7 in evals and last in evals and last % 7 != 0, evals  # both kinds of evaluation
    assert sorted(_tb(w.folder, "loss/heldout")) == sorted(evals)


def test_a_run_stopped_during_its_final_evaluation_says_continue_scores_it(qtbot, tmp_path):
    """A Stop while the run's last held-out evaluation ran: the status line said "stopped at
    step 2" with nothing on why it has no held-out loss or that Continue scores it."""
    w = _worker(tmp_path, _spec(2))
    real_open = w._open

    def open_then_stop_in_the_final_evaluation() -> engine.Run:
        run = real_open()
        scored = run.trainer.held_out

        def stop_while_scoring(should_stop=None):  # type: ignore[no-untyped-def]
            w.control.stop()  # Stop pressed while the evaluation runs
            return scored(should_stop)

        run.trainer.held_out = stop_while_scoring  # type: ignore[method-assign]
        return run

    w._open = open_then_stop_in_the_final_evaluation  # type: ignore[method-assign]
    ended: list[str] = []
    w.ended.connect(ended.append)
    w.run()
    assert len(ended) == 1 and "stopped at step 2" in ended[0], ended
    assert engine.UNSCORED in ended[0] and "Continue scores it" in ended[0], ended


def test_a_file_error_is_said_in_one_line_not_as_a_traceback():
    """A run folder that cannot be written (a full disk, permissions) is the user's to fix: the
    Log got a Python traceback for it."""
    exc = PermissionError(13, "Permission denied", "/runs/r/lock")
    assert describe_error(exc) == "/runs/r/lock: Permission denied"  # as the CLI says it (it
    # read "[Errno 13] Permission denied: '/runs/r/lock'")
    assert describe_error(MemoryError()) == ("out of memory; use a smaller model, batch or "
                                             "sequence length")  # (a traceback)


def test_a_preview_whose_numbers_overflow_says_so_and_the_run_goes_on(qtbot, tmp_path,
                                                                      monkeypatch):
    """A diverging model's preview (a FloatingPointError in sampling) showed a traceback
    instead of the prompt and what went wrong."""
    def overflowing(self, prompt, cfg, stepper=None):  # type: ignore[no-untyped-def]
        raise FloatingPointError("overflow in exp")

    monkeypatch.setattr(engine.MambaLM, "generate", overflowing)
    w = _worker(tmp_path, _spec(1), prompts=["The "])
    said = _Lines()
    w.info.connect(said.add)
    w.run()
    shown = [r["text"] for r in engine.read_samples(w.folder)]
    assert shown and all(t == "The  [generation failed: overflow in exp]" for t in shown), shown
    QCoreApplication.processEvents()  # the preview thread's lines, posted before run() ended
    assert not any("preview failed" in s or "Traceback" in s for s in said.lines), said.lines
    assert engine.read_pointer(Path(w.folder))["step"] == 1


def test_a_preview_that_cannot_start_says_why_in_one_line(qtbot, tmp_path, monkeypatch):
    """A preview backend that cannot be made (no GPU memory, a driver's error) put a Python
    traceback in the Log at every preview."""
    def no_device(lm, choice):  # type: ignore[no-untyped-def]
        raise OSError("the GPU device is gone")

    monkeypatch.setattr(engine, "pick_backend", no_device)
    w = _worker(tmp_path, _spec(1), prompts=["The "])
    said = _Lines()
    w.info.connect(said.add)
    w.run()
    qtbot.waitUntil(lambda: any(s.startswith("preview failed") for s in said.lines))
    failed = [s for s in said.lines if s.startswith("preview failed")]
    assert failed[0] == "preview failed: the GPU device is gone", failed


def test_each_preview_prompt_is_sampled_with_its_own_seed(qtbot, tmp_path):
    """Every prompt of a preview was sampled from the same seed: the Gallery's records of two
    prompts gave the same seed, unlike the CLI's previews."""
    w = TrainWorker(TrainJob(_spec(1), [str(SAMPLE)], str(tmp_path / "runs")), ["The ", "A "],
                    replace(SHORT, seed=7), every=0)
    w.run()
    first = [r for r in engine.read_samples(w.folder) if r["step"] == 0]
    assert [r["seed"] for r in first] == [engine.sample_seed(7, 0), engine.sample_seed(7, 1)]


@pytest.mark.parametrize("kind", ["merged"])
def test_an_export_between_steps_names_the_step_it_wrote(qtbot, tmp_path, kind):
    """Export of a training run's current weights: the message said only "from run R", not
    the step of the weights written (the run trains on after it)."""
    w = _worker(tmp_path, _spec(2))
    out = tmp_path / "out"
    saved: list[str] = []
    w.saved.connect(saved.append)
    w.request(kind, str(out))  # served after the first step
    w.run()
    name = Path(w.folder).name
    assert f"{kind} written to {out} (from run {name}, step 1)" in saved, saved


def test_an_export_that_fails_between_steps_names_what_and_where(qtbot, tmp_path):
    """An export the training worker could not write said only the exporter's reason, not that
    it was the export to that folder that failed (the run trains on, and the Log is busy)."""
    w = _worker(tmp_path, _spec(1))
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("a user's file")  # not empty: refused without force
    failed: list[str] = []
    w.failed.connect(failed.append)
    w.request("merged", str(out))
    w.run()
    assert len(failed) == 1 and failed[0].startswith(f"could not write merged to {out}: "), failed
    assert (out / "notes.txt").read_text() == "a user's file"


def test_continue_with_max_steps_0_says_no_limit(qtbot, tmp_path):
    """Continue with Max steps set back to 0 said "continuing ... with max_steps 0", which
    reads as a run of no steps; 0 is no limit."""
    first = _worker(tmp_path, _spec(1))
    first.run()
    again = _worker(tmp_path, _spec(1), continue_folder=first.folder,
                    overrides={"max_steps": 0})
    said: list[str] = []
    again.info.connect(said.append)
    again.control.stop()  # stopped before its first step: only the opening is looked at
    again.run()
    assert f"continuing {first.folder} from step 1 with max_steps no limit" in said, said


def test_an_epochs_sample_is_recorded_with_that_epoch_done(qtbot, tmp_path):
    """The sample at the end of epoch 1 was recorded as "0 epochs done", so the Gallery's epoch
    filter put it with the untrained model's."""
    w = _worker(tmp_path, _spec(None, epochs=1), prompts=["The "])
    w.run()
    rows = [(r["tag"], r["epoch"]) for r in engine.read_samples(w.folder)]
    assert ("step 0, untrained", 0) in rows and ("epoch 1", 1) in rows, rows


@pytest.mark.parametrize(("steps", "epochs", "fix"), [(None, 1, "Epochs"), (3, 50, "Max steps")])
def test_a_short_runs_warmup_note_names_the_box_that_ends_it(qtbot, tmp_path, steps, epochs, fix):
    """The window's note that a run too short for its warmup learns little names the box to
    raise: the one whose total ends the run (raising Max steps does nothing when Epochs end it)."""
    spec = runapi.RunSpec(preset="tiny", autosave_minutes=0, train=TrainConfig(  # 5 steps an
        batch_size=64, seq_len=64, epochs=epochs, max_steps=steps))  # epoch
    w = _worker(tmp_path, spec)
    said: list[str] = []
    w.saved.connect(said.append)
    w.run()
    notes = [s for s in said if "learns little" in s]
    assert len(notes) == 1 and notes[0].endswith(f"learns little: raise {fix}"), said
