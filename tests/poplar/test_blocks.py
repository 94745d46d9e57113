"""``poplar.blocks``: copies between address lists as strided block copies. Each copy is
checked bit for bit against the plain gather and scatter (``dst[:, b] = src[:, a]``) on
random storage, and the cases where blocks do not pay must fall back (None)."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.poplar import blocks

RNG = np.random.default_rng(5)


def _storage(size: int, replicas: int = 2) -> np.ndarray:
    return RNG.standard_normal((replicas, size)).astype(np.float32)


def _copied(a: np.ndarray, b: np.ndarray, replicas: int = 2) -> bool:
    """Copy ``a`` -> ``b`` within one array through :func:`blocks.copier` (twice, the views
    kept) and compare with the gather and scatter; whether blocks were used."""
    arr = _storage(int(max(a.max(), b.max())) + 16, replicas)
    want = arr.copy()
    want[:, b] = arr[:, a]
    copy = blocks.copier(arr, a, arr, b)
    if copy is None:
        return False
    before = arr.copy()
    for _ in range(2):
        arr[...] = before
        copy()
        np.testing.assert_array_equal(arr, want)
    return True


def test_rows_of_a_column_block_are_one_strided_block():
    """A [16, 64] column block of a [16, 256] matrix (a gate of an LSTM's gates) into a
    contiguous tensor: 16 runs stepping evenly, one block, one copy."""
    rows = (np.arange(16)[:, None] * 256 + 64 + np.arange(64)).reshape(-1)
    dst = 10_000 + np.arange(rows.size)
    assert blocks.plan(rows, dst) == [(0, 64, 256, 10_000, 64, 16, 64)]
    assert _copied(rows, dst)
    assert _copied(dst, rows)  # and back (a dynamic update)


def test_a_concatenation_of_two_tensors_is_a_block_each():
    """``[x_t, h]`` rows: 16 rows of 64 from one tensor then 64 from another, into a
    [16, 128] buffer: two blocks (one per source tensor)."""
    x = (np.arange(16)[:, None] * 64 + np.arange(64)).reshape(16, 64)
    h = 5000 + x
    a = np.concatenate([x, h], axis=1).reshape(-1)
    b = 20_000 + np.arange(a.size)
    assert len(blocks.plan(a, b)) == 2
    assert _copied(a, b)


def test_short_runs_reversed_and_overlapping_copies_fall_back():
    a = np.arange(0, 4096, 2)  # runs of one element
    assert blocks.plan(a, 10_000 + np.arange(a.size)) == []
    assert not _copied(a, 10_000 + np.arange(a.size))
    rev = np.arange(1024)[::-1].copy()
    assert not _copied(rev, 5000 + np.arange(1024))
    shifted = np.arange(1024)
    assert not _copied(shifted, shifted + 64)  # one array, shared addresses: the caller's
    # many distinct blocks for few elements: the gather and scatter
    pieces = np.concatenate([i * 100 + np.arange(8 + i) for i in range(12)])
    assert blocks.plan(pieces, 50_000 + np.arange(pieces.size)) == []


@pytest.mark.parametrize("seed", range(8))
def test_random_run_structures_copy_like_the_gather_and_scatter(seed):
    """Random pieces: equal-length runs at even steps (a strided block), a few such
    blocks, or runs of random lengths; whatever the plan, the copy is the reference's."""
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(int(rng.integers(1, 4))):
        count, length = int(rng.integers(1, 40)), int(rng.integers(1, 200))
        step = length + int(rng.integers(0, 50))
        start = int(rng.integers(0, 40_000))
        parts.append((start + np.arange(count)[:, None] * step + np.arange(length)).reshape(-1))
    a = np.concatenate(parts)
    b = 100_000 + np.arange(a.size)
    _copied(a, b, replicas=int(rng.integers(1, 3)))
    buf = np.empty((2, a.size), np.float32)
    arr = _storage(50_000)
    blocks.gatherer(arr, a, buf)()
    np.testing.assert_array_equal(buf, arr[:, a])


@pytest.mark.parametrize("n", [1, 7, 64, 1000])
def test_gatherer_fills_the_buffer_like_take(n):
    arr = _storage(5000, replicas=3)
    for a in (
        RNG.permutation(5000)[:n],
        np.arange(n) * 3,
        (np.arange(max(n // 8, 1))[:, None] * 40 + np.arange(8)).reshape(-1)[:n],
    ):
        buf = np.full((3, a.size), np.nan, np.float32)
        gather = blocks.gatherer(arr, a, buf)
        for _ in range(2):
            buf[...] = np.nan
            gather()
            np.testing.assert_array_equal(buf, arr[:, a])
