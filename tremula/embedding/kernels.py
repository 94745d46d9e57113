"""The host's work, in NumPy: gathering rows, summing the gradients of repeated indices, and
applying an update to the touched rows of a table (in place, a chunk of rows at a time).

Sums are exact in the order of occurrence: the gradient of a row that appears ``k`` times is
``((g_1 + g_2) + ...) + g_k`` in the order the rows appear, as ``np.add.at`` into zeros and
as the device's ``popops::MultiUpdateAdd`` sum them, so every mode gives the same bits. The
sum never calls ``np.add.at`` (slow: a ufunc call per index): one sort of (row, position)
keys groups the repeats; rows seen a few times are summed one rank of repeat at a time
(the ``r``-th occurrences of all rows in one vectorised add), the few rows seen many times
one by one with ``np.add.reduce`` over their occurrences (sequential along the rows too).
The rows seen once (most of a batch over a large table) are not summed at all: the update
reads their gradients straight from the batch.

Updates are read-modify-write over chunks of rows (gather a chunk, compute, scatter it back
while its cache lines are still in the cache): one random access per row instead of two.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

#: rows per read-modify-write chunk (128 KiB of 64-float rows: in the L2 cache)
CHUNK = 512


def lookup(table: np.ndarray, indices: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[i] = table[indices[i]]``; ``indices`` must be in range (clipped or checked).
    ``np.take`` with ``mode="clip"`` writes straight into ``out`` (the default mode buffers
    the result first). One thread: a helper thread made lookups slower on a busy machine
    (waiting for a descheduled helper) and gained little on an idle one."""
    return np.take(table, indices, axis=0, mode="clip", out=out)


@dataclass
class RowSums:
    """The distinct rows a batch of gradients touches and each row's summed gradient.

    ``rows`` lists the rows seen once first, in order of occurrence, then the repeated rows
    in increasing order. The sums of the rows seen once are their gradients, read from
    ``grads`` when needed (:meth:`take`) rather than copied; the repeated rows' sums are
    ``repeated``.
    """

    rows: np.ndarray  # [u]
    grads: np.ndarray  # [n, e]: the batch
    once: np.ndarray  # positions in ``grads`` of the rows seen once (``rows[:once.size]``)
    repeated: np.ndarray  # [u - once.size, e] float32 sums of the others

    @property
    def size(self) -> int:
        return int(self.rows.size)

    def take(self, chunk: slice, out: np.ndarray) -> np.ndarray:
        """The sums of ``rows[chunk]``, written into ``out`` (float32, at least as long)."""
        lo, hi, k = chunk.start, min(chunk.stop, self.size), self.once.size
        out = out[: hi - lo]
        if lo < k:
            _gather(self.grads, self.once[lo : min(hi, k)], out[: min(hi, k) - lo])
        if hi > k:
            b = max(lo, k)
            out[b - lo :] = self.repeated[b - k : hi - k]
        return out

    def sums(self) -> np.ndarray:
        """All the sums, ``[u, e]`` float32."""
        out = np.empty((self.size, self.grads.shape[1]), self.repeated.dtype)
        return self.take(slice(0, self.size), out)


