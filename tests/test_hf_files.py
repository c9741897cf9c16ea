"""The files a model folder holds, as transformers, PEFT and tokenizers read them (the live check
against those tools is tests/interop, run by scripts/test-interop.sh)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from engine import BPETokenizer, ByteTokenizer, MambaLM, load_tokenizer
from engine import checkpoint as ckpt
from engine.config import MambaConfig, preset
from engine.errors import CheckpointError
from engine.params import LM_HEAD

from .helpers import tiny_config

TEXTS = ["hello world", "naïve café 日本語 😀", "  spaces\tand\nlines", ""]


def _lm(**kw) -> MambaLM:  # type: ignore[no-untyped-def]
    return MambaLM.create(tiny_config(vocab_size=264, **kw), ByteTokenizer(), seed=2)


def test_weights_carry_the_pt_format_tag(tmp_path: Path) -> None:
    from safetensors import safe_open

    _lm().save(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "np") as f:
        assert f.metadata()["format"] == "pt"  # transformers 4.x refuses anything else


def test_config_json_has_the_keys_transformers_reads(tmp_path: Path) -> None:
    _lm().save(tmp_path)
    conf = json.loads((tmp_path / "config.json").read_text())
    assert conf["architectures"] == ["MambaForCausalLM"] and conf["model_type"] == "mamba"
    assert conf["dtype"] == conf["torch_dtype"] == "float32"
    assert (conf["bos_token_id"], conf["eos_token_id"], conf["pad_token_id"]) == (256, 256, 256)
    gen = json.loads((tmp_path / "generation_config.json").read_text())
    assert gen["eos_token_id"] == gen["pad_token_id"] == 256


def test_vocab_is_never_padded_on_load(tmp_path: Path) -> None:
    """An HF folder with vocab_size 300 (not a multiple of 8) loads as 300 rows."""
    cfg = MambaConfig(vocab_size=300, d_model=16, n_layer=1, d_state=4)
    lm = MambaLM.create(cfg, ByteTokenizer(), seed=0)
    lm.save(tmp_path)
    assert MambaLM.load(tmp_path).config.vocab_size == 300
    assert preset("tiny", 257).vocab_size == 264  # new models are still padded, explicitly


def test_sharded_write_and_read_round_trip(tmp_path: Path) -> None:
    lm = _lm()
    lm.save(tmp_path)  # a single file first: the sharded save must remove it
    hashes = ckpt.save_model_files(tmp_path, lm.config, lm.params, lm.tokenizer, max_shard_bytes=4096)
    shards = sorted(p.name for p in tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 2 and not (tmp_path / "model.safetensors").exists()
    assert set(shards) | {ckpt.INDEX} <= set(hashes)
    index = json.loads((tmp_path / ckpt.INDEX).read_text())
    assert set(index["weight_map"]) == set(lm.params)
    back = MambaLM.load(tmp_path)
    for name, a in lm.params.items():
        np.testing.assert_array_equal(back.params[name], a)
    ckpt.save_model_files(tmp_path, lm.config, lm.params, lm.tokenizer)  # and back to one file
    assert not list(tmp_path.glob("model-*")) and not (tmp_path / ckpt.INDEX).exists()


def test_shard_index_naming_a_file_outside_is_refused(tmp_path: Path) -> None:
    lm = _lm()
    ckpt.save_model_files(tmp_path, lm.config, lm.params, lm.tokenizer, max_shard_bytes=4096)
    index = json.loads((tmp_path / ckpt.INDEX).read_text())
    index["weight_map"]["backbone.norm_f.weight"] = "../elsewhere.safetensors"
    (tmp_path / ckpt.INDEX).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="outside the folder"):
        MambaLM.load(tmp_path)


def test_tied_config_with_a_different_lm_head_is_refused(tmp_path: Path) -> None:
    lm = _lm()
    lm.save(tmp_path)
    tensors = ckpt.read_tensors(tmp_path / "model.safetensors")
    tensors[LM_HEAD] = tensors["backbone.embeddings.weight"] + 1
    ckpt.atomic_write_tensors(tmp_path / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match="tie_word_embeddings"):
        MambaLM.load(tmp_path)
    tensors[LM_HEAD] = tensors["backbone.embeddings.weight"].copy()  # HF writes an equal copy
    ckpt.atomic_write_tensors(tmp_path / "model.safetensors", tensors)
    MambaLM.load(tmp_path)


@pytest.mark.parametrize("kind", ["bytes", "bpe"])
def test_saved_tokenizer_is_an_hf_tokenizer_with_our_ids(tmp_path: Path, kind: str) -> None:
    from tokenizers import Tokenizer

    tok = (ByteTokenizer() if kind == "bytes"
           else BPETokenizer.train(["the cat sat on the mat " * 50], vocab_size=300))
    tok.save(tmp_path)
    hf = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert hf.get_vocab_size() == tok.vocab_size
    assert hf.token_to_id("<|endoftext|>") == tok.eos_id
    for text in TEXTS:
        assert hf.encode(text, add_special_tokens=False).ids == tok.encode(text).tolist(), text
    conf = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert conf["eos_token"] == conf["pad_token"] == "<|endoftext|>"
    assert conf["added_tokens_decoder"][str(tok.eos_id)]["content"] == "<|endoftext|>"
    assert json.loads((tmp_path / "special_tokens_map.json").read_text())["eos_token"] == "<|endoftext|>"
    assert load_tokenizer(tmp_path).kind == kind
    # a literal marker in text: our byte tokenizer reads its 13 bytes, BPE the end-of-text token;
    # transformers reads it as tokenizer_config.json says (it gave the byte model the token)
    hf.encode_special_tokens = conf.get("split_special_tokens", False)
    assert hf.encode_special_tokens == (kind == "bytes")
    for text in ("ends with <|endoftext|> inside", "<|endoftext|>"):
        assert hf.encode(text, add_special_tokens=False).ids == tok.encode(text).tolist(), text


def test_older_byte_tokenizer_file_still_loads(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text(json.dumps(
        {"mamba_studio_tokenizer": "bytes", "eos_token": "<|endoftext|>", "eos_id": 256}))
    assert isinstance(load_tokenizer(tmp_path), ByteTokenizer)


def test_an_end_of_text_id_outside_the_vocabulary_is_refused(tmp_path):
    """eos_token_id 99999 in a 264-token model's config.json was taken without a word."""
    import pytest

    from engine.errors import MambaStudioError
    from engine.limits import check_hf_config

    cfg = {"vocab_size": 264, "hidden_size": 16, "num_hidden_layers": 1, "eos_token_id": 99999}
    with pytest.raises(MambaStudioError, match=r"eos_token_id = 99,999 is out of range \[0, 263\]"):
        check_hf_config(cfg, str(tmp_path / "config.json"))
    check_hf_config({**cfg, "eos_token_id": 263}, "config.json")


