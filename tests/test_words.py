"""Counts in words: one spelling for the engine and the window ("1 tokens", "1 ranks" were
printed where each message spelled its own plural)."""

from engine.earlystop import EarlyStopping
from engine.words import plural


def test_plural_says_one_without_an_s_and_groups_thousands():
    assert plural(1, "token") == "1 token"
    assert plural(0, "token") == "0 tokens"
    assert plural(2, "rank") == "2 ranks"
    assert plural(12_345, "step") == "12,345 steps"


def test_the_window_counts_with_the_engines_words():
    from app import words

    assert words.plural is plural


def test_early_stopping_after_one_evaluation_says_one():
    early = EarlyStopping(patience=1)
    assert not early.update(2.0)
    assert early.update(2.5)
    assert "for 1 evaluation (patience 1)" in early.reason, early.reason


def test_listing_names_the_first_few_and_counts_the_rest():
    from engine.words import listing

    assert listing(["a"]) == "a"
    assert listing(["a", "b", "c"]) == "a, b, c"
    assert listing(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert listing([str(i) for i in range(1_005)], most=2) == "0, 1 and 1,003 more"
