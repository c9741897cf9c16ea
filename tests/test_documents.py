"""Documents: records, the seeded held-out split of whole documents, and the stored form."""

import os

import numpy as np
import pytest

from engine import BPETokenizer, ByteTokenizer, CorpusError, load_corpus
from engine.docstore import IDS, OFFSETS, load_documents, save_documents
from engine.documents import Documents, encode_documents, iter_records, split_documents

TOK = ByteTokenizer()


def _docs_text(docs: Documents) -> list[str]:
    return [TOK.decode(docs.ids[docs.offsets[i] + 1 : docs.offsets[i + 1]]) for i in range(len(docs))]


def _corpus(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).write_bytes(text.encode())
    return load_corpus([tmp_path])


@pytest.mark.parametrize("records,expect", [
    ("file", ["a b\r\nc\n \n\nd\n", "z\n"]),
    ("blank-line", ["a b\r\nc", "d", "z"]),
    ("line", ["a b", "c", "d", "z"]),
])
def test_records_modes_cut_documents_where_the_user_asked(tmp_path, records, expect):
    docs = encode_documents(_corpus(tmp_path, {"1.txt": "a b\r\nc\n \n\nd\n", "2.txt": "z\n"}),
                            TOK, records)
    assert _docs_text(docs) == expect
    assert docs.ids.dtype == np.uint16 and np.all(docs.ids[docs.offsets] == TOK.eos_id)
    assert docs.offsets[-1] == len(docs.ids) - 1


def test_a_record_longer_than_the_limit_comes_in_pieces_that_join_back():
    text = "word " * 50 + "\n\nnext\n"
    chunks = [text[i : i + 30] for i in range(0, len(text), 30)]
    got = list(iter_records(iter(chunks), "blank-line", limit=40))
    records, current = [], ""
    for piece, ends in got:
        current += piece
        if ends:
            records.append(current)
            current = ""
    assert records == [("word " * 50).rstrip("\n"), "next"]
    assert len(got) > 3


def test_bpe_documents_match_encoding_each_record_whole(tmp_path):
    files = {"a.txt": "the cat sat.\n\nthe dog ran far.\n", "b.txt": "a cat\n"}
    tok = BPETokenizer.train(list(files.values()) * 20, vocab_size=300)
    docs = encode_documents(_corpus(tmp_path, files), tok, "blank-line")
    for i, text in enumerate(["the cat sat.", "the dog ran far.", "a cat"]):
        np.testing.assert_array_equal(docs.ids[docs.offsets[i] + 1 : docs.offsets[i + 1]],
                                      tok.encode(text))


def test_no_records_is_an_error_naming_the_option(tmp_path):
    with pytest.raises(CorpusError, match="records must be one of"):
        encode_documents(_corpus(tmp_path, {"a.txt": "x\n"}), TOK, "paragraph")


def _targets(spans: np.ndarray) -> set[int]:
    return {int(p) + 1 for s, n in spans for p in range(s, s + n)}


def _inputs(spans: np.ndarray) -> set[int]:
    return {int(p) for s, n in spans for p in range(s, s + n)}


def test_no_held_out_document_appears_in_training(tmp_path):
    files = {f"{i:02d}.txt": f"document {i} " + "x" * (i * 7 % 23) + "\n" for i in range(40)}
    docs = encode_documents(_corpus(tmp_path, files), TOK)
    train, held = split_documents(docs, 0.2, seed=3)
    starts = set(docs.offsets[:-1].tolist())
    assert set(held[:, 0].tolist()) <= starts and set(train[:, 0].tolist()) <= starts
    assert not set(held[:, 0].tolist()) & set(train[:, 0].tolist())
    eos = set(docs.offsets.tolist())  # separators: the end of one document, the start of the next
    held_pos = (_inputs(held) | _targets(held)) - eos
    assert not held_pos & _targets(train)
    assert not held_pos & _inputs(train)
    assert len(_targets(train)) + len(_targets(held)) == len(docs.ids) - 1  # nothing lost
    frac = held[:, 1].sum() / docs.lengths.sum()
    assert 0.1 <= frac <= 0.3, frac


def test_held_out_choice_is_seeded_and_not_the_last_file(tmp_path):
    files = {f"{i:02d}.txt": f"text {i}\n" for i in range(30)}
    docs = encode_documents(_corpus(tmp_path, files), TOK)
    picks = {tuple(split_documents(docs, 0.1, seed=s)[1][:, 0]) for s in range(6)}
    assert len(picks) > 1  # the seed chooses
    last = int(docs.offsets[-2])
    assert any(last not in p for p in picks)
    a, b = split_documents(docs, 0.1, seed=4), split_documents(docs, 0.1, seed=4)
    np.testing.assert_array_equal(a[1], b[1])