@pytest.mark.parametrize("key, value, words", [
    ("hidden_act", "gelu", "hidden_act='gelu' is not supported"),
    ("use_bias", True, "use_bias=true"),
    ("use_conv_bias", False, "use_conv_bias=false"),
])
def test_a_config_the_model_cannot_follow_is_refused(key, value, words):
    """hidden_act gelu loaded and ran SiLU (HF applies it), as use_bias would have."""
    with pytest.raises(ValueError, match=re.escape(words)):
        MambaConfig.from_hf_dict({"vocab_size": 264, "hidden_size": 16, key: value})
    MambaConfig.from_hf_dict({"vocab_size": 264, "hidden_size": 16, "hidden_act": "silu"})


def test_a_bpe_stream_says_bytes_that_are_no_character():
    """A BPE model sampling lone UTF-8 continuation bytes printed nothing at all (generate exited
    0 with only the prompt); the byte tokenizer's stream prints U+FFFD for them. Characters split
    over several ids still come out whole."""
    tok = BPETokenizer.train(["日本語のテキスト 🙂 hello world " * 50], vocab_size=300)
    lone = tok._tok.token_to_id("¬")  # the byte 0xAC alone, in the byte-level alphabet
    s = tok.stream()
    out = "".join(s.step(lone) for _ in range(8)) + s.flush()  # said at the end, whole
    assert out == tok.decode([lone] * 8) and out.strip("\ufffd") == "", repr(out)
    text = "日本語 🙂 hello"
    s = tok.stream()
    assert "".join(s.step(int(i)) for i in tok.encode(text)) + s.flush() == text
