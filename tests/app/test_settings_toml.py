"""File > Open settings… goes through the same checks as ``train --config``: a wrong key or a
wrongly typed value is one line in the window, never an exception out of the slot."""

from dataclasses import replace

import pytest

from .helpers import RUN_TIMEOUT


@pytest.mark.parametrize("text, key", [
    ('[model]\nd_model = "big"\n', "model.d_model"),
    ("[model]\nd_modell = 64\n", "model.d_modell"),
    ('[early_stopping]\npatience = "x"\n', "early_stopping.patience"),
    ("[train]\nepochs = 2.5\n", "train.epochs"),
    ("[run]\nrun = 5\n", "run.run"),
])
def test_bad_settings_file_is_one_line_in_the_window(win, tmp_path, text, key):
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    before = win.train.patience.value(), win.train.epochs.value(), win.train.d_model.value()
    win.load_settings_file(str(bad))
    msg = win.errors[-1]
    assert str(bad) in msg and key in msg and "\n" not in msg
    assert (win.train.patience.value(), win.train.epochs.value(),
            win.train.d_model.value()) == before  # nothing half-applied


def test_loaded_settings_are_shown_as_given_or_the_change_is_named(win, tmp_path):
    """lr 1e-6 and seq_len 8192 (both valid for the engine) were shown as 0.00001 and 4096 with
    only "settings loaded from …"."""
    path = tmp_path / "s.toml"
    path.write_text("[train]\nlr = 0.000001\nseq_len = 8192\nbatch_size = 512\n")
    win.load_settings_file(str(path))
    assert not win.errors, win.errors
    assert win.train.lr.value() == pytest.approx(1e-6) and win.train.lr.text() == "1e-06"
    assert (win.train.seq_len.value(), win.train.batch.value()) == (8192, 512)
    tc = win.make_job().spec.train
    assert (tc.lr, tc.seq_len) == (pytest.approx(1e-6), 8192)
    path.write_text("[train]\nseed = 3000000000\n")  # beyond what a spin box holds
    win.load_settings_file(str(path))
    assert "seed 3000000000 -> 2147483647" in win.errors[-1] and str(path) in win.errors[-1]


def test_a_files_model_sizes_give_the_window_the_model_the_cli_trains(win, tmp_path):
    """[model] d_model = 7 trained a 7-wide model from ``train --config`` and became 16 in the
    window ("changed to fit the panel"): the boxes take the engine's ranges."""
    import engine

    path = tmp_path / "s.toml"
    path.write_text("[model]\nd_model = 7\nn_layer = 60\nd_state = 100\n")
    win.load_settings_file(str(path))
    assert not win.errors, win.errors
    cli = engine.load_settings(str(path)).spec.model
    assert {k: cli[k] for k in ("d_model", "n_layer", "d_state")} == {
        "d_model": 7, "n_layer": 60, "d_state": 100}
    shown = win.make_job().spec.model
    assert shown is not None and {k: shown[k] for k in ("d_model", "n_layer", "d_state")} == {
        "d_model": 7, "n_layer": 60, "d_state": 100}


def test_a_files_training_settings_the_cli_takes_are_taken_by_the_window(win, qtbot, tmp_path):
    """bpe_vocab 65,536 and a clip of 1e9 trained from ``train --config`` and were changed in
    the window (its boxes held 300-32,000 and 1e6): the boxes take the engine's ranges."""
    import engine
    from engine.tokenizer import ByteTokenizer
    from tests.helpers import tiny_config

    path = tmp_path / "s.toml"
    path.write_text('[run]\ntokenizer = "bpe"\nbpe_vocab = 65536\n'
                    "[train]\nmax_grad_norm = 1e9\nepochs = 1000000\n")
    cli = engine.load_settings(str(path)).spec
    win.load_settings_file(str(path))
    assert not win.errors, win.errors
    spec = win.make_job().spec
    assert (spec.bpe_vocab, spec.train.max_grad_norm, spec.train.epochs) == (
        cli.bpe_vocab, cli.train.max_grad_norm, cli.train.epochs) == (65536, 1e9, 1_000_000)
    model = tmp_path / "model"
    engine.MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer()).save(model)
    path.write_text(f'[run]\ninit = "{model}"\n'  # (LoRA adapts a trained model only)
                    "[train.lora]\nrank = 4096\ndropout = 0.999\n")
    win.load_settings_file(str(path))
    qtbot.waitUntil(lambda: win.init_dir == str(model), timeout=RUN_TIMEOUT)
    assert not win.errors, win.errors
    lora = win.make_job().spec.train.lora
    assert lora is not None and (lora.rank, lora.dropout) == (4096, 0.999), lora


