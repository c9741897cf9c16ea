"""A corpus file that vanishes or turns unreadable between the scan and the read is skipped with
a note (and listed in the run's data manifest); only a corpus with nothing left fails."""

import json
from pathlib import Path

import numpy as np
import pytest

import engine.data
import engine.documents
import engine.run
from engine.data import encode_files, load_corpus
from engine.documents import encode_documents
from engine.errors import CorpusError
from engine.run import RunSpec, start
from engine.tokenizer import BPETokenizer, ByteTokenizer
from engine.trainer import TrainConfig


def _files(tmp_path: Path, n: int = 3) -> list[Path]:
    d = tmp_path / "c"
    d.mkdir()
    out = []
    for i in range(n):
        p = d / f"f{i}.txt"
        p.write_text("".join(f"file {i} line {j} says hello\n" for j in range(40)))
        out.append(p)
    return out


def _without(tmp_path: Path, files: list[Path], gone: Path):  # the corpus the survivors make
    keep = tmp_path / "keep"
    keep.mkdir(exist_ok=True)
    for f in files:
        if f != gone:
            (keep / f.name).write_text(f.read_text())
    return load_corpus([keep])


@pytest.mark.parametrize("records", [None, "file", "line"])  # None: the stream encoder
def test_a_deleted_file_is_skipped_and_named(tmp_path, records):
    files = _files(tmp_path)
    corpus = load_corpus([tmp_path / "c"])
    expect = _without(tmp_path, files, files[1])
    files[1].unlink()  # gone after the scan
    tok = ByteTokenizer()
    if records is None:
        got, want = encode_files(corpus, tok), encode_files(expect, tok)
    else:
        a, b = encode_documents(corpus, tok, records), encode_documents(expect, tok, records)
        assert np.array_equal(a.offsets, b.offsets)
        got, want = a.ids, b.ids
    assert np.array_equal(got, want)
    assert [p for p, _ in corpus.gone] == [files[1]] and "no such" in corpus.gone[0][1]
    assert files[1] not in [f.path for f in corpus.files]


def test_a_file_that_fails_part_way_leaves_nothing_of_itself(tmp_path, monkeypatch):
    files = _files(tmp_path)
    corpus = load_corpus([tmp_path / "c"])
    expect = _without(tmp_path, files, files[0])
    files[0].write_bytes(files[0].read_bytes() + b"\xff\xfe tail")  # not UTF-8 from byte ~1000
    monkeypatch.setattr(engine.data, "CHUNK", 64)  # read in pieces: some of it was taken first
    monkeypatch.setattr(engine.documents, "TEXT_CHUNK", 64)
    tok = ByteTokenizer()
    docs = encode_documents(corpus, tok, "line")
    want = encode_documents(expect, tok, "line")
    assert np.array_equal(docs.ids, want.ids) and np.array_equal(docs.offsets, want.offsets)
    assert corpus.gone[0][0] == files[0] and "UTF-8" in corpus.gone[0][1]


def test_bpe_training_and_encoding_skip_a_deleted_file(tmp_path):
    files = _files(tmp_path)
    corpus = load_corpus([tmp_path / "c"])
    files[2].unlink()
    tok = BPETokenizer.train(corpus.texts, vocab_size=300)
    assert [p for p, _ in corpus.gone] == [files[2]]
    assert len(encode_documents(corpus, tok, "file")) == 2


def test_nothing_left_is_one_clear_error(tmp_path):
    files = _files(tmp_path, 2)
    corpus = load_corpus([tmp_path / "c"])
    for f in files:
        f.unlink()
    with pytest.raises(CorpusError, match="no usable text left.*vanished or became unreadable"):
        encode_documents(corpus, ByteTokenizer(), "file")


def test_a_run_notes_and_records_the_skipped_file(tmp_path, monkeypatch):
    files = _files(tmp_path)
    real = engine.run.load_corpus

    def scan_then_delete(paths, **kw):  # noqa: ANN001, ANN003
        corpus = real(paths, **kw)
        files[0].unlink()
        return corpus

    monkeypatch.setattr(engine.run, "load_corpus", scan_then_delete)
    said: list[str] = []
    spec = RunSpec(preset="tiny", autosave_minutes=0,
                   train=TrainConfig(batch_size=2, seq_len=32, epochs=1, max_steps=2))
    with start(spec, [tmp_path / "c"], out=tmp_path / "r", progress=said.append) as run:
        assert run.train().step == 2
    assert any(f"skipped {files[0]}" in m for m in said)
    assert any("1 corpus file(s) skipped after the scan" in m for m in said)
    manifest = json.loads((tmp_path / "r" / "data" / "manifest.json").read_text())
    assert [s["path"] for s in manifest["skipped_after_scan"]] == [str(files[0])]
    assert str(files[0]) not in [s["path"] for s in manifest["sources"]]


def test_token_count_skips_a_vanished_file_and_counts_the_rest(tmp_path):
    files = _files(tmp_path)
    corpus = load_corpus([tmp_path / "c"])
    files[1].unlink()
    tok = BPETokenizer.train(corpus.texts[:1], vocab_size=300)
    counts = engine.data.count_tokens(corpus, tok)
    assert set(counts) == {files[0], files[2]}
    assert counts[files[0]] == len(tok.encode(files[0].read_text()))
    assert [p for p, _ in corpus.gone] == [files[1]] and "since the scan" in corpus.gone[0][1]
    files[0].unlink()
    files[2].unlink()
    assert engine.data.count_tokens(corpus, tok) == {}  # nothing left: nothing counted, no error
