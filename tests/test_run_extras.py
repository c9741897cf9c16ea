"""Run-folder extras: sample gallery file, TOML settings, early stopping, TensorBoard events,
repetition penalty."""

import json
import math
import time

import numpy as np
import pytest

import engine
from engine.earlystop import EarlyStopping
from engine.run import RunSpec
from engine.runtoml import RunSettings, load_settings, save_settings
from engine.samples import append_sample, read_samples, sample_seed
from engine.sampling import SamplingConfig, sample
from engine.tblog import TB_DIR, TBLogger
from engine.trainer import TrainConfig


def test_samples_round_trip_and_skip_a_torn_line(tmp_path):
    append_sample(tmp_path, {"step": 0, "epoch": 0, "prompt": "The", "text": "The cat"})
    append_sample(tmp_path, {"step": 9, "epoch": 1, "prompt": "A", "text": "A dog"})
    with open(tmp_path / "samples.jsonl", "a") as f:
        f.write('{"step": 10, "te')  # kill -9 mid-write
    rows = read_samples(tmp_path)
    assert [r["text"] for r in rows] == ["The cat", "A dog"] and rows[1]["epoch"] == 1
    assert read_samples(tmp_path / "none") == []


def test_each_prompt_gets_its_own_seed():
    seeds = [sample_seed(7, i) for i in range(4)]
    assert len(set(seeds)) == 4 and sample_seed(None, 3) is None


def test_settings_toml_round_trip(tmp_path):
    lora = engine.LoRAConfig(targets=("x_proj", "dt_proj"), rank=4)
    s = RunSettings(RunSpec(preset="tiny", model={"d_model": 32, "n_layer": 1},
                            train=TrainConfig(lr=1e-3, batch_size=2, max_steps=5, lora=lora),
                            early_stopping=EarlyStopping(patience=3, target_loss=1.5)),
                    ("data.txt",))
    path = tmp_path / "run.toml"
    save_settings(path, s)
    back = load_settings(path)
    assert back.spec == s.spec
    assert back.corpus == (str(tmp_path / "data.txt"),)
    assert back.early_stopping.patience == 3 and back.early_stopping.target_loss == 1.5


@pytest.mark.parametrize("text, words", [
    ("[train]\nlr = nan\n", "learning rate"),
    ("[train]\nbogus = 1\n", "bogus"),
    ("[wat]\n", "unknown section"),
    ("lr = = 3", "not valid TOML"),
    ("[run]\nholdout = 0.95\n", "held-out fraction 0.95 is outside [0, 0.9]"),
])
def test_bad_settings_are_one_line_errors_naming_the_file(tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(engine.MambaStudioError) as exc:
        load_settings(path)
    msg = str(exc.value)
    assert str(path) in msg and words in msg and "\n" not in msg


def test_early_stopping_patience_and_target():
    es = EarlyStopping(patience=2)
    assert [es.update(v) for v in (3.0, 2.5, 2.6, 2.7)] == [False, False, False, True]
    assert es.best == 2.5 and "patience 2" in es.reason
    es = EarlyStopping(target_loss=1.0)
    assert not es.update(1.5) and es.update(0.9) and "target" in es.reason
    assert not EarlyStopping().enabled and not EarlyStopping().update(math.nan)


def test_tensorboard_events_read_back_by_tensorboard(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = TBLogger(tmp_path, tokens_per_byte=1.0)
    for step in range(1, 4):
        log.step(step, 5.0 - step, 0.5, 1e-3, 100.0)
    log.eval(3, 2.5)
    log.close()
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    train = acc.Scalars("loss/train")
    assert [e.step for e in train] == [1, 2, 3]
    assert [e.value for e in train] == pytest.approx([4.0, 3.0, 2.0])
    assert acc.Scalars("bpb/heldout")[0].value == pytest.approx(2.5 / math.log(2))


def test_a_resume_in_the_same_second_keeps_the_earlier_tensorboard_events(tmp_path):
    """tensorboardX names its file by the second and the host alone: a second logger in the same
    second (a run continued at once) opened the same file and truncated the first's steps."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for steps in ((1, 2), (3, 4)):  # well within one second
        log = TBLogger(tmp_path)
        for step in steps:
            log.step(step, 5.0 - step, 0.5, 1e-3, 100.0)
        log.close()
    assert len(list((tmp_path / TB_DIR).iterdir())) == 2
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss/train")] == [1, 2, 3, 4]


def test_a_resume_hides_the_steps_a_crash_lost_from_tensorboard(tmp_path):
    """Killed at step 6 after its save at step 4, a run is resumed at 4 and trains 5 and 6
    again: TensorBoard drew both copies of them (28 duplicates in a walk-through; with a changed
    total, a curve that doubled back)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = TBLogger(tmp_path)
    for step in range(1, 7):
        log.step(step, 10.0 + step, 0.5, 1e-3, 100.0)
    log.close()
    log = TBLogger(tmp_path, step=4)  # the resume, from the snapshot of step 4
    for step in range(5, 9):
        log.step(step, 20.0 + step, 0.5, 1e-3, 100.0)
    log.close()
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    train = acc.Scalars("loss/train")
    assert [e.step for e in train] == list(range(1, 9))
    assert [e.value for e in train] == [11, 12, 13, 14, 25, 26, 27, 28]


def test_the_run_logger_of_a_resume_starts_at_the_runs_step(tmp_path, monkeypatch):
    """``run_logger`` (the CLI's and the window's) gives the logger the resumed run's step, so
    the events a crash left after the snapshot are hidden, as the test above shows of it."""
    from pathlib import Path

    from engine import tblog
    from engine.trainer import TrainConfig

    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=2))
    corpus = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"
    with engine.start_run(spec, [corpus], out=tmp_path / "r") as run:
        run.train()
    made: list[dict] = []
    monkeypatch.setattr(tblog, "TBLogger", lambda *a, **k: made.append(k) or "logger")
    with engine.resume_run(tmp_path / "r", max_steps=4) as run:
        assert tblog.run_logger(run, resumed=True, wanted=True) == "logger"
        assert run.step == 2 and made[-1]["step"] == 2, made


