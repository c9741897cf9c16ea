"""Small models and data shared by the tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.config import MambaConfig
from engine.params import init_params


def tiny_config(**kw) -> MambaConfig:  # type: ignore[no-untyped-def]
    base = {"vocab_size": 24, "d_model": 16, "n_layer": 2, "d_state": 4}
    base.update(kw)
    return MambaConfig(**base)


def random_params(cfg: MambaConfig, seed: int = 0, dtype=np.float64, noise: float = 0.1):  # type: ignore[no-untyped-def]
    """Reference init plus noise, so norms/D/biases are not at special values.

    The reference (N(0, 0.02) embeddings), not the training default N(0, 1): with unit-scale
    embeddings the float64 central differences at eps 1e-6 carry truncation errors of ~2e-4
    relative on some x_proj entries, above the 1e-5 the gradient tests demand.
    """
    p = init_params(cfg, seed=seed, dtype=np.float64, init="reference")
    rng = np.random.default_rng(seed + 100)
    for a in p.values():
        a += noise * rng.standard_normal(a.shape)
    return {k: v.astype(dtype) for k, v in p.items()}


def random_batch(cfg: MambaConfig, b: int = 2, length: int = 7, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab_size, size=(b, length))
    targets = rng.integers(0, cfg.vocab_size, size=(b, length))
    return tokens, targets


def two_file_corpus(tmp_path: Path, repeat: int = 30) -> Path:
    """``tmp_path/corpus`` holding two short English files of ``repeat`` sentences each."""
    d = tmp_path / "corpus"
    d.mkdir(exist_ok=True)
    (d / "a.txt").write_text("the cat sat on the mat and looked at the hat. " * repeat)
    (d / "b.txt").write_text("a dog ran in the fog and sat on a log by the bog. " * repeat)
    return d


def train_stopped_while_scoring(run) -> object:
    """``run.train()`` with a stop that comes while its held-out evaluation runs (a Stop or
    SIGTERM during the run's final evaluation); returns its TrainResult."""
    from engine.control import TrainControl

    control = TrainControl()
    scored = run.trainer.held_out

    def stop_while_scoring(should_stop=None):
        control.stop()
        return scored(should_stop)

    run.trainer.held_out = stop_while_scoring
    return run.train(control=control)


def write_legacy_checkpoint(tr, folder: Path) -> Path:  # type: ignore[no-untyped-def]
    """A trained ``engine.Trainer`` written as the old single-folder checkpoint (weights,
    optimizer.safetensors and a ``trainer_state.json`` listing every file's sha256), as the
    original library wrote it: the product only reads this format (``engine.legacy``)."""
    from dataclasses import asdict

    from engine import checkpoint as ckpt

    folder = Path(folder)
    hashes = tr.lm.save(folder)
    extra = {**tr.optimizer.state_tensors(), **tr.trainable.state_tensors()}
    ckpt.atomic_write_tensors(folder / "optimizer.safetensors", extra)
    hashes["optimizer.safetensors"] = ckpt.sha256_file(folder / "optimizer.safetensors")
    ckpt.atomic_write_json(folder / "trainer_state.json", {
        "format": "mamba-studio-trainer/1", "step": tr.cursor.step, "epoch": tr.cursor.epoch,
        "group": tr.cursor.group, "cursor": asdict(tr.cursor), "optimizer_t": tr.optimizer.t,
        "train_config": tr.cfg.to_dict(), "history": [asdict(h) for h in tr.history[-5000:]],
        "epochs": [asdict(e) for e in tr.epochs], "files": hashes})
    return folder
