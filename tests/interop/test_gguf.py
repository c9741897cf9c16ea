"""GGUF export in llama.cpp (llama-cpp-python): greedy continuation, logits and tokenization
against ours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine import MambaLM, SamplingConfig
from engine.export import export_gguf

from .conftest import model_folder

llama_cpp = pytest.importorskip("llama_cpp")

PROMPT = "The quick"
N = 32


def _llama(path: Path):  # type: ignore[no-untyped-def]
    return llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=2, logits_all=True,
                           verbose=False)


@pytest.fixture(scope="module")
def ggufs(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gguf")
    out = {}
    for name in ("byte", "bpe", "untied"):
        assert export_gguf(runs[name], root / f"{name}.gguf") == []
        out[name] = root / f"{name}.gguf"
    return out


@pytest.mark.parametrize("name", ["byte", "bpe", "untied"])
def test_llama_cpp_greedy_continuation_equals_ours(runs: dict[str, Path], ggufs: dict[str, Path],
                                                   name: str) -> None:
    lm = MambaLM.load(model_folder(runs[name]))
    prompt = lm.tokenizer.encode(PROMPT).tolist()
    ours = list(lm.generate_ids(np.array(prompt), SamplingConfig(temperature=0.0, max_new_tokens=N)))
    llm = _llama(ggufs[name])
    llm.eval(prompt)
    first = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    theirs = []
    for _ in range(N):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        theirs.append(tok)
        llm.eval([tok])
    assert theirs == ours
    assert len(set(ours)) > 1  # a real continuation, not one repeated token
    ref = lm.logits(np.array(prompt)[None])[0, -1]
    assert np.abs(first - ref).max() < 1e-3  # float32 on both sides, different op order


@pytest.mark.parametrize("name", ["byte", "bpe"])
def test_llama_cpp_reads_a_prompt_as_generate_does(runs: dict[str, Path], ggufs: dict[str, Path],
                                                   name: str) -> None:
    """``llama-cli -p "The "`` tokenizes with the file's add_bos_token: it was off, so llama.cpp
    read the prompt alone where our ``generate`` reads it after <|endoftext|>."""
    lm = MambaLM.load(model_folder(runs[name]))
    llm = _llama(ggufs[name])
    assert llm.tokenize(PROMPT.encode("utf-8")) == lm.prompt_ids(PROMPT).tolist()


@pytest.mark.parametrize("name", ["byte", "bpe"])
def test_llama_cpp_tokenizer_equals_ours(runs: dict[str, Path], ggufs: dict[str, Path], name: str) -> None:
    lm = MambaLM.load(model_folder(runs[name]))
    llm = _llama(ggufs[name])
    for text in ["The quick brown fox", "  two spaces", "naïve café — 日本語 😀", "tabs\tand\nlines\n"]:
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        assert ids == lm.tokenizer.encode(text).tolist(), text
        assert llm.detokenize(ids).decode("utf-8") == text
    assert llm.token_eos() == lm.tokenizer.eos_id
