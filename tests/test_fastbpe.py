"""The tiktoken encoder used for our byte-level BPE gives HF ``tokenizers``' ids exactly, and is
not used where that cannot be shown."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.fastbpe import PROBE, fast_encoder
from engine.tokenizer import BPETokenizer

ROOT = Path(__file__).resolve().parent.parent


def _texts() -> list[str]:
    """Code (this repository's engine), prose, whitespace runs, several scripts, emoji, CRLF,
    the end-of-text token inside text."""
    code = "".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "engine").glob("*.py")))
    rng = np.random.default_rng(0)
    words = ["the", "The", "cat's", "DON'T", "we'll", "naïve", "Grüße", "東京", "мир", "🙂", "👍🏽",
             "3.14", "1e-5", "x_1", "\t", "  ", "\r\n", "\n\n\n", " \n", "«»", "—", "e\u0301",
             "<|endoftext|>", "\u00a0", "...", "'s", "''"]
    mixed = "".join(str(rng.choice(words)) + str(rng.choice(["", " ", "  ", "\n"]))
                    for _ in range(40_000))
    return [code, mixed, PROBE, "", " ", "<|endoftext|>", "a<|endoftext|>b", "   \n\n  x"]


@pytest.fixture(scope="module")
def bpe() -> BPETokenizer:
    return BPETokenizer.train(_texts()[:2], vocab_size=1500)


def test_fast_encoder_gives_hf_ids_on_code_prose_and_unicode(bpe):
    assert bpe._encoder() is not None  # the fast path is really taken
    for text in _texts():
        fast = bpe.encode(text).tolist()
        assert fast == bpe._hf_encode(text)
        if "<|endoftext|>" not in text:  # decode drops special tokens
            assert bpe.decode(fast) == text
    pieces = [t[i:i + 5000] for t in _texts()[:2] for i in range(0, len(t), 5000)]
    got = bpe.encode_batch(pieces)
    want = bpe._tok.encode_batch(pieces, add_special_tokens=False)
    assert [g.tolist() for g in got] == [w.ids for w in want] and len(got) > 50
    assert bpe.encode("<|endoftext|>").tolist() == [bpe.eos_id]


def _spec(bpe: BPETokenizer) -> dict:
    return json.loads(bpe._tok.to_str())


@pytest.mark.parametrize("change", ["normalizer", "no_regex", "prefix_space", "dropout",
                                    "ids_out_of_merge_order", "added_token_rstrip"])
def test_other_tokenizers_keep_hf_encoder(bpe, change):
    from tokenizers import Tokenizer

    spec = _spec(bpe)
    if change == "normalizer":
        spec["normalizer"] = {"type": "NFC"}
    elif change == "no_regex":
        spec["pre_tokenizer"]["use_regex"] = False
    elif change == "prefix_space":
        spec["pre_tokenizer"]["add_prefix_space"] = True
    elif change == "dropout":
        spec["model"]["dropout"] = 0.1
    elif change == "added_token_rstrip":  # HF eats the spaces after it; a plain split would not
        spec["added_tokens"][0]["rstrip"] = True
    else:  # swap the ids of the first two merged tokens: HF's merge order and tiktoken's differ
        vocab, (a, b) = spec["model"]["vocab"], spec["model"]["merges"][:2]
        ta, tb = "".join(a.split(" ") if isinstance(a, str) else a), \
            "".join(b.split(" ") if isinstance(b, str) else b)
        vocab[ta], vocab[tb] = vocab[tb], vocab[ta]
    text = json.dumps(spec)
    hf = Tokenizer.from_str(text)
    assert fast_encoder(text, lambda t: hf.encode(t, add_special_tokens=False).ids) is None
    assert BPETokenizer(hf)._encoder() is None  # its encodes are HF's own


def test_a_probe_that_disagrees_keeps_hf_encoder(bpe):
    text = bpe._tok.to_str()
    assert fast_encoder(text, bpe._hf_encode) is not None
    assert fast_encoder(text, lambda t: bpe._hf_encode(t)[:-1]) is None
