"""Packing documents into rows with a reset mask, and the seeded, resumable batch order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ByteTokenizer, load_corpus
from engine.config import MambaConfig
from engine.documents import encode_documents, split_documents
from engine.model import loss_and_grad
from engine.packing import epoch_order, iter_batches, line_end_table, pack_spans
from engine.params import zeros_like
from tests.helpers import random_params

TOK = ByteTokenizer()
LINE_END = line_end_table(TOK)


def _docs(tmp_path, files: dict[str, str], records: str = "file"):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return encode_documents(load_corpus([tmp_path]), TOK, records)


def _rows_as_pieces(rows):
    """Each row -> list of (start, length) pieces as placed, read back from a materialised batch."""
    tokens, targets, reset = rows.batch(np.arange(len(rows)))
    out = []
    for r in range(len(rows)):
        cols = np.flatnonzero(reset[r]).tolist() + [int((targets[r] >= 0).sum())]
        out.append([(cols[i], cols[i + 1]) for i in range(len(cols) - 1)])
    return tokens, targets, out


def test_packed_rows_with_a_boundary_equal_documents_run_separately_float64(tmp_path):
    """Two documents packed into one row by the real pipeline: the loss and every gradient equal
    running each document on its own (float64; the reset stops state crossing the boundary)."""
    docs = _docs(tmp_path, {"a.txt": "the cat sat\n", "b.txt": "a dog ran off\n"})
    cfg = MambaConfig(vocab_size=257, d_model=16, n_layer=2, d_state=4)
    p = random_params(cfg, seed=5)
    packed = pack_spans(docs.ids, docs.spans(), 64, LINE_END)
    assert len(packed) == 1  # both documents share the row
    tokens, targets, reset = packed.batch(np.array([0]))
    assert reset.sum() == 2 and reset[0, 0] and reset[0, docs.lengths[0]]
    g_packed, g_sep = zeros_like(p), zeros_like(p)
    loss_packed, n_packed = loss_and_grad(p, tokens, targets, cfg, g_packed, 1.0, reset=reset)
    loss_sep, n_sep = 0.0, 0
    for i in range(2):
        alone = pack_spans(docs.ids, docs.spans([i]), 64, LINE_END)
        t, y, r = alone.batch(np.array([0]))
        ls, n = loss_and_grad(p, t, y, cfg, g_sep, 1.0, reset=r)
        loss_sep, n_sep = loss_sep + ls, n_sep + n
    assert n_packed == n_sep == len(docs.ids) - 1
    assert abs(loss_packed - loss_sep) <= 1e-12 * abs(loss_sep)
    for name in p:
        np.testing.assert_allclose(g_packed[name], g_sep[name], rtol=1e-10, atol=1e-13,
                                   err_msg=name)
    leak, _ = loss_and_grad(p, tokens, targets, cfg, None, 1.0)  # the test can fail: no reset
    assert abs(leak - loss_sep) > 1e-6


def test_no_document_shorter_than_a_row_is_cut(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["x" + "".join(rng.choice(list("abcde "), int(n))) for n in rng.integers(0, 40, 300)]
    docs = _docs(tmp_path, {"lines.txt": "\n".join(lines) + "\n"}, "line")
    seq_len = 48
    rows = pack_spans(docs.ids, docs.spans(), seq_len, LINE_END)
    tokens, targets, pieces = _rows_as_pieces(rows)
    placed = sorted(TOK.decode(tokens[r, a + 1 : b]) for r, row in enumerate(pieces)
                    for a, b in row)
    assert placed == sorted(lines)  # every line is one whole piece: none split, none lost
    assert all(tokens[r, a] == TOK.eos_id for r, row in enumerate(pieces) for a, _ in row)
    assert rows.fill > 0.8, rows.fill


def test_a_long_document_is_cut_after_line_breaks_and_loses_no_target(tmp_path):
    text = "".join(f"line number {i} of a long file\n" for i in range(60))
    docs = _docs(tmp_path, {"long.txt": text, "short.txt": "tiny\n"})
    seq_len = 100
    rows = pack_spans(docs.ids, docs.spans(), seq_len, LINE_END)
    tokens, targets, pieces = _rows_as_pieces(rows)
    ends = [TOK.decode(tokens[r, b - 1 : b]) for r, row in enumerate(pieces) for a, b in row]
    # every line is shorter than half a row, so no piece is cut hard at the row's width: each
    # ends after a line break (the long file in at least 18 pieces of < 100 tokens)
    assert all(b - a < seq_len for row in pieces for a, b in row)
    assert len(ends) >= 18 + 1 and all(e == "\n" for e in ends), ends
    got = np.sort(np.concatenate([targets[r][targets[r] >= 0] for r in range(len(rows))]))
    np.testing.assert_array_equal(got, np.sort(docs.ids[1:].astype(np.int64)))
    hard = pack_spans(docs.ids, docs.spans(), seq_len)  # no line table: cut at the row width
    assert hard.n_targets == rows.n_targets == len(docs.ids) - 1


def test_pieces_start_lines_when_cut(tmp_path):
    text = "".join(f"row {i:03d}\n" for i in range(40))  # 8 bytes a line
    docs = _docs(tmp_path, {"a.txt": text})
    rows = pack_spans(docs.ids, docs.spans(), 30, LINE_END)
    tokens, targets, pieces = _rows_as_pieces(rows)
    starts = [(r, a) for r, row in enumerate(pieces) for a, _ in row]
    assert len(starts) > 2  # 320 bytes in rows of 30: the document is cut into many pieces
    for r, a in starts:
        assert TOK.decode(tokens[r, a : a + 4]) == "row " or tokens[r, a] == TOK.eos_id, (r, a)


def test_batches_are_deterministic_from_seed_epoch_and_cursor(tmp_path):
    docs = _docs(tmp_path, {f"{i}.txt": f"doc {i} " * (i % 5 + 1) + "\n" for i in range(50)})
    rows = pack_spans(docs.ids, docs.spans(), 24, LINE_END)
    full = list(iter_batches(rows, 4, seed=7, epoch=2))
    resumed = list(iter_batches(rows, 4, seed=7, epoch=2, cursor=8))
    assert len(resumed) == len(full) - 2
    for a, b in zip(full[2:], resumed, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert not np.array_equal(epoch_order(len(rows), 7, 2), epoch_order(len(rows), 7, 3))
    np.testing.assert_array_equal(np.sort(epoch_order(len(rows), 7, 2)), np.arange(len(rows)))
    seen = np.concatenate([y[y >= 0] for _, y, _ in full])
    assert len(seen) == rows.n_targets  # each target once per epoch
    tok, tgt, reset = full[0]
    assert tok.shape == tgt.shape == reset.shape == (4, rows.width) and reset[:, 0].all()


def test_rows_are_views_over_the_ids(tmp_path):
    docs = _docs(tmp_path, {"a.txt": "abc\n" * 100})
    train, _ = split_documents(docs, 0.0)
    rows = pack_spans(docs.ids, train, 16, LINE_END)
    assert np.shares_memory(rows.ids, docs.ids)
    with pytest.raises(Exception, match="at least 1"):
        pack_spans(docs.ids, train, 0)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 90), min_size=1, max_size=60), st.integers(1, 64),
       st.integers(0, 2**31 - 1))
def test_packing_invariants_hold_for_any_document_lengths(lengths, seq_len, seed):
    """Any documents, any row width: every target placed exactly once, a document that fits a
    row is one piece, each piece starts with a reset, rows never wider than seq_len."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = rng.integers(0, 250, offsets[-1] + 1).astype(np.uint16)
    ids[offsets] = 256
    ids[rng.random(len(ids)) < 0.1] = 10  # some line breaks
    ids[offsets] = 256
    rows = pack_spans(ids, np.stack([offsets[:-1], np.diff(offsets)], 1), seq_len, LINE_END)
    assert rows.width <= seq_len
    tokens, targets, reset = rows.batch(np.arange(len(rows)))
    src = {}
    for j in range(len(rows.start)):
        for k in range(int(rows.length[j])):
            pos = int(rows.start[j]) + k
            assert pos not in src
            src[pos] = j
    assert sorted(src) == list(range(offsets[-1]))  # every input/target pair exactly once
    fits = [i for i, n in enumerate(lengths) if n <= seq_len]
    assert set(offsets[fits].tolist()) <= set(rows.start.tolist())  # whole, as one piece
    assert all(n in rows.length.tolist() or n > seq_len for n in lengths)
    assert reset.sum() == len(rows.start) and reset[:, 0].all()
    np.testing.assert_array_equal(np.sort(targets[targets >= 0]), np.sort(ids[1:].astype(np.int64)))


def test_held_out_score_of_packed_rows_equals_each_document_alone(tmp_path):
    from engine.evaluation import evaluate
    from engine.lm import MambaLM

    docs = _docs(tmp_path, {"a.txt": "one two\n", "b.txt": "three four five\n", "c.txt": "six\n"})
    cfg = MambaConfig(vocab_size=257, d_model=16, n_layer=2, d_state=4)
    lm = MambaLM(cfg, random_params(cfg, seed=3), TOK)
    packed = evaluate(lm, pack_spans(docs.ids, docs.spans(), 64), 64)
    alone = [evaluate(lm, pack_spans(docs.ids, docs.spans([i]), 64), 64) for i in range(3)]
    assert packed.tokens == sum(a.tokens for a in alone) == len(docs.ids) - 1
    loss_sum = packed.loss * packed.tokens
    assert abs(loss_sum - sum(a.loss * a.tokens for a in alone)) < 1e-9 * loss_sum
    t, y, _ = pack_spans(docs.ids, docs.spans(), 64).batch(np.array([0]))
    ls, n = loss_and_grad(lm.params, t, y, cfg, None, 1.0)  # without the resets the score differs
    assert abs(ls - loss_sum) > 1e-6
