"""``train --config run.toml``: every unknown key or wrongly typed value is one line on stderr
naming the file and the table.key, exit code 2, before anything trains."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import MambaStudioError
from engine.runtoml import load_settings

ROOT = Path(__file__).resolve().parent.parent

BAD = [  # (file text, the table.key the error names, words it must also hold)
    ('[run]\ncorpus = ["a.txt"]\n[model]\nd_model = "big"\n', "model.d_model",
     ['"big" (a string)', "expected an integer"]),
    ('[run]\ncorpus = ["a.txt"]\n[model]\nd_modell = 64\n', "model.d_modell",
     ["unknown key", "did you mean model.d_model?"]),
    ('[run]\ncorpus = ["a.txt"]\n[train]\neval_every = 2\n[early_stopping]\npatience = "x"\n',
     "early_stopping.patience", ["expected an integer"]),
    ('[run]\npresett = "tiny"\n', "run.presett", ["did you mean run.preset?"]),
    ("[train]\nepoks = 3\n", "train.epoks", ["train.epochs"]),  # (it named only train.eps)
    ("[run]\nrun = 5\n", "run.run", ["unknown key", "preset"]),
    ('[run]\nholdout = "x"\n', "run.holdout", ["expected a number"]),
    ("[run]\ncorpus = 5\n", "run.corpus", ["5 (an integer)", "array of strings"]),
    ('[run]\ncorpus = ["a.txt", 3]\n', "run.corpus", ["array of strings"]),
    ("[train]\nepochs = true\n", "train.epochs", ["true (true/false)", "expected an integer"]),
    ("[train]\nshuffle = 1\n", "train.shuffle", ["expected true/false"]),
    ("[train]\nlora = 3\n", "train.lora", ["[train.lora] table"]),
    ('[train.lora]\ntargets = "in_proj"\nrankk = 4\n', "train.lora.rankk",
     ["did you mean train.lora.rank?"]),
    ("[model]\nvocab_size = 300\n", "model.vocab_size", ["tokenizer"]),
    ('[run]\ncorpus = [""]\n', "run.corpus", ["empty path"]),
    ('corpus = ["a.txt"]\n', "corpus = ", ["outside any section", "under [run]"]),
    ("wat = 1\n", "[wat]", ["unknown section"]),
    ("lr = 0.001\n[train]\nepochs = 2\n", "lr = 0.001",
     ["outside any section", "belongs under [train]"]),
    ('[[run]]\ncorpus = ["a.txt"]\n', "run = ", ["expected a [run] table"]),
    ('[model]\ndt_rank = "big"\n', "model.dt_rank", ['expected an integer or "auto"']),
    # ranges, named with the file before the tokenizer trains (they came after, without it)
    ("[model]\nd_model = 1000000\n", "d_model = 1,000,000", ["out of range [1, 65,536]"]),
    ('[run]\nbpe_vocab = 1\ntokenizer = "bpe"\n', "bpe_vocab", ["[257, 1,048,576], not 1"]),
]
UNUSED_BPE_VOCAB = '[run]\nbpe_vocab = 1\ntokenizer = "bytes"\n'  # never used: not refused


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 30)
    return tmp_path


@pytest.mark.parametrize("text, key, words", BAD, ids=[b[1] for b in BAD])
def test_bad_key_or_type_is_one_line_exit_2(folder, text, key, words):
    toml = folder / "run.toml"
    toml.write_text(text)
    out = folder / "out"
    proc = subprocess.run([sys.executable, "-m", "engine", "train", "--config", str(toml),
                           "--out", str(out), "--max-steps", "1", "--sample-tokens", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {toml}: ") and key in lines[0]
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()  # nothing trained, no run folder


def _refused(path: Path, text: str) -> str:
    """The one-line message ``load_settings`` refuses a file holding ``text`` with."""
    path.write_text(text)
    with pytest.raises(MambaStudioError) as info:
        load_settings(path)
    return str(info.value)


def test_every_wrong_key_and_type_is_named_at_once(folder):
    """A file with several mistakes names each of them (it named the first, so a user fixed
    them one run at a time)."""
    toml = folder / "run.toml"
    msg = _refused(toml, '[run]\npresett = "tiny"\n[model]\nd_model = "big"\n[train]\n'
                   'epochs = true\nlora = 3\n[early_stoping]\npatience = 2\n')
    assert "\n" not in msg and msg.startswith(f"{toml}: 5 problems: (1) ")
    for i, key in enumerate(["run.presett", "model.d_model", "train.epochs", "train.lora",
                             "[early_stoping]"], 1):
        assert f"({i}) " in msg and key in msg.split(f"({i}) ")[1], (key, msg)
    assert "did you mean [early_stopping]?" in msg
    toml.write_text("[train]\n" + "".join(f"epochs{i} = 1\n" for i in range(8)))
    msg = str(pytest.raises(MambaStudioError, load_settings, toml).value)
    assert msg.count("unknown key") == 8 and "8 problems" in msg and "more" not in msg  # (5 and
    toml.write_text("[train]\n" + "".join(f"epochs{i} = 1\n" for i in range(30)))  # "3 more")
    msg = str(pytest.raises(MambaStudioError, load_settings, toml).value)  # bounded, still
    assert msg.count("unknown key") == 20 and "30 problems" in msg and "and 10 more" in msg


@pytest.mark.parametrize("corpus, targets", [('"a.txt"', '"in_proj"'),
                                             ('["a.txt"]', '["in_proj", "x_proj"]')])
def test_a_lone_string_is_a_one_element_list_never_its_characters(folder, corpus, targets):
    toml = folder / "run.toml"
    toml.write_text(f'[run]\ncorpus = {corpus}\nprompts = "Hi "\n[train.lora]\ntargets = {targets}\n')
    s = load_settings(toml)
    assert s.corpus == (str(folder / "a.txt"),)
    assert s.spec.train.lora is not None and s.spec.train.lora.targets[0] == "in_proj"
    assert s.spec.prompts == ("Hi ",)


def test_ints_pass_as_floats_bools_do_not_pass_as_ints(folder):
    toml = folder / "run.toml"
    toml.write_text("[run]\nholdout = 0\n[train]\nlr = 1\n")
    s = load_settings(toml)
    assert s.spec.holdout == 0.0 and isinstance(s.spec.train.lr, float)
    toml.write_text("[train]\nseed = false\n")
    with pytest.raises(Exception, match="train.seed = false"):
        load_settings(toml)


def test_a_valid_file_still_trains(folder, capsys):
    toml = folder / "run.toml"
    toml.write_text('[run]\npreset = "tiny"\ncorpus = "a.txt"\nholdout = 0.1\n'
                    "[model]\nd_model = 32\nn_layer = 1\n"
                    "[train]\nlr = 1\nbatch_size = 2\nseq_len = 32\nmax_steps = 2\neval_every = 1\n"
                    "[early_stopping]\npatience = 5\n")
    out = folder / "out"
    assert main(["train", "--config", str(toml), "--out", str(out), "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and (out / "latest.json").exists()


def test_a_file_naming_no_settings_is_noted(folder, capsys):
    """An emptied settings file trained on every default without a word."""
    toml = folder / "empty.toml"
    toml.write_text("# to fill in\n")
    assert main(["train", str(folder / "a.txt"), "--config", str(toml), "--preset", "tiny",
                 "--seq-len", "32", "--batch", "2", "--max-steps", "1", "--out",
                 str(folder / "out"), "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"note: {toml} names no settings (empty, or comments only): it changes "
                     "nothing") == 1, err


def test_a_missing_corpus_of_a_file_names_the_file(folder, capsys):
    """It said "no usable text in the corpus (.../nothere: no such file or folder)", not that
    the path came from the settings file."""
    toml = folder / "c.toml"
    toml.write_text('[run]\ncorpus = ["nothere"]\n')
    assert main(["train", "--config", str(toml), "--out", str(folder / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {folder / 'nothere'}: no such file or folder; check the name, or "
                   f"leave it out of the corpus, named by run.corpus in {toml}"), err


@pytest.mark.parametrize("key", ["corpus", "init"])
def test_a_path_through_a_link_loop_is_one_line_naming_the_loop(folder, capsys, key):
    """A relative corpus or init path through a link loop raised RuntimeError ("Symlink loop")
    with a traceback while the file was read (the window's Open settings did nothing); --init
    on such a link then called it "a file"."""
    (folder / "loop").symlink_to("loop")
    toml = folder / "c.toml"
    toml.write_text(f'[run]\npreset = "tiny"\n{key} = {["loop"] if key == "corpus" else "loop"!r}\n'
                    .replace("'", '"'))
    assert main(["train", "--config", str(toml), "--out", str(folder / "out"), "--max-steps",
                 "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {folder / 'loop'}: a link that loops back to itself" if
                          key == "init" else f"error: no usable text in the corpus ({folder / 'loop'}"
                          ": a link that loops back to itself"), err
    assert not (folder / "out").exists()


def test_dt_rank_auto_is_accepted_as_in_hf_config(folder):
    """``dt_rank = "auto"`` is MambaConfig's own spelling (and HF's time_step_rank)."""
    toml = folder / "run.toml"
    for value in ('"auto"', "0", "5"):
        toml.write_text(f"[model]\nd_model = 64\ndt_rank = {value}\n")
        assert load_settings(toml).spec.model["dt_rank"] == (value.strip('"') if value[0] == '"'
                                                             else int(value))


@pytest.mark.parametrize("preset", ["tiny", "medium"])
def test_a_file_naming_a_preset_trains_with_that_presets_defaults(folder, preset):
    """A file naming only preset = "medium" got TrainConfig's own defaults (small's learning
    rate 3e-3), where ``--preset medium`` gives medium's (2e-3)."""
    from engine.runtoml import defaulted
    from engine.trainer import TrainConfig

    path = folder / "s.toml"
    path.write_text(f'[run]\npreset = "{preset}"\ntokenizer = "bpe"\n[train]\nepochs = 2\n')
    s = load_settings(path)
    assert s.spec.train == TrainConfig.for_preset(preset, "bpe", epochs=2)
    assert s.named == ("run.preset", "run.tokenizer", "train.epochs")
    left = defaulted(s)
    assert "train.lr" in left and "train.epochs" not in left and "run.preset" not in left