def test_one_document_holds_out_a_window_sharing_no_target(tmp_path):
    docs = encode_documents(_corpus(tmp_path, {"one.txt": "line of text\n" * 100}), TOK)
    train, held = split_documents(docs, 0.25, seed=1, min_tokens=10)
    assert len(held) == 1 and held[0, 1] == int(docs.lengths.sum() * 0.25)
    assert not (_inputs(held) | _targets(held)) & _targets(train)
    assert not _targets(held) & _inputs(train)
    assert split_documents(docs, 0.0)[1].shape == (0, 2)


def test_a_huge_document_is_not_held_out_whole(tmp_path):
    docs = encode_documents(_corpus(tmp_path, {"big.txt": "y" * 5000 + "\n", "small.txt": "s\n"}),
                            TOK)
    for seed in range(5):
        train, held = split_documents(docs, 0.1, seed=seed)
        assert held[:, 1].sum() <= 0.15 * docs.lengths.sum()
        assert train[:, 1].sum() > 0.8 * docs.lengths.sum()


def test_store_round_trip_is_memory_mapped(tmp_path):
    docs = encode_documents(_corpus(tmp_path, {"a.txt": "abc\n\ndef\n"}), TOK, "blank-line")
    save_documents(tmp_path / "run", docs)
    back = load_documents(tmp_path / "run", vocab_size=257, eos_id=256)
    assert isinstance(back.ids, np.memmap)
    np.testing.assert_array_equal(back.ids, docs.ids)
    np.testing.assert_array_equal(back.offsets, docs.offsets)
    assert not [p for p in os.listdir(tmp_path / "run") if p.endswith(".tmp")]


@pytest.mark.parametrize("damage,message", [
    (lambda d: (d / IDS).write_bytes(b"garbage"), "not a readable .npy"),
    (lambda d: np.save(d / IDS, np.arange(5, dtype=np.float32)), "unsigned id array"),
    (lambda d: np.save(d / OFFSETS, np.array([0, 3], dtype=np.int64)), "offsets do not describe"),
    (lambda d: np.save(d / IDS, np.array([256, 300, 256], dtype=np.uint16)), "outside the vocab"),
    (lambda d: (d / OFFSETS).unlink(), "no such token file"),
    (lambda d: ((d / IDS).unlink(), os.mkfifo(d / IDS)), "FIFO"),
    (lambda d: np.save(d / IDS, np.array([97, 97, 256], np.uint16)),  # (no case had these two)
     "do not start with the end-of-text"),
    (lambda d: np.save(d / OFFSETS, np.array([0, 0, 2], np.int64)), "offsets do not describe"),
])
def test_a_damaged_store_is_one_line_naming_the_file(tmp_path, damage, message):
    save_documents(tmp_path, Documents(np.array([256, 97, 256], np.uint16), np.array([0, 2])))
    damage(tmp_path)
    with pytest.raises(Exception, match=message) as info:
        load_documents(tmp_path, vocab_size=257, eos_id=256)
    assert "\n" not in str(info.value) and str(tmp_path) in str(info.value)
    from engine.errors import MambaStudioError
    assert isinstance(info.value, MambaStudioError)


def test_line_records_with_non_ascii_text_and_long_lines(tmp_path, monkeypatch):
    import engine.documents as documents

    monkeypatch.setattr(documents, "TEXT_CHUNK", 64)  # many pieces, records cut across them
    lines = ["héllo wörld ✓", "  indented", "x" * 300, "word " * 80 + "end", "last"]
    docs = encode_documents(_corpus(tmp_path, {"a.txt": "\n\n".join(lines) + "\n \n"}), TOK, "line")
    assert _docs_text(docs) == lines
    docs = encode_documents(_corpus(tmp_path, {"a.txt": "\n\n".join(lines) + "\n \n"}), TOK,
                            "blank-line")
    assert _docs_text(docs) == lines


@pytest.mark.parametrize("records", ["file", "line"])
def test_progress_reaches_the_corpus_size(tmp_path, records):
    corpus = _corpus(tmp_path, {"a.txt": "x y\n" * 50, "b.txt": "zz\n" * 30})
    seen: list[tuple[int, int]] = []
    encode_documents(corpus, TOK, records, progress=lambda d, t: seen.append((d, t)))
    assert seen and seen[-1] == (corpus.n_bytes, corpus.n_bytes)
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:], strict=False))


