"""Rules of a run's state that only a mutation of the code showed untested: no write lands in a
folder put at a run's path, early stopping after a rollback, a snapshot's training state, the
steps a kill lost, advice in the window's words, one-line errors, generated text at an end of
text, the settings' ranges, a GGUF publish without hard links, and an export write's advice.
Each fails with a small change to the code it names (a boundary, a type check, a branch)."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from engine import runformat as rf
from engine.errors import CheckpointError, TrainingError, one_line
from engine.limits import Range
from engine.run import RunSpec, start
from engine.runformat import trainer_state
from engine.trainer import TrainConfig
from tests.helpers import two_file_corpus


def _spec(**train) -> RunSpec:  # noqa: ANN003
    kw = {"batch_size": 2, "seq_len": 32, "epochs": 1, "max_steps": 2, **train}
    return RunSpec(preset="tiny", train=TrainConfig(**kw), autosave_minutes=0)


# --- engine/run.py: Run._here before each write by path


def _files(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and p.name != "lock"}


WRITES = {"status": lambda run: run._status("running"),
          "metric": lambda run: run._metric({"kind": "step", "step": 1}),
          "save": lambda run: run.save(),
          "rollback": lambda run: run._forget_diverged(run.step)}


@pytest.mark.parametrize("write", WRITES)
def test_no_write_of_a_run_lands_in_the_folder_put_at_its_path(tmp_path, write):
    """Each write by path checks first that the path still leads to the locked folder: after
    `mv a a-old && mv b a`, none of them may touch b (status.json, metrics.csv, a snapshot,
    the rollback's truncation)."""
    corpus = two_file_corpus(tmp_path)
    other, folder = tmp_path / "b", tmp_path / "a"
    with start(_spec(), [corpus], out=other) as done:
        done.train()
    before = _files(other)
    with start(_spec(), [corpus], out=folder) as run:
        os.rename(folder, tmp_path / "a-old")
        os.rename(other, folder)
        with pytest.raises(TrainingError, match="moved or deleted while training"):
            WRITES[write](run)
    assert _files(folder) == before


def test_a_run_folder_swapped_during_the_last_save_says_so_once(tmp_path):
    """`mv a a-old && mv b a` between the last save and the final status write: the error is
    the moved folder's one line (not a "could not be saved: fix that, then resume a" of the
    other run, which holds a run.json), and b is left as it was."""
    corpus = two_file_corpus(tmp_path)
    other, folder = tmp_path / "b", tmp_path / "a"
    with start(_spec(), [corpus], out=other) as done:
        done.train()
    before = _files(other)

    def swap_after_the_last_save(path):  # noqa: ANN001
        if path.name == "step-2":
            os.rename(folder, tmp_path / "a-old")
            os.rename(other, folder)

    with (start(_spec(), [corpus], out=folder) as run, pytest.raises(TrainingError) as info):
        run.train(on_save=swap_after_the_last_save)
    assert str(info.value) == (
        f"{folder}: the run folder was moved or deleted while training (another folder is at "
        "its path now: nothing was written there); training stopped at step 2, and its last "
        "snapshot is step 2; if it was moved, resume it where it is now")
    assert _files(folder) == before


def test_a_run_folder_deleted_and_made_again_empty_gets_no_file(tmp_path):
    """`rm -r a && mkdir a` while a trained: the lock's file is gone, and nothing is written
    into the new empty folder (no metrics.csv appended to it)."""
    folder = tmp_path / "a"
    with start(_spec(), [two_file_corpus(tmp_path)], out=folder) as run:
        shutil.rmtree(folder)
        folder.mkdir()
        with pytest.raises(TrainingError, match="moved or deleted while training"):
            run._metric({"kind": "step", "step": 1})
        assert list(folder.iterdir()) == []



# --- engine/run.py: _Pass.forget_undone


def test_a_rollback_gives_early_stopping_back_its_state_before_the_first_undone_loss():
    """Two held-out losses after the step a rollback goes back to: early stopping returns to
    its best and count from before the first of them (not from between the two)."""
    from types import SimpleNamespace

    from engine.control import TrainControl
    from engine.earlystop import EarlyStopping
    from engine.run import _Pass

    run = SimpleNamespace(spec=SimpleNamespace(early_stopping=EarlyStopping(patience=5)),
                          best_val=None, early_bad=0, step=2, saved_val=None, saved_step=2,
                          trainer=SimpleNamespace(total_steps=100),
                          _forget_diverged=lambda reported: None)
    p = _Pass(run, TrainControl(), None, None, None, None)
    for step, loss in ((3, 1.0), (4, 2.0), (5, 3.0)):
        run.step = step
        p.held_out(loss)
    assert (p.early.best, p.early.bad, run.early_bad) == (1.0, 2, 2)
    run.step = 3  # rolled back to step 3: the losses of steps 4 and 5 are undone
    p.forget_undone()
    assert (p.early.best, p.early.bad, run.early_bad) == (1.0, 0, 0)
    assert [f[0] for f in p.fed] == [3]


# --- engine/runformat/trainer_state.py


def test_prefixed_takes_only_names_that_start_with_the_prefix():
    """A LoRA's tensors are read by prefix: a name holding the prefix elsewhere is not one."""
    tensors = {"trainable.a": 1, "optimizer.trainable.b": 2, "x.trainable.c": 3}
    assert trainer_state.prefixed(tensors, trainer_state.TRAINABLE) == {"a": 1}


def test_unpack_gives_back_the_stored_schedule_and_counts():
    meta = {"cursor": {"step": 7}, "lr_scale": 0.25, "epochs": [{"steps": 7}], "optimizer_t": 7}
    tensors = {"optimizer.m": 1, "trainable.w": 2}
    back = trainer_state.unpack(meta, tensors)
    assert back == {"cursor": {"step": 7}, "lr_scale": 0.25, "epochs": [{"steps": 7}],
                    "optimizer": {"t": 7, "tensors": {"m": 1}}, "trainable": {"tensors": {"w": 2}}}


@pytest.mark.parametrize("stored, read", [(3, 3), (0, 0), (-2, 0), (True, 0), (1.5, 0),
                                          ("2", 0), (None, 0)])
def test_early_bad_of_a_snapshot_is_a_count_or_0(stored, read):
    assert trainer_state.early_bad({"early_bad": stored}) == read
    assert trainer_state.early_bad({}) == 0  # a snapshot from before early stopping


@pytest.mark.parametrize("meta, done", [({"epochs": [{}, {}]}, 2), ({"epochs": {"a": 1}}, 0),
                                        ({"epochs": "ab"}, 0), ({}, 0), ([1, 2], 0)])
def test_epochs_done_counts_only_a_list_of_epoch_reports(meta, done):
    assert trainer_state.epochs_done(meta) == done


def test_the_last_epochs_evaluation_is_at_the_sum_of_the_steps_up_to_it():
    epochs = [{"steps": 3, "val": {"loss": 2.0}}, {"steps": 4}, {"steps": 2, "val": {"loss": 1.5}},
              {"steps": 5}]
    assert trainer_state.last_epoch_eval(epochs) == ({"loss": 1.5}, 9)
    assert trainer_state.last_epoch_eval([{"steps": 3, "val": {"loss": 2.0}},
                                          {"steps": "x"}]) == ({"loss": 2.0}, None)
    assert trainer_state.last_epoch_eval("not a list") == (None, None)


def _good_trainer_json() -> dict:
    cursor = {"step": 4, "epoch": 1, "group": 0, "good": 4, "steps": 4, "loss_sum": 1.0,
              "norm_sum": 2.0}
    return {"cursor": cursor, "lr_scale": 1.0, "optimizer_t": 4, "epochs": [], "step": 4}


@pytest.mark.parametrize("change, said", [
    (lambda t: t.update(lr_scale=1.5), "lr_scale is 1.5, not a number in (0, 1]"),
    (lambda t: t.update(step=5), "step 5 differs from cursor.step 4"),
    (lambda t: t["cursor"].update(extra=1), "cursor holds unknown keys"),
    (lambda t: t["cursor"].update(good=-1), "cursor.good is -1, not a count"),
])
def test_a_trainer_json_out_of_range_is_named(change, said):
    t = _good_trainer_json()
    assert trainer_state.problem(t) is None
    change(t)
    assert said in (trainer_state.problem(t) or ""), trainer_state.problem(t)


# --- engine lost_steps_note


def test_the_lost_steps_are_counted_from_the_snapshot_kept(tmp_path):
    """Steps 1-5 in metrics.csv, the run going on from step 2: three steps lost, not five."""
    folder = tmp_path / "r"
    folder.mkdir()
    for step in range(1, 6):
        rf.append_metric(folder, {"kind": "step", "step": step, "epoch": 0, "loss": 1.0})
    note = rf.lost_steps_note(folder, 2)
    assert note is not None and note.startswith(
        "r trained to step 5, but its last snapshot is step 2: 3 steps after it were lost "), note
    assert rf.lost_steps_note(folder, 5) is None
    one = rf.lost_steps_note(folder, 4) or ""  # (it said "1 step after it were lost")
    assert "r trained to step 5, but its last snapshot is step 4: 1 step after it was lost " in \
        one and "(a kill or a crash) and is trained again from step 4" in one, one
    assert (rf.lost_steps_note(folder, 4, passed_over=True) or "").endswith(
        ": 1 step after it is trained again")


def test_no_lost_steps_are_said_of_a_run_a_process_still_trains(tmp_path):
    """A run being trained keeps its rows past its last snapshot: they are not lost."""
    with start(_spec(), [two_file_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
        for step in (3, 4):
            rf.append_metric(run.folder, {"kind": "step", "step": step, "epoch": 0, "loss": 1.0})
        assert rf.lost_steps_note(run.folder) is None  # held by this run (another opener)
    assert "2 steps after it were lost" in (rf.lost_steps_note(run.folder) or "")


# --- app/words.py


def test_give_or_init_advice_names_the_snapshot_to_open():
    from app.words import in_window_terms

    msg = ("r/run.json: damaged; its snapshots still load: give /x/r/snapshots/step-4 to "
           "generate, eval or export, or --init it to a new run")
    assert in_window_terms(msg) == (
        "r/run.json: damaged; its snapshots still load: open /x/r/snapshots/step-4 with File > "
        "Open model… (the Playground generates from it) and Start a new run from it")


# --- engine.one_line


def test_one_line_of_a_file_error_a_memory_error_and_a_long_message():
    assert one_line(OSError(errno.EACCES, "Permission denied", "/x/f")) == "/x/f: Permission denied"
    assert one_line(MemoryError()) == ("out of memory; use a smaller model, batch or sequence "
                                       "length")
    assert one_line(ValueError("a\n  b")) == "a b"
    long = one_line(ValueError("a" * 3000))
    assert long == "a" * 2000 + "..."
    assert one_line(ValueError("a" * 2000)) == "a" * 2000


# --- engine.GeneratedText


def test_an_end_of_text_is_a_line_break_after_the_pending_bytes():
    from engine import GeneratedText
    from engine.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    text = GeneratedText(tok)
    first = "é".encode()[0]
    assert text.step(first) == ""  # half a character: held back
    assert text.step(tok.eos_id) == "\ufffd\n"  # its byte said (not dropped), then the break
    assert text.step(ord("a")) == "a"
    assert text.step(first) == "" and text.flush() == "\ufffd"


def test_generate_says_a_character_cut_short_at_its_end(monkeypatch):
    """The last token is half a character: generate still gives its byte (as the tokenizer's
    replacement character), not nothing."""
    from engine.lm import MambaLM
    from engine.tokenizer import ByteTokenizer
    from tests.helpers import tiny_config

    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    monkeypatch.setattr(lm, "generate_ids", lambda *a, **k: iter([ord("a"), "é".encode()[0]]))
    assert "".join(lm.generate("x")) == "a\ufffd"


# --- engine.limits.Range


def test_a_range_is_whole_only_where_both_ends_are_ints():
    assert Range(1, 10).whole
    assert not Range(0, 1.5).whole and not Range(0.5, 2).whole and not Range(0.0, 1.0).whole


def test_a_training_setting_out_of_range_is_named_in_words():

    from engine.limits import train_problems
    from engine.trainer import TrainConfig

    tc = replace(TrainConfig(), max_grad_norm=-1.0, batch_size=0, seq_len=1)
    assert train_problems(tc) == [
        "training settings: batch size = 0 is out of range [1, 65,536]",
        "training settings: sequence length = 1 is out of range [2, 16,777,216]",
        "training settings: gradient clip = -1.0 is out of range [0, 1e+12]"]


@pytest.mark.parametrize("flag, value, said", [
    ("--clip", "2e12", "[0, 1e+12]"), ("--epochs", "1000001", "[1, 1000000]"),
    ("--lora-dropout", "0.9995", "[0, 0.999]"), ("--lora-alpha", "0", "(0, 1e+06]"),
    ("--patience", "1000001", "[0, 1000000]"), ("--target-loss", "1001", "[0, 1000]"),
    ("--holdout", "0.95", "[0, 0.9]"), ("--autosave-minutes", "2e6", "[0, 1e+06]")])
def test_each_train_flag_takes_its_own_settings_range(flag, value, said, capsys):
    """The CLI's flags read the engine's table: each flag its own setting's row."""
    from engine.cli import build_parser, main

    with pytest.raises(SystemExit) as info:
        main(["train", "c.txt", flag, value])
    assert info.value.code == 2
    assert f"argument {flag}: {value} is out of range {said}" in capsys.readouterr().err
    args = build_parser().parse_args(["train", "c.txt", "--clip", "5000", "--lora-dropout",
                                      "0.5", "--epochs", "1000000"])
    assert (args.clip, args.lora_dropout, args.epochs) == (5000.0, 0.5, 1_000_000)


# --- engine/export/gguf_file.py: the publish without hard links


def test_a_gguf_publish_without_hard_links_never_replaces_a_file_made_meanwhile(tmp_path,
                                                                                 monkeypatch):
    from engine.export import gguf_file

    def no_links(src, dst):  # noqa: ANN001, ANN202  (a FAT disk)
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    tmp, out = tmp_path / ".m.gguf.tmp", tmp_path / "m.gguf"
    tmp.write_bytes(b"ours")
    out.write_bytes(b"the other export's")
    with pytest.raises(CheckpointError, match="written by another export meanwhile"):
        gguf_file._publish(tmp, out, replacing=False)
    assert out.read_bytes() == b"the other export's"
    out.unlink()
    gguf_file._publish(tmp, out, replacing=False)  # nothing there: renamed into place
    assert out.read_bytes() == b"ours" and not tmp.exists()



def test_an_export_write_failure_is_advised_by_its_cause(tmp_path):
    """A CheckpointError raised from a file-size limit or a full disk (its own text naming
    neither) gets the advice of its cause."""
    from engine.export.source import write_fix as _write_fix

    def wrapped(code: int) -> CheckpointError:
        try:
            try:
                raise OSError(code, "x")
            except OSError as cause:
                raise CheckpointError("m: cannot write") from cause
        except CheckpointError as exc:
            return exc

    assert _write_fix(tmp_path, wrapped(errno.EFBIG)).startswith("a file-size limit stopped it")
    assert "MB free on its disk" in _write_fix(tmp_path, wrapped(errno.ENOSPC))
    assert _write_fix(tmp_path, wrapped(errno.EACCES)) == "choose another folder"


def test_a_disk_out_of_files_is_not_told_to_free_space(tmp_path, monkeypatch):
    """Out of inodes with 5.3 MB free, an export said "5.3 MB free on its disk: free some
    space"."""
    from engine.export.source import write_fix

    monkeypatch.setattr(os, "statvfs", lambda _p: type("S", (), {
        "f_bavail": 1300, "f_frsize": 4096, "f_files": 40, "f_favail": 0})())
    said = write_fix(tmp_path / "x", OSError(errno.ENOSPC, "No space left on device"))
    assert said == "its disk is out of files (inodes), with space left: delete some files or " \
                   "choose another folder", said