def test_overlay_sets_only_what_the_file_names(tmp_path):
    """The window's Open settings: the named settings over what it shows, the rest kept; a named
    preset drops the shown custom dims (they would override it)."""
    from dataclasses import replace

    from engine import EarlyStopping, RunSettings, RunSpec, TrainConfig, overlay_settings

    base = RunSettings(RunSpec(preset="small", model={"d_model": 96, "n_layer": 2, "d_state": 8},
                               prompts=("Once", "def f("),
                               train=TrainConfig(epochs=7, lr=0.002, batch_size=4),
                               early_stopping=EarlyStopping(patience=3)),
                       ("/data/a.txt",))
    f = tmp_path / "s.toml"
    f.write_text("[train]\nlr = 0.001\n")
    got = overlay_settings(base, load_settings(f))
    assert got.spec == replace(base.spec, train=replace(base.spec.train, lr=0.001))
    assert got.corpus == base.corpus and got.early_stopping == base.early_stopping
    f.write_text('[run]\npreset = "tiny"\ncorpus = ["b.txt"]\n[early_stopping]\npatience = 0\n')
    got = overlay_settings(base, load_settings(f))
    assert got.spec.preset == "tiny" and got.spec.model is None  # the dims went with "custom"
    assert got.spec.train == base.spec.train and got.spec.prompts == base.spec.prompts
    assert got.corpus == (str(tmp_path / "b.txt"),) and not got.early_stopping.enabled


