"""Bad inputs are refused with one line, without hanging or reading unbounded amounts."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from engine import BPETokenizer, ByteTokenizer, MambaLM, SamplingConfig, TrainConfig
from engine import data as data_mod
from engine.checkpoint import read_config
from engine.cli import main
from engine.data import encode_corpus, encode_files, id_dtype, load_corpus, make_rows
from engine.errors import CheckpointError, CorpusError, MambaStudioError, TokenizerError
from engine.legacy import read_trainer_state
from engine.limits import (
    ConfigError,
    MemorySpec,
    check_fits,
    check_hf_config,
    check_train,
    estimate,
)
from engine.run import load_model
from engine.safeio import read_json
from engine.tokenizer import check_fits as tokenizer_fits
from engine.tokenizer import load_tokenizer
from tests.helpers import tiny_config, write_legacy_checkpoint

MiB = 1 << 20


def _peak_bytes(fn) -> int:  # type: ignore[no-untyped-def]
    """Peak traced allocation (Python objects and NumPy buffers) while ``fn`` runs."""
    tracemalloc.start()
    try:
        with contextlib.suppress(MambaStudioError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ special files
def test_a_name_from_a_folders_own_files_never_leads_out_through_a_link(tmp_path):
    """``safeio.inside`` promises "no symlinks leading out"; only ``../`` names were tried."""
    from engine.safeio import UnsafeFileError, inside

    (tmp_path / "secret").write_text("outside")
    folder = tmp_path / "run"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "model.safetensors").symlink_to(tmp_path / "secret")
    (folder / "out").symlink_to(tmp_path)
    for name in ("sub/model.safetensors", "out/secret"):
        with pytest.raises(UnsafeFileError, match="outside the folder"):
            inside(folder, name)
    (folder / "sub" / "real").write_text("in")
    (folder / "inner").symlink_to(folder / "sub" / "real")  # a link that stays inside is fine
    assert inside(folder, "inner") == (folder / "sub" / "real").resolve()


def test_fifo_device_and_socket_are_refused_without_opening(tmp_path):
    import socket

    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)  # opening it for reading would block forever
    sock = socket.socket(socket.AF_UNIX)  # (the name promised a socket; none was tried)
    sock.bind(str(tmp_path / "sock.txt"))
    try:
        for path, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "device"),
                           (tmp_path / "sock.txt", "socket")):
            with pytest.raises(CorpusError, match=kind):
                load_corpus([path])
            with pytest.raises(MambaStudioError, match=kind):
                read_json(path)
    finally:
        sock.close()
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "good.txt").write_text("hello world\n")
    os.mkfifo(folder / "pipe.txt")
    corpus = load_corpus([folder])
    assert [f.path.name for f in corpus.files] == ["good.txt"]
    assert "not a regular file" in {p.name: r for p, r in corpus.rejected}["pipe.txt"]


def test_sparse_1gb_file_is_rejected_after_reading_one_block(tmp_path):
    sparse = tmp_path / "sparse.txt"
    with open(sparse, "wb") as f:
        f.truncate(1 << 30)
    peak = _peak_bytes(lambda: load_corpus([sparse]))
    with pytest.raises(CorpusError, match="binary"):
        load_corpus([sparse])
    assert peak < 3 * data_mod.CHUNK  # not the 1 GB the old loader read


def test_huge_file_is_refused_before_reading(tmp_path, monkeypatch):
    big = tmp_path / "big.txt"
    big.write_text("x" * 5000)
    monkeypatch.setattr(data_mod, "FILE_LIMIT", 4096)
    with pytest.raises(CorpusError, match="larger than"):
        load_corpus([big], strict=True)


def test_config_json_bad_shapes_and_types_are_one_line_errors(tmp_path):
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    lm.save(tmp_path)
    good = json.loads((tmp_path / "config.json").read_text())
    cases = {
        "list": [1, 2, 3],
        "layers": {**good, "num_hidden_layers": 10**8},
        "pad0": {**good, "pad_vocab_size_multiple": 0},
        "eps": {**good, "layer_norm_epsilon": -1},
        "str": {**good, "hidden_size": "64"},
        "bool": {**good, "state_size": True},
    }
    for name, value in cases.items():
        (tmp_path / "config.json").write_text(json.dumps(value))
        with pytest.raises(CheckpointError) as info:
            read_config(tmp_path)
        assert "\n" not in str(info.value), name
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match="nested"):
        read_config(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="device"):
        read_config(tmp_path)


def test_absurd_layer_count_is_refused_before_any_shape_is_built():
    d = {"vocab_size": 264, "hidden_size": 64, "num_hidden_layers": 10**8}
    peak = _peak_bytes(lambda: check_hf_config(d))
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        check_hf_config(d)
    assert peak < MiB


# ------------------------------------------------------------------ tokenizers
def test_tokenizer_file_rules(tmp_path):
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    lm.save(tmp_path)
    tok = tmp_path / "tokenizer.json"
    tok.write_text("[]")
    with pytest.raises(TokenizerError, match="JSON list"):
        load_tokenizer(tmp_path)
    tok.unlink()
    os.mkfifo(tok)
    with pytest.raises(TokenizerError, match="FIFO"):
        load_tokenizer(tmp_path)
    tok.unlink()
    assert isinstance(load_tokenizer(tmp_path), ByteTokenizer)  # config records "bytes"
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["mamba_studio"]["tokenizer"] = "bpe"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TokenizerError, match="records a 'bpe' tokenizer"):
        MambaLM.load(tmp_path)


def test_tokenizer_and_embedding_table_must_match(tmp_path):
    bpe = BPETokenizer.train(["the cat sat on the mat. " * 40], vocab_size=300)
    tokenizer_fits(bpe, bpe.vocab_size + 5, "x")  # padded vocabulary: fine
    with pytest.raises(TokenizerError, match="only"):
        tokenizer_fits(bpe, bpe.vocab_size - 1, "x")  # ids would index past the table
    with pytest.raises(TokenizerError, match="padding"):
        tokenizer_fits(bpe, bpe.vocab_size + 500, "x")  # not this model's tokenizer
    lm = MambaLM.create(tiny_config(vocab_size=1024), bpe)
    lm.save(tmp_path)
    bpe.save(tmp_path)
    with pytest.raises(TokenizerError, match="padding"):
        MambaLM.load(tmp_path)


# ------------------------------------------------------------------ streaming corpus
def test_streamed_encoding_equals_whole_text_encoding(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "γάμμα", "δ", "🙂", "x\ty", "", "  indented", "end."]
    text = "\ufeff" + "\n".join(" ".join(rng.choice(words, size=rng.integers(0, 12)))
                                for _ in range(400)) + "\n\n\nlast line without newline"
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.md").write_text("second document ✓\n" * 30, encoding="utf-8")
    monkeypatch.setattr(data_mod, "CHUNK", 97)  # many cuts, some inside multi-byte characters
    corpus = load_corpus([tmp_path])
    whole = [text.lstrip("\ufeff"), "second document ✓\n" * 30]
    assert list(corpus.texts) == whole
    bpe = BPETokenizer.train(whole, vocab_size=300)
    for tok in (ByteTokenizer(), bpe):
        ids = encode_files(corpus, tok)
        assert ids.dtype == id_dtype(tok.vocab_size) == np.uint16
        expect = np.concatenate([tok.encode(whole[0]), [tok.eos_id], tok.encode(whole[1])])
        np.testing.assert_array_equal(ids, expect)
        np.testing.assert_array_equal(encode_corpus(corpus.texts, tok), expect)
    assert BPETokenizer.train(corpus.texts, vocab_size=300).encode(text).tolist() == \
        bpe.encode(text).tolist()  # BPE trained on the streamed chunks is the same tokenizer
    assert id_dtype(256) == np.uint8 and id_dtype(65_537) == np.uint32


def _whitespace_text(n_lines: int = 3000) -> str:
    """Lines of words separated by runs of newlines, " \n", "\t\n" and "\r\n": the places a
    pre-tokeniser splits inside a whitespace run."""
    rng = np.random.default_rng(1)
    ends = ["\n", "\n\n", "\n\n\n", " \n", "\t\n", "\r\n", "\n ", "\n  "]
    words = ["".join(rng.choice(list("abcdefghijkl"), size=rng.integers(1, 7))) for _ in range(300)]
    return "".join(" ".join(rng.choice(words, size=rng.integers(1, 6)))
                   + str(rng.choice(ends)) for _ in range(n_lines))


@pytest.mark.parametrize("chunk", [61, 97, 256, 4096])
def test_text_pieces_cut_only_where_the_pre_tokeniser_cuts(tmp_path, chunk):
    """Pre-tokenised words of the pieces equal those of the whole text: a cut after "\n\n"
    (before a word) made "\n\n\n" one word where the whole text has "\n\n" and "\n"."""
    from tokenizers import pre_tokenizers

    text = _whitespace_text()
    (tmp_path / "a.txt").write_bytes(text.encode())
    pieces = list(data_mod.iter_text(tmp_path / "a.txt", chunk))
    assert "".join(pieces) == text and len(pieces) > 3
    pt = pre_tokenizers.ByteLevel(add_prefix_space=False)
    words = [w for p in pieces for w, _ in pt.pre_tokenize_str(p)]
    assert words == [w for w, _ in pt.pre_tokenize_str(text)]


def test_bpe_trains_on_bounded_pieces_into_the_tokenizer_of_the_whole_text(tmp_path, monkeypatch):
    """HF's trainer took ~90 bytes of memory per byte of each text handed to it (4 MiB chunks:
    1.56 GB for 17 MB of code, 0.22 GB in 64 KiB pieces): training reads bounded pieces and
    still learns the merges of whole-text training."""
    import engine.tokenizer as tok_mod

    text = _whitespace_text(20_000)
    (tmp_path / "a.txt").write_bytes(text.encode())
    monkeypatch.setattr(tok_mod, "BPE_PIECE_BYTES", 1024)
    corpus = load_corpus([tmp_path])
    pieces = list(tok_mod._chunks(corpus.texts))
    assert len(pieces) > 50 and max(len(p) for p in pieces) < 4 * 1024 + 64
    merges = [json.loads(t._tok.to_str())["model"]["merges"]
              for t in (BPETokenizer.train(corpus.texts, vocab_size=300),
                        BPETokenizer.train([text], vocab_size=300))]
    assert merges[0] == merges[1] and len(merges[0]) > 20


def test_bpe_learns_from_a_share_spread_over_a_large_corpus(tmp_path, monkeypatch):
    """Above BPE_TRAIN_MAX_BYTES the trainer reads every k-th piece (HF's trainer splits words
    at ~1.2 MB/s a core: 83 s of a 200 MB corpus's preparation), spread over all files."""
    import engine.tokenizer as tok_mod

    for i in range(6):  # six different files
        (tmp_path / f"{i}.txt").write_bytes(_whitespace_text(2000).replace("b", "mnopqr"[i]).encode())
    monkeypatch.setattr(tok_mod, "BPE_PIECE_BYTES", 1024)
    corpus = load_corpus([tmp_path])
    every_piece = list(corpus.chunks(1024))
    assert len(set(every_piece)) > 0.95 * len(every_piece)
    monkeypatch.setattr(tok_mod, "BPE_TRAIN_MAX_BYTES", corpus.n_bytes // 5)
    assert tok_mod.bpe_sample_every(corpus.n_bytes) == 6
    share = list(tok_mod._chunks(corpus.texts))
    assert share == list(tok_mod._chunks(corpus.texts))  # seeded: the same every time
    assert set(share) <= set(every_piece) and 0.08 < len(share) / len(every_piece) < 0.26
    spread = [every_piece.index(p) for p in share]
    assert min(spread) < len(every_piece) / 4 and max(spread) > 3 * len(every_piece) / 4
    merges = [json.loads(t._tok.to_str())["model"]["merges"]
              for t in (BPETokenizer.train(corpus.texts, vocab_size=300),
                        BPETokenizer.train(share, vocab_size=300))]
    assert merges[0] == merges[1]
    monkeypatch.setattr(tok_mod, "BPE_TRAIN_MAX_BYTES", corpus.n_bytes)
    assert list(tok_mod._chunks(corpus.texts)) == every_piece  # up to the cap: all of it


def test_byte_corpus_costs_at_most_two_bytes_per_byte(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("hello world, a line of text\n" * 40_000)  # ~1.1 MB
    n = f.stat().st_size
    seen: list[tuple[int, int]] = []
    corpus = load_corpus([f])
    tracemalloc.start()
    ids = encode_files(corpus, ByteTokenizer(), progress=lambda done, total: seen.append((done, total)))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(ids) == n and ids.nbytes == 2 * n
    assert peak < 2 * n + 2 * data_mod.CHUNK + MiB
    assert seen[-1] == (n, n)


def test_row_views_match_materialised_rows():
    ids = np.arange(50, dtype=np.uint16) * 7 % 257
    inputs, targets = make_rows(ids, 8)
    full_in, full_tg = np.asarray(inputs), np.asarray(targets)
    assert full_in.shape == (7, 8) and full_in.dtype == np.int64
    for r in range(7):
        s = r * 8
        x, y = ids[s : s + 8], ids[s + 1 : s + 9]
        np.testing.assert_array_equal(full_in[r, : len(y)], x[: len(y)])  # inputs with a target
        np.testing.assert_array_equal(full_tg[r, : len(y)], y)
        assert (full_tg[r, len(y) :] == -1).all()
    idx = np.array([3, 0, 6])
    np.testing.assert_array_equal(inputs[idx], full_in[idx])
    np.testing.assert_array_equal(targets[2:5], full_tg[2:5])
    np.testing.assert_array_equal(targets[-1], full_tg[-1])


# ------------------------------------------------------------------ incremental decoding
@pytest.mark.parametrize("kind", ["bytes", "bpe"])
def test_incremental_generation_text_equals_full_decode(kind):
    texts = ["héllo wörld ✓ 🙂 naïve café " * 30]
    tok = ByteTokenizer() if kind == "bytes" else BPETokenizer.train(texts, vocab_size=320)
    lm = MambaLM.create(tiny_config(vocab_size=tok.vocab_size), tok, seed=3)
    s = SamplingConfig(temperature=1.5, top_k=0, top_p=1.0, max_new_tokens=300, seed=1)
    ids = list(lm.generate_ids(np.concatenate([[tok.eos_id], tok.encode("hé")]), s))
    text = "".join(lm.generate("hé", s))  # reads the prompt after an end-of-text id
    # an end of text generation goes past is a line break between the documents around it
    ends = [i for i, t in enumerate(ids) if t == tok.eos_id]
    starts = [0, *(i + 1 for i in ends)]
    head = "".join(tok.decode(ids[a:b]) + "\n" for a, b in zip(starts, ends, strict=False))
    last = ids[starts[-1]:]
    full = tok.decode(last)
    # what is shown of the last document is the decode of the longest run of ids that ends on a
    # whole character: an incomplete last character is held back (alone it decodes to U+FFFD)
    whole = max((tok.decode(last[:k]) for k in range(len(last) + 1)
                 if full.startswith(tok.decode(last[:k]))), key=len)
    assert len(full) - len(whole) <= 1
    assert text == head + whole


# ------------------------------------------------------------------ settings and memory
def test_train_config_ranges():
    check_train(TrainConfig())
    for bad in ({"epochs": 0}, {"batch_size": -1}, {"seq_len": 1}, {"lr": float("nan")},
                {"lr": 0.0}, {"grad_accum": 0}, {"max_steps": 0}, {"beta2": 1.0}):
        with pytest.raises(ConfigError):
            check_train(TrainConfig(**bad))


def test_memory_estimate_parts_and_refusal():
    cfg = tiny_config(vocab_size=264, d_model=64, n_layer=8)
    small = estimate(MemorySpec(cfg, batch_size=2, seq_len=64, threads=2))
    big = estimate(MemorySpec(cfg, batch_size=2, seq_len=64 * 1024))
    ckpt = estimate(MemorySpec(cfg, batch_size=2, seq_len=64 * 1024, activation_checkpointing=True))
    one_row = estimate(MemorySpec(cfg, batch_size=1, seq_len=64, threads=2))
    assert small.params == big.params and one_row.optimizer == 2 * one_row.grads
    assert small.grads == 2 * one_row.grads  # a micro-batch's second half gathers apart
    for threads in (1, 4, 8):  # no halves there (threads.splits): one gradient buffer
        assert estimate(MemorySpec(cfg, batch_size=2, seq_len=64, threads=threads)).grads == \
            one_row.grads
    assert estimate(MemorySpec(cfg, batch_size=2, seq_len=64, threads=3)).grads == small.grads
    assert big.activations > 500 * small.activations
    assert ckpt.activations < big.activations / 2
    assert "GB" in big.human() and "activations" in big.human()
    with pytest.raises(ConfigError, match="this run needs about .* lower the batch size"):
        check_fits(MemorySpec(cfg, batch_size=1, seq_len=1_000_000), available=8 << 30)
    with pytest.raises(ConfigError, match=r"this evaluation needs about .*; give a shorter "
                                          r"--seq-len$"):  # (eval has no batch size to lower)
        check_fits(MemorySpec(cfg, batch_size=8, seq_len=10**9, training=False), available=8 << 30)
    check_fits(MemorySpec(cfg, batch_size=1, seq_len=64), available=8 << 30)


def test_the_memory_estimate_counts_the_divergence_guards_copy():
    """Before each step the divergence guard copies the trained tensors and their two moments
    (to undo a diverged step): uncounted, a 51 M-parameter run estimated at 1.1 GB peaked at
    1.8 GB (2.6 GB before its saves streamed and its copy reused its arrays)."""
    from engine.config import MambaConfig

    cfg = MambaConfig(vocab_size=256, d_model=1024, n_layer=8)
    full = estimate(MemorySpec(cfg, batch_size=1, seq_len=16))
    p = full.params // 4
    assert full.rollback == 3 * p * 4 and "rollback copy" in full.human()
    assert full.total == sum(full.parts().values())
    lora = estimate(MemorySpec(cfg, batch_size=1, seq_len=16, trainable=1000))
    assert lora.rollback == 3 * 1000 * 4  # only what is trained is copied


def test_crafted_trainer_state_is_refused(tmp_path):
    from engine import Trainer

    ids = np.arange(300) % 50
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    write_legacy_checkpoint(Trainer(lm, ids, ids[:0], TrainConfig(seq_len=16, batch_size=2, max_steps=1)),
                            tmp_path)
    state_path = tmp_path / "trainer_state.json"
    good = json.loads(state_path.read_text())
    read_trainer_state(tmp_path)
    for bad, why in (({**good, "files": {}}, "lacks"),
                     ({**good, "files": {**good["files"], "../../../../dev/zero": "0" * 64}}, "outside"),
                     ({**good, "train_config": {**good["train_config"], "bogus": 1}}, "unknown"),
                     ({k: v for k, v in good.items() if k != "files"}, "no 'files'"),
                     ([1], "JSON object")):
        state_path.write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=why):
            load_model(tmp_path)


# ------------------------------------------------------------------ the CLI
@pytest.mark.parametrize("argv", [
    ["train", "--epochs", "0"], ["train", "--batch", "0"], ["train", "--seq-len", "1"],
    ["train", "--accum", "-1"], ["train", "--lora", "foo"], ["train", "--lora-rank", "0"],
    ["train", "--lora-dropout", "1.5"], ["train", "--bpe-vocab", "-5"], ["train", "--lr", "nan"],
    ["generate", "m", "--temperature", "nan"], ["generate", "m", "--prompt", "ab\udcffcd"],
    ["bench", "--configs", "bogus"], ["bench", "--steps", "0"], ["bench", "--threads", "0"],
    ["bench", "--modes", "foo"], ["eval", "m", "--seq-len", "x"],
])
def test_cli_bad_arguments_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("value", ["-1e-3", "-inf", "-Infinity", "-nan", "-.5", "-2"])
def test_cli_negative_numbers_are_checked_as_numbers(value, capsys):
    """`--lr -1e-3` said "expected one argument": argparse read the value as an option."""
    with pytest.raises(SystemExit) as info:
        main(["train", "--lr", value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"error: argument --lr: {value} is out of range (0, 10]"
                   " (see python -m engine train --help)\n")


def test_cli_bad_files_are_one_line(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo.txt")
    lm = MambaLM.create(tiny_config(vocab_size=264), ByteTokenizer())
    lm.params["backbone.norm_f.weight"][0] = np.nan
    lm.save(tmp_path / "nan")
    for argv in (["train", str(tmp_path / "fifo.txt")], ["eval", str(tmp_path / "nan")],
                 ["generate", str(tmp_path / "nan")], ["generate", str(tmp_path)],
                 ["train", "--resume", str(tmp_path / "nan")],
                 ["train", "--preset", "tiny", "--seq-len", "1000000", "--batch", "64"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert lines[-1].startswith("error: ") and "Traceback" not in err, (argv, err)
        assert sum(line.startswith("error: ") for line in lines) == 1, (argv, err)


def test_bpe_training_gets_no_word_longer_than_long_word(tmp_path, monkeypatch):
    """Text that is one long distinct word after another (random letters, DNA): HF's trainer
    rescans a whole word for every merge in it, and 4.5 MB of random letters, handed to it in
    64 KiB words, took 61 s to train (9 s in words of 4,096; 68.9 -> 18.2 s for the whole start).
    The texts it gets are cut inside longer runs only, and add up to the text."""
    import engine.tokenizer as tok_mod

    monkeypatch.setattr(tok_mod, "LONG_WORD", 100)
    monkeypatch.setattr(tok_mod, "_LONG_RUN", re.compile(r"\S{101,}"))
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("acgt"), n)) for n in (5, 100, 101, 250, 1000, 3)]
    text = " the ".join(words) + "\n" + "x" * 400
    (tmp_path / "a.txt").write_text(text)
    corpus = load_corpus([tmp_path])
    for texts in (corpus.texts, [text]):
        parts = list(tok_mod._chunks(texts))
        assert "".join(parts) == text
        assert max(len(w) for p in parts for w in p.split()) == 100
    short = "a word " * 100  # no long run: handed on whole
    assert list(tok_mod._chunks([short])) == [short]


def test_long_run_pattern_is_anchored_and_finds_the_same_runs():
    """Unanchored, ``\\S{4097,}`` was tried again from every character of each shorter run
    (1 MB of 4,000-letter runs: 3.4 s a scan); anchored at a run's start it finds the same
    runs."""
    import engine.tokenizer as tok_mod

    rng = np.random.default_rng(3)
    for _ in range(20):
        runs = ["x" * int(n) for n in rng.integers(1, 9000, size=12)]
        text = "".join(r + str(rng.choice([" ", "\n", "\t\t", "\u3000"])) for r in runs)
        free = [m.span() for m in re.finditer(r"\S{4097,}", text)]
        assert [m.span() for m in tok_mod._LONG_RUN.finditer(text)] == free
        assert tok_mod._LONG_RUN.pattern.startswith("(?<!\\S)")
        assert tok_mod._ENCODE_RUN.pattern.startswith("(?<!\\S)")


def test_bpe_training_leaves_out_distinct_long_letter_runs_past_a_budget(monkeypatch):
    """Each distinct run of letters is a word of its own to HF's trainer, ~90 bytes of its memory
    a byte: 10 MB of random letters peaked at 1.36 GB, random Chinese sentences at ~90 bytes a
    byte too. Past ``DISTINCT_LONG_BYTES`` of them, new long runs are left out (a line break
    in their place); runs seen before, short words and other text are kept."""
    import engine.tokenizer as tok_mod

    monkeypatch.setattr(tok_mod, "DISTINCT_LONG_BYTES", 100)
    rng = np.random.default_rng(5)
    runs = ["".join(rng.choice(list("acgt"), 20)) for _ in range(10)]  # 20 letters each
    cjk = "".join(chr(0x4E00 + i) for i in range(15))  # 15 letters of 3 bytes: 45 bytes
    texts = [f"{runs[0]} {runs[1]} word 42 {runs[2]}", f"{runs[0]}. {cjk} {runs[3]}_{runs[4]}",
             f"{runs[5]} {runs[1]} short words stay"]
    out = list(tok_mod._chunks(texts))
    assert out[0] == texts[0]  # 60 bytes of the 100
    assert out[1] == f"{runs[0]}. \n {texts[1][-41:]}"  # seen: kept; 45 > 40 left: out; 20, 20 fit
    assert out[2] == f"\n {runs[1]} short words stay"  # nothing left: a new one goes, a seen stays
    monkeypatch.setattr(tok_mod, "DISTINCT_LONG_BYTES", 10_000)
    assert list(tok_mod._chunks(texts)) == texts  # within the budget: handed on whole


def test_the_budget_of_long_runs_is_spread_over_the_whole_corpus(tmp_path, monkeypatch):
    """Spent first-come, the budget went to the first files: a Chinese corpus's later files
    reached the trainer with no run of letters at all, and their text got no merges (2.87
    tokens a character against 0.53). Its share grows with the part of the corpus read."""
    import engine.tokenizer as tok_mod

    monkeypatch.setattr(tok_mod, "DISTINCT_LONG_BYTES", 600)
    rng = np.random.default_rng(7)
    for name, letters in (("a.txt", "abcdefgh"), ("b.txt", "stuvwxyz")):
        runs = ["".join(rng.choice(list(letters), 20)) for _ in range(50)]
        (tmp_path / name).write_text(" ".join(runs))  # 50 distinct 20-letter runs each
    corpus = load_corpus([tmp_path])
    out = list(tok_mod._chunks(corpus.texts))
    kept = [w for p in out for w in p.split() if len(w) >= 12]
    from_a = sum(set(w) <= set("abcdefgh") for w in kept)
    from_b = sum(set(w) <= set("stuvwxyz") for w in kept)
    assert from_a > 5 and from_b > 5, (from_a, from_b)  # both files, not the first alone
    assert 20 * (from_a + from_b) <= 600  # within the budget


def test_bpe_encodes_runs_longer_than_encode_word_in_parts(monkeypatch):
    """tiktoken encoded a 10 MB line of letters as one word in 26.6 s with an 840 MB peak. The
    encoders get runs without whitespace of at most ``ENCODE_WORD`` characters (cut neither
    inside an end-of-text marker nor anywhere in a text without such a run), and the ids decode
    to the text."""
    import engine.tokenizer as tok_mod

    tok = BPETokenizer.train(["abc abcabc abcabcabc " * 100], vocab_size=270)
    eos = tok_mod.EOS
    long_run = "abc" * 65 + eos + "abc" * 40  # 195 letters, the marker at 195..208 (a cut at 200), 120
    text = "hello abc " + long_run + " tail abc\n" + "q" * 150
    whole = tok.encode(text)
    monkeypatch.setattr(tok_mod, "ENCODE_WORD", 100)
    monkeypatch.setattr(tok_mod, "_ENCODE_RUN", re.compile(r"(?<!\S)\S{101,}"))
    parts = tok_mod._encode_parts(text)
    assert "".join(parts) == text and len(parts) > 1
    assert all(len(w) <= 100 for p in parts for w in p.split())
    assert sum(eos in p for p in parts) == 1  # the marker whole, in one part
    in_parts = [i for p in parts for i in tok.encode(p).tolist()]
    assert in_parts != whole.tolist()  # the cuts change the ids around them...
    ids = tok.encode(text)
    assert ids.tolist() == in_parts  # ... and the encoder cuts there
    assert tok.decode(ids) == tok.decode(whole) == text.replace(eos, "")
    assert [a.tolist() for a in tok.encode_batch([text, "abc"])] == [in_parts,
                                                                     tok.encode("abc").tolist()]
    assert tok.eos_id in in_parts  # the marker is still matched as the special token
    plain = "a b " * 300  # every window has a space: handed on whole, no scan
    assert tok_mod._encode_parts(plain) == [plain]


def test_bpe_learns_from_a_corpus_that_is_one_uncuttable_line(tmp_path, monkeypatch):
    """A 50 MB line without spaces (base64, minified JSON) was one piece; sampled above the cap,
    its one draw dropped it and the "BPE" run trained with no merge at the BPE learning rate.
    Such a piece is drawn from in parts, and some part is always kept."""
    import base64

    import engine.tokenizer as tok_mod

    monkeypatch.setattr(tok_mod, "BPE_PIECE_BYTES", 1024)
    text = base64.b64encode(np.random.default_rng(0).bytes(60_000)).decode()  # 80 KB, no space
    (tmp_path / "a.txt").write_text(text)
    corpus = load_corpus([tmp_path])
    assert len(list(corpus.chunks(1024))) == 1  # the reader finds no place to cut it
    monkeypatch.setattr(tok_mod, "BPE_TRAIN_MAX_BYTES", corpus.n_bytes // 10)
    parts = list(tok_mod._chunks(corpus.texts))
    assert parts and all(len(p) <= 1024 for p in parts) and all(p in text for p in parts)
    assert 0.03 < len(parts) / (len(text) / 1024) < 0.25  # about one part in 10
    tok = BPETokenizer.train(corpus.texts, vocab_size=300)
    assert len(json.loads(tok._tok.to_str())["model"]["merges"]) > 10
    monkeypatch.setattr(tok_mod, "BPE_TRAIN_MAX_BYTES", 1)  # sampled so thin none is drawn
    assert len(list(tok_mod._chunks(corpus.texts))) == 1  # one part is kept anyway


def test_a_file_that_grows_past_the_limit_while_read_is_refused(tmp_path, monkeypatch):
    """Checked small at its stat, then grown (a log being written): the read stays bounded
    and refuses it rather than returning more than the limit."""
    import engine.safeio as safeio

    f = tmp_path / "grows.json"
    f.write_bytes(b"x" * 5000)
    monkeypatch.setattr(safeio, "check_regular", lambda *a, **k: 100)  # its size at the stat
    asked: list[int] = []  # the read stays bounded: never more than limit + 1 bytes asked for
    real = safeio.open_regular

    def counting(*a, **k):  # noqa: ANN002, ANN003
        f = real(*a, **k)
        read = f.read
        f.read = lambda n=-1: (asked.append(n), read(n))[1]  # type: ignore[method-assign]
        return f

    monkeypatch.setattr(safeio, "open_regular", counting)
    with pytest.raises(safeio.UnsafeFileError, match="larger than the"):
        safeio.read_bytes(f, 1000)
    assert asked and all(n >= 0 for n in asked) and sum(asked) <= 1001, asked
    assert safeio.read_bytes(f, 10_000) == b"x" * 5000  # grown, still within the limit: read on


def test_the_memory_room_is_the_least_of_ram_ulimit_and_cgroup(tmp_path, monkeypatch):
    """Only MemAvailable was read: runs estimated at 5.8 and 7.7 GB started under a 6 GB
    ``ulimit -v`` and failed allocating; in a container the kernel kills such a run without a
    word. The check takes the least room, and the refusal names which limit it is."""
    import resource

    from engine import limits

    cgroup_left = limits._cgroup_left
    monkeypatch.delenv("MAMBA_STUDIO_MEMORY", raising=False)
    monkeypatch.setattr(limits, "_ram_available", lambda: 20 << 30)
    monkeypatch.setattr(limits, "_cgroup_left", lambda: None)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (6 << 30, resource.RLIM_INFINITY))
    monkeypatch.setattr(limits, "_proc_kb", lambda path, key: 1 << 30)  # VmSize now
    assert limits.memory_room() == (5 << 30, "what ulimit -v leaves")
    cfg = tiny_config(vocab_size=264, d_model=64, n_layer=8)
    with pytest.raises(ConfigError, match=r"only 5.0 GB of memory is available \(what ulimit -v "
                                          r"leaves\); lower the batch"):
        check_fits(MemorySpec(cfg, batch_size=4, seq_len=1_000_000))
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (resource.RLIM_INFINITY,) * 2)
    assert limits.memory_room() == (20 << 30, "")
    # cgroup v2 (a container sees its own group as /) and v1
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("4294967296\n")
    (v2 / "memory.current").write_text("1073741824\n")
    (tmp_path / "cg2").write_text("0::/\n")
    assert cgroup_left(str(tmp_path / "cg2"), str(v2)) == 3 << 30
    (v2 / "memory.max").write_text("max\n")
    assert cgroup_left(str(tmp_path / "cg2"), str(v2)) is None
    v1 = tmp_path / "v1" / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(2 << 30))
    (v1 / "memory.usage_in_bytes").write_text(str(1 << 30))
    (tmp_path / "cg1").write_text("5:cpu:/\n4:memory:/docker/abc\n")
    assert cgroup_left(str(tmp_path / "cg1"), str(tmp_path / "v1")) == 1 << 30
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712")  # v1's "no limit"
    assert cgroup_left(str(tmp_path / "cg1"), str(tmp_path / "v1")) is None
    parent = tmp_path / "v2p" / "kubepods"  # a limit on a parent group, and page cache
    (parent / "pod1").mkdir(parents=True)
    (parent / "memory.max").write_text(str(8 << 30))
    (parent / "memory.current").write_text(str(7 << 30))
    (parent / "memory.stat").write_text(f"anon 123\ninactive_file {4 << 30}\n")
    (parent / "pod1" / "memory.max").write_text("max\n")
    (parent / "pod1" / "memory.current").write_text(str(1 << 30))
    (tmp_path / "cg3").write_text("0::/kubepods/pod1\n")
    assert cgroup_left(str(tmp_path / "cg3"), str(tmp_path / "v2p")) == 5 << 30  # 8 - (7 - 4)
    monkeypatch.setattr(limits, "_cgroup_left", lambda: 2 << 30)
    assert limits.memory_room() == (2 << 30, "what the cgroup (container) memory limit leaves")


def _files(folder: Path, **texts: str) -> Path:
    """``folder`` made, holding a file per keyword (``memory_max="..."`` is memory.max)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name.replace("_", ".", 1)).write_text(text)
    return folder


def test_the_cgroup_room_is_the_least_over_the_group_and_its_parents(tmp_path):
    """A pod limited to 2 GB inside a parent group limited to 8 GB: the room is what the pod's
    own limit leaves (1 GB), not the parent's 7 GB. Every case before gave only one group a
    limit, so taking the largest room instead of the least passed."""
    from engine import limits

    root = tmp_path / "v2"
    _files(root / "kubepods", memory_max=str(8 << 30), memory_current=str(1 << 30))
    _files(root / "kubepods" / "pod1", memory_max=str(2 << 30), memory_current=str(1 << 30))
    (tmp_path / "cg").write_text("0::/kubepods/pod1\n")
    assert limits._cgroup_left(str(tmp_path / "cg"), str(root)) == 1 << 30
    # the other way round too: the parent's limit is the tighter one
    _files(root / "kubepods", memory_max=str(3 << 30), memory_current=str(5 << 29))
    _files(root / "kubepods" / "pod1", memory_max=str(6 << 30), memory_current=str(1 << 30))
    assert limits._cgroup_left(str(tmp_path / "cg"), str(root)) == 1 << 29


def test_a_v1_cgroup_does_not_count_droppable_page_cache_as_used(tmp_path):
    """cgroup v1 names the page cache the kernel can drop ``total_inactive_file`` (the group and
    its children; ``inactive_file`` is the group alone). No test read a v1 memory.stat, so
    reading the v2 key there (1 byte here, not 2 GB) passed: a v1 container's room was
    understated by its whole page cache."""
    from engine import limits

    _files(tmp_path / "v1" / "memory" / "job", memory_limit_in_bytes=str(4 << 30),
           memory_usage_in_bytes=str(3 << 30),
           memory_stat=f"cache 5\ntotal_inactive_file {2 << 30}\ninactive_file 1\n")
    (tmp_path / "cg").write_text("7:memory:/job\n")
    assert limits._cgroup_left(str(tmp_path / "cg"), str(tmp_path / "v1")) == 3 << 30


def test_a_group_using_more_than_its_limit_leaves_no_room_not_a_negative_one(tmp_path):
    """cgroup v1's usage may pass limit_in_bytes for a moment: the room is 0, never negative
    (a negative room was said as "only -1.0 GB of memory is available")."""
    from engine import limits

    _files(tmp_path / "v1" / "memory", memory_limit_in_bytes=str(1 << 30),
           memory_usage_in_bytes=str(2 << 30))
    (tmp_path / "cg").write_text("4:memory:/\n")
    assert limits._cgroup_left(str(tmp_path / "cg"), str(tmp_path / "v1")) == 0


def test_proc_kb_reads_a_kb_line_as_bytes(tmp_path):
    """/proc/meminfo and /proc/self/status give kB: ``_proc_kb`` returns bytes. It was only ever
    replaced by a stand-in in the tests, so dropping the x 1024 (every room 1,024 times too
    small, each run refused) passed. A missing key or a malformed line is None."""
    from engine import limits

    f = tmp_path / "meminfo"
    f.write_text("MemTotal:        8 kB\nMemAvailable:   1024 kB\nVmSize:\n")
    assert limits._proc_kb(str(f), "MemAvailable") == 1 << 20
    assert limits._proc_kb(str(f), "MemTotal") == 8 << 10
    assert limits._proc_kb(str(f), "Nope") is None
    assert limits._proc_kb(str(f), "VmSize") is None  # no number
    f.write_text("MemAvailable: lots kB\n")
    assert limits._proc_kb(str(f), "MemAvailable") is None
    assert limits._proc_kb(str(tmp_path / "none"), "MemAvailable") is None


def test_ram_available_is_memavailable_else_the_physical_ram(monkeypatch):
    """The RAM room is MemAvailable (free RAM plus the cache the kernel can drop), not MemFree
    (which leaves the page cache out: on a machine that has read a corpus, most of its RAM).
    It was always replaced in the tests; where /proc/meminfo cannot be read it is all RAM."""
    from engine import limits

    asked = []
    monkeypatch.setattr(limits, "_proc_kb", lambda path, key: asked.append((path, key)) or 7)
    assert limits._ram_available() == 7
    assert asked == [("/proc/meminfo", "MemAvailable")]
    monkeypatch.setattr(limits, "_proc_kb", lambda path, key: None)
    monkeypatch.setattr(limits.os, "sysconf", {"SC_PHYS_PAGES": 3, "SC_PAGE_SIZE": 4096}.get)
    assert limits._ram_available() == 3 * 4096


def test_the_memory_room_is_the_least_whichever_comes_first(monkeypatch):
    """RAM is the least room (1 GB under a 6 GB ulimit and an 8 GB cgroup limit), then the
    ulimit is (the cgroup room coming last). Every case before had the last room also the
    least, so taking the last room instead of the least passed."""
    import resource

    from engine import limits

    monkeypatch.delenv("MAMBA_STUDIO_MEMORY", raising=False)
    monkeypatch.setattr(limits, "_ram_available", lambda: 1 << 30)
    monkeypatch.setattr(resource, "getrlimit", lambda _r: (6 << 30, resource.RLIM_INFINITY))
    monkeypatch.setattr(limits, "_proc_kb", lambda path, key: 1 << 30)  # VmSize now
    monkeypatch.setattr(limits, "_cgroup_left", lambda: 8 << 30)
    assert limits.memory_room() == (1 << 30, "")
    monkeypatch.setattr(limits, "_ram_available", lambda: 20 << 30)
    assert limits.memory_room() == (5 << 30, "what ulimit -v leaves")


def test_the_memory_estimate_sizes_the_scan_backward_jobs_the_kernel_runs():
    """The estimate's workspace counts the scan backward's per-job buffers at the larger need of
    its job widths, copied into engine.limits (which imports no kernel): a change of the
    kernel's widths would leave the estimate sizing old ones. And the larger need is taken:
    wider jobs hold more per job, narrower ones more dB/dC partial sums."""
    from engine.config import MambaConfig
    from engine.limits import SCAN_PAD, SCAN_WIDTHS, MemorySpec, _scan_workspace, estimate
    from engine.ops.selective_scan import BWD_CHUNK, BWD_CHUNKS, CHUNK

    assert sorted(BWD_CHUNKS.values()) == sorted(SCAN_WIDTHS) and BWD_CHUNK in SCAN_WIDTHS
    assert SCAN_PAD == CHUNK
    cfg = MambaConfig(vocab_size=256, d_model=256, n_layer=6)  # e 512, n 16
    spec = MemorySpec(cfg, batch_size=8, seq_len=256, threads=2)
    need = {w: _scan_workspace(spec, cfg.d_inner, cfg.d_state, 2, w) for w in SCAN_WIDTHS}
    assert need[128] == 2 * (2 * 256 + 2) * 16 * 128 * 4 + 2 * 4 * 2048 * 16 * 4 + 2 * 4 * 256 * 128 * 4
    assert need[64] < need[128]
    many = MemorySpec(cfg, batch_size=64, seq_len=16, threads=1)
    assert _scan_workspace(many, 512, 16, 1, 64) > _scan_workspace(many, 512, 16, 1, 128)
    for s, th in ((spec, 2), (many, 1)):  # and the estimate counts the larger of the two
        other = 8 * 512 * 4 * s.batch_size * s.seq_len + 4 * 512 * 4 * s.batch_size
        assert estimate(s).workspace == other + max(_scan_workspace(s, 512, 16, th, w)
                                                    for w in SCAN_WIDTHS)


def test_a_kernel_file_given_as_a_settings_or_run_file_is_refused_unread(tmp_path, capsys):
    """``--config /proc/kmsg`` read (and so consumed) the kernel's log, and every later call
    died in a TypeError: its read would wait, and a non-blocking read returned None. A file of a
    kernel pseudo-filesystem is refused before it is opened, as a corpus file of one is."""
    from engine.cli import main

    assert main(["train", "--config", "/proc/self/status", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: /proc/self/status: a file of a kernel pseudo-filesystem "
                          "(proc), not a settings file") and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


def test_a_read_that_would_wait_is_one_error_not_a_type_error(tmp_path, monkeypatch):
    """A regular file whose read would wait (a non-blocking descriptor's read gives None, as
    /proc/kmsg's did once the log was read) is refused in one line naming it."""
    from engine import safeio

    f = tmp_path / "state.json"
    f.write_text("{}")

    class Waits:
        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc):  # noqa: ANN002, ANN204
            return False

        def read(self, _n):  # noqa: ANN001, ANN202
            return None

    monkeypatch.setattr(safeio, "open_regular", lambda *_a, **_k: Waits())
    with pytest.raises(safeio.UnsafeFileError, match=r"state\.json: cannot be read without "
                                                     r"waiting.*give a regular JSON file"):
        safeio.read_json(f)
