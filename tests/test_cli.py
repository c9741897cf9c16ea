import csv
import json
import re
from pathlib import Path

import pytest

from engine.cli import main


def _corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 30)
    (d / "b.bin").write_bytes(b"\x00\x01binary")
    return d


def test_train_generate_eval_resume(tmp_path, capsys):
    out = tmp_path / "run"
    corpus = _corpus(tmp_path)
    args = ["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
            "--max-steps", "3", "--out", str(out), "--sample-tokens", "8"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and "b.bin" in err  # the binary file is reported, the rest trains
    assert "sample before training" in err and "saved" in err and "step-3" in err
    # it ends inside its first epoch: the last step's held-out loss is said (it was nowhere)
    latest = json.loads((out / "latest.json").read_text())
    assert "at step 3 (3 steps in" in err and f"(held-out loss {latest['val_loss']:.4f})" in err
    assert "the 100-step warmup is cut to 0 steps, a fifth of this 3-step run" in err
    assert "raise --max-steps" in err  # --max-steps 3 cut the run, not --epochs
    assert json.loads((out / "latest.json").read_text())["step"] == 3
    assert main(["train", "--resume", str(out), "--sample-tokens", "0"]) == 0
    assert "already at step 3 of 3" in capsys.readouterr().err  # max_steps kept
    assert main(["train", "--resume", str(out), "--max-steps", "5", "--sample-tokens", "4"]) == 0
    assert json.loads((out / "latest.json").read_text())["step"] == 5  # --max-steps continues
    err = capsys.readouterr().err  # a resumed run's first sample is not "before training"
    assert "at step 5 (2 steps in " in err  # this session's steps (it said "after 5 steps")
    assert "--- sample at step 3, resuming ---" in err and "before training" not in err
    assert main(["generate", str(out), "--prompt", "the ", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("the ")
    assert main(["eval", str(out), str(corpus), "--seq-len", "32"]) == 0
    got = capsys.readouterr()  # what it is doing is said first (150 MB: nothing for 47 s)
    assert "perplexity" in got.out
    assert "tokenizing 1,380 bytes of text, then scoring up to 262,144 tokens..." in got.err
    one = tmp_path / "one.txt"  # it said "evaluation text has fewer than 2 tokens": no file
    one.write_text("x")
    assert main(["eval", str(out), str(one), "--records", "stream"]) == 2
    err = capsys.readouterr().err
    assert f"{one}: 1 token(s)" in err and "give more text" in err


def test_max_steps_past_the_epochs_says_to_raise_epochs(tmp_path, capsys):
    # 1,380 bytes -> one epoch is a few steps; --max-steps 1000 cannot be reached in 1 epoch
    out = tmp_path / "run"
    args = ["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32", "--batch", "8",
            "--epochs", "1", "--out", str(out), "--sample-tokens", "0"]
    assert main(args) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "1000", "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "1 epoch ends at step" in err and "before max steps 1,000; pass --epochs" in err
    assert "pass --epochs with a larger total" in err  # not "--max-steps", which was just given


def test_eval_of_a_run_without_a_corpus_uses_its_held_out_split(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32", "--batch",
                 "2", "--max-steps", "2", "--out", str(out), "--sample-tokens", "0"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out)]) == 0  # was: the bundled sample corpus, silently
    got = capsys.readouterr().out
    assert "the run's held-out split at step 2" in got
    loss = float(got.split()[1])
    assert abs(loss - json.loads((out / "latest.json").read_text())["val_loss"]) < 1e-4
    snap = out / "snapshots" / "step-2"  # a snapshot: its run's held-out split, not the sample
    assert main(["eval", str(snap)]) == 0  # corpus (which holds the training text too)
    got = capsys.readouterr().out
    assert "the run's held-out split at step 2" in got and abs(float(got.split()[1]) - loss) < 1e-4
    for flags in (["--seq-len", "2"], ["--records", "line"]):  # they were ignored silently
        assert main(["eval", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {flags[0]} applies to a corpus") and "seq len 32" in err, err


def test_lora_bpe_and_adapter_export(tmp_path, capsys):
    out, corpus = tmp_path / "run", _corpus(tmp_path)
    assert main(["train", str(corpus), "--preset", "tiny", "--tokenizer", "bpe",
                 "--bpe-vocab", "300", "--seq-len", "16", "--batch", "2", "--max-steps", "2",
                 "--lora", "in_proj,dt_proj", "--export-adapter", str(tmp_path / "ad"),
                 "--out", str(out), "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "LoRA r=8: 4 modules adapted" in err and "PEFT un-merged LoRA on dt_proj" in err
    assert (tmp_path / "ad" / "adapter_model.safetensors").exists()
    assert (tmp_path / "ad" / "base" / "model.safetensors").exists()  # the unmerged base
    assert "LoRA adapters on a new model with random weights" in err  # no --init: said so
    assert "is training" not in err  # (its own lock: "the steps after it are not in the export")
    assert main(["export", "--peft", str(out), str(tmp_path / "again")]) == 0
    for name in ("adapter_model.safetensors", "base/model.safetensors"):
        assert (tmp_path / "ad" / name).read_bytes() == (tmp_path / "again" / name).read_bytes()
    configs = [json.loads((tmp_path / d / "adapter_config.json").read_text()) for d in ("ad", "again")]
    for c in configs:  # (each names its own base folder)
        c.pop("base_model_name_or_path")
    assert configs[0] == configs[1]
    assert main(["train", str(corpus), "--init", str(out), "--lora", "in_proj",
                 "--seq-len", "16", "--batch", "2", "--max-steps", "1", "--out",
                 str(tmp_path / "ft"), "--sample-tokens", "0"]) == 0
    assert "random weights" not in capsys.readouterr().err


def test_an_adapter_export_failing_after_training_says_the_run_is_saved(tmp_path, capsys,
                                                                        monkeypatch):
    """Two trainings racing for one adapter folder: the loser said only "written by another
    export meanwhile" (exit 2), read as lost training; it names the saved run and the export
    that writes the adapter."""
    from engine import export
    from engine.errors import CheckpointError

    def raced(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise CheckpointError(f"{tmp_path / 'ad'}: written by another export meanwhile "
                                     "(Directory not empty); export into a new folder")

    monkeypatch.setattr(export, "export_peft", raced)
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "16",
                 "--batch", "2", "--max-steps", "2", "--lora", "in_proj",
                 "--export-adapter", str(tmp_path / "ad"), "--out", str(out),
                 "--sample-tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: {tmp_path / 'ad'}: written by another export meanwhile (Directory not "
                   f"empty); export into a new folder; the run is saved ({out}/snapshots/step-2): "
                   f"export its adapter with `python -m engine export --peft {out} OUT`"), err
    assert main(["eval", str(out)]) == 0  # (it is)

    def stopped(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt  # a Ctrl-C or SIGTERM while the adapter is written

    monkeypatch.setattr(export, "export_peft", stopped)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "3", "--sample-tokens", "0",
                 "--export-adapter", str(tmp_path / "ad2")]) == 130
    err = capsys.readouterr().err
    assert (f"the run is saved ({out}/snapshots/step-3): export its adapter with `python -m "
            f"engine export --peft {out} OUT`\n\ninterrupted (Ctrl-C)") in err, err


def test_adapter_export_peft_cannot_load_is_refused_before_training(tmp_path, capsys):
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--lora", "in_proj,out_proj",
                 "--export-adapter", str(tmp_path / "ad"), "--out", str(tmp_path / "run")]) == 2
    assert "export --merged" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_bad_input_exits_with_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["train", str(empty), "--out", str(tmp_path / "r")]) == 2
    assert "error: no usable text" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "nope")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