def test_the_windows_boxes_hold_the_engines_ranges(win):
    """Each training box's range is the engine's (the one the CLI's flags and a settings file
    are checked against), cut only where a spin box cannot hold more."""
    import engine

    t = win.train
    boxes = {"epochs": t.epochs, "batch_size": t.batch, "seq_len": t.seq_len,
             "grad_accum": t.accum, "weight_decay": t.weight_decay, "max_grad_norm": t.clip,
             "seed": t.seed, "eval_every": t.eval_every}
    for key, box in boxes.items():
        lo, hi, _ = engine.TRAIN_RANGES[key]
        cap = 2**31 - 1 if isinstance(hi, int) else hi  # (an int box's limit)
        assert (box.minimum(), box.maximum()) == (lo, min(hi, cap)), key
    assert t.lr.maximum() == engine.TRAIN_RANGES["lr"].hi
    assert t.max_steps.maximum() == min(engine.TRAIN_RANGES["max_steps"].hi, 2**31 - 1)
    assert (t.bpe_vocab.minimum(), t.bpe_vocab.maximum()) == engine.BPE_VOCAB_RANGE[:2]
    assert (t.rank.minimum(), t.rank.maximum()) == engine.LORA_RANGES["rank"][:2]
    assert (t.lora_dropout.minimum(), t.lora_dropout.maximum()) == engine.LORA_RANGES["dropout"][:2]
    assert t.alpha.maximum() == engine.LORA_RANGES["alpha"].hi
    # a run's own settings and its early stopping: each key has its box, or is named as having
    # none (NO_BOX_RUN: kept from a file for the session); the window's patience and target
    # loss had drifted (1,000,000 and 1,000 where the CLI took 2^40 and 1e6)
    from app.panels.train_panel import NO_BOX_RUN

    own = {"holdout": t.holdout, "patience": t.patience, "target_loss": t.target_loss}
    for key, rng in {**engine.RUN_RANGES, **engine.EARLY_RANGES}.items():
        if key in own:
            assert (own[key].minimum(), own[key].maximum()) == (rng.lo, rng.hi), key
        else:
            assert key in NO_BOX_RUN or key == "min_delta", key  # (early stopping's: no box)


def test_a_files_settings_without_a_box_are_trained_and_saved_as_given(win, tmp_path):
    """Open settings dropped [model] d_conv / expand / dt_rank / tie_embeddings and [train]
    beta1 / beta2 / eps / shuffle / max_delta / max_bad_steps without a word (the Log said the
    file set them): the window trained 64,656 parameters with conv_kernel 4 where
    ``train --config`` trained 64,368 with 3, and Save settings as wrote the defaults back."""
    import engine

    path = tmp_path / "s.toml"
    path.write_text("[model]\nd_model = 40\nn_layer = 2\nd_conv = 3\nexpand = 3\ndt_rank = 5\n"
                    "tie_embeddings = false\n[train]\nbeta1 = 0.8\nbeta2 = 0.95\neps = 1e-6\n"
                    "shuffle = false\nmax_delta = 0.5\nmax_bad_steps = 7\n")
    win.load_settings_file(str(path))
    assert not win.errors, win.errors
    cli = engine.load_settings(str(path)).spec
    job = win.make_job().spec
    assert job.model_config(264) == cli.model_config(264)
    cfg = job.model_config(264)
    assert (cfg.d_model, cfg.n_layer, cfg.d_conv, cfg.expand, cfg.dt_rank, cfg.tie_embeddings) == (
        40, 2, 3, 3, 5, False)
    for k in ("beta1", "beta2", "eps", "shuffle", "max_delta", "max_bad_steps"):
        assert getattr(job.train, k) == getattr(cli.train, k), k
    assert win.train.model_config() == job.model_config(win.train.vocab_hint)
    log = win.log.toPlainText()
    assert ("with no box in the panel, used by the next runs: d_conv 3, expand 3, dt_rank 5, "
            "tie_embeddings false, ") in log and "shuffle false" in log, log
    again = tmp_path / "again.toml"
    win.save_settings_file(str(again))
    saved = engine.load_settings(str(again)).spec
    assert saved.model_config(264) == cli.model_config(264)
    assert saved.train.beta2 == 0.95 and not saved.train.shuffle
    win.train.preset.setCurrentText("tiny")  # a preset chosen: its own shape, and custom sizes
    win.train.preset.setCurrentText("custom")  # chosen after it have no d_conv 3 left over
    assert win.train.model_config().d_conv == 4


