"""The preview prompts are part of a run (run.json): a resumed run keeps them; --prompt on resume
replaces them; run.json files written before they were stored resume with the default."""

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.run import RunSpec, resume, start
from engine.runtoml import RunSettings, load_settings, save_settings
from engine.trainer import TrainConfig

TINY = ["--preset", "tiny", "--seq-len", "32", "--batch", "2", "--no-tensorboard"]


def _corpus(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 40)
    return tmp_path / "a.txt"


def test_old_run_json_without_prompts_gets_the_default():
    d = RunSpec().to_dict()
    assert d["prompts"] == ["The"]
    del d["prompts"]
    assert RunSpec.from_dict(d).prompts == ("The",)
    assert RunSpec.from_dict({**d, "prompts": ["Q: ", "A: "]}).prompts == ("Q: ", "A: ")


def test_prompts_are_checked():
    with pytest.raises(ValueError, match="prompts"):
        RunSpec(prompts=()).check()
    with pytest.raises(ValueError, match="prompts"):
        RunSpec(prompts=("x" * 5000,)).check()


def test_prompts_survive_resume_and_can_be_replaced(tmp_path):
    spec = RunSpec(preset="tiny", prompts=("Once",), autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=2))
    with start(spec, [_corpus(tmp_path)], out=tmp_path / "r") as run:
        run.train()
    with resume(tmp_path / "r") as run:
        assert run.spec.prompts == ("Once",)
    with resume(tmp_path / "r", prompts=("Twice", "Thrice")):
        pass
    spec_json = json.loads((tmp_path / "r" / "run.json").read_text())["spec"]
    assert spec_json["prompts"] == ["Twice", "Thrice"]
    with resume(tmp_path / "r") as run:
        run.set_prompts(["Four"])  # the app's Preview edited during training
    with resume(tmp_path / "r") as run:
        assert run.spec.prompts == ("Four",)


def test_cli_prompt_is_kept_for_previews_after_resume(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["train", str(_corpus(tmp_path)), *TINY, "--max-steps", "1", "--out", out,
                 "--prompt", "Zebra ", "--sample-tokens", "2"]) == 0
    assert "\nZebra " in capsys.readouterr().err
    assert main(["train", "--resume", out, "--max-steps", "2", "--sample-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert "--- sample at step 1, resuming ---\nZebra " in err and "\nThe " not in err
    assert main(["train", "--resume", out, "--max-steps", "3", "--prompt", "Yak ",
                 "--sample-tokens", "2"]) == 0
    assert "\nYak " in capsys.readouterr().err
    assert json.loads((tmp_path / "r" / "run.json").read_text())["spec"]["prompts"] == ["Yak "]


def test_settings_file_round_trips_prompts(tmp_path):
    s = RunSettings(RunSpec(prompts=("Dear ", "Hi ")))
    save_settings(tmp_path / "s.toml", s)
    assert load_settings(tmp_path / "s.toml").spec.prompts == ("Dear ", "Hi ")