def test_overlay_of_a_preset_moves_the_training_defaults_with_it(tmp_path):
    """A file naming only preset = "medium" gave the window small's rate where `train --config`
    gives medium's; settings set by hand stay."""
    from dataclasses import replace

    from engine import PRESET_DEFAULTS, RunSettings, RunSpec, TrainConfig, overlay_settings

    base = RunSettings(RunSpec(preset="small", train=replace(TrainConfig.for_preset("small"),
                                                             epochs=7)))
    f = tmp_path / "s.toml"
    f.write_text('[run]\npreset = "medium"\n')
    got = overlay_settings(base, load_settings(f))
    cli = load_settings(f).spec.train
    assert got.spec.train.lr == cli.lr == PRESET_DEFAULTS["medium"].lr != PRESET_DEFAULTS["small"].lr
    assert got.spec.train.epochs == 7  # set by hand: kept


def test_a_bpe_vocab_a_bytes_run_never_uses_is_not_refused(folder):
    toml = folder / "run.toml"
    toml.write_text(UNUSED_BPE_VOCAB)
    assert load_settings(toml).spec.tokenizer == "bytes"


def test_overlay_of_a_file_with_init_and_an_unknown_preset(tmp_path):
    """A file starting from a model folder may name any preset (it is unused); the window's
    Open settings raised KeyError: 'tinyy' on it, with nothing said."""
    from engine import RunSettings, RunSpec, TrainConfig, overlay_settings

    base = RunSettings(RunSpec(preset="small", train=TrainConfig()))
    f = tmp_path / "s.toml"
    f.write_text(f'[run]\npreset = "tinyy"\ninit = "{tmp_path}"\n')
    got = overlay_settings(base, load_settings(f))
    assert got.spec.init == str(tmp_path) and got.spec.train == base.spec.train