def test_steps_a_rollback_undid_are_hidden_from_tensorboard(tmp_path):
    """The guard can roll back past logged steps; the retrained ones were logged after them, so
    TensorBoard drew each of those steps twice."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = TBLogger(tmp_path)
    for step in (1, 2, 3, 4, 3, 4, 5):  # rolled back to step 2 after step 4
        log.step(step, 10.0 * step, 0.5, 1e-3, 100.0)
    log.close()
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss/train")] == [1, 2, 3, 4, 5]


def test_a_step_retrained_after_a_one_step_rollback_is_drawn_once(tmp_path):
    """The commonest rollback undoes the last step alone: that step is logged again with the
    same number, and its first loss must be hidden as well (only an earlier step was)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = TBLogger(tmp_path)
    for step, loss in ((1, 10.0), (2, 20.0), (3, 30.0), (3, 31.0), (4, 40.0)):
        log.step(step, loss, 0.5, 1e-3, 100.0)
    log.close()
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss/train")] == [
        (1, 10.0), (2, 20.0), (3, 31.0), (4, 40.0)]


def test_tensorboard_has_each_held_out_loss_once_and_every_saved_step_at_once(tmp_path):
    """An evaluation at an epoch's end reached the step's and the epoch's report and was logged
    twice; events buffered for up to 5 s were lost by a kill -9 after the save that holds their
    steps, and the resume went on after them (a gap in the curves)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = TBLogger(tmp_path, tokens_per_byte=1.0)
    for step in range(1, 12):
        log.step(step, 5.0 - step / 10, 0.5, 1e-3, 100.0)
    log.eval(11, 2.5)
    log.eval(11, 2.5)  # the epoch's report of the same evaluation
    log.flush()  # a save: what a kill -9 right now must not lose (the writer is still open)
    acc = EventAccumulator(str(tmp_path / TB_DIR))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss/train")] == list(range(1, 12))
    assert [e.step for e in acc.Scalars("loss/heldout")] == [11]
    log.close()


def test_a_snapshot_is_written_only_after_the_events_of_its_steps(tmp_path, monkeypatch):
    """The CLI flushed TensorBoard after the snapshot was published: a kill -9 between the two
    (3 of 30 kills in a walk-through) lost that step's events for good, since the resume goes
    on after the snapshot's step. Each snapshot of step N now finds the events of steps 1..N
    already in the file."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from engine import runformat as rf
    from engine.cli import main

    out = tmp_path / "run"
    real = rf.write_snapshot
    seen: list[tuple[int, list[int]]] = []

    def checked(folder, step, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        files = sorted((out / TB_DIR).glob("events.out.tfevents.*"))
        logged = sorted({e.step for f in files for e in EventFileLoader(str(f)).Load()
                         for v in e.summary.value if v.tag == "loss/train"})
        seen.append((step, logged))
        return real(folder, step, *a, **k)

    monkeypatch.setattr(rf, "write_snapshot", checked)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    assert main(["train", str(corpus), "--preset", "tiny", "--batch", "2", "--seq-len", "32",
                 "--max-steps", "6", "--autosave-steps", "2", "--sample-tokens", "0",
                 "--out", str(out)]) == 0
    assert [s for s, _ in seen if s > 0] == [2, 4, 6], seen
    assert all(logged == list(range(1, step + 1)) for step, logged in seen), seen


def test_a_save_waits_for_a_slow_write_of_the_last_event_and_leaves_no_marker(tmp_path,
                                                                            monkeypatch):
    """A flush waited for tensorboardX's queue to empty and then 10 ms: an event still being
    written then (a slow disk) was not in the file a kill -9 leaves. It now waits for its own
    marker to pass the writer thread, which never writes the marker to the file."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboardX import event_file_writer

    real = event_file_writer.EventsWriter.write_event

    def slow(self, event):  # noqa: ANN001, ANN202
        time.sleep(0.04)
        return real(self, event)

    monkeypatch.setattr(event_file_writer.EventsWriter, "write_event", slow)
    log = TBLogger(tmp_path, tokens_per_byte=1.0)
    for step in (1, 2, 3):
        log.step(step, 5.0 - step, 0.5, 1e-3, 100.0)
    log.flush()  # a save
    (events_file,) = (tmp_path / TB_DIR).glob("events.out.tfevents.*")
    events = list(EventFileLoader(str(events_file)).Load())
    written = sorted((v.tag, e.step) for e in events for v in e.summary.value)
    assert written == sorted((tag, step) for step in (1, 2, 3) for tag in (
        "loss/train", "bpb/train", "grad_norm", "lr", "tokens_per_s"))  # the last one too
    assert not any(e.file_version.startswith("mamba-studio") for e in events)
    log.flush()  # a second save's marker: waited for too
    log.close()
    events = list(EventFileLoader(str(events_file)).Load())
    assert not any(e.file_version.startswith("mamba-studio") for e in events)


@pytest.mark.parametrize("writes_before_full", [0, 1, 30])  # at start / in its writer thread
def test_a_full_disk_stops_tensorboard_logging_quietly(tmp_path, capfd, monkeypatch,
                                                       writes_before_full):
    """On a full disk tensorboardX's writer thread died with a traceback (another came from its
    exit hook), and its bounded queue then blocks add_scalar for good: logging now stops, says
    why once, and training is never blocked."""
    from tensorboardX import event_file_writer

    real = event_file_writer.EventsWriter._write_serialized_event
    done: list[int] = []

    def full(self, data):  # noqa: ANN001, ANN202
        if len(done) >= writes_before_full:
            raise OSError(28, "No space left on device")
        done.append(1)
        return real(self, data)

    monkeypatch.setattr(event_file_writer.EventsWriter, "_write_serialized_event", full)
    said: list[str] = []
    log = TBLogger(tmp_path, on_error=said.append)
    t0 = time.monotonic()
    for step in range(1, 200):  # far more than the writer's queue of 10
        log.step(step, 2.0, 0.5, 1e-3, 100.0)
        time.sleep(0.005)
    log.close()
    assert time.monotonic() - t0 < 30
    assert len(said) == 1 and "No space left on device" in said[0], said
    assert "Traceback" not in capfd.readouterr().err


def test_a_logger_that_failed_on_a_save_still_ends_its_writer_thread(tmp_path, monkeypatch):
    """A full disk met by the flush at a save (not by the writer thread) skipped the writer's
    close, and its thread, left waiting on its queue, printed "OSError: handle is closed" at
    the interpreter's exit, after the run's one-line error."""
    log = TBLogger(tmp_path, on_error=lambda _m: None)
    log.step(1, 2.0, 0.5, 1e-3, 100.0)

    def full() -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(log.writer, "flush", full)
    log.flush()
    assert log.failed and log._worker.is_alive()
    log.close()
    assert not log._worker.is_alive()


def test_a_tb_link_is_not_followed_out_of_the_run(tmp_path):
    """A run's tb/ turned into a link to another folder (/etc in a test): events were written
    there. Logging stops with one message and training goes on, as for a tb that is a file."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / TB_DIR).symlink_to(outside)
    said: list[str] = []
    log = TBLogger(run, on_error=said.append)
    log.step(1, 2.0, 0.5, 1e-3, 100.0)
    log.eval(1, 2.0)
    log.close()
    assert list(outside.iterdir()) == []
    assert len(said) == 1 and "is a link" in said[0] and "training goes on" in said[0], said


