"""Continue / --resume can lift a run's max-steps limit back to "no limit" (all its epochs)."""

import json
from pathlib import Path

from engine.cli import main
from engine.run import NO_LIMIT, RunSpec, resume, start
from engine.trainer import TrainConfig


def _run(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * 40)
    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=2, max_steps=2))
    with start(spec, [tmp_path / "a.txt"], out=tmp_path / "r") as run:
        run.train()
        per_epoch = run.trainer.steps_per_epoch
    assert per_epoch > 2
    return tmp_path / "r"


def test_resume_with_no_limit_trains_all_epochs(tmp_path):
    folder = _run(tmp_path)
    with resume(folder, max_steps=NO_LIMIT) as run:
        assert run.spec.train.max_steps is None
        assert run.trainer.total_steps == 2 * run.trainer.steps_per_epoch
    assert json.loads((folder / "run.json").read_text())["spec"]["train"]["max_steps"] is None


def test_cli_max_steps_0_lifts_the_limit(tmp_path, capsys):
    folder = _run(tmp_path)
    with resume(folder) as run:
        total = 2 * run.trainer.steps_per_epoch
    assert main(["train", "--resume", str(folder), "--max-steps", "0", "--sample-tokens", "0",
                 "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert f"at step 2 of {total}" in err and f"at step {total} ({total - 2} steps in" in err