def _run_with(tmp_path, text: str, *flags: str) -> dict:
    """Train one step from a settings file (and flags on top); the run's saved spec."""
    import json

    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    f = tmp_path / "s.toml"
    f.write_text('[run]\ncorpus = ["c.txt"]\n' + text)
    out = tmp_path / "out"
    assert main(["train", "--config", str(f), "--max-steps", "1", "--seq-len", "32", "--batch",
                 "2", "--sample-tokens", "0", "--no-tensorboard", "--out", str(out), "--force",
                 *flags]) == 0
    return json.loads((out / "run.json").read_text())["spec"]


def test_a_files_wsla_and_checkpointing_are_kept(tmp_path):
    """They were set from the (absent) flags: a WSLA file trained every weight."""
    spec = _run_with(tmp_path, 'preset = "tiny"\n[train]\nwsla = true\n'
                               "activation_checkpointing = true\n")
    assert spec["train"]["wsla"] is True and spec["train"]["activation_checkpointing"] is True


@pytest.mark.parametrize("text, flags, check", [
    ('preset = "medium"\n', ["--preset", "tiny"],  # tiny at medium's rate
     lambda s: s["preset"] == "tiny" and s["train"]["lr"] == 0.003),
    ('preset = "tiny"\ntokenizer = "bpe"\nbpe_vocab = 300\n', ["--tokenizer", "bytes"],
     lambda s: s["tokenizer"] == "bytes" and s["train"]["lr"] == 0.003),  # not BPE's 0.006
    ('preset = "tiny"\n[train.lora]\ntargets = ["in_proj", "x_proj"]\nrank = 4\nalpha = 16.0\n',
     ["--lora", "in_proj"], lambda s: s["train"]["lora"]["targets"] == ["in_proj"]
     and s["train"]["lora"]["rank"] == 4 and s["train"]["lora"]["alpha"] == 16.0),
    ('preset = "tiny"\n[train.lora]\ntargets = ["in_proj"]\nrank = 4\n', ["--lora-rank", "2"],
     lambda s: s["train"]["lora"]["rank"] == 2 and s["train"]["lora"]["targets"] == ["in_proj"]),
    ('preset = "tiny"\n[train]\nlr = 0.001\n', ["--preset", "small"],  # a rate set by hand stays
     lambda s: s["preset"] == "small" and s["train"]["lr"] == 0.001),
], ids=["preset", "tokenizer", "lora-targets", "lora-rank", "hand-set-lr"])
def test_flags_over_a_settings_file_change_one_setting_each(tmp_path, text, flags, check):
    """A flag replaced a whole group of the file's settings, or missed the defaults that follow
    it: "flags override it" holds setting by setting, as the window opens a file."""
    spec = _run_with(tmp_path, text, *flags)
    assert check(spec), spec


def test_a_partial_model_table_keeps_the_presets_shape(tmp_path):
    """[model] naming only norm_eps trained d 128 x 4 layers (MambaConfig's own defaults)."""
    import engine

    _run_with(tmp_path, 'preset = "tiny"\n[model]\nnorm_eps = 1e-6\n')
    cfg = engine.read_model_config(tmp_path / "out")
    tiny = engine.preset("tiny", 264)
    assert (cfg.d_model, cfg.n_layer, cfg.norm_eps) == (tiny.d_model, tiny.n_layer, 1e-6)