def test_typed_values_out_of_range_are_not_taken(win, qtbot):
    """Typing lr -1 gave 1.00000 (the maximum); seq len 99999 gave 999."""
    from PySide6.QtCore import Qt

    def type_into(box, text: str) -> None:
        box.lineEdit().selectAll()
        qtbot.keyClicks(box.lineEdit(), text)
        qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)

    lr = win.train.lr.value()
    type_into(win.train.lr, "-1")
    assert win.train.lr.value() == lr  # not taken: the value stays
    type_into(win.train.lr, "2e-6")
    assert win.train.lr.value() == pytest.approx(2e-6)
    type_into(win.train.seq_len, "99999")
    assert win.train.seq_len.value() == 99999


def test_a_settings_file_naming_nothing_says_so(win, tmp_path):
    """An emptied (or all-comment) file said "settings loaded from ..." and changed nothing."""
    before = win.current_settings()
    path = tmp_path / "s.toml"
    path.write_text("# nothing here yet\n")
    win.load_settings_file(str(path))
    line = win.log.toPlainText().splitlines()[-1]
    assert f"{path} names no settings (empty, or comments only): nothing changed" in line, line
    assert win.current_settings() == before


def test_a_partial_settings_file_changes_only_what_it_names(win, tmp_path):
    """A file naming only lr reset the preset, epochs, the preview prompts and the rest to their
    defaults (Epochs 7 -> 3, tiny -> small, three prompts -> "The "); two walk-throughs expected
    only the named settings to change."""
    win.train.epochs.setValue(7)
    win.preview.prompts.setPlainText("Once\nThe cat\ndef f(")
    before = win.current_settings()
    path = tmp_path / "s.toml"
    path.write_text("[train]\nlr = 0.001\n")
    win.load_settings_file(str(path))
    line = win.log.toPlainText().splitlines()[-1]
    assert "it sets 1 setting (lr); the others stay as they were" in line, line
    after = win.current_settings()
    assert after.spec.train == replace(before.spec.train, lr=0.001)
    assert after.spec.preset == "tiny" and after.spec.prompts == ("Once", "The cat", "def f(")
    path.write_text('[run]\npreset = "medium"\n')  # a preset named: its dims, the rest kept
    win.load_settings_file(str(path))
    assert win.train.preset.currentText() == "medium" and win.train.epochs.value() == 7
    full = tmp_path / "full.toml"
    win.save_settings_file(str(full))
    win.load_settings_file(str(full))  # a file the window saved names everything: no note
    assert win.log.toPlainText().splitlines()[-1] == f"settings loaded from {full}"