@pytest.mark.parametrize("args", [
    ["train", "--resume", ""], ["train", "--init", " "], ["train", "--config", ""],
    ["train", ""], ["train", "--out", ""], ["train", "--lora", "x_proj", "--export-adapter", ""],
    ["generate", ""], ["eval", ""], ["export", "--merged", "", "out"],
    ["export", "--gguf", "run", ""]])
def test_an_empty_path_is_refused_not_taken_as_not_given(tmp_path, monkeypatch, capsys, args):
    """``train --resume "$RUN"`` with RUN unset trained a new default run for minutes (exit 0);
    an empty --init trained from random weights and an empty --config was ignored."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(args)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "an empty path" in err and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()  # nothing started


@pytest.mark.parametrize("args, words", [
    (["--lora-rank", "4"], "error: --lora-rank needs --lora"),
    (["--lora-dropout", "0.1"], "error: --lora-dropout needs --lora"),
])
def test_flags_that_could_do_nothing_are_refused(tmp_path, capsys, args, words):
    """They were taken without a word and nothing used them (exit 0)."""
    out = tmp_path / "r"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--max-steps", "1",
                 "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("args", [["--patience", "2"], ["--target-loss", "3"]])
def test_early_stopping_without_held_out_text_says_it_is_off(tmp_path, capsys, args):
    """--holdout 0 with early stopping: it could never stop the run, and nothing said so."""
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--max-steps", "1",
                 "--seq-len", "32", "--batch", "2", "--sample-tokens", "0", "--holdout", "0",
                 "--out", str(tmp_path / "r"), *args]) == 0
    assert "warning: early stopping is off: the run holds out no text to measure" in \
        capsys.readouterr().err


def test_flags_a_run_does_not_use_are_named(tmp_path, capsys):
    """--init with --preset medium trained the opened model's shape and run.json said medium,
    with no note; --bpe-vocab on a bytes run was dropped without a word; --resume with
    --checkpointing blamed "LoRA/WSLA"."""
    base, corpus = tmp_path / "base", _corpus(tmp_path)
    common = ["--seq-len", "32", "--batch", "2", "--max-steps", "1", "--sample-tokens", "0"]
    assert main(["train", str(corpus), "--preset", "tiny", *common, "--out", str(base)]) == 0
    capsys.readouterr()
    assert main(["train", str(corpus), "--init", str(base), "--preset", "medium", *common,
                 "--bpe-vocab", "300", "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "note: --preset medium sets the training settings only; the model's shape is " \
           f"{base}'s (d_model 64, 2 layers)" in err, err
    assert f"note: --bpe-vocab not used: a run from {base} keeps that model's bytes tokenizer" \
        in err
    (tmp_path / "s.toml").write_text(f'[run]\ninit = "{base}"\n')  # an init from a file too
    assert main(["train", str(corpus), "--config", str(tmp_path / "s.toml"), *common,
                 "--bpe-vocab", "300", "--out", str(tmp_path / "f")]) == 0
    assert f"a run from {base} keeps that model's bytes tokenizer" in capsys.readouterr().err
    assert main(["train", str(corpus), "--preset", "tiny", *common, "--bpe-vocab", "300",
                 "--out", str(tmp_path / "c")]) == 0
    assert "note: --bpe-vocab not used: the tokenizer is bytes (auto: bytes below 4 MB" in \
           capsys.readouterr().err
    assert main(["train", "--resume", str(base), "--checkpointing"]) == 2
    assert "settings; checkpointing cannot change" in capsys.readouterr().err
    assert main(["train", "--resume", str(base), "--lora-rank", "4"]) == 2  # not "needs --lora"
    assert "settings; lora_rank cannot change" in capsys.readouterr().err
    # the run's own command line again, --resume added: its own values change nothing (it
    # was refused: "batch_size cannot change" of the run's own batch 2)
    assert main(["train", "--resume", str(base), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "2", "--sample-tokens", "0"]) == 0
    from engine import read_pointer

    assert read_pointer(base)["step"] == 2
    assert main(["train", "--resume", str(base), "--batch", "4"]) == 2  # another value: refused
    assert "settings; batch_size cannot change" in capsys.readouterr().err


def test_lora_knobs_apply_to_a_settings_files_lora(tmp_path, capsys):
    """A settings file with LoRA and --lora-rank 16 on top: it was refused as "needs --lora"."""
    from engine import LoRAConfig, RunSettings, RunSpec, TrainConfig, save_settings

    base, corpus = tmp_path / "base", _corpus(tmp_path)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "1", "--sample-tokens", "0", "--out", str(base)]) == 0
    spec = RunSpec(preset="tiny", init=str(base), train=TrainConfig(
        batch_size=2, seq_len=32, max_steps=1, lora=LoRAConfig(("in_proj",), rank=4)))
    save_settings(tmp_path / "s.toml", RunSettings(spec, (str(corpus),)))
    out = tmp_path / "lora"
    assert main(["train", "--config", str(tmp_path / "s.toml"), "--lora-rank", "2",
                 "--sample-tokens", "0", "--out", str(out)]) == 0
    lora = json.loads((out / "run.json").read_text())["spec"]["train"]["lora"]
    assert lora["rank"] == 2 and lora["targets"] == ["in_proj"]


def test_rank_timeout_without_distributed_is_refused(capsys):
    """It was accepted without a word (and did nothing)."""
    assert main(["train", "--rank-timeout", "5", "--max-steps", "1"]) == 2
    assert "--rank-timeout applies to --distributed runs only" in capsys.readouterr().err


def test_bench_json_line(capsys):
    assert main(["bench", "--json", "--configs", "small", "--steps", "1"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["config"] == "small" and line["tokens_per_s"] > 0 and "blas_kernel" in line


def test_samples_cannot_drive_the_terminal():
    """An early byte model samples ESC, NUL, backspace...: shown as U+FFFD, text kept."""
    from engine.cli import terminal_safe

    assert terminal_safe("a\x1b[2Jb\x00c\x08d\x7f\x9be") == "a\ufffd[2Jb\ufffdc\ufffdd\ufffd\ufffde"
    assert terminal_safe("line\tone\r\nläuft ✓\n") == "line\tone\r\nläuft ✓\n"


def test_generate_flags_default_to_the_generation_defaults():
    """`generate` samples as the app's Playground and previews do (it had repetition 1.0)."""
    from engine.cli import build_parser
    from engine.sampling import GENERATION_DEFAULTS as gen

    a = build_parser().parse_args(["generate", "some-run"])
    assert (a.temperature, a.top_k, a.top_p, a.repetition_penalty, a.stop, a.max_new_tokens,
            a.seed) == (gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty,
                        gen.stop_at_eos, gen.max_new_tokens, gen.seed)
    assert gen.repetition_penalty > 1