def test_the_same_files_in_another_order_make_the_same_run_data(tmp_path):
    """Files added to the window one way, then the other, made another held-out split (11
    held-out files against 8 from the same 68): held-out losses of two runs did not compare."""
    import numpy as np

    from engine import runformat as rf
    from engine.data import load_corpus
    from engine.run import RunSpec, start
    from engine.trainer import TrainConfig

    files = []
    for i in range(8):
        f = tmp_path / "c" / f"{i}" / "t.txt"
        f.parent.mkdir(parents=True)
        f.write_text(f"document {i} " * (20 + 7 * i))
        files.append(f)
    shuffled = [files[i] for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    assert [f.path for f in load_corpus(shuffled).files] == files
    spec = RunSpec(preset="tiny", holdout=0.3, train=TrainConfig(batch_size=2, seq_len=32,
                                                                 max_steps=1))
    data = []
    for name, order in (("a", files), ("b", shuffled)):
        with start(spec, order, out=tmp_path / name):
            pass
        data.append(rf.read_data(tmp_path / name))
    assert np.array_equal(data[0].ids, data[1].ids)
    assert np.array_equal(data[0].val_spans, data[1].val_spans) and len(data[0].val_spans)


def test_a_link_to_a_corpus_file_is_read_once(tmp_path):
    """A link beside its target was a second document: the split held out that copy of a
    training document (held-out loss 0.07 where training was at 0.88)."""
    import os

    from engine.data import load_corpus

    c = tmp_path / "c"
    c.mkdir()
    (c / "doc1.txt").write_text("first document " * 30)
    (c / "doc2.txt").write_text("second document " * 30)
    (c / "link.txt").symlink_to(c / "doc1.txt")
    os.link(c / "doc2.txt", c / "zz-hard.txt")
    corpus = load_corpus([c, c / "doc1.txt"])
    assert [f.path.name for f in corpus.files] == ["doc1.txt", "doc2.txt"]
    why = {p.name: r for p, r in corpus.rejected}
    assert why["link.txt"] == (f"the same file as {c / 'doc1.txt'}, under another name (a link); "
                               "read once")
    assert why["zz-hard.txt"].startswith(f"the same file as {c / 'doc2.txt'}")
    assert "doc1.txt" not in why  # given twice (in its folder and by name): once, unsaid


def test_a_copy_of_a_corpus_file_is_read_once(tmp_path):
    """A byte-identical copy under another name (river_ferry.txt and rf_copy.txt) was a second
    document, and the split held out the copy of a training text with no word. Copies are
    read once (the first by path), whether in one folder or given apart; a file of the same
    size with other bytes is read."""
    import engine
    from engine.data import load_corpus

    c = tmp_path / "c"
    c.mkdir()
    text = "first document " * 30
    (c / "doc1.txt").write_text(text)
    (c / "doc2.txt").write_text(text.replace("first", "frist"))  # same size, other bytes
    (c / "zz-copy.txt").write_text(text)
    apart = tmp_path / "zz-apart.md"
    apart.write_text(text)
    corpus = load_corpus([c, apart])
    assert [f.path.name for f in corpus.files] == ["doc1.txt", "doc2.txt"]
    why = {p.name: r for p, r in corpus.rejected}
    said = f"the same text as {c / 'doc1.txt'} (a copy); read once"
    assert why == dict.fromkeys(("zz-copy.txt", "zz-apart.md"), said), why
    assert engine.same_file_as(why["zz-apart.md"]) == str(c / "doc1.txt")  # the window: a copy
    assert corpus.n_bytes == 2 * len(text)  # is no unreadable file


def test_held_out_files_names_the_files_a_run_holds_out(tmp_path):
    """The window's Corpus table marks held-out files before Start from token counts alone; the
    rule is the engine's, checked here against the split of the documents a run encodes."""
    import engine

    data = tmp_path / "data"
    data.mkdir()
    for i in range(10):  # small files a token apart: the end token decides which fit
        (data / f"{i:02d}.txt").write_text("x" * (10 + i) + "\n")
    corpus = engine.load_corpus([str(data)])
    docs = engine.encode_documents(corpus, engine.ByteTokenizer(), "file")
    starts = [int(s) for s in docs.offsets[:-1]]
    paths = [str(f.path) for f in corpus.files]
    counts = {str(f.path): f.n_bytes for f in reversed(corpus.files)}  # any order
    seen_whole = 0
    for seed in range(30):
        for min_tokens in (0, 17, 65):
            _, val = engine.split_documents(docs, 0.1, seed, min_tokens)
            held = {paths[starts.index(int(s))] for s, n in val if int(s) in starts
                    and int(s) + int(n) in [*starts[1:], int(docs.offsets[-1])]}
            predicted = engine.held_out_files(counts, 0.1, seed, min_tokens)
            assert {p for p, whole in predicted.items() if whole} == held, (seed, min_tokens)
            seen_whole += bool(held)
    assert seen_whole > 30
    assert engine.held_out_files(counts, 0.0) == {}
