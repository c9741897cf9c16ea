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
    assert capsys.readouterr().out == "AHi\nHaa\n"  # went on past the end-of-text id, shown
    # as a line break between the documents (as the window's Playground shows it: they ran
    # together)


def test_past_an_unstopped_end_of_text_the_state_restarts_as_in_training(monkeypatch):
    """Training starts every document from a zero state fed the end-of-text id; generation went
    on from the old state, so '12+54=70' was followed by fragments ('3', '3', '3370=97')."""
    from engine.inference import CpuStepper

    lm = _lm()
    calls: list[tuple[str, list[int]]] = []

    class Recording(CpuStepper):
        def prefill(self, ids):
            calls.append(("prefill", [int(i) for i in ids]))
            return super().prefill(ids)

        def step(self, token):
            calls.append(("step", [int(token)]))
            return super().step(token)

    seen: list[np.ndarray] = []

    def scripted(logits, *a, **k):
        seen.append(np.array(logits))
        return [72, 256, 105][len(seen) - 1] if len(seen) <= 3 else 97

    monkeypatch.setattr(engine.lm, "sample", scripted)
    out = list(lm.generate_ids(np.array([65]), SamplingConfig(max_new_tokens=4, stop_at_eos=False),
                               Recording(lm.params, lm.config)))
    assert out == [72, 256, 105, 97]
    assert calls == [("prefill", [65]), ("step", [72]), ("prefill", [256]), ("step", [105]),
                     ("step", [97])]
    fresh = CpuStepper(lm.params, lm.config).prefill(np.array([256]))  # a new document's start
    np.testing.assert_array_equal(seen[2], fresh)