def test_export_adapter_without_lora_is_refused_before_training(tmp_path, capsys):
    """It was refused only after the run had trained and saved."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("the cat sat on the mat. " * 40)
    out = tmp_path / "run"
    assert main(["train", str(corpus), "--out", str(out), "--export-adapter",
                 str(tmp_path / "adapter")]) == 2
    assert "--export-adapter needs a LoRA run (--lora)" in capsys.readouterr().err
    assert not out.exists()
    (tmp_path / "s.toml").write_text("[train]\nmax_steps = 1\n")  # a settings file's run too:
    assert main(["train", str(corpus), "--config", str(tmp_path / "s.toml"), "--out", str(out),
                 "--export-adapter", str(tmp_path / "adapter")]) == 2  # (its folder was made)
    assert "--export-adapter needs a LoRA run (--lora)" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("where", ["inside", "same"])
def test_an_adapter_folder_inside_the_run_folder_is_refused_before_training(tmp_path, capsys,
                                                                             where):
    """``--export-adapter`` inside (or equal to) ``--out`` was refused only after the whole
    run had trained, with exit status 2 for a run that was fine."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("the cat sat on the mat. " * 40)
    out = tmp_path / "run"
    adapter = out / "ad" if where == "inside" else out
    assert main(["train", str(corpus), "--out", str(out), "--lora", "in_proj", "--max-steps", "1",
                 "--export-adapter", str(adapter)]) == 2
    err = capsys.readouterr().err
    assert f"{adapter}: inside (or around) the folder being exported, {out}" in err, err
    assert "step" not in err and not out.exists(), err


def test_an_adapter_folder_inside_a_resumed_run_is_refused_before_training(tmp_path, capsys,
                                                                            monkeypatch):
    """The same for ``train --resume RUN --export-adapter RUN/ad``: refused before any step."""
    from engine import run as run_mod

    corpus = tmp_path / "a.txt"
    corpus.write_text("the cat sat on the mat. " * 40)
    out = tmp_path / "run"
    assert main(["train", str(corpus), "--out", str(out), "--lora", "in_proj", "--max-steps", "1",
                 "--sample-tokens", "0"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(run_mod.Run, "train", lambda *a, **k: 1 / 0)  # (never reached)
    assert main(["train", "--resume", str(out), "--max-steps", "2",
                 "--export-adapter", str(out / "ad")]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'ad'}: inside (or around) the folder being exported, {out}" in err, err


@pytest.mark.parametrize(("flags", "fix"), [(["--epochs", "1"], "--epochs"),
                                           (["--epochs", "50", "--max-steps", "3"], "--max-steps")])
def test_a_short_runs_warmup_note_names_the_setting_that_ends_it(tmp_path, capsys, flags, fix):
    """The note that a run too short for its warmup learns little names what to raise: the
    setting that ends the run (raising --max-steps does nothing when the epochs end it)."""
    corpus = tmp_path / "a.txt"
    corpus.write_text("the cat sat on the mat. " * 40)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "16", "--batch", "2",
                 *flags, "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert f"a run this short learns little: raise {fix}\n" in err, err


def test_a_full_disk_while_training_says_what_was_kept_on_its_own_line(tmp_path, capsys,
                                                                     monkeypatch):
    """A full disk while appending metrics printed "error: No space left on device" glued to the
    end of the progress line, naming no file and not saying what was kept."""
    import errno
    import os

    real = csv.DictWriter.writerow

    def full_at_step_4(self, row):  # the write itself fails, as on a full disk
        if row.get("step") == 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, row)

    monkeypatch.setattr(csv.DictWriter, "writerow", full_at_step_4)
    out = tmp_path / "run"
    rc = main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32", "--batch",
               "2", "--max-steps", "6", "--out", str(out), "--sample-tokens", "0"])
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "error:" in x)
    assert rc == 2 and line.startswith("error: "), err
    assert "metrics.csv: No space left on device" in line and "stopped at step 4" in line, line
    assert f"resume {out}" in line
    assert json.loads((out / "latest.json").read_text())["step"] == 4


def test_export_of_a_run_names_a_better_best_snapshot(tmp_path, capsys, monkeypatch):
    """The CLI exported the latest weights without a word when best.json named a better
    snapshot (the window asks which); the step it names is the one exported."""
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "4", "--eval-every", "2", "--autosave-steps", "2",
                 "--sample-tokens", "0", "--out", str(out)]) == 0
    (out / "best.json").write_text(json.dumps({"snapshot": "step-2", "step": 2, "val_loss": 0.5}))
    capsys.readouterr()
    assert main(["export", "--merged", str(out), str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "note: this is the latest snapshot, step 4 (held-out " in err, err
    assert f"the best held-out loss is step 2's (0.5000): to export that one, give its " \
           f"snapshot folder, {out / 'snapshots' / 'step-2'}, in place of the run" in err
    assert main(["export", "--merged", str(out / "snapshots" / "step-2"), str(tmp_path / "b")]) == 0
    assert "best held-out" not in capsys.readouterr().err
    import engine.export  # a run in training saves on while it is exported: the note said the
    real = engine.export.export_merged  # step saved meanwhile, not the one exported

    def saved_meanwhile(*a, **k):  # noqa: ANN002, ANN003, ANN202
        notes = real(*a, **k)
        import shutil

        snaps = out / "snapshots"
        shutil.copytree(snaps / "step-4", snaps / "step-6")
        state = json.loads((snaps / "step-6" / "trainer.json").read_text())
        (snaps / "step-6" / "trainer.json").write_text(json.dumps({**state, "step": 6}))
        latest = json.loads((out / "latest.json").read_text())
        (out / "latest.json").write_text(json.dumps({**latest, "snapshot": "step-6", "step": 6}))
        return notes

    monkeypatch.setattr(engine.export, "export_merged", saved_meanwhile)
    assert main(["export", "--merged", str(out), str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    assert "note: this is the latest snapshot, step 4 (held-out " in err, err


def test_a_too_long_preview_prompt_names_the_flag(capsys):
    """It said "prompts must be 1 to 16 texts of at most 4096 characters", no flag named."""
    with pytest.raises(SystemExit) as info:
        main(["train", "--prompt", "x" * 5000])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --prompt: 5,000 characters; a preview prompt " \
        "holds at most 4,096" in err, err


def test_export_names_an_output_whose_extension_says_otherwise(tmp_path, capsys):
    """`export --merged RUN out/m.gguf` made a folder called m.gguf (then, with a note: the
    window asks; a folder a tool globbing *.gguf finds), and --gguf took a name without .gguf,
    both without a word."""
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "1", "--sample-tokens", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    for kind in ("--merged", "--peft"):
        assert main(["export", kind, str(out), str(tmp_path / "m.GGUF")]) == 2
        err = capsys.readouterr().err
        assert f"a GGUF file's name for a {kind} export" in err and "pass --gguf" in err, err
    assert not (tmp_path / "m.GGUF").exists()
    assert main(["export", "--gguf", str(out), str(tmp_path / "model.bin")]) == 0
    assert "name it *.gguf" in capsys.readouterr().err
    assert main(["export", "--gguf", str(out), str(tmp_path / "model.gguf")]) == 0
    err = capsys.readouterr().err
    assert "note:" not in err
    assert f"llama-cli -m {tmp_path / 'model.gguf'})" in err, err  # (it said "-m OUT")


def test_export_adapter_of_a_resumed_run_without_lora_is_refused_before_training(tmp_path, capsys):
    """A resumed (or --config) run without LoRA trained all its steps, saved, then failed with
    "--export-adapter needs a LoRA run"."""
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "2", "--sample-tokens", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--max-steps", "6", "--sample-tokens", "0",
                 "--export-adapter", str(tmp_path / "ad")]) == 2
    err = capsys.readouterr().err
    assert "error: --export-adapter needs a LoRA run" in err and "finished" not in err, err
    assert json.loads((out / "status.json").read_text())["step"] == 2  # nothing trained
    assert not (tmp_path / "ad").exists()


def test_cli_previews_go_to_the_runs_gallery(tmp_path, capsys):
    """The CLI printed its samples but never wrote samples.jsonl: a CLI run opened in the
    window had an empty Gallery. A resume does not record its first step's sample twice."""
    from engine.samples import read_samples

    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--sample-tokens", "8",
                 "--seq-len", "32", "--batch", "2", "--epochs", "1", "--out", str(out)]) == 0
    rows = read_samples(out)
    end = json.loads((out / "latest.json").read_text())["step"]
    assert [r["step"] for r in rows] == [0, end]  # before training, after its epoch
    assert rows[0]["text"].startswith("The") and rows[1]["epoch"] == 1
    assert rows[0]["max_new_tokens"] == 8 and rows[0]["backend"] == "cpu"
    assert main(["train", "--resume", str(out), "--sample-tokens", "8", "--epochs", "2"]) == 0
    steps = [r["step"] for r in read_samples(out)]  # the resume's first sample, at `end`, was
    assert steps == [0, end, 2 * end], steps  # printed, not recorded again
    capsys.readouterr()