def test_a_flag_over_a_files_early_stopping_keeps_the_rest(tmp_path, capsys):
    """--patience 5 over a file's target_loss 900 dropped the target: the run trained on."""
    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    f = tmp_path / "s.toml"
    f.write_text('[run]\ncorpus = ["c.txt"]\npreset = "tiny"\n[train]\nmax_steps = 10\n'
                 "eval_every = 2\nseq_len = 32\nbatch_size = 2\n[early_stopping]\n"
                 "target_loss = 900\n")
    assert main(["train", "--config", str(f), "--patience", "5", "--sample-tokens", "0",
                 "--no-tensorboard", "--out", str(tmp_path / "o")]) == 0
    assert "stopped (early stopping: held-out loss" in capsys.readouterr().err


def test_a_relative_init_is_taken_from_the_files_folder(tmp_path, monkeypatch):
    """`init = "../w/base"` was resolved against the working folder (corpus paths against the
    file's), so the same file worked from one folder and failed from another."""
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "s.toml").write_text('[run]\ninit = "../w/base"\ncorpus = ["sub/c.txt"]\n')
    monkeypatch.chdir("/")
    s = load_settings(cfg / "s.toml")
    assert s.spec.init == str(tmp_path / "w" / "base")
    assert s.corpus == (str(cfg / "sub" / "c.txt"),)


