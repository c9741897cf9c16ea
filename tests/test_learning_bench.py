"""The learning benchmark's generators, scorer and n-gram baseline on a few lines (fast; the
benchmark itself is a script: python -m benchmarks.learning)."""

import numpy as np
import pytest

from benchmarks.learning.ngram import KneserNey
from benchmarks.learning.score import answer_accuracy, answer_positions
from benchmarks.learning.tasks import (
    MARKER,
    NOISE,
    SYMBOLS,
    TRIGGER,
    Induction,
    SelectiveCopy,
    split_documents,
)


def test_selective_copy_lines_hold_four_symbols_among_64_noise_positions_then_markers_and_answer():
    text = SelectiveCopy().text(50, seed=1)
    lines = text.splitlines()
    assert len(lines) == 50 and text.endswith("\n")
    for line in lines:
        body, markers, answer = line[:64], line[64:68], line[68:]
        assert len(line) == 72 and markers == MARKER * 4
        data = [ch for ch in body if ch != NOISE]
        assert "".join(data) == answer and len(answer) == 4
        assert set(answer) <= set(SYMBOLS)
    assert SelectiveCopy().text(5, seed=1) == SelectiveCopy().text(5, seed=1)
    assert SelectiveCopy().text(5, seed=1) != SelectiveCopy().text(5, seed=2)


def test_induction_line_ends_with_trigger_and_the_key_that_followed_its_first_occurrence():
    for line in Induction().text(50, seed=3).splitlines():
        assert len(line) == 66 and line.count(TRIGGER) == 2 and line[-2] == TRIGGER
        first = line.index(TRIGGER)
        assert line[first + 1] == line[-1] and line[-1] in SYMBOLS


def test_scorer_counts_only_answer_characters():
    text = "..a.|a\n.b..|b\n"
    assert list(answer_positions(text, 1)) == [5, 12]
    truth = np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)
    assert answer_accuracy(text, truth, 1) == 1.0
    wrong_noise = truth.copy()
    wrong_noise[[0, 1, 2, 4]] = ord("z")  # non-answer positions do not count
    assert answer_accuracy(text, wrong_noise, 1) == 1.0
    one_wrong = truth.copy()
    one_wrong[12] = ord("a")
    assert answer_accuracy(text, one_wrong, 1) == 0.5
    with pytest.raises(ValueError):
        answer_accuracy("no newline", truth, 1)


def test_scorer_with_bpe_counts_a_character_right_only_when_its_whole_token_is():
    from benchmarks.learning.score import token_chars
    from engine.tokenizer import BPETokenizer, ByteTokenizer

    text = SelectiveCopy().text(300, seed=1)
    tok = BPETokenizer.train([text], vocab_size=400)
    ids = tok.encode(text)
    chars = token_chars(tok, tok.vocab_size + 8)
    assert int(chars[ids].sum()) == len(text) and len(ids) < len(text)  # merged tokens
    assert answer_accuracy(text, ids.copy(), 4, ids, chars) == 1.0
    pos = answer_positions(text, 4)
    ends = np.cumsum(chars[ids])
    t = int(np.searchsorted(ends, pos[0], side="right"))  # the token holding the first answer char
    wrong = ids.copy()
    wrong[t] = (ids[t] + 1) % tok.vocab_size
    covered = sum(1 for p in pos if int(np.searchsorted(ends, p, side="right")) == t)
    assert covered >= 1
    assert answer_accuracy(text, wrong, 4, ids, chars) == pytest.approx(1 - covered / len(pos))
    byte_ids = ByteTokenizer().encode(text)  # bytes: the same as the default path
    assert answer_accuracy(text, byte_ids, 4, byte_ids, token_chars(ByteTokenizer(), 264)) == 1.0
    with pytest.raises(ValueError):
        answer_accuracy(text, ids, 4, ids[:-1], chars)


def test_kneser_ney_is_a_distribution_and_beats_uniform_on_repetitive_text():
    train = b"the cat sat on the mat. the dog sat on the log. " * 20
    model = KneserNey.fit(train, 4)
    for ctx in (b"the", b"at ", b"zzz"):
        grams = int.from_bytes(ctx, "big") * 256 + np.arange(256)
        assert model.prob(grams).sum() == pytest.approx(1.0, abs=1e-9)
    assert model.bits_per_byte(b"the cat sat on the log. ") < 2.0 < 8.0


def test_documents_split_whole_files_and_respect_the_byte_budgets():
    docs = [(f"m{i}.py", f"# module {i}\n" * 10) for i in range(200)]
    train, held = split_documents(docs, 2_000, 500)
    assert len(held) > 0 and len(train) > 0
    held_docs = set(held.split("# module ")) - {""}
    assert not held_docs & set(train.split("# module ")) - {""}
    assert len(train) < 2_000 + 200 and len(held) < 500 + 200


def test_line_rows_come_from_the_products_document_split():
    """run.py imports engine.runtime.configure at import time, so it is checked in a child."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import numpy as np
from benchmarks.learning.run import predict_next, text_rows
from engine import ByteTokenizer, MambaLM, preset
tok = ByteTokenizer()
text = "ab|b\\n\\ncd|d\\nef|f\\n"
rows = text_rows(tok, text, 16, "line")
x, y, reset = rows.batch(np.arange(len(rows)))
assert 10 not in x[y >= 0] and 10 not in y  # line breaks are replaced by end-of-text
assert int(reset.sum()) == 3 and (x[reset] == tok.eos_id).all()  # 3 records, each from EOS
assert sorted(y[y >= 0].tolist()).count(tok.eos_id) == 3  # ... and each ends predicting EOS
lm = MambaLM.create(preset("tiny", 257), tok)
ids = tok.encode(text)
assert predict_next(lm, ids, lead=True)[0] >= 0 and predict_next(lm, ids)[0] == -1
print("ok")
"""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