def test_the_corpus_a_run_trains_on_is_said_when_not_given(tmp_path, capsys, monkeypatch):
    """No corpus: it trained on the bundled sample without a word; --resume with a settings
    file ignored the file's corpus without a word (a positional corpus was noted)."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--seq-len", "32", "--batch", "2", "--max-steps",
                 "1", "--sample-tokens", "0", "--out", str(out)]) == 0
    assert "note: no corpus given; training on the bundled sample corpus" in capsys.readouterr().err
    (tmp_path / "s.toml").write_text('[run]\ncorpus = ["elsewhere"]\n[train]\nmax_steps = 2\n')
    assert main(["train", "--resume", str(out), "--config", str(tmp_path / "s.toml"),
                 "--sample-tokens", "0"]) == 0
    assert f"note: the corpus of {tmp_path / 's.toml'} is ignored" in capsys.readouterr().err


def test_a_bench_mode_given_twice_is_measured_once():
    """`bench --modes full,full` stepped one trainer twice a round: an IndexError traceback."""
    from engine.cli import build_parser

    a = build_parser().parse_args(["bench", "--modes", "full,lora,full", "--configs",
                                   "small,small"])
    assert a.modes == "full,lora" and a.configs == "small"


def test_resume_says_which_total_stops_the_run(tmp_path, capsys):
    """`--resume RUN --epochs 20` on a run of max steps 4 said "already at step 4 of 4; pass
    --max-steps or --epochs with a larger total", --epochs having just been given: the run's
    max steps end it, and the message says so (and what a plain --epochs run needs)."""
    out, corpus = tmp_path / "run", _corpus(tmp_path)
    tiny = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]
    assert main(["train", str(corpus), *tiny, "--max-steps", "4", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--epochs", "20", "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "already at step 4 of 4; pass --max-steps with a larger total (0: no limit)" in err
    assert "note: the run's max steps 4 end it before its 20 epochs" in err
    assert main(["train", "--resume", str(out), "--max-steps", "0", "--epochs", "1",
                 "--sample-tokens", "0"]) == 0  # all of one epoch, then nothing left
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--sample-tokens", "0"]) == 0
    assert "; pass --epochs with a larger total to continue it" in capsys.readouterr().err


def test_a_chosen_bpe_says_its_learning_rate(tmp_path, capsys):
    """`--tokenizer bpe` trained at twice the preset's rate and said so only for "auto"."""
    corpus = _corpus(tmp_path)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "1", "--tokenizer", "bpe", "--bpe-vocab", "300",
                 "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    assert ("tokenizer: bpe, learning rate 0.006 (BPE's: 2x the preset's byte rate 0.003)"
            in capsys.readouterr().err)


def test_a_run_shorter_than_an_epoch_shows_a_sample_of_its_trained_model(tmp_path, capsys):
    """Only the untrained model's sample was shown when a run ended inside its first epoch."""
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "3", "--sample-tokens", "6", "--out",
                 str(out)]) == 0
    err = capsys.readouterr().err
    assert "--- sample before training ---" in err
    assert "--- sample at step 3, the end of the run ---" in err
    from engine.samples import read_samples

    assert sorted({r["step"] for r in read_samples(out)}) == [0, 3]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A run trained one step (its kernels compiled here)."""
    tmp = tmp_path_factory.mktemp("gen")
    out = tmp / "run"
    assert main(["train", str(_corpus(tmp)), "--preset", "tiny", "--seq-len", "32", "--batch",
                 "2", "--max-steps", "1", "--out", str(out), "--sample-tokens", "0"]) == 0
    return out


def test_generate_no_stream_interrupted_prints_the_text_so_far(tiny_model, capsys,
                                                               monkeypatch):
    """`generate --no-stream` interrupted (Ctrl-C, SIGTERM) after minutes printed nothing of
    the text it had made."""
    from engine.lm import MambaLM

    def pieces(self, prompt, sampling=None, backend=None):  # noqa: ANN001, ARG001
        yield "made "
        yield "so far"
        raise KeyboardInterrupt

    monkeypatch.setattr(MambaLM, "generate", pieces)
    rc = main(["generate", str(tiny_model), "--prompt", "P: ", "--no-stream"])
    out, err = capsys.readouterr()
    assert rc == 130 and out == "P: made so far\n" and "interrupted" in err, (out, err)


@pytest.mark.parametrize("stop", [True, False])
def test_generate_says_why_nothing_followed_the_prompt(tiny_model, capsys, monkeypatch, stop):
    """A model that ends the text at once printed an empty line and nothing on stderr; with
    --no-stop, one making only end-of-text tokens printed blank lines (each a line break) and
    no note. Sampling is scripted: the model's own generation runs."""
    import engine.lm
    from engine.lm import MambaLM

    eos = engine.load_model(tiny_model).tokenizer.eos_id
    monkeypatch.setattr(engine.lm, "sample", lambda *a, **k: eos)
    rc = main(["generate", str(tiny_model), "--prompt", "", "--max-new-tokens", "4"]
              + ([] if stop else ["--no-stop"]))
    out, err = capsys.readouterr()
    assert rc == 0 and out == ("\n" if stop else "\n" * 5), repr(out)
    assert "note: no text after the prompt" in err, err
    assert ("--no-stop" in err) == stop and ("each printed as a line break" in err) != stop
    monkeypatch.undo()
    monkeypatch.setattr(MambaLM, "generate", lambda self, *a, **k: iter(["x"]))
    assert main(["generate", str(tiny_model), "--prompt", ""]) == 0
    assert "note:" not in capsys.readouterr().err
    monkeypatch.setattr(MambaLM, "generate", lambda self, *a, **k: iter(()))
    assert main(["generate", str(tiny_model), "--max-new-tokens", "0"]) == 0  # none asked for
    assert "note:" not in capsys.readouterr().err


