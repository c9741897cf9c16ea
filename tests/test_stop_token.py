"""Generation ends at the tokenizer's end-of-text id when asked (the CLI's and the app's default);
``generate --no-stop`` always produces --max-new-tokens."""

from pathlib import Path

import numpy as np
import pytest

import engine.lm
from engine import MambaLM, SamplingConfig
from engine.cli import main
from engine.tokenizer import ByteTokenizer
from tests.helpers import tiny_config


def _scripted(monkeypatch, ids):  # noqa: ANN001  sample() returns these ids, then "a" forever
    seq = iter(ids)
    monkeypatch.setattr(engine.lm, "sample", lambda *a, **k: next(seq, 97))


def _lm() -> MambaLM:
    return MambaLM.create(tiny_config(vocab_size=257), ByteTokenizer(), seed=0)


@pytest.mark.parametrize("stop_at_eos, n", [(True, 2), (False, 10)])
def test_generate_ids_stops_at_end_of_text_when_asked(monkeypatch, stop_at_eos, n):
    _scripted(monkeypatch, [72, 105, 256, 72])
    s = SamplingConfig(max_new_tokens=10, stop_at_eos=stop_at_eos)
    out = list(_lm().generate_ids(np.array([65]), s))
    assert len(out) == n and out[:2] == [72, 105]


def test_an_explicit_stop_token_still_works(monkeypatch):
    _scripted(monkeypatch, [72, 105, 33, 72])
    assert list(_lm().generate_ids(np.array([65]), SamplingConfig(stop_token=33))) == [72, 105]


def test_cli_generate_stops_at_end_of_text_unless_no_stop(tmp_path: Path, monkeypatch, capsys):
    _lm().save(tmp_path / "m")
    _scripted(monkeypatch, [72, 105, 256, 72])
    assert main(["generate", str(tmp_path / "m"), "--prompt", "A", "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out == "AHi\n"
    _scripted(monkeypatch, [72, 105, 256, 72])
    assert main(["generate", str(tmp_path / "m"), "--prompt", "A", "--max-new-tokens", "6",
                 "--no-stop"]) == 0
    assert capsys.readouterr().out == "AHiHaa\n"  # went on past the end-of-text id (not shown)
