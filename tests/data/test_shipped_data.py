"""The shipped corpus and its loaders: tiny Shakespeare as documented, the character
vocabulary round trip, batches of consecutive ids."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import data


def test_tiny_shakespeare_is_shipped_whole():
    text = data.load_text("shakespeare")
    assert len(text.encode()) == 1_115_394 and text.isascii()
    assert text.startswith("First Citizen:\nBefore we proceed any further, hear me speak.")
    assert text.count("\n") == 40_000


def test_the_character_vocabulary_round_trips():
    text, vocab, ids = data.char_corpus()
    assert vocab.size == 65 and list(vocab.chars) == sorted(set(text))
    assert ids.dtype == np.int32 and ids.shape == (len(text),)
    assert vocab.decode(ids[:200]) == text[:200]
    assert vocab.chars[ids[0]] == "F"
    with pytest.raises(ValueError, match="character 'é' is not in the vocabulary"):
        vocab.encode("café")
    with pytest.raises(ValueError, match="unknown corpus 'wikipedia'"):
        data.load_text("wikipedia")


def test_batches_are_consecutive_text_shuffled_deterministically():
    ids = np.arange(1000, dtype=np.int32)
    got = list(data.batches(ids, 10, 4, seed=1, count=30))  # 25 batches a pass: reshuffled
    assert len(got) == 30 and all(b.shape == (4, 10) for b in got)
    assert all((np.diff(b, axis=1) == 1).all() and (b[:, 0] % 10 == 0).all() for b in got)
    assert sorted(int(s) for b in got[:25] for s in b[:, 0]) == list(range(0, 1000, 10))
    again = list(data.batches(ids, 10, 4, seed=1, count=30))
    assert all((a == b).all() for a, b in zip(got, again))
    with pytest.raises(ValueError, match="make 1 sequences of 10; a batch needs 4"):
        next(data.batches(ids[:15], 10, 4))