def test_progress_to_a_log_is_whole_lines_now_and_then(tmp_path, capsys, monkeypatch):
    """With stderr a file (`train ... 2> log`), every redraw of the bar went into it, joined by
    carriage returns into a few very long lines. A log gets whole lines: one each LOG_EVERY_S
    (here: only the first; the timing itself: test_a_log_gets_a_progress_line_each_log_every_s),
    the scoring ones and the last step's."""
    import engine.cliout

    monkeypatch.setattr(engine.cliout, "LOG_EVERY_S", 1e9)
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "5", "--eval-every", "2", "--sample-tokens", "0",
                 "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err, err
    bars = [line for line in err.splitlines() if line.startswith("[")]
    steps = [line.split()[1] for line in bars]
    assert steps == ["1/5", "1/5", "3/5", "4/5", "5/5"], bars  # the first; the bar before
    # each scoring (at 2, 4 and the last step, 5), and the last step's
    assert [bars[i].endswith(f"at step {n}...") for i, n in ((1, 2), (2, 4), (3, 5))] == [True] * 3
    assert "scoring" not in bars[4] and bars[4].endswith("ETA 00:00")



def test_a_log_gets_a_progress_line_each_log_every_s(capsys, monkeypatch):
    """To a log (stderr no terminal) a redraw is a line when LOG_EVERY_S have passed since the
    last line, or when forced, and is dropped otherwise. The train test sets LOG_EVERY_S out of
    reach, so logging the first line only (a long run's log silent after it) passed. A clock
    read 0, 5, 11, 12, 13 (forced), 22, 23.5 gives the lines at 0, 11, 13 and 23.5."""
    from types import SimpleNamespace

    import engine.cliout

    clock = iter([0.0, 5.0, 11.0, 12.0, 13.0, 22.0, 23.5])
    monkeypatch.setattr(engine.cliout, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(engine.cliout, "LOG_EVERY_S", 10.0)
    bar = engine.cliout.ProgressLine()
    for text in "abcd":
        bar.write(text)
    bar.write("e", force=True)
    bar.write("f")
    bar.write("g")
    assert capsys.readouterr().err == "a\nc\ne\ng\n"


def test_generate_prompt_file_reads_the_prompt_from_a_file(tiny_model, tmp_path, capsys,
                                                            monkeypatch):
    """A prompt too long for the command line ("Argument list too long" at ~128 KB) is read
    with --prompt-file: the same text as --prompt gives; a wrong file is one line naming it
    (and the two flags are not taken together)."""
    text = "Der Fluß fließt.\n" * 40
    (tmp_path / "p.txt").write_text(text, encoding="utf-8")
    common = ["generate", str(tiny_model), "--max-new-tokens", "8", "--seed", "3"]
    assert main([*common, "--prompt", text]) == 0
    by_flag = capsys.readouterr().out
    assert main([*common, "--prompt-file", str(tmp_path / "p.txt")]) == 0
    assert capsys.readouterr().out == by_flag and by_flag.startswith(text)
    (tmp_path / "u16.txt").write_bytes(text.encode("utf-16"))
    assert main([*common, "--prompt-file", str(tmp_path / "u16.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'u16.txt'}: UTF-16 text") and err.count("\n") == 1
    assert main([*common, "--prompt-file", str(tmp_path / "none.txt")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'none.txt'}: no such prompt file\n"
    with pytest.raises(SystemExit):
        main([*common, "--prompt", "x", "--prompt-file", str(tmp_path / "p.txt")])
    assert "not allowed with argument --prompt" in capsys.readouterr().err
    import engine.cli

    monkeypatch.setattr(engine.cli, "PROMPT_FILE_LIMIT", 100)  # (a 63 MB file took over
    assert main([*common, "--prompt-file", str(tmp_path / "p.txt")]) == 2  # 1.3 GB; 16 MB now)
    assert "760 bytes is larger than the 100 bytes allowed for a prompt file" in capsys.readouterr().err


def test_samples_come_every_n_steps_inside_an_epoch(tmp_path, capsys):
    """A long epoch showed no sample between step 0 and its end (a 1.7 MB corpus: 741 steps):
    ``--sample-every N`` shows one once N steps have gone by, kept in the Gallery too; an
    epoch's end restarts the count, and 0 keeps to the epoch ends."""
    from engine.samples import read_samples

    corpus = _corpus(tmp_path)
    common = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "4"]
    out = tmp_path / "run"
    assert main(["train", str(corpus), *common, "--max-steps", "7", "--sample-every", "3",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "--- sample at step 3 ---" in err and "--- sample at step 6 ---" in err, err
    assert sorted({r["step"] for r in read_samples(out)}) == [0, 3, 6, 7]
    assert main(["train", "--resume", str(out), "--max-steps", "11", "--sample-every",
                 "3"]) == 0  # counted from where it resumes
    assert sorted({r["step"] for r in read_samples(out)}) == [0, 3, 6, 7, 10, 11]
    off = tmp_path / "off"
    assert main(["train", str(corpus), *common, "--max-steps", "7", "--sample-every", "0",
                 "--out", str(off)]) == 0
    assert sorted({r["step"] for r in read_samples(off)}) == [0, 7]
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["train", str(corpus), *common, "--sample-every", "-1", "--out",
              str(tmp_path / "bad")])
    assert bad.value.code == 2 and "--sample-every" in capsys.readouterr().err


def test_a_bpe_smaller_than_asked_says_its_size(tmp_path, capsys):
    """A corpus of a few words learned 368 of 2,048 tokens and said "2,048-token BPE" only."""
    corpus = _corpus(tmp_path)
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "1", "--tokenizer", "bpe", "--bpe-vocab", "2048",
                 "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    m = re.search(r"the BPE tokenizer learned ([0-9,]+) tokens of the 2,048 asked", err)
    assert m, err
    from engine.tokenizer import load_tokenizer

    learned = load_tokenizer(tmp_path / "r" / "snapshots" / "step-1").vocab_size
    assert int(m.group(1).replace(",", "")) == learned < 2048


def test_the_progress_line_says_when_the_held_out_set_is_scored(tmp_path, capsys, monkeypatch):
    """An evaluation took 13 s on a big held-out set with the bar standing at its last step and
    nothing said; a merged export's 10 s of scoring for its card said nothing either."""
    monkeypatch.setattr("engine.cliout._terminal", lambda: True)  # the bar drawn in place
    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--max-steps", "3", "--eval-every", "2", "--sample-tokens", "0",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    lines = err.split("\r")
    scored = [i for i, t in enumerate(lines) if "scoring the held-out set at step" in t]
    assert len(scored) == 2, err  # step 2 (--eval-every 2) and step 3 (the run's last)
    assert " 1/3 " in lines[scored[0]] and " 2/3 " in lines[scored[1]], err  # the bar's steps
    assert lines[scored[0]].endswith("at step 2...") and lines[scored[1]].endswith("at step 3...")
    # (the bar moves after the scoring: "1/3 ... scoring" read as step 1 being scored)
    after = lines[scored[0] + 1]  # the next step's line covers the longer one before it
    assert len(after.split("\n")[0]) >= len(lines[scored[0]]), (lines[scored[0]], after)
    assert main(["export", "--merged", str(out), str(tmp_path / "m")]) == 0
    err = capsys.readouterr().err
    assert "scoring the weights on the run's held-out set for the model card" in err
    assert main(["export", "--gguf", str(out), str(tmp_path / "m.gguf")]) == 0
    assert "scoring" not in capsys.readouterr().err


def test_bench_text_names_its_shapes_spread_and_columns(capsys, monkeypatch):
    """The text output had no header (its "small" is not the preset's), no spread (three runs
    gave 4k / 15.5k / 10.3k tok/s with nothing said), unexplained columns, and "x1.00 vs full"
    for a bench of one mode."""
    from engine import bench

    def fake(name, modes, steps, threads, workers=1):  # noqa: ANN001, ARG001
        return [{"mode": m, "tokens_per_s": 1000.0, "median_ms": 10.0, "min_ms": 10.0,
                 "max_ms": 30.0 if (name, m) == ("medium", "lora") else 14.0 if name == "medium"
                 else 11.0,
                 "speedup_vs_full": 1.0 if "full" in modes else None,
                 "step_over_gemm_only": 3.0, "trainable_params": 5, "numpy_peak_mb_one_step": 1}
                for m in modes]

    monkeypatch.setattr(bench, "bench_config", fake)
    bench.run(["small"], False, 4, ["full"], 2)
    out = capsys.readouterr().out
    assert "small: d 128 x 4 layers, batch 4 x 256 tokens, vocab 256" in out
    assert "(min 10.0, max 11.0)" in out and "vs full" not in out and "note:" not in out
    assert "step / GEMM-only: the step's time over its matrix products timed alone" in out
    assert "2 thread(s), 4 timed steps" in out
    bench.run(["medium"], False, 4, ["full", "lora"], 2)
    out = capsys.readouterr().out
    assert "x1.00 vs full" in out and "note: steps varied 3.0x" in out, out  # the noisiest
    monkeypatch.setattr(bench, "NOISY", 1.5)
    bench.run(["medium"], False, 4, ["full"], 2)  # 1.4x: within the noise allowed
    assert "note:" not in capsys.readouterr().out


def test_an_epochs_last_step_is_sampled_once_as_the_epochs_end(tmp_path, capsys):
    """With samples every step, an epoch's last step was due both ways: two samples made, and
    the Gallery's record tagged by the step rather than the epoch."""
    from engine.samples import read_samples

    out = tmp_path / "run"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--epochs", "2", "--sample-every", "1", "--sample-tokens", "2",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    headers = re.findall(r"--- sample ([^-]+) ---", err)
    assert len(headers) == len(set(headers)), headers
    rows = read_samples(out)
    assert len({r["step"] for r in rows}) == len(rows)  # one record a step (one prompt)
    first_end = next(r for r in rows if r["tag"] == "epoch 1")
    assert f"at step {first_end['step']}" not in headers
    # recorded in the window's words (a CLI run continued there mixed "after epoch 1" with
    # "epoch 1" in one Preview history): engine.sample_tag's
    assert rows[0]["tag"] == "step 0, untrained" and "before training" in headers, headers
    assert all(re.fullmatch(r"epoch [12]|step [1-9]\d*", r["tag"]) for r in rows[1:]), rows


def test_a_relative_init_is_recorded_as_an_absolute_path(tmp_path, capsys, monkeypatch):
    """`--init runs/x` run from one folder named nothing from another."""
    from engine import runformat as rf

    first = tmp_path / "first"
    common = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--max-steps", "1",
              "--sample-tokens", "0"]
    assert main(["train", str(_corpus(tmp_path)), *common, "--out", str(first)]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["train", "corpus", *common, "--init", "first", "--out", "second"]) == 0
    snap = str((first / "snapshots" / "step-1").resolve())
    assert rf.read_run_json(tmp_path / "second")["init_from"] == {"path": snap, "step": 1}
    from engine.run import resume

    with resume(tmp_path / "second") as run:  # new prompts keep it, and the creation time
        before = rf.read_run_json(run.folder)
        run.set_prompts(["Once"])
    after = rf.read_run_json(tmp_path / "second")
    assert after["spec"]["prompts"] == ["Once"]
    assert (after["init_from"], after["created"]) == (before["init_from"], before["created"])


def test_a_bpe_that_fills_its_size_says_nothing_of_it(tmp_path, capsys):
    corpus = Path(__file__).resolve().parents[1] / "assets" / "sample_corpus"
    assert main(["train", str(corpus), "--preset", "tiny", "--seq-len", "32", "--batch", "2",
                 "--max-steps", "1", "--tokenizer", "bpe", "--bpe-vocab", "300",
                 "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    from engine.tokenizer import load_tokenizer

    assert load_tokenizer(tmp_path / "r" / "snapshots" / "step-1").vocab_size == 300
    assert "the BPE tokenizer learned" not in capsys.readouterr().err


def test_previews_come_every_200_steps_by_default():
    from engine.cli import build_parser
    from engine.samples import SAMPLE_EVERY

    assert SAMPLE_EVERY == 200
    assert build_parser().parse_args(["train"]).sample_every == 200


def test_release_freed_memory_trims_the_heap(monkeypatch):
    """It returned True while doing nothing and passed."""
    import ctypes

    from engine import runtime

    calls: list[int] = []

    class Libc:
        def malloc_trim(self, pad: int) -> int:
            calls.append(pad)
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda _name: Libc())
    assert runtime.release_freed_memory() is True and calls == [0]


def test_resume_of_a_run_stopped_during_its_final_evaluation_scores_it(tmp_path, capsys):
    """It said "already at step 4 of 4; pass --max-steps ..." and left the run unscored."""
    from engine.run import resume
    from tests.helpers import train_stopped_while_scoring

    out, corpus = tmp_path / "run", _corpus(tmp_path)
    tiny = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]
    assert main(["train", str(corpus), *tiny, "--max-steps", "3", "--out", str(out)]) == 0
    with resume(out, max_steps=4) as run:
        assert train_stopped_while_scoring(run).unscored
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    latest = json.loads((out / "latest.json").read_text())
    assert latest["step"] == 4 and latest["val_loss"] is not None
    assert "already at step" not in err and "before its held-out loss at step 4" in err
    assert f"finished: saved {out / 'snapshots' / 'step-4'} at step 4" in err
    assert f"(held-out loss {latest['val_loss']:.4f})" in err
    assert main(["train", "--resume", str(out), "--sample-tokens", "0"]) == 0
    assert "already at step 4 of 4" in capsys.readouterr().err  # scored: nothing left


def test_resume_measures_a_held_out_evaluation_a_stop_interrupted_inside_the_run(tmp_path,
                                                                                 capsys):
    """A stop (SIGTERM, Stop) during the evaluation at step 2 of 6 (every 2 steps): the resume
    went on without it, so metrics.csv had no eval row at step 2 and early stopping counted one
    evaluation fewer than the run not stopped. The resume measures it first, once."""
    from engine import runformat as rf
    from engine.run import RunSpec, resume, start
    from engine.trainer import TrainConfig
    from tests.helpers import train_stopped_while_scoring

    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, max_steps=6, eval_every=2))
    corpus = _corpus(tmp_path)
    with start(spec, [corpus], out=tmp_path / "plain") as run:
        run.train()
    with start(spec, [corpus], out=tmp_path / "stopped") as run:
        result = train_stopped_while_scoring(run)
        assert result.step == 2 and not result.unscored and run.interrupted_eval
    assert [r["step"] for r in rf.read_metrics(tmp_path / "stopped") if r["kind"] == "eval"] == []
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "stopped"), "--sample-tokens", "0"]) == 0
    assert "before its held-out loss at step 2 was measured: measuring it" in capsys.readouterr().err

    def evals(folder):  # noqa: ANN001, ANN202
        return [(r["step"], r["epoch"], r["val_loss"]) for r in rf.read_metrics(folder)
                if r["kind"] == "eval"]

    assert evals(tmp_path / "stopped") == evals(tmp_path / "plain")
    assert [s for s, _, _ in evals(tmp_path / "plain")] == [2, 4, 6]
    # a save without a loss at a measured step (the window's Save), then a kill: no such stop
    # (it was measured again: a second eval row at step 2, and early stopping fed it twice)

    class Killed(Exception):
        pass

    def save_then_die(r):  # noqa: ANN001, ANN202
        if r.step == 2:
            run.save()
            raise Killed

    with start(spec, [corpus], out=tmp_path / "saved") as run, pytest.raises(Killed):
        run.train(on_step=save_then_die)
    with resume(tmp_path / "saved") as run:
        assert run.step == 2 and not run.interrupted_eval
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "saved"), "--sample-tokens", "0"]) == 0
    assert "measuring it" not in capsys.readouterr().err
    assert evals(tmp_path / "saved") == evals(tmp_path / "plain")


