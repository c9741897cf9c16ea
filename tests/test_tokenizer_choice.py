"""Tokenizer "auto" (the default): bytes for small corpora, BPE from ``BPE_MIN_BYTES``, and a
learning rate left at the preset's byte default doubled for BPE (engine/defaults.py)."""

from __future__ import annotations

import json

import pytest

import engine.defaults as defaults
from engine.cli import main
from engine.run import RunSpec, start
from engine.trainer import TrainConfig


def test_auto_picks_bytes_below_the_threshold_and_bpe_from_it():
    n = defaults.BPE_MIN_BYTES
    assert defaults.choose_tokenizer("auto", n - 1) == "bytes"
    assert defaults.choose_tokenizer("auto", n) == "bpe"
    assert defaults.choose_tokenizer("bytes", 10 * n) == "bytes"  # a choice by hand is kept
    assert defaults.choose_tokenizer("bpe", 10) == "bpe"


def test_for_corpus_doubles_only_a_default_rate_and_only_for_bpe():
    spec = RunSpec(preset="small", train=TrainConfig.for_preset("small"))
    byte_lr = defaults.PRESET_DEFAULTS["small"].lr
    big, small = defaults.BPE_MIN_BYTES, 1000
    assert spec.tokenizer == "auto"
    assert (spec.for_corpus(small).tokenizer, spec.for_corpus(small).train.lr) == ("bytes", byte_lr)
    assert spec.for_corpus(big).tokenizer == "bpe"
    assert spec.for_corpus(big).train.lr == pytest.approx(byte_lr * defaults.BPE_LR_SCALE)
    assert TrainConfig.for_preset("small", "bpe").lr == spec.for_corpus(big).train.lr
    by_hand = RunSpec(preset="small", train=TrainConfig.for_preset("small", lr=1e-3))
    assert by_hand.for_corpus(big).train.lr == 1e-3
    chosen = RunSpec(preset="small", tokenizer="bpe", train=TrainConfig.for_preset("small"))
    assert chosen.for_corpus(small).tokenizer == "bpe"  # bpe by hand, even on a small corpus
    assert chosen.for_corpus(small).train.lr == pytest.approx(byte_lr * defaults.BPE_LR_SCALE)


def test_a_new_run_records_the_chosen_tokenizer_and_rate(tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 400)
    monkeypatch.setattr(defaults, "BPE_MIN_BYTES", 1_000)  # this corpus counts as large
    notes: list[str] = []
    run = start(RunSpec(train=TrainConfig.for_preset("small", max_steps=1)), [corpus],
                out=tmp_path / "run", progress=notes.append)
    run.close()
    saved = json.loads((tmp_path / "run" / "run.json").read_text())["spec"]
    assert saved["tokenizer"] == "bpe" and run.lm.tokenizer.kind == "bpe"
    assert saved["train"]["lr"] == pytest.approx(2 * defaults.PRESET_DEFAULTS["small"].lr)
    assert any(n.startswith("tokenizer: bpe (auto") for n in notes)
    monkeypatch.setattr(defaults, "BPE_MIN_BYTES", 10**9)
    code = main(["train", str(corpus), "--out", str(tmp_path / "b"), "--max-steps", "1",
                 "--lr", "2e-3"])
    assert code == 0
    saved = json.loads((tmp_path / "b" / "run.json").read_text())["spec"]
    assert saved["tokenizer"] == "bytes" and saved["train"]["lr"] == 2e-3


def test_a_tokenizer_setting_a_run_from_a_model_cannot_use_is_said(tmp_path):
    """--init keeps the model's tokenizer; --tokenizer bpe beside a bytes model was dropped without
    a word (found by a walk-through of the README's LoRA line)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("def f(x):\n    return x + 1\n" * 40)
    base = start(RunSpec(tokenizer="bytes", train=TrainConfig.for_preset("tiny", max_steps=1)),
                 [corpus], out=tmp_path / "base")
    base.close()
    for tokenizer, said in (("bpe", True), ("auto", False), ("bytes", False)):
        notes: list[str] = []
        run = start(RunSpec(tokenizer=tokenizer, init=str(tmp_path / "base"),
                            train=TrainConfig.for_preset("tiny", max_steps=1)),
                    [corpus], out=tmp_path / f"from-{tokenizer}", progress=notes.append)
        run.close()
        assert run.lm.tokenizer.kind == "bytes"
        assert any("tokenizer bpe not used" in n and "bytes tokenizer" in n for n in notes) == said