def test_a_folder_added_whole_is_saved_as_the_folder(win, qtbot, tmp_path):
    """A settings file saved the folder a user added as its files of the day: a file put in the
    folder later was not trained on by ``train --config`` (the CLI given the folder walks it).
    A folder with a file removed one by one is saved as its remaining files."""
    import engine

    data = tmp_path / "data"
    data.mkdir()
    for name in ("a.txt", "b.txt"):
        (data / name).write_text(f"{name} " * 50)
    single = tmp_path / "one.txt"
    single.write_text("one " * 50)
    win.corpus.files.clear()
    win.corpus.add_paths([str(data), str(single)], sync=True)
    path = tmp_path / "s.toml"
    win.save_settings_file(str(path))
    assert engine.load_settings(path).corpus == (str(data), str(single))
    (data / "c.txt").write_text("c " * 50)  # added to the folder later: trained on
    win.corpus.files.clear()
    win.load_settings_file(str(path))
    qtbot.waitUntil(lambda: len(win.corpus.files) == 4, timeout=10000)
    assert str(data / "c.txt") in win.corpus.files
    row = list(win.corpus.files).index(str(data / "b.txt"))
    win.corpus.table.selectRow(row)
    win.corpus._remove_selected()  # the Remove button
    win.save_settings_file(str(path))
    assert set(engine.load_settings(path).corpus) == {str(data / "a.txt"), str(data / "c.txt"),
                                                       str(single)}
    win.corpus.add_paths([str(data)], sync=True)  # the folder added again: whole again
    win.save_settings_file(str(path))
    assert engine.load_settings(path).corpus == (str(data), str(single))


def test_nested_adds_are_saved_once_and_a_removed_file_stays_out(win, qtbot, tmp_path):
    """A folder, a file in it and a subfolder of it: the settings file named all three and
    `train --config` read two files twice; after a Remove of that file it came back."""
    import engine

    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "sub/c.txt"):
        (data / name).write_text(f"{name} " * 40)
    c = win.corpus
    c.clear()
    for p in (data, data / "a.txt", data / "sub"):
        c.add_paths([str(p)], sync=True)
    assert c.notice.isVisible() is False and len(c.files) == 3
    path = tmp_path / "s.toml"
    win.save_settings_file(str(path))
    assert engine.load_settings(path).corpus == (str(data),)
    c.table.selectRow(list(c.files).index(str(data / "a.txt")))
    c._remove_selected()
    win.save_settings_file(str(path))
    assert set(engine.load_settings(path).corpus) == {str(data / "b.txt"), str(data / "sub")}


def test_a_file_fixed_and_added_again_leaves_the_skipped_list(win, qtbot, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "good.txt").write_text("good " * 40)
    (data / "bad.txt").write_bytes("bad text ".encode("utf-16") * 20)
    c = win.corpus
    c.clear()
    c.add_paths([str(data)], sync=True)
    assert [p for p, _ in c.skipped] == [str(data / "bad.txt")]
    (data / "bad.txt").write_text("now fine " * 20)
    added: list[str] = []
    c.added.connect(lambda what, _rejected: added.append(what))
    c.add_paths([str(data)], sync=True)
    assert c.skipped == [] and added == ["1 file (1 already in the corpus)"]
    c.add_paths([str(data), str(data / "good.txt")], sync=True)  # one file twice in one add
    assert added[-1] == "no new file (2 already in the corpus)"


def test_a_file_the_folders_walk_skips_is_saved_by_its_own_name(win, tmp_path):
    """A folder added whole, then files in it the walk does not read (a .xyz, a hidden file)
    added by name: the settings file (and the next launch) named only the folder, and those
    files vanished."""
    import engine

    a = tmp_path / "A"
    a.mkdir()
    (a / "a.txt").write_text("plain text " * 30)
    (a / "data.xyz").write_text("more text " * 30)
    (a / ".h.txt").write_text("hidden text " * 30)
    c = win.corpus
    c.clear()
    c.add_paths([str(a)], sync=True)
    c.add_paths([str(a / "data.xyz"), str(a / ".h.txt"), str(a / "a.txt")], sync=True)
    assert len(c.files) == 3
    saved = c.settings_paths()
    assert set(saved) == {str(a), str(a / "data.xyz"), str(a / ".h.txt")}, saved
    assert len(engine.load_corpus(saved).files) == 3