def test_other_threads_errors_reach_the_hook_installed_before_the_logger(tmp_path, monkeypatch):
    """The logger's thread hook passed other threads' errors to the hook current when
    ``engine.tblog`` was imported, skipping one installed later (a crash reporter, pytest's)."""
    import threading

    from engine import tblog

    seen: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: seen.append(str(args.exc_value)))
    monkeypatch.setattr(tblog, "_previous_hook", [])
    log = TBLogger(tmp_path)
    try:
        assert threading.excepthook is tblog._quiet_writer_errors

        def boom() -> None:
            raise RuntimeError("not the writer's")

        t = threading.Thread(target=boom)
        t.start()
        t.join()
        assert seen == ["not the writer's"]
    finally:
        log.close()


def test_repetition_penalty_lowers_a_seen_token():
    logits = np.array([2.0, 1.9, -1.0])
    greedy = SamplingConfig(temperature=0.0)
    assert sample(logits, greedy, np.random.default_rng(0), np.array([0])) == 0
    pen = SamplingConfig(temperature=0.0, repetition_penalty=1.5)
    assert sample(logits, pen, np.random.default_rng(0), np.array([0])) == 1
    assert logits[0] == 2.0  # the caller's array is untouched


def test_cli_train_config_file_with_early_stopping_and_tensorboard(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from engine.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    s = RunSettings(RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=8,
                                                             eval_every=2),
                            early_stopping=EarlyStopping(target_loss=900.0)), ("c.txt",))
    save_settings(tmp_path / "run.toml", s)
    out = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "run.toml"), "--out", str(out),
                 "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "stopped (early stopping: held-out loss" in err and "best snapshot is kept" in err
    spec = engine.run.open_run(out).spec
    assert spec.preset == "tiny" and spec.train.seq_len == 32  # from the file
    acc = EventAccumulator(str(out / TB_DIR))
    acc.Reload()
    assert [e.step for e in acc.Scalars("loss/heldout")] == [2]  # stopped at the first eval


def test_early_stopping_does_not_claim_a_runs_own_end(tmp_path, capsys):
    """The held-out loss measured at a run's last step (max steps inside an epoch) met the
    target and the run said "early stopping: ... reached the target" at its natural end."""
    from engine.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    out = tmp_path / "run"
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "3", "--target-loss", "900", "--sample-tokens", "0",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "early stopping" not in err and "finished: saved" in err and "(held-out loss" in err


def test_the_run_owns_early_stopping_and_says_why_it_stopped(tmp_path):
    """Early stopping lives in Run.train (the CLI and the window each had a copy): a target met
    at the first evaluation stops the run there with its reason; met only at the run's own end,
    it is a plain finish with no reason."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=8,
                                                    eval_every=2),
                   early_stopping=EarlyStopping(target_loss=900.0))
    with engine.run.start(spec, [corpus], out=tmp_path / "a") as run:
        result = run.train()
    assert (result.state, result.step) == ("stopped", 2)
    assert result.reason.startswith("early stopping: held-out loss") and "900" in result.reason
    spec = RunSpec(preset="tiny", train=TrainConfig(batch_size=2, seq_len=32, max_steps=3),
                   early_stopping=EarlyStopping(target_loss=900.0))
    with engine.run.start(spec, [corpus], out=tmp_path / "b") as run:
        result = run.train()
    assert (result.state, result.step, result.reason) == ("finished", 3, "")
    assert result.val_loss is not None and result.val_loss < 900  # measured, not fed to it


def test_a_run_started_without_tensorboard_resumes_without_it(tmp_path, capsys):
    """``--no-tensorboard`` was forgotten: a plain --resume wrote tb/ anyway."""
    from engine.cli import main

    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    out = tmp_path / "run"
    tiny = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]
    assert main(["train", str(corpus), *tiny, "--max-steps", "2", "--no-tensorboard",
                 "--out", str(out)]) == 0
    assert main(["train", "--resume", str(out), "--max-steps", "3", "--sample-tokens", "0"]) == 0
    assert not (out / TB_DIR).exists()
    assert main(["train", "--resume", str(out), "--max-steps", "4", "--sample-tokens", "0",
                 "--tensorboard"]) == 0  # asked for: from here on
    assert (out / TB_DIR).is_dir()
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--sample-tokens", "0"]) == 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out / TB_DIR))
    acc.Reload()
    assert 5 in [e.step for e in acc.Scalars("loss/train")]  # kept on by a plain resume


def test_a_sample_after_a_torn_line_is_kept_and_a_foreign_one_skipped(tmp_path):
    """A record appended after a torn last line was glued to it and lost; a line whose epoch is
    no integer reached the window (a traceback, the window half-switched to another run)."""
    append_sample(tmp_path, {"step": 1, "epoch": 0, "prompt": "A", "text": "A b"})
    with open(tmp_path / "samples.jsonl", "a") as f:
        f.write('{"step": 2, "te')  # kill -9 mid-write
        f.write('\n{"text": "hand-added", "epoch": "two", "step": 1}\n{"text": "x", "step": true}')
    append_sample(tmp_path, {"step": 3, "epoch": 1, "prompt": "A", "text": "A c"})
    assert [(r["step"], r["text"]) for r in read_samples(tmp_path)] == [(1, "A b"), (3, "A c")]


def test_the_sample_schedule_counts_steps_from_the_last_sample():
    """Inside an epoch a sample once ``every`` steps have gone by since the last one (any
    sample: step 0, an epoch's end, a resume); an epoch's last step is left to the epoch's
    end; 0 never samples inside an epoch."""
    from engine.samples import SampleSchedule

    s = SampleSchedule(5, 0)
    assert [t for t in range(1, 13) if s.due(t, ends_epoch=False)] == list(range(5, 13))
    s.shown(5)
    assert not s.due(9, ends_epoch=False) and s.due(10, ends_epoch=False)
    assert not s.due(10, ends_epoch=True)  # the epoch's end samples it
    s.shown(8)  # an epoch's end at step 8: the count restarts there
    assert not s.due(12, ends_epoch=False) and s.due(13, ends_epoch=False)
    s.shown(3)  # an older step never moves it back
    assert s.last == 8
    resumed = SampleSchedule(5, 40)
    assert not resumed.due(44, ends_epoch=False) and resumed.due(45, ends_epoch=False)
    never = SampleSchedule(0, 0)
    assert not any(never.due(t, ends_epoch=False) for t in range(1, 1000))
    with pytest.raises(ValueError, match="expected 0"):
        SampleSchedule(-1, 0)


def test_settings_the_corpus_cannot_fill_are_said(tmp_path):
    """A sequence length of 100,000 trained rows of the corpus's 17,815 tokens, and an
    accumulation of 1,000 x 4 rows trained each step on the 81 rows there were: both without
    a word (the memory estimate was sized for the shape asked for)."""
    import engine
    from engine.run import RunSpec, start
    from engine.trainer import TrainConfig

    said = {}
    for seq, accum in ((100_000, 1), (256, 1000), (256, 1)):
        spec = RunSpec(preset="tiny", train=TrainConfig(seq_len=seq, batch_size=4,
                                                        grad_accum=accum, max_steps=1))
        with start(spec, [engine.SAMPLE_CORPUS], root=tmp_path) as run:
            said[(seq, accum)] = [n for n in run.notices if "training text fills" in n]
            rows, width = len(run.trainer.rows), run.trainer.rows.width
    assert said[(100_000, 1)] == [f"the training text fills rows of {17_815:,} tokens, not the "
                                   "sequence length of 100,000: rows are that long",
                                   "a step takes 4 rows (batch 4 x accumulation 1), but the "
                                   "training text fills only 1 row: each step trains on all of "
                                   "it once"]
    assert said[(256, 1000)] == [f"a step takes 4,000 rows (batch 4 x accumulation 1,000), but "
                                  f"the training text fills only {rows} rows: each step trains "
                                  "on all of it once"]
    assert said[(256, 1)] == [] and width == 256


def test_a_step_of_exactly_the_rows_there_are_is_no_note(tmp_path):
    """A step of batch x accumulation equal to the training rows trains each row once: nothing
    to say. One row more is the note. Only far larger steps were tried, so saying it for the
    equal case passed."""
    import engine
    from engine.run import RunSpec, start
    from engine.trainer import TrainConfig

    def notes(batch: int, accum: int) -> tuple[list[str], int]:
        spec = RunSpec(preset="tiny", train=TrainConfig(seq_len=256, batch_size=batch,
                                                        grad_accum=accum, max_steps=1))
        with start(spec, [engine.SAMPLE_CORPUS], root=tmp_path) as run:
            return [n for n in run.notices if "a step takes" in n], len(run.trainer.rows)

    said, rows = notes(1, 1)
    assert said == [] and rows > 2
    assert notes(1, rows) == ([], rows)
    said, _ = notes(1, rows + 1)
    assert said == [f"a step takes {rows + 1:,} rows (batch 1 x accumulation {rows + 1:,}), "
                    f"but the training text fills only {rows:,} rows: each step trains on all "
                    "of it once"]


def test_the_newest_samples_step_is_read_from_the_end_of_the_gallery(tmp_path, monkeypatch):
    """The CLI asked whether a step was recorded by reading the whole samples.jsonl (up to 64
    MiB) at every sample; the newest record's step is read from the file's last 256 KiB."""
    from engine import samples

    assert samples.last_sampled_step(tmp_path) is None
    rows = "".join(json.dumps({"step": s, "epoch": 0, "text": "x" * 900, "prompt": "p"}) + "\n"
                   for s in range(1, 3001))
    (tmp_path / samples.SAMPLES).write_text(rows + '{"step": 3001, "epo')  # a torn last line
    assert (tmp_path / samples.SAMPLES).stat().st_size > 2_000_000
    reads: list[int] = []
    real = samples.read_samples
    monkeypatch.setattr(samples, "read_samples",
                        lambda folder, tail=None: reads.append(tail) or real(folder, tail))
    assert samples.last_sampled_step(tmp_path) == 3000 and reads == [256 * 1024]
    with open(tmp_path / samples.SAMPLES, "a") as f:  # a newest record over the tail (a
        f.write("\n" + json.dumps({"step": 3002, "epoch": 0, "text": "y" * 300_000,  # sample
                                    "prompt": "p"}) + "\n")  # of 1,000,000 tokens): it said
    assert samples.last_sampled_step(tmp_path) == 3002  # None, so the step was recorded again


def test_a_cli_run_sampling_every_step_never_reads_the_whole_gallery(tmp_path, monkeypatch,
                                                                     capsys):
    from engine import samples
    from engine.cli import main

    whole: list[int] = []
    real = samples.read_samples

    def counted(folder, tail=None):  # noqa: ANN001, ANN202
        if tail is None or tail >= samples.MAX_BYTES:
            whole.append(1)
        return real(folder, tail)
    monkeypatch.setattr(samples, "read_samples", counted)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat and looked at the hat. " * 100)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "4", "--sample-every", "1", "--sample-tokens", "2", "--out",
                 str(tmp_path / "r")]) == 0
    assert len(real(tmp_path / "r")) == 5 and whole == [], whole  # steps 0-4, one prompt each