def test_train_under_mpirun_without_distributed_is_refused(tmp_path, capsys, monkeypatch):
    """`mpirun -np 2 python -m engine train ...` without --distributed: two trainings of the
    same run, the second refused by the run's lock, and nothing said --distributed was missing.
    Rank 0 says it and fails the job; the other ranks end without a word or a run."""
    from engine.distributed import launched_as

    assert launched_as({}) == (0, 1)
    assert launched_as({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4"}) == (1, 4)
    assert launched_as({"PMI_RANK": "0", "PMI_SIZE": "2"}) == (0, 2)
    assert launched_as({"PMIX_RANK": "x", "PMIX_SIZE": "2"}) == (0, 1)
    out = tmp_path / "run"
    args = ["train", str(_corpus(tmp_path)), "--preset", "tiny", "--max-steps", "1", "--out",
            str(out), "--sample-tokens", "0"]
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "started as one of 2 MPI processes without --distributed" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert main(args) == 0
    assert capsys.readouterr().err == "" and not out.exists()


@pytest.mark.parametrize("published", [True, False])
def test_ctrl_c_after_an_export_is_published_says_it_was_written(tmp_path, capsys, monkeypatch,
                                                                 published):
    """Ctrl-C once the export's rename had happened said "interrupted (Ctrl-C)", exit 130, over a
    complete export (a second export then needed --force)."""
    out = tmp_path / "exp"

    def export(run, dest, force=False, progress=None):
        if published:
            Path(dest).mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr("engine.export.export_merged", export)
    code = main(["export", "--merged", str(tmp_path), str(out)])
    err = capsys.readouterr().err
    if published:
        assert code == 0 and f"wrote {out} (the interrupt came once it was written)" in err, err
    else:
        assert code == 130 and "interrupted (Ctrl-C)" in err and not out.exists(), err


def test_an_interrupted_distributed_job_says_it_once(tmp_path, capsys, monkeypatch):
    """`mpirun ... --distributed` interrupted while preparing: "interrupted (SIGTERM)" came
    once per rank; rank 0 speaks for the job."""
    import engine.cli as cli

    def interrupted(a):
        raise cli.Interrupted("SIGTERM")

    monkeypatch.setattr(cli, "cmd_train", interrupted)
    args = cli.build_parser().parse_args(["train", "--distributed"])
    args.fn = interrupted
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    for rank, said in (("1", ""), ("0", "\ninterrupted (SIGTERM)\n")):
        monkeypatch.setenv("OMPI_COMM_WORLD_RANK", rank)
        assert cli._run(args) == 143
        assert capsys.readouterr().err == said
    args.distributed = False  # (not a distributed job: every process says it)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert cli._run(args) == 143 and "interrupted (SIGTERM)" in capsys.readouterr().err


def test_a_link_that_loops_back_to_itself_is_one_line_wherever_a_path_goes(tiny_model, tmp_path,
                                                                           capsys):
    """As an export's output, the run exported, `train --out` or `--export-adapter`, a link
    loop printed a 40-line traceback (Python 3.11's Path.resolve raises RuntimeError there,
    past every `except OSError`)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    corpus = _corpus(tmp_path)
    said = f"error: {loop}: a link that loops back to itself; point it at a folder or file, or " \
           "choose another path\n"
    for args in (["export", "--merged", str(tiny_model), str(loop)],
                 ["export", "--peft", str(tiny_model), str(loop)],
                 ["export", "--gguf", str(tiny_model), str(loop)],
                 ["export", "--merged", str(loop), str(tmp_path / "x")],
                 ["train", str(corpus), "--preset", "tiny", "--out", str(loop), "--max-steps", "1"],
                 ["train", str(corpus), "--init", str(tiny_model), "--lora", "in_proj", "--out",
                  str(tmp_path / "a"), "--max-steps", "1", "--export-adapter", str(loop)],
                 ["train", "--resume", str(loop)]):  # (it said "no such folder")
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.endswith(said) and "Traceback" not in err, (args, err)
    assert main(["train", "--resume", str(loop / "sub")]) == 2  # through the loop: "no such
    assert capsys.readouterr().err == said.replace(f"{loop}:", f"{loop / 'sub'}:")  # folder"
    dangling = tmp_path / "gone"  # a link to nothing: "cannot create the run folder (File
    dangling.symlink_to(tmp_path / "nowhere")  # exists)", after the corpus was read
    assert main(["train", str(corpus), "--preset", "tiny", "--out", str(dangling)]) == 2
    assert capsys.readouterr().err == (f"error: {dangling}: a link to {tmp_path / 'nowhere'}, "
                                       "which does not exist; create that folder, remove the "
                                       "link, or choose another --out\n")


def test_resume_takes_the_runs_own_command_line_in_every_spelling(tmp_path, capsys,
                                                                   monkeypatch):
    """The run's own command line again, --resume added, was refused where run.json keeps a
    value in another form: --tokenizer auto (kept as what it chose), --lora / --lora-rank /
    --checkpointing (refused whenever given), --init as another path to the same run; and a
    damaged run.json was hidden behind "batch_size cannot change"."""

    corpus = _corpus(tmp_path)
    common = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]
    base, ada = tmp_path / "base", tmp_path / "ada"
    assert main(["train", str(corpus), *common, "--max-steps", "1", "--out", str(base)]) == 0
    monkeypatch.chdir(tmp_path)
    own = ["--lora", "in_proj,x_proj", "--lora-rank", "4", "--lora-dropout", "0.1",
           "--checkpointing", "--init", "base"]
    assert main(["train", str(corpus), *common, *own, "--tokenizer", "auto", "--max-steps", "1",
                 "--out", "ada"]) == 0
    capsys.readouterr()
    again = ["train", str(corpus), *common, *own[:-1], str(base), "--tokenizer", "auto"]
    assert main([*again, "--resume", "ada", "--max-steps", "2"]) == 0, capsys.readouterr().err
    from engine import read_pointer

    assert read_pointer(ada)["step"] == 2
    for flag, value in (("--lora-rank", "8"), ("--lora", "in_proj"), ("--tokenizer", "bpe"),
                        ("--lora-dropout", "0")):  # (0 was taken unsaid: never compared)
        assert main(["train", "--resume", "ada", flag, value, "--max-steps", "3"]) == 2
        assert "cannot change" in capsys.readouterr().err, flag
    assert main(["train", "--resume", str(base), "--checkpointing", "--max-steps", "2"]) == 2
    assert "checkpointing cannot change" in capsys.readouterr().err
    (base / "run.json").write_text('{"broken')
    assert main(["train", "--resume", str(base), "--batch", "4", "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "run.json" in err and "cannot change" not in err, err


def test_a_run_json_beyond_todays_ends_still_resumes(tmp_path, capsys):
    """An earlier version took --patience and --target-loss above today's ends (2^40 and 1e6 in
    the CLI, any number in a file) and autosave without an upper end: such a run could not be
    resumed, evaluated or opened, nor its patience lowered by a flag."""
    import json

    run = tmp_path / "r"
    assert main(["train", str(_corpus(tmp_path)), "--preset", "tiny", "--seq-len", "32",
                 "--batch", "2", "--sample-tokens", "0", "--max-steps", "1",
                 "--out", str(run)]) == 0
    doc = json.loads((run / "run.json").read_text())
    doc["spec"]["early_stopping"].update(patience=2_000_000, target_loss=5000.0, min_delta=2e3)
    doc["spec"]["autosave_steps"] = 1 << 41
    doc["spec"]["autosave_minutes"] = 5e6
    (run / "run.json").write_text(json.dumps(doc))
    from engine import read_run_spec

    assert read_run_spec(run).early_stopping.patience == 2_000_000
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0, capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--patience", "5", "--target-loss", "0",
                 "--max-steps", "2"]) == 0, capsys.readouterr().err
    assert read_run_spec(run).early_stopping.patience == 5
    from engine import EarlyStopping
    from engine.run import resume

    for given in ({"autosave_minutes": 5e9}, {"autosave_steps": 1 << 60},  # given now: today's
                  {"early_stopping": EarlyStopping(patience=10**12)}):   # ends (they were
        with pytest.raises(ValueError):                                   # written to run.json)
            resume(run, **given)
    assert read_run_spec(run).autosave_minutes != 5e9
    doc = json.loads((run / "run.json").read_text())
    doc["spec"]["early_stopping"]["patience"] = -1  # a lower end still holds
    (run / "run.json").write_text(json.dumps(doc))
    assert main(["eval", str(run)]) == 2
    assert "early_stopping.patience = -1; expected a whole number from 0 (off)" in \
        capsys.readouterr().err


def test_eval_of_a_run_whose_corpus_was_too_small_to_split_says_so(tmp_path, capsys):
    """It said "the run has no held-out split (holdout 0)" of a run whose run.json holds 0.1."""
    corpus = tmp_path / "one.txt"
    corpus.write_text("a")  # one byte
    assert main(["train", str(corpus), "--preset", "tiny", "--max-steps", "1",
                 "--sample-tokens", "0", "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "the run has no held-out split (its corpus was too small to split); pass a corpus" \
        in err, err


def test_a_plain_resume_of_a_diverged_run_says_it_goes_on_at_that_rate(tmp_path, capsys):
    """A run stopped as diverged (told to lower the learning rate), resumed as it was: it went
    on at the rate that diverged, unsaid, into a collapse it then called finished."""
    out = tmp_path / "dv"
    args = ["--preset", "tiny", "--seq-len", "64", "--batch", "4", "--sample-tokens", "0"]
    assert main(["train", str(_corpus(tmp_path)), *args, "--lr", "10", "--max-steps", "40",
                 "--out", str(out)]) == 2
    assert "training diverged" in capsys.readouterr().err
    import shutil

    shutil.copytree(out, tmp_path / "dv2")
    shutil.copytree(out, tmp_path / "dv3")
    rc = main(["train", "--resume", str(out), "--max-steps", "2", "--sample-tokens", "0"])
    err = capsys.readouterr().err  # (at that rate it may diverge again: said, not a crash)
    assert rc == 0 or "error: training diverged" in err, err
    assert "warning: dv ended diverged: it goes on at the learning rate it diverged at (" in err
    rc = main(["train", "--resume", str(tmp_path / "dv3"), "--max-steps", "2", "--lr", "10",
               "--sample-tokens", "0"])  # its own rate again (its command line): said too
    err = capsys.readouterr().err
    assert rc == 0 or "error: training diverged" in err, err
    assert "warning: dv3 ended diverged: it goes on" in err, err
    assert main(["train", "--resume", str(tmp_path / "dv2"), "--max-steps", "2", "--lr",
                 "0.001", "--sample-tokens", "0"]) == 0  # (a rate given: as asked)
    assert "ended diverged" not in capsys.readouterr().err


def test_train_out_inside_another_run_is_refused(tmp_path, capsys):
    """--out RUN/snapshots/inner or RUN/inner made a run inside another (export refused the
    same place); that run's --force was refused from then on ("holds files that are not a
    run's")."""
    run, corpus = tmp_path / "k", _corpus(tmp_path)
    common = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--max-steps", "1",
              "--sample-tokens", "0"]
    assert main(["train", str(corpus), *common, "--out", str(run)]) == 0
    for inner in (run / "snapshots" / "inner", run / "inner2", run / "a" / "b"):
        capsys.readouterr()
        assert main(["train", str(corpus), *common, "--out", str(inner)]) == 2
        err = capsys.readouterr().err
        assert f"{inner}: inside the run folder {run.resolve()}; choose another --out" in err, err
        assert not inner.exists()
    assert main(["train", str(corpus), *common, "--out", str(run), "--force"]) == 0
    proj = tmp_path / "proj"  # a folder above holding a run.json of its own (not a run's):
    proj.mkdir()  # every new run under it was refused
    (proj / "run.json").write_text('{"note": "my own config"}')
    assert main(["train", str(corpus), *common, "--out", str(proj / "runs" / "r")]) == 0


