"""The host's work, in NumPy: gathering rows, summing the gradients of repeated indices, and
applying an update to the touched rows of a table (in place, a chunk of rows at a time).

Sums are exact in the order of occurrence: the gradient of a row that appears ``k`` times is
``((g_1 + g_2) + ...) + g_k`` in the order the rows appear, as ``np.add.at`` into zeros and
as the device's ``popops::MultiUpdateAdd`` sum them, so every mode gives the same bits. The
sum never calls ``np.add.at`` (slow: a ufunc call per index): one sort of (row, position)
keys groups the repeats; rows seen a few times are summed one rank of repeat at a time
(the ``r``-th occurrences of all rows in one vectorised add), the few rows seen many times
one by one with ``np.add.reduce`` over their occurrences (sequential along the rows too).

Updates are read-modify-write over chunks of rows (gather a chunk, compute, scatter it back
while its cache lines are still in the cache): one random access per row instead of two.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: rows per read-modify-write chunk (about 256 KiB of 64-float rows: in the L2 cache)
CHUNK = 1024


def lookup(table: np.ndarray, indices: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[i] = table[indices[i]]``; ``indices`` must be in range (clipped or checked).
    ``np.take`` with ``mode="clip"`` writes straight into ``out`` (the default mode buffers
    the result first)."""
    return np.take(table, indices, axis=0, mode="clip", out=out)


def segment_sum(indices: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``indices`` and the sum of each row's gradients (float32, or
    float64 for float64 gradients), summed in order of occurrence.

    Rows that occur once come first, in order of occurrence (their gradients are read in
    order, not scattered), then the repeated rows in increasing order.

    Args:
        indices: ``[n]`` non-negative integers below 2**31.
        grads: ``[n, e]``.

    Returns:
        ``(rows [u], sums [u, e])``.
    """
    n = indices.size
    dtype = np.float64 if grads.dtype == np.float64 else np.float32
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, grads.shape[1]), dtype)
    keys = (indices.astype(np.int64) << 32) | np.arange(n, dtype=np.int64)
    keys.sort()  # by row, then by position: each row's repeats in order of occurrence
    rows_sorted = keys >> 32
    pos = keys & 0xFFFFFFFF
    first = np.flatnonzero(np.r_[True, rows_sorted[1:] != rows_sorted[:-1]])
    counts = np.diff(np.r_[first, n])
    once = np.sort(pos[first[counts == 1]])  # positions of the rows seen once, in order
    repeated = np.flatnonzero(counts > 1)
    rows = np.concatenate([indices[once].astype(np.int64), rows_sorted[first[repeated]]])
    sums = np.empty((rows.size, grads.shape[1]), dtype)
    _gather(grads, once, sums[: once.size])
    tail = sums[once.size :]
    _gather(grads, pos[first[repeated]], tail)
    _add_repeats(grads, pos, first[repeated], counts[repeated], tail)
    return rows, sums


def _gather(src: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = src[index]`` (straight into ``out`` when the types match)."""
    if src.dtype == out.dtype:
        np.take(src, index, axis=0, mode="clip", out=out)  # "raise" would buffer
    else:
        out[...] = src[index]


def _add_repeats(
    grads: np.ndarray, pos: np.ndarray, first: np.ndarray, counts: np.ndarray, sums: np.ndarray
) -> None:
    """Add the 2nd, 3rd ... occurrences of each repeated row ``k`` (``counts[k]`` of them,
    at ``pos[first[k]:]``) into ``sums[k]``, sequentially: rank by rank (one vectorised add
    per rank over the rows repeated that often) up to a depth ``h``, then row by row
    (``np.add.reduce`` along the rows, which is sequential) for the few rows repeated more
    than ``h`` times; ``h`` balances the two loops."""
    h = _depth(counts)
    light = np.flatnonzero(counts <= h)
    for r in range(1, h):
        light = light[counts[light] > r]
        if light.size == 0:
            break
        sums[light] += grads[pos[first[light] + r]]
    for k in np.flatnonzero(counts > h):
        occ = grads[pos[first[k] : first[k] + counts[k]]]
        sums[k] = np.add.reduce(occ.astype(sums.dtype, copy=False), axis=0)


def _depth(counts: np.ndarray) -> int:
    """The smallest ``h`` with at most ``h`` rows repeated more than ``h`` times (so that
    both loops of :func:`_add_repeats` make at most ``h`` Python steps)."""
    if counts.size == 0:
        return 1
    desc = np.sort(counts)[::-1]  # desc[h] > h while more than h rows exceed h
    h = int(np.searchsorted(-(desc - np.arange(desc.size)), 0))
    return max(h, 1)


RowStep = Callable[[np.ndarray, np.ndarray, slice], np.ndarray]


def read_modify_write(table: np.ndarray, rows: np.ndarray, step: RowStep) -> None:
    """``table[rows] = step(old_rows, sums_chunk...)`` chunk by chunk, all or nothing.

    ``step(old, new, chunk)`` receives a chunk's old rows (``old``, a gathered copy in the
    table's dtype) and a float32 buffer ``new`` to fill with the new rows (the chunk being
    ``chunk``, a slice of ``rows``); it returns the array to write (``new`` or another). If
    it raises, the chunks already written are restored and the exception propagates: the
    table is never left half-updated.

    Args:
        table: ``[t, e]``, written in place (a memmap too).
        rows: ``[u]`` distinct row indices.
        step: the update of one chunk.
    """
    u = rows.size
    old = np.empty((u, table.shape[1]), table.dtype)
    new = np.empty((min(u, CHUNK), table.shape[1]), np.float32)
    done = 0
    try:
        for lo in range(0, u, CHUNK):
            chunk = slice(lo, min(u, lo + CHUNK))
            r = rows[chunk]
            np.take(table, r, axis=0, mode="clip", out=old[chunk])
            out = step(old[chunk], new[: r.size], chunk)
            table[r] = out
            done = chunk.stop
    except BaseException:
        table[rows[:done]] = old[:done]
        raise
