"""Data shipped with Tremula, for examples and tests (nothing is downloaded).

* ``shakespeare.txt``: *tiny Shakespeare*, 40,000 lines of Shakespeare's plays (1,115,394
  bytes, ASCII), the corpus of char-rnn (``data/tinyshakespeare/input.txt`` there) and of
  the TensorFlow-IPU host-embedding example. The plays are in the public domain.

A text corpus is read with :func:`load_text`; :class:`CharVocabulary` maps its characters to
integer ids and back; :func:`char_corpus` gives both and the encoded text; :func:`batches`
cuts an encoded text into training sequences::

    from tremula import data
    text, vocab, ids = data.char_corpus("shakespeare")
    for batch in data.batches(ids, length=100, batch_size=16, seed=0):  # [16, 100] int32
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent
TEXTS = ("shakespeare",)


@cache
def load_text(name: str = "shakespeare") -> str:
    """The text of a shipped corpus.

    Raises:
        ValueError: an unknown corpus (the names are in :data:`TEXTS`).
    """
    if name not in TEXTS:
        raise ValueError(f"load_text: unknown corpus {name!r}; corpora: {list(TEXTS)}")
    return (DATA_DIR / f"{name}.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class CharVocabulary:
    """The characters of a text, sorted (id ``i`` is ``chars[i]``)."""

    chars: tuple[str, ...]

    @staticmethod
    def of(text: str) -> CharVocabulary:
        return CharVocabulary(tuple(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """The ids of ``text``'s characters (int32).

        Raises:
            ValueError: a character not in the vocabulary (named).
        """
        table = np.full(max(map(ord, self.chars), default=0) + 1, -1, np.int32)
        table[[ord(c) for c in self.chars]] = np.arange(self.size, dtype=np.int32)
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        inside = codes < table.size
        ids = np.full(codes.shape, -1, np.int32)
        ids[inside] = table[codes[inside]]
        if (ids < 0).any():
            bad = text[int(np.argmax(ids < 0))]
            raise ValueError(f"CharVocabulary.encode: character {bad!r} is not in the vocabulary")
        return ids

    def decode(self, ids: np.ndarray) -> str:
        """The text of ``ids``."""
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


def char_corpus(name: str = "shakespeare") -> tuple[str, CharVocabulary, np.ndarray]:
    """``(text, vocabulary, ids)`` of a shipped corpus, character by character."""
    text = load_text(name)
    vocab = CharVocabulary.of(text)
    return text, vocab, vocab.encode(text)


def batches(
    ids: np.ndarray, length: int, batch_size: int, seed: int = 0, count: int | None = None
) -> Iterator[np.ndarray]:
    """Batches ``[batch_size, length]`` (int32) of consecutive ids: the text cut into
    sequences of ``length``, shuffled with ``seed``, reshuffled after each pass (``count``
    batches, or forever).

    Raises:
        ValueError: a text shorter than one batch, or sizes that are not positive.
    """
    if length < 1 or batch_size < 1:
        raise ValueError(
            f"batches: length and batch_size must be positive ({length}, {batch_size})"
        )
    seqs = np.asarray(ids, np.int32)[: len(ids) // length * length].reshape(-1, length)
    if seqs.shape[0] < batch_size:
        raise ValueError(
            f"batches: {len(ids)} ids make {seqs.shape[0]} sequences of {length}; a batch "
            f"needs {batch_size}"
        )
    rng = np.random.default_rng(seed)
    made = 0
    while count is None or made < count:
        order = rng.permutation(seqs.shape[0])
        for lo in range(0, order.size - batch_size + 1, batch_size):
            if count is not None and made >= count:
                return
            yield seqs[order[lo : lo + batch_size]]
            made += 1


__all__ = ["DATA_DIR", "TEXTS", "CharVocabulary", "batches", "char_corpus", "load_text"]
