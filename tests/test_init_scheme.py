"""RunSpec.init_scheme: the weight init of a new model, recorded in run.json, kept on resume,
set by ``train --init-scheme`` and by the TOML settings file."""

import json

import numpy as np
import pytest

from engine import runformat as rf
from engine.cli import main
from engine.params import EMBEDDINGS, INITS, init_params
from engine.run import RunSpec, resume, start
from engine.runtoml import RunSettings, load_settings, save_settings
from engine.trainer import TrainConfig

TINY = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--sample-tokens", "0",
        "--max-steps", "1", "--autosave-minutes", "0", "--no-tensorboard"]


def _corpus(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir(exist_ok=True)
    (d / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 20)
    return d


@pytest.mark.parametrize("scheme", INITS)
def test_each_scheme_starts_records_and_resumes(tmp_path, scheme):
    spec = RunSpec(preset="tiny", init_scheme=scheme, autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=1))
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "run") as run:
        want = init_params(run.lm.config, spec.train.seed, init=scheme)
        got = run.lm.params[EMBEDDINGS]  # step 0: exactly the scheme's init
        assert np.array_equal(got, want[EMBEDDINGS])
        run.train()
    assert rf.read_run_json(tmp_path / "run")["spec"]["init_scheme"] == scheme
    with resume(tmp_path / "run", max_steps=2) as run:
        assert run.spec.init_scheme == scheme
        run.train()
    assert rf.read_run_json(tmp_path / "run")["spec"]["init_scheme"] == scheme


def test_cli_flag_and_one_line_errors(tmp_path, capsys):
    corpus = str(_corpus(tmp_path))
    scheme = INITS[-1]
    assert main(["train", corpus, *TINY, "--out", str(tmp_path / "r"), "--init-scheme", scheme]) == 0
    assert json.loads((tmp_path / "r" / "run.json").read_text())["spec"]["init_scheme"] == scheme
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["train", corpus, *TINY, "--init-scheme", "nope"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert main(["train", corpus, *TINY, "--out", str(tmp_path / "s"), "--init", str(tmp_path / "r"),
                 "--init-scheme", scheme]) == 2
    assert "applies to a new model" in capsys.readouterr().err
    other = next(i for i in INITS if i != scheme)  # (the run's own scheme changes nothing)
    assert main(["train", "--resume", str(tmp_path / "r"), "--init-scheme", other]) == 2
    assert "init_scheme" in capsys.readouterr().err


def test_toml_key_round_trips_and_is_checked(tmp_path):
    path = tmp_path / "run.toml"
    save_settings(path, RunSettings(RunSpec(init_scheme="reference")))
    assert 'init_scheme = "reference"' in path.read_text()
    assert load_settings(path).spec.init_scheme == "reference"
    path.write_text('[run]\ninit_scheme = "nope"\n')
    with pytest.raises(Exception, match="init scheme must be one of"):
        load_settings(path)


def test_an_old_run_json_without_the_field_reads_as_default():
    d = RunSpec().to_dict()
    del d["init_scheme"]
    assert RunSpec.from_dict(d).init_scheme == RunSpec.init_scheme
