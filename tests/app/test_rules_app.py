"""Rules of the window's worker and settings that only a mutation of the code showed untested:
an export from a training run is of its current weights, a Save or Export asked for during the
run's last step is still made, and a remembered dialog folder that is gone is not offered."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

import engine
from app import settings
from app.workers import TrainJob, TrainWorker, export_from
from engine import run as runapi
from engine.trainer import TrainConfig

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "sample_corpus"


def _spec(steps: int) -> engine.RunSpec:
    return runapi.RunSpec(preset="tiny", train=TrainConfig(batch_size=4, seq_len=64,
                                                           max_steps=steps), autosave_minutes=0)


def test_an_export_from_a_training_run_is_of_its_current_weights(tmp_path):
    """Without its save, Export while training wrote the last autosave (minutes older) under
    the current step's label; and it warned that the steps after that save were not in it."""
    with runapi.start(_spec(2), [SAMPLE], root=tmp_path / "runs") as run:
        run.train()
        name = "backbone.norm_f.weight"
        run.lm.params[name] += 1.0  # the weights moved on since the last save
        notes = export_from(run, "merged", str(tmp_path / "out"))
        assert not any("is training" in n for n in notes), notes
        exported = load_file(str(tmp_path / "out" / "model.safetensors"))
        np.testing.assert_array_equal(exported[name], run.lm.params[name])
        assert engine.read_pointer(run.folder)["step"] == run.step


def test_a_save_asked_for_during_the_last_step_is_made(qtbot, tmp_path):
    """A Save snapshot asked for after the last step's own hook had served its requests (during
    the run's final evaluation and save) was dropped when the run ended: no snapshot, no
    message."""
    job = TrainJob(_spec(2), [str(SAMPLE)], str(tmp_path / "runs"))
    w = TrainWorker(job, [], engine.GENERATION_DEFAULTS, every=0)
    said: list[str] = []
    w.saved.connect(said.append)
    real = w._on_save

    def on_save(path: Path) -> None:  # the run's own last save, after its last step's hook
        real(path)
        if path.name == "step-2" and not asked:
            asked.append(path)
            w.request("save", "")

    asked: list[Path] = []
    w._on_save = on_save  # type: ignore[method-assign]
    w.run()
    assert asked
    assert any(m.startswith("snapshot saved: ") for m in said), said


def test_a_remembered_dialog_folder_that_is_gone_is_not_offered(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    settings.remember_folder("corpus", str(gone / "a.txt"))
    assert settings.last_folder("corpus", "D") == str(gone)  # a file's folder
    gone.rmdir()
    assert settings.last_folder("corpus", "D") == "D"


def test_a_continues_first_sample_is_recorded_with_the_epochs_done(qtbot, tmp_path):
    """The window's Continue recorded its resume sample as "epochs done 0" (the CLI: 1), so the
    Gallery's epoch filter listed it under 0."""
    with runapi.start(_spec(100), [SAMPLE], root=tmp_path / "runs") as run:
        run.train()  # one whole epoch
        folder, step = str(run.folder), run.step
    job = TrainJob(_spec(100), [], str(tmp_path / "runs"), continue_folder=folder,
                   overrides={"max_steps": step + 1, "epochs": 2})
    w = TrainWorker(job, ["The "], replace(engine.GENERATION_DEFAULTS, max_new_tokens=2),
                    every=0)
    w.run()
    first = engine.read_samples(folder)[0]
    assert (first["step"], first["epoch"]) == (step, 1)