def test_a_flag_that_cannot_go_with_the_file_names_both(tmp_path, capsys):
    """--wsla over a file's LoRA on in_proj said ".: ...; fix that setting in the file"."""
    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    f = tmp_path / "s.toml"
    f.write_text('[run]\ncorpus = ["c.txt"]\npreset = "tiny"\n[train.lora]\ntargets = ["in_proj"]\n')
    assert main(["train", "--config", str(f), "--wsla", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {f} with the flags given: ") and ".:" not in err, err
    assert err.count("\n") == 0 and not (tmp_path / "o").exists()


def test_model_sizes_with_an_init_are_named_unused(tmp_path, capsys):
    """A [model] table with an init was ignored without a word, kept in run.json, and the
    Runs list called the run "custom"."""
    import engine

    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    base = tmp_path / "base"
    assert main(["train", str(tmp_path / "c.txt"), "--preset", "tiny", "--max-steps", "1",
                 "--seq-len", "32", "--batch", "2", "--sample-tokens", "0", "--out", str(base)]) == 0
    f = tmp_path / "s.toml"
    f.write_text(f'[run]\ncorpus = ["c.txt"]\ninit = "{base}"\n[model]\nd_model = 32\n'
                 "n_layer = 1\n[train]\nmax_steps = 1\nseq_len = 32\nbatch_size = 2\n")
    capsys.readouterr()
    assert main(["train", "--config", str(f), "--sample-tokens", "0", "--out",
                 str(tmp_path / "o")]) == 0
    assert f"note: model sizes not used: a run from {base} keeps that model's shape" in \
        capsys.readouterr().err
    assert engine.read_run_spec(tmp_path / "o").model is None
    assert [r.preset for r in engine.list_runs(tmp_path) if r.path.name == "o"] == ["opened weights"]


def test_every_value_out_of_range_is_named_at_once(tmp_path):
    """preset "huge", holdout 1.5, seq_len -5 and batch_size 0: four Opens, one named each."""
    f = tmp_path / "bad.toml"
    f.write_text('[run]\npreset = "huge"\nholdout = 1.5\n[train]\nseq_len = -5\nbatch_size = 0\n')
    with pytest.raises(MambaStudioError) as info:
        load_settings(f)
    msg = str(info.value)
    assert msg.startswith(f"{f}: 4 problems: (1) ") and "\n" not in msg, msg
    for words in ("batch size = 0", "sequence length = -5", "preset must be one of",
                  "held-out fraction 1.5"):
        assert words in msg, (words, msg)


def test_lora_and_early_stopping_problems_are_named_with_the_others(tmp_path):
    """A [train.lora] or [early_stopping] problem was named alone: the three [train] values out
    of range beside it were not (nor early stopping's second one)."""
    f = tmp_path / "bad.toml"
    msg = _refused(f, "[train]\nepochs = -4\nbatch_size = 0\n[train.lora]\nrank = -1\n"
                   "dropout = 2.0\n[early_stopping]\npatience = -1\ntarget_loss = -3\n")
    assert msg.startswith(f"{f}: 6 problems: (1) ") and "\n" not in msg, msg
    for words in ("rank = -1", "dropout = 2.0", "epochs = -4", "batch size = 0",
                  "early_stopping.patience = -1", "early_stopping.target_loss = -3",
                  "fix those settings"):
        assert words in msg, (words, msg)
    # wrong types and values out of range in one message (they took two tries), and a [model]
    # with three sizes of 0 names each (one a try), not a nested "4 problems: (1) ..." list
    f.write_text('[model]\nd_model = 0\nn_layer = 0\nd_state = 0\n[train]\nlr = "fast"\n'
                 "epochs = -4\n")
    msg = str(pytest.raises(MambaStudioError, load_settings, f).value)
    assert msg.startswith(f"{f}: 5 problems: (1) train.lr") and "problems: (1)" not in \
        msg.split("5 problems: ", 1)[1], msg
    for words in ("d_model = 0", "n_layer = 0", "d_state = 0", "epochs = -4"):
        assert words in msg, (words, msg)
    assert "dt_rank" not in msg  # (d_model's problem, not a second one of its own)
    f.write_text("[early_stopping]\npatience = -1\ntarget_loss = -3\n")
    with pytest.raises(MambaStudioError, match=r"2 problems: .*patience.*target_loss"):
        load_settings(f)


def test_max_steps_0_in_a_file_means_no_limit_as_on_the_command_line(tmp_path):
    """`max_steps = 0` was refused ("out of range [1, ...]") while --max-steps 0 means no
    limit, so a file could not undo another's limit."""
    f = tmp_path / "s.toml"
    f.write_text("[train]\nmax_steps = 0\nepochs = 2\n")
    s = load_settings(f)
    assert s.spec.train.max_steps is None and "train.max_steps" in s.named
    f.write_text("[train]\nmax_steps = false\n")  # (False == 0 in Python: still refused)
    with pytest.raises(MambaStudioError, match="max_steps"):
        load_settings(f)
    msg = _refused(f, "[train]\nmax_steps = -5\n")  # it said "[1, ...]" and nothing of 0
    assert "max steps = -5 is out of range" in msg and "(0: no limit)" in msg, msg


def test_max_steps_0_laid_over_a_limit_lifts_it(tmp_path, capsys):
    """A file's `max_steps = 0` was dropped when laid over other settings (the window's Open
    settings, `train --resume RUN --config FILE`): the limit stayed ("already at step 4 of 4")."""
    from engine import RunSettings, RunSpec, TrainConfig, overlay_settings

    base = RunSettings(RunSpec(preset="tiny", train=TrainConfig(max_steps=40, epochs=5)))
    f = tmp_path / "lift.toml"
    f.write_text("[train]\nmax_steps = 0\n")
    got = overlay_settings(base, load_settings(f))
    assert got.spec.train.max_steps is None and got.spec.train.epochs == 5
    saved = tmp_path / "saved.toml"  # a window with no limit writes it, and it is read back
    from engine.runtoml import save_settings

    save_settings(saved, got)
    assert "max_steps = 0" in saved.read_text()
    assert overlay_settings(base, load_settings(saved)).spec.train.max_steps is None
    out, corpus = tmp_path / "run", tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. " * 200)
    tiny = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0"]
    assert main(["train", str(corpus), *tiny, "--max-steps", "2", "--out", str(out)]) == 0
    f.write_text("[train]\nmax_steps = 0\nepochs = 1\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--config", str(f), "--sample-tokens", "0"]) == 0
    err = capsys.readouterr().err
    assert "already at step" not in err, err
    assert json.loads((out / "latest.json").read_text())["step"] > 2


def test_target_loss_0_in_a_file_is_off_as_on_the_command_line(tmp_path):
    """`target_loss = 0` was refused ("expected a number > 0") while --target-loss 0 is off, so a
    file could not switch off another's target."""
    from engine import EarlyStopping, RunSettings, RunSpec, overlay_settings

    f = tmp_path / "s.toml"
    f.write_text("[early_stopping]\ntarget_loss = 0\n")
    s = load_settings(f)
    assert s.early_stopping.target_loss is None and "early_stopping.target_loss" in s.named
    base = RunSettings(RunSpec(early_stopping=EarlyStopping(patience=2, target_loss=1.5)))
    got = overlay_settings(base, s).early_stopping
    assert (got.patience, got.target_loss) == (2, None)
    msg = _refused(f, "[early_stopping]\ntarget_loss = -1\n")
    assert "target_loss = -1.0; expected a number above 0 (0: off) up to 1000" in msg, msg
    msg = _refused(f, "[early_stopping]\ntarget_loss = 5000\npatience = 2000000\n")
    assert "target_loss = 5000.0; expected a number above 0 (0: off) up to 1000" in msg, msg
    assert "patience = 2000000; expected a whole number from 0 (off) to 1,000,000" in msg, msg


def test_a_model_size_of_0_is_named_as_the_file_names_it(tmp_path):
    """`[model] d_model = 0` said "MambaConfig.d_model must be a positive int", a class name
    the user never wrote."""
    f = tmp_path / "s.toml"
    f.write_text("[model]\nd_model = 0\n")
    with pytest.raises(MambaStudioError) as info:
        load_settings(f)
    assert "d_model = 0" in str(info.value) and "MambaConfig" not in str(info.value)


@pytest.mark.parametrize("where", ["flag", "file"])
def test_a_bpe_choice_does_not_double_an_init_runs_rate(tmp_path, capsys, where):
    """--tokenizer bpe over a settings file, on a run from --init (which keeps its model's bytes
    tokenizer), trained at BPE's doubled rate 0.006; without the file it was 0.003."""
    import json

    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    base = tmp_path / "base"
    assert main(["train", str(tmp_path / "c.txt"), "--preset", "tiny", "--max-steps", "1",
                 "--seq-len", "32", "--batch", "2", "--sample-tokens", "0", "--out", str(base)]) == 0
    text = '[run]\ncorpus = ["c.txt"]\npreset = "tiny"\n'
    text += f'init = "{base}"\n' + ('tokenizer = "bpe"\n' if where == "file" else "")
    (tmp_path / "s.toml").write_text(text + "[train]\nmax_steps = 1\nseq_len = 32\n"
                                     "batch_size = 2\n")
    flags = ["--tokenizer", "bpe"] if where == "flag" else []
    assert main(["train", "--config", str(tmp_path / "s.toml"), *flags, "--sample-tokens", "0",
                 "--out", str(tmp_path / "o")]) == 0
    spec = json.loads((tmp_path / "o" / "run.json").read_text())["spec"]
    assert spec["tokenizer"] == "bytes" and spec["train"]["lr"] == 0.003, spec


def test_a_key_set_twice_quotes_its_line(tmp_path):
    """tomllib says "Cannot overwrite a value (at line 3, column 7)" for a key set twice, not
    which key: the line is quoted."""
    msg = _refused(tmp_path / "s.toml", "[train]\nepochs = 4\nepochs = 5\n")
    assert "Cannot overwrite a value (at line 3, column 11): `epochs = 5`)" in msg, msg
    msg = _refused(tmp_path / "s.toml", "[train]\nlr = " + "9" * 80 + "x\n")
    assert ": `lr = " + "9" * 55 + "…`)" in msg, msg


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be"])
def test_a_settings_file_with_a_byte_order_mark_is_read(tmp_path, encoding):
    """Saved as "UTF-8 with BOM" it was "not valid TOML (Invalid statement (at line 1, column
    1))"; as UTF-16 ("Unicode" in Windows editors) "looks binary (byte 0)"."""
    p = tmp_path / "s.toml"
    text = '[run]\nprompts = ["Grüße "]\n[train]\nepochs = 4\n'
    data = text.encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    p.write_bytes(data)
    s = load_settings(p)
    assert s.spec.train.epochs == 4 and s.spec.prompts == ("Grüße ",)


@pytest.mark.parametrize("data,words", [(b"\x7fELF\x02\x01\x00\x00\xd0\x00", "looks binary (byte 8)"),
                                        (b"lr = 1\n\xff\xfe", "is not UTF-8 text (byte 7)")])
def test_a_settings_file_that_is_no_text_is_said_so(tmp_path, data, words):
    """A binary file opened as settings said "not valid TOML ('utf-8' codec can't decode byte
    0xd0 in position 24: invalid continuation byte)"."""
    p = tmp_path / "s.toml"
    p.write_bytes(data)
    with pytest.raises(MambaStudioError) as err:
        load_settings(p)
    assert str(err.value) == (f"{p}: {words}, not a settings file; give a .toml file saved by "
                              "the app or written as text")


def test_a_preset_flag_over_a_files_model_sizes_keeps_them_or_says_so(tmp_path, capsys):
    """--preset tiny over a file of preset tiny with [model] d_model 8 trained the plain tiny
    model, without a word: the file's own preset keeps its sizes; another one says it
    replaces them."""
    import engine

    (tmp_path / "c.txt").write_text("the cat sat on the mat. " * 200)
    f = tmp_path / "s.toml"
    f.write_text('[run]\ncorpus = ["c.txt"]\npreset = "tiny"\n[model]\nd_model = 8\n'
                 "n_layer = 1\n[train]\nmax_steps = 1\nseq_len = 32\nbatch_size = 2\n")
    common = ["train", "--config", str(f), "--sample-tokens", "0", "--no-tensorboard"]
    assert main([*common, "--preset", "tiny", "--out", str(tmp_path / "same")]) == 0
    assert "note: --preset" not in capsys.readouterr().err
    cfg = engine.read_model_config(tmp_path / "same")
    assert (cfg.d_model, cfg.n_layer) == (8, 1)
    assert main([*common, "--preset", "small", "--out", str(tmp_path / "other")]) == 0
    assert (f"note: --preset small replaces the model sizes {f} gives (d_model 8, n_layer 1) "
            "with small's") in capsys.readouterr().err
    small = engine.preset("small", 264)
    assert engine.read_model_config(tmp_path / "other").d_model == small.d_model


def test_a_runs_run_json_as_config_says_what_it_is(folder, capsys):
    """`--config runs/x/run.json` said only "not valid TOML (Invalid statement (at line 1,
    column 1))"."""
    run_json = folder / "run.json"
    run_json.write_text('{\n  "spec": {"preset": "tiny"}\n}\n')
    assert main(["train", "--config", str(run_json), "--out", str(folder / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {run_json}: JSON, not a settings file (TOML); a run's run.json "
                          "is its record: train --resume RUN goes on with its settings"), err
    assert err.count("\n") == 0 and not (folder / "out").exists()


def test_a_lora_without_targets_adapts_what_peft_applies_as_the_window_does(folder):
    """A settings file's ``[train.lora]`` without targets adapted out_proj too (the engine's
    default), which PEFT refuses un-merged, while the window's boxes default to in_proj and
    x_proj: the same file gave two runs, and ``--export-adapter`` was refused."""
    from engine.lora import PEFT_REFUSES

    toml = folder / "l.toml"
    toml.write_text('[train.lora]\nrank = 4\n')
    spec = load_settings(toml).spec
    assert spec.train.lora is not None and spec.train.lora.targets == ("in_proj", "x_proj")
    assert not set(spec.train.lora.targets) & set(PEFT_REFUSES)


@pytest.mark.parametrize(("line", "said"), [
    ("keep = 0", "keep = 0: a run keeps a whole number of its latest snapshots, at least 1"),
    ("autosave_steps = -1", "autosave_steps = -1 is outside 0 (off) to 2^40"),
    ("autosave_minutes = inf", "autosave_minutes = inf is not a number from 0 (off) to "
                               "1,000,000"),
    ("autosave_minutes = -2.0", "autosave_minutes = -2.0 is not a number from 0 (off) to "
                                "1,000,000"),
    ("autosave_minutes = 2e6", "autosave_minutes = 2000000.0 is not a number from 0 (off) to "
                               "1,000,000"),  # (the CLI's --autosave-minutes range)
])
def test_a_run_setting_out_of_range_in_a_settings_file_names_the_key(folder, capsys, line, said):
    """It said "autosave_steps/minutes must be >= 0 and finite, keep >= 1" of keep = 0."""
    toml = folder / "k.toml"
    toml.write_text(f"[run]\n{line}\n")
    assert main(["train", "--config", str(toml), "--out", str(folder / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {toml}: {said}; fix that setting in the file", err
