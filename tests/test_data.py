import numpy as np
import pytest

from engine import BPETokenizer, ByteTokenizer, CorpusError, load_corpus, load_tokenizer
from engine.data import encode_corpus, iter_bytes, split_holdout
from engine.errors import MambaStudioError


def test_bad_files_are_rejected_with_reasons_and_good_ones_kept(tmp_path):
    (tmp_path / "good.txt").write_text("hello world\n")
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.md").write_text("   \n\n")
    (tmp_path / "binary.txt").write_bytes(b"abc\x00\x01\x02def")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]")
    corpus = load_corpus([tmp_path])
    assert [f.path.name for f in corpus.files] == ["good.txt"]
    reasons = {p.name: r for p, r in corpus.rejected}
    assert reasons["empty.txt"] == "file is empty"
    assert reasons["blank.md"] == "file is empty (only whitespace, 5 bytes)"  # not "0 bytes"
    assert "binary" in reasons["binary.txt"]
    assert "UTF-8" in reasons["latin1.txt"] and "offset 3" in reasons["latin1.txt"]
    assert "not a text file type" in reasons["image.png"]
    assert "config" not in reasons  # hidden folders are ignored


@pytest.mark.parametrize("content", [b"", b"\x00\x00", b"\xff\xfe\xfa"])
def test_only_bad_files_raise(tmp_path, content):
    f = tmp_path / "x.txt"
    f.write_bytes(content)
    with pytest.raises(CorpusError):
        load_corpus([f])
    with pytest.raises(CorpusError, match="no such file"):
        load_corpus([tmp_path / "missing.txt"])


def test_byte_tokenizer_round_trip_and_eos_separator():
    tok = ByteTokenizer()
    text = "héllo, wörld ✓"
    assert tok.decode(tok.encode(text)) == text
    ids = encode_corpus(["ab", "c"], tok)
    np.testing.assert_array_equal(ids, [97, 98, 256, 99])


def test_bpe_train_save_load(tmp_path):
    texts = ["the cat sat on the mat. " * 50, "the dog sat on the log. " * 50]
    tok = BPETokenizer.train(texts, vocab_size=300)
    assert 256 < tok.vocab_size <= 300
    ids = tok.encode("the cat sat on the log.")
    assert len(ids) < len("the cat sat on the log.")
    assert tok.decode(ids) == "the cat sat on the log."
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    np.testing.assert_array_equal(again.encode("the dog"), tok.encode("the dog"))
    assert again.eos_id == tok.eos_id


def test_holdout_split_keeps_order_and_sizes():
    ids = np.arange(1000)
    tr, va = split_holdout(ids, 0.1, 32)
    assert len(va) == 100
    np.testing.assert_array_equal(np.concatenate([tr, va]), ids)  # in order, nothing lost
    tr, va = split_holdout(ids[:100], 0.1, 32)  # at least one row of seq_len + 1 held out
    assert len(va) == 20 and len(tr) == 80  # (capped at a fifth of the stream)


def test_a_folder_of_only_rejected_files_gives_a_short_error(tmp_path):
    for i in range(500):
        (tmp_path / f"img{i}.png").write_bytes(b"\x89PNG")
    with pytest.raises(CorpusError) as exc:
        load_corpus([tmp_path])
    msg = str(exc.value)
    assert "img1.png, " in msg and "img10.png: not a text file type (.png)" in msg
    assert msg.count("not a text file type") == 1 and "and 497 more" in msg
    assert len(msg) < 400  # was every file's reason: ~25,000 characters


def test_a_file_that_grows_while_it_is_read_is_refused_not_read_for_ever(tmp_path):
    """``yes > f`` running beside a training's scan: the read went on to the file's moving end
    (45 GB in 120 s, nothing said), past the 4 GiB limit checked before it. At most the size
    seen when opened is read; any growth then is a one-line error naming the file and the fix."""
    f = tmp_path / "log.txt"
    f.write_text("a line of text\n" * 100)
    pieces = iter_bytes(f, chunk=256)
    first = next(pieces)
    with open(f, "a") as out:  # another program appends while the read is under way
        out.write("more text\n" * 1000)
    with pytest.raises(CorpusError, match=r"log\.txt: grew while it was read \(it had 1,500 "
                                          r"bytes when opened\).*train on a copy"):
        for _ in pieces:
            pass
    assert len(first) == 256
    assert sum(len(p) for p in iter_bytes(f)) == 1500 + 10_000  # complete now: read whole


def test_a_prompt_file_is_bounded_by_its_own_limit_as_it_is_read(tmp_path, monkeypatch):
    """``generate --prompt-file``: its 16 MB limit was checked before the read only; the read
    itself was bounded by the corpus's 4 GiB."""
    from engine import cli

    f = tmp_path / "prompt.txt"
    f.write_text("x" * 5000)
    monkeypatch.setattr(cli, "PROMPT_FILE_LIMIT", 6000)
    assert cli.read_prompt(str(f)) == "x" * 5000
    real = cli.read_prompt

    def grown_after_check(path: str) -> str:  # the file grows between the check and the read
        import engine.safeio as safeio

        check = safeio.check_regular

        def then_grow(p, what="file", limit=None):  # noqa: ANN001, ANN202
            size = check(p, what, limit)
            with open(p, "a") as out:
                out.write("y" * 5000)
            return size

        monkeypatch.setattr(safeio, "check_regular", then_grow)
        try:
            return real(path)
        finally:
            monkeypatch.setattr(safeio, "check_regular", check)

    with pytest.raises(MambaStudioError, match=r"prompt\.txt: .*allowed for a prompt file"):
        grown_after_check(str(f))


def test_a_big_corpus_is_announced_before_it_is_read(tmp_path, monkeypatch):
    """A 1.3 GB corpus was checked for 20-30 s before the first line was printed."""
    from engine import data

    for name in "ab":
        (tmp_path / f"{name}.txt").write_text(f"{name}ome text\n" * 300)  # (not copies)
    heard: list[str] = []
    monkeypatch.setattr(data, "SAY_CHECKING_BYTES", 6000)
    corpus = load_corpus([tmp_path], say=heard.append)
    assert heard == ["checking 2 files (0.01 MB) as UTF-8 text…"] and len(corpus.files) == 2
    heard.clear()
    load_corpus([tmp_path / "a.txt"], say=heard.append)  # 3,000 bytes: under the threshold
    assert heard == []


def test_refusals_are_listed_path_by_path(tmp_path):
    """Reading after the walks listed every folder's walk refusals first, then the read
    failures: the error's first reasons came from a later folder."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "bad.txt").write_bytes(b"caf\xe9\n")
    (a / "empty.txt").write_text("")
    (b / "img.png").write_bytes(b"\x89PNG\r\n")
    (b / "x.bin").write_bytes(b"\x00\x01")
    corpus = load_corpus([a, b], allow_empty=True)
    assert [p.name for p, _ in corpus.rejected] == ["bad.txt", "empty.txt", "img.png", "x.bin"]


def test_a_file_grown_past_its_limit_after_the_check_is_refused_at_the_read(tmp_path,
                                                                             monkeypatch):
    """The limit is held again on the open file: one that grew past it between the size check
    and the open is refused, not read."""
    from engine import data

    f = tmp_path / "big.txt"
    f.write_text("x" * 5000)
    monkeypatch.setattr(data, "check_regular", lambda *_a, **_k: 100)  # its size at the check
    with pytest.raises(CorpusError, match=r"big\.txt: grew past the 4,096 bytes allowed for a "
                                          r"corpus file"):
        list(iter_bytes(f, limit=4096))