@pytest.mark.parametrize("threads", [1, 4, 8])
def test_bench_two_workers_need_the_threads_training_offers_them_at(threads, capsys):
    """`bench --workers 2` runs the thread tuner's two-worker choice, offered at 2 or 3 threads
    only (with 4 and 8 cores the halves were slower): at other counts the bench would time whole
    micro-batches under the halves' name."""
    from engine import bench

    with pytest.raises(ValueError, match=r"--workers 2 needs --threads 2 or 3"):
        bench.run(["small"], False, 1, ["full"], threads, workers=2)
    assert capsys.readouterr().out == ""  # (refused before its header)


def test_the_bench_scripts_configs_name_the_known_ones():
    """benchmarks/bench_halves*.py ended in a KeyError on an unknown config."""
    import argparse

    from engine.bench import config_names

    assert config_names("small,medium") == ["small", "medium"]
    with pytest.raises(argparse.ArgumentTypeError, match=r"unknown nope \(known: small, medium"):
        config_names("small,nope")


def test_positional_arguments_may_follow_options(tmp_path, capsys):
    """`eval RUN --records line CORPUS` and `train a.txt --preset tiny b.txt` were refused as
    "unrecognized arguments: CORPUS" (argparse gives a command's positionals only the words
    before its first option); an unknown option is still refused, and named."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the cat sat on the mat. " * 200)
    b.write_text("a dog ran in the fog. " * 200)
    out = tmp_path / "r"
    assert main(["train", str(a), "--preset", "tiny", str(b), "--max-steps", "1", "--batch", "2",
                 "--seq-len", "32", "--sample-tokens", "0", "--out", str(out)]) == 0
    sources = json.loads((out / "data" / "manifest.json").read_text())["sources"]
    assert sorted(Path(s["path"]).name for s in sources) == ["a.txt", "b.txt"]
    capsys.readouterr()
    assert main(["eval", str(out), "--records", "line", str(b), "--seq-len", "32"]) == 0
    assert "line records" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["eval", str(out), "--records", "line", str(b), "--bogus"])
    assert info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