def segment_sum(indices: np.ndarray, grads: np.ndarray) -> RowSums:
    """The distinct rows of ``indices`` and the sum of each row's gradients (float32, or
    float64 for float64 gradients), summed in order of occurrence.

    Args:
        indices: ``[n]`` non-negative integers below 2**31.
        grads: ``[n, e]``.

    Returns:
        The :class:`RowSums`.
    """
    n, e = indices.size, grads.shape[1]
    dtype = np.float64 if grads.dtype == np.float64 else np.float32
    keys = indices.astype(np.int64)
    keys <<= 32
    keys |= np.arange(n, dtype=np.int64)
    keys.sort()  # by row, then by position: each row's repeats in order of occurrence
    rows_sorted = keys >> 32
    pos = keys & 0xFFFFFFFF
    starts = np.ones(n, bool)
    np.not_equal(rows_sorted[1:], rows_sorted[:-1], out=starts[1:])
    first = np.flatnonzero(starts)
    counts = np.diff(first, append=n)
    single = np.zeros(n, bool)
    single[pos[first[counts == 1]]] = True
    once = np.flatnonzero(single)  # positions of the rows seen once, in order
    repeated = np.flatnonzero(counts > 1)
    rows = np.concatenate([indices[once].astype(np.int64), rows_sorted[first[repeated]]])
    sums = np.empty((repeated.size, e), dtype)
    _gather(grads, pos[first[repeated]], sums)
    _add_repeats(grads, pos, first[repeated], counts[repeated], sums)
    return RowSums(rows, grads, once, sums)


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
    at ``pos[first[k]:]``) into ``sums[k]``, sequentially.

    Rows repeated at most ``h`` times go rank by rank: ordered by decreasing count, the
    rows that have an ``r``-th repeat are a prefix, so rank ``r`` is one add of a slice of
    the gradients (gathered once, rank after rank). The few rows repeated more than ``h``
    times go row by row (``np.add.reduce`` along the rows, which is sequential, over a slice
    of their occurrences, gathered once). ``h`` balances the two loops."""
    h = _depth(counts)
    light = np.flatnonzero(counts <= h)
    if light.size and h > 1:
        order = light[np.argsort(-counts[light], kind="stable")]
        alive = np.searchsorted(-counts[order], -np.arange(1, h), side="left")  # c > r
        ranks = np.repeat(np.arange(1, h), alive)
        within = np.arange(ranks.size) - np.repeat(np.cumsum(alive) - alive, alive)
        block = grads[pos[first[order[within]] + ranks]].astype(sums.dtype, copy=False)
        part = sums[order]
        offset = 0
        for m in alive.tolist():
            part[:m] += block[offset : offset + m]
            offset += m
        sums[order] = part
    heavy = np.flatnonzero(counts > h)
    if heavy.size:
        lengths = counts[heavy]
        starts = np.cumsum(lengths) - lengths
        within = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
        block = grads[pos[np.repeat(first[heavy], lengths) + within]].astype(sums.dtype, copy=False)
        for k, lo, n in zip(heavy.tolist(), starts.tolist(), lengths.tolist()):
            sums[k] = np.add.reduce(block[lo : lo + n], axis=0)


def _depth(counts: np.ndarray) -> int:
    """The smallest ``h`` with at most ``h`` rows repeated more than ``h`` times (so that
    both loops of :func:`_add_repeats` make at most ``h`` Python steps)."""
    if counts.size == 0:
        return 1
    desc = np.sort(counts)[::-1]  # desc[h] > h while more than h rows exceed h
    h = int(np.searchsorted(-(desc - np.arange(desc.size)), 0))
    return max(h, 1)


RowStep = Callable[[np.ndarray, np.ndarray, slice], np.ndarray]


def read_modify_write(
    table: np.ndarray, rows: np.ndarray, step: RowStep, scratch: np.ndarray | None = None
) -> None:
    """``table[rows] = step(old rows ...)`` chunk by chunk, all or nothing.

    ``step(old, new, chunk)`` receives a chunk's old rows (``old``, a gathered copy in the
    table's dtype) and a float32 buffer ``new`` of the same shape to fill with the new rows
    (the chunk being ``chunk``, a slice of ``rows``); it returns the array to write. If
    it raises, the chunks already written are restored and the exception propagates: the
    table is never left half-updated.

    The chunks are shared between threads (:func:`_share`; NumPy releases the GIL in the
    gathers, scatters and arithmetic). The rows are distinct, so the result does not
    depend on which thread updates which chunk.

    Args:
        table: ``[t, e]``, written in place (a memmap too).
        rows: ``[u]`` distinct row indices.
        step: the update of one chunk; called from several threads at once, on different
            chunks.
        scratch: a buffer of at least ``u`` rows of the table's dtype to keep the old rows
            in (reused across calls, it saves allocating and faulting in fresh pages).
    """
    u = rows.size
    if scratch is None or scratch.shape[0] < u:
        scratch = np.empty((u, table.shape[1]), table.dtype)
    old = scratch[:u]
    chunks = [slice(lo, min(u, lo + CHUNK)) for lo in range(0, u, CHUNK)]
    done = np.zeros(len(chunks), bool)
    buffers: dict[int, np.ndarray] = {}  # a float32 chunk buffer per thread

    def update(i: int) -> None:
        chunk = chunks[i]
        r = rows[chunk]
        new = buffers.get(threading.get_ident())
        if new is None:
            new = buffers[threading.get_ident()] = np.empty((CHUNK, table.shape[1]), np.float32)
        np.take(table, r, axis=0, mode="clip", out=old[chunk])
        table[r] = step(old[chunk], new[: r.size], chunk)
        done[i] = True

    errors = _share(len(chunks), update)
    if errors:
        for i in np.flatnonzero(done).tolist():
            table[rows[chunks[i]]] = old[chunks[i]]
        raise errors[0]


#: threads sharing a large update (the host's cores, at most 2: random row accesses are
#: bound by memory latency, which two threads overlap)
WORKERS = min(2, os.cpu_count() or 1)
_POOL: list[ThreadPoolExecutor] = []


def _share(count: int, work: Callable[[int], None]) -> list[BaseException]:
    """``work(i)`` for every ``i < count``, shared between this thread and the pool's:
    each claims the next item until none is left, so this thread never waits for a helper
    that has not started (on a busy machine the work simply stays on this thread). Work
    stops at the first exception; the exceptions raised are returned."""
    claim = itertools.count()
    errors: list[BaseException] = []

    def loop() -> None:
        while not errors:
            i = next(claim)  # atomic under the GIL
            if i >= count:
                return
            try:
                work(i)
            except BaseException as err:
                errors.append(err)

    helpers = []
    if WORKERS > 1 and count > 1:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(WORKERS - 1, thread_name_prefix="embedding"))
        helpers = [_POOL[0].submit(loop) for _ in range(WORKERS - 1)]
    loop()
    for h in helpers:
        if not h.cancel():  # started: wait for the item it holds
            h.result()
    return errors
