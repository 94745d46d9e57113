"""Run-length views of address arrays: most tensors are a few contiguous runs, so checks over
intervals cost far less than checks over elements."""

from __future__ import annotations

from typing import Literal

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (flattened), as ``np.unique`` returns them.
    For integers, booleans and strings a sort and a comparison of neighbours; NumPy's own
    ``np.unique`` loads ``numpy.ma`` on its first call (to ask whether its argument is
    masked), tens of milliseconds of a first session's compile. Floats (whose NaNs
    ``np.unique`` collapses) and other kinds go to ``np.unique``."""
    a = np.asarray(values)
    if a.dtype.kind not in "biuUS":
        return np.unique(a)
    a = np.sort(a.reshape(-1))
    if a.size < 2:
        return a
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def runs(addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the maximal runs of consecutive addresses, in array order."""
    a = np.asarray(addresses, dtype=np.int64).reshape(-1)
    if a.size == 0:
        z = np.zeros(0, np.int64)
        return z, z
    head = np.empty(a.size, dtype=bool)  # each run's first address (masks: no index arrays)
    head[0] = True
    np.not_equal(np.diff(a), 1, out=head[1:])
    tail = np.empty_like(head)  # and its last
    tail[:-1] = head[1:]
    tail[-1] = True
    return a[head], a[tail] + 1


def union_runs(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, bool]:
    """Sorted runs of several run lists, and whether any two of them overlap."""
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, False
    starts = np.concatenate([p[0] for p in parts])
    ends = np.concatenate([p[1] for p in parts])
    order = np.argsort(starts, kind=sort_kind(starts))
    starts, ends = starts[order], ends[order]
    overlap = bool(np.any(starts[1:] < np.maximum.accumulate(ends)[:-1])) if starts.size else False
    return starts, ends, overlap


def sort_kind(values: np.ndarray) -> Literal["stable", "quicksort"]:
    """The faster ``argsort`` kind for ``values`` (callers that need no stable order): a
    merge sort when they are mostly in order already (runs listed vertex by vertex: it then
    only merges a few sorted stretches), else NumPy's vectorised quicksort (several times
    faster on shuffled keys)."""
    descents = np.count_nonzero(values[1:] < values[:-1])
    return "stable" if descents * PRESORTED <= values.size else "quicksort"


#: values with fewer than one descent in this many count as mostly in order
PRESORTED = 64


def first_overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int | None:
    """An address in both run sets (``b`` sorted and disjoint; ``a`` in any order), or None:
    the first such address of the ``a`` run that starts lowest (the first listed of
    equals)."""
    (s, e), (bs, be) = a, b
    if s.size == 0 or bs.size == 0:
        return None
    # for each run of a, the last run of b starting before its end
    j = np.searchsorted(bs, e, side="left") - 1
    ok = j >= 0
    hit = ok & (be[np.maximum(j, 0)] > s)
    if not hit.any():
        return None
    hits = np.flatnonzero(hit)
    i = int(hits[np.argmin(s[hits])])
    return int(max(s[i], bs[j[i]]))


def split_runs(
    pos: np.ndarray, length: np.ndarray, cuts: np.ndarray, rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals ``[pos, pos + length)`` (``length >= 1``) at the sorted ``cuts``: the
    pieces' starts, lengths, and the interval each comes from. ``rank`` (:func:`cut_rank`),
    when given, looks each interval's cuts up instead of searching for them."""
    if cuts.size == 0 or pos.size == 0:
        return pos, length, np.arange(pos.size)
    end = pos + length
    if rank is None:
        lo = np.searchsorted(cuts, pos, side="right")
        hi = np.searchsorted(cuts, end, side="left")
    else:
        lo, hi = rank[pos], rank[end - 1]
    if np.array_equal(lo, hi):  # no interval crosses a cut
        return pos, length, np.arange(pos.size)
    pieces = np.maximum(hi - lo, 0) + 1
    run = np.repeat(np.arange(pos.size), pieces)
    j = np.arange(run.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    last = cuts.size - 1
    begin = np.where(j == 0, pos[run], cuts[np.minimum(lo[run] + j - 1, last)])
    stop = np.where(j == pieces[run] - 1, end[run], cuts[np.minimum(lo[run] + j, last)])
    return begin, stop - begin, run


def cut_rank(cuts: np.ndarray, size: int) -> np.ndarray:
    """``rank[p]``, the number of the sorted, distinct ``cuts`` at or below ``p`` for ``0 <=
    p < size``: a run's cuts by lookup (one table per axis, built in one pass)."""
    mark = np.zeros(size, dtype=np.int32 if size < 2**31 else np.int64)
    mark[cuts[cuts < size]] = 1
    return np.cumsum(mark, dtype=mark.dtype)