def test_a_file_that_cannot_go_with_the_panel_is_one_error(win, tmp_path, monkeypatch):
    """A file whose settings cannot go with the panel's (WSLA ticked on opened weights and a
    LoRA on in_proj): the error of the merge left the slot (a traceback)."""
    import engine

    seen: list[str] = []

    def refuse(base, top, where=""):  # noqa: ANN001
        seen.append(where)
        raise engine.MambaStudioError(f"{where}: WSLA trains x_proj only; drop one")

    monkeypatch.setattr(engine, "overlay_settings", refuse)
    f = tmp_path / "lora.toml"
    f.write_text('[train.lora]\ntargets = ["in_proj"]\n')
    win.load_settings_file(str(f))
    assert seen == [f"{f} over the settings shown"]
    assert win.errors[-1] == f"{f} over the settings shown: WSLA trains x_proj only; drop one"


def test_a_settings_file_whose_corpus_is_gone_keeps_the_corpus_shown(win, tmp_path):
    """The corpus was cleared first, then nothing could be added: 0 files."""
    before = sorted(win.corpus.files)
    assert before
    f = tmp_path / "s.toml"
    f.write_text(f'[run]\ncorpus = ["{tmp_path / "gone_corpus"}"]\n[train]\nepochs = 7\n')
    win.load_settings_file(str(f))
    assert sorted(win.corpus.files) == before and win.train.epochs.value() == 7
    assert win.errors and "its corpus (gone_corpus) no longer exists" in win.errors[-1]


def test_a_settings_files_corpus_replaces_the_corpus_shown(win, qtbot, tmp_path):
    """Open settings… added the file's corpus to the one shown (the sample texts beside the
    file's own data), and the next Start trained on both."""
    mine = tmp_path / "mine.txt"
    mine.write_text("my own text\n" * 40)
    shown = list(win.corpus.files)
    assert shown and str(mine) not in shown
    f = tmp_path / "s.toml"
    f.write_text(f'[run]\ncorpus = ["{mine}"]\n')
    win.load_settings_file(str(f))
    qtbot.waitUntil(lambda: win.corpus.pending == 0 and str(mine) in win.corpus.files,
                    timeout=10000)
    assert win.corpus.paths() == [str(mine)]
    assert win.corpus.table.rowCount() == 1


def test_save_settings_as_a_name_without_toml_adds_it(win, tmp_path, monkeypatch):
    """A name typed without .toml was saved as a file Open settings… (which lists *.toml
    files) then did not show."""
    from pathlib import Path

    from PySide6.QtWidgets import QFileDialog

    import engine
    from app import settings

    offered: list[str] = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda _w, _t, where, *a, **k: (
        offered.append(where), (str(tmp_path / "mine"), "Settings (*.toml)"))[1])
    win._save_settings_dialog()
    assert (tmp_path / "mine.toml").is_file() and not (tmp_path / "mine").exists()
    assert not offered[0].startswith(win.runs_root), offered  # (a first one was offered a place
    # among the run folders; now the Documents folder or home, then where the last one went)
    assert Path(offered[0]).parent == settings.documents()
    win._save_settings_dialog()
    assert Path(offered[1]).parent == tmp_path
    assert engine.load_settings(tmp_path / "mine.toml").corpus == tuple(
        win.corpus.settings_paths())


def test_a_settings_file_too_large_to_read_is_said_in_the_windows_terms(win, tmp_path):
    """The window said "check the --config path" (a flag of the CLI's) of a 110 MB file."""
    big = tmp_path / "big.toml"
    big.write_bytes(b"# x\n" * 300_000)
    win.load_settings_file(str(big))
    assert str(big) in win.errors[-1] and "check the settings file's path" in win.errors[-1]
    assert "--config" not in win.errors[-1]


def test_a_settings_file_without_epochs_trains_as_many_in_the_cli_and_the_window(win, tmp_path):
    """Epochs defaulted to 3 from ``train --config`` and showed 10 in a fresh window: one file,
    two runs (the window's 10 reach past the warmup on the bundled corpus; 3 stayed inside it)."""
    import engine

    path = tmp_path / "s.toml"
    path.write_text('[run]\npreset = "small"\n')
    cli = engine.load_settings(str(path)).spec.train.epochs
    assert win.train.epochs.value() == cli == engine.DEFAULT_EPOCHS == 10
