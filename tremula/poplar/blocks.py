"""Copies between two ordered lists of element addresses as a few strided block copies.

A copy ``dst[b[i]] = src[a[i]]`` whose address lists are made of runs of consecutive
addresses, the runs' starts stepping evenly in both lists (rows of a matrix, the pieces of
a concatenation, a tensor moved into a block-interleaved layout), is a few NumPy copies
between strided views: memory-speed copies instead of an index gather and scatter of every
element. :func:`plan` finds the blocks (pure, once per address pair), :func:`views` makes
the view pairs over ``[replica, address]`` arrays and :func:`copier` binds them into a call.
The engine's ``Copy`` programs (``tremula.engine.plan.CopyPlan``) and codelets' prepared
runs (operand gathers, dynamic slices) use them; the numbers moved are the same as the
gather and scatter's, only faster.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: ``(position, src start, src step, dst start, dst step, runs, run length)``: ``runs``
#: runs of ``run length`` elements, the ``k``-th read at ``src start + k * src step`` and
#: written at ``dst start + k * dst step``; ``position`` is its first element's place in
#: the lists
Block = tuple[int, int, int, int, int, int, int]

#: at most one block per this many elements (and one block for fewer), else the gather and
#: scatter are cheaper
ELEMENTS_PER_BLOCK = 1024
#: runs shorter than this on average are left to the gather and scatter
MIN_AVERAGE_RUN = 8
#: most interleaved progressions :func:`_interleaved` looks for
INTERLEAVE = 8


def plan(a: np.ndarray, b: np.ndarray) -> list[Block]:
    """The blocks covering the copy from addresses ``a`` to addresses ``b`` (equal sizes):
    in order, or as interleaved progressions when those are fewer and every element is
    written once; empty when the runs are short or would need more than one block per
    :data:`ELEMENTS_PER_BLOCK` elements (then the gather and scatter are the better way)."""
    n = int(a.size)
    if n == 0 or b.size != n:
        return []
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    b = np.asarray(b, dtype=np.int64).reshape(-1)
    cut = np.flatnonzero((a[1:] != a[:-1] + 1) | (b[1:] != b[:-1] + 1)) + 1
    if cut.size + 1 > n // MIN_AVERAGE_RUN:  # short runs: nothing to gain
        return []
    starts = np.concatenate(([0], cut))
    lens = np.diff(np.concatenate((starts, [n])))
    ordered = _in_order(starts, lens, a[starts], b[starts], max(1, n // ELEMENTS_PER_BLOCK))
    interleaved = _interleaved(starts, lens, a[starts], b[starts])
    if (
        interleaved
        and (ordered is None or len(interleaved) < len(ordered))
        and np.unique(b).size == n  # each written once: any order will do
    ):
        return interleaved
    return ordered or []


def _in_order(
    pos: np.ndarray, lens: np.ndarray, sa: np.ndarray, sb: np.ndarray, limit: int
) -> list[Block] | None:
    """The runs in order as blocks of consecutive runs of one length stepping evenly in
    both lists; None past ``limit`` blocks."""
    lens_l, sa_l, sb_l, pos_l = lens.tolist(), sa.tolist(), sb.tolist(), pos.tolist()
    blocks: list[Block] = []
    i, runs = 0, len(pos_l)
    while i < runs:
        j, da, db = i + 1, 0, 0
        if j < runs and lens_l[j] == lens_l[i]:
            da, db = sa_l[j] - sa_l[i], sb_l[j] - sb_l[i]
            while (
                j < runs
                and lens_l[j] == lens_l[i]
                and sa_l[j] - sa_l[j - 1] == da
                and sb_l[j] - sb_l[j - 1] == db
            ):
                j += 1
        blocks.append((pos_l[i], sa_l[i], da, sb_l[i], db, j - i, lens_l[i]))
        if len(blocks) > limit:
            return None
        i = j
    return blocks


def _interleaved(pos: np.ndarray, lens: np.ndarray, sa: np.ndarray, sb: np.ndarray) -> list[Block]:
    """The runs as ``k <= INTERLEAVE`` blocks, block ``c`` holding runs ``c, c + k, ...``
    when each such class has runs of one length stepping evenly in both address lists
    (buckets swapped in pairs, rolled within groups: a few long blocks instead of one per
    group); empty when no ``k`` fits."""
    runs = lens.size
    for k in range(2, min(INTERLEAVE, runs // 2) + 1):
        blocks = []
        for c in range(k):
            ln, a, b = lens[c::k], sa[c::k], sb[c::k]
            da, db = (int(a[1] - a[0]), int(b[1] - b[0])) if a.size > 1 else (0, 0)
            if np.any(ln != ln[0]) or np.any(np.diff(a) != da) or np.any(np.diff(b) != db):
                break
            blocks.append((int(pos[c]), int(a[0]), da, int(b[0]), db, int(a.size), int(ln[0])))
        else:
            return blocks
    return []


def strided(
    arr: np.ndarray,
    start: int,
    step: int,
    count: int,
    length: int,
    outer: tuple[int, int] | None = None,
) -> np.ndarray:
    """``[replica, count, length]``: ``count`` runs of ``length`` elements of ``arr``'s rows,
    the ``k``-th starting at ``start + k * step``; with ``outer = (blocks, stride)``,
    ``[replica, blocks, count, length]``, block ``b`` starting ``b * stride`` further."""
    item = arr.itemsize
    shape: tuple[int, ...] = (arr.shape[0], count, length)
    strides: tuple[int, ...] = (arr.strides[0], step * item, item)
    if outer is not None:
        shape = (shape[0], outer[0], *shape[1:])
        strides = (strides[0], outer[1] * item, *strides[1:])
    return np.lib.stride_tricks.as_strided(arr[:, start:], shape=shape, strides=strides)


def merged(blocks: list[Block]) -> tuple[int, ...] | None:
    """``(src start, src block step, src run step, dst start, dst block step, dst run step,
    blocks, runs, run length)`` when ``blocks`` are one block shape repeated at even steps
    in both address lists, else None."""
    if len(blocks) < 2:
        return None
    _, sa, da, sb, db, count, length = blocks[0]
    ea, eb = blocks[1][1] - sa, blocks[1][3] - sb
    for i, (_, a, d_a, b, d_b, c, n) in enumerate(blocks):
        if (d_a, d_b, c, n) != (da, db, count, length) or (a, b) != (sa + i * ea, sb + i * eb):
            return None
    return sa, ea, da, sb, eb, db, len(blocks), count, length


def views(src: np.ndarray, dst: np.ndarray, blocks: list[Block]) -> list[tuple[np.ndarray, ...]]:
    """``(source view, destination view)`` of every block over the ``[replica, address]``
    arrays ``src`` and ``dst``. Blocks that are one block repeated at even steps in both
    lists (a tensor moved into or out of block-interleaved order) become one 4-D view pair,
    so that NumPy walks the copy in memory order rather than block by block."""
    joined = merged(blocks)
    if joined is not None:
        sa, ea, da, sb, eb, db, k, count, length = joined
        return [
            (
                strided(src, sa, da, count, length, (k, ea)),
                strided(dst, sb, db, count, length, (k, eb)),
            )
        ]
    return [
        (strided(src, sa, da, count, length), strided(dst, sb, db, count, length))
        for _, sa, da, sb, db, count, length in blocks
    ]


def overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether some address is in both lists."""
    if a.size == 0 or b.size == 0:
        return False
    lo, hi = max(int(a.min()), int(b.min())), min(int(a.max()), int(b.max()))
    if lo > hi:
        return False
    seen = np.zeros(hi - lo + 1, dtype=bool)
    seen[a[(a >= lo) & (a <= hi)] - lo] = True
    inside = b[(b >= lo) & (b <= hi)]
    return bool(seen[inside - lo].any())


def copier(
    src: np.ndarray, a: np.ndarray, dst: np.ndarray, b: np.ndarray
) -> Callable[[], None] | None:
    """A call that copies, on every row, ``src[:, a]`` into ``dst[:, b]`` as strided block
    copies (:func:`plan`); None when the blocks do not pay, or when ``src`` and ``dst``
    are one array and the lists share an address (the caller's gather and scatter keep
    the read-before-write order)."""
    if src is dst and overlap(a, b):
        return None
    pairs = views(src, dst, plan(a, b))
    if not pairs:
        return None
    if len(pairs) == 1:
        (s, d), copyto = pairs[0], np.copyto
        return lambda: copyto(d, s)

    def copy() -> None:
        for s, d in pairs:
            np.copyto(d, s)

    return copy


def gatherer(src: np.ndarray, index: np.ndarray, buf: np.ndarray) -> Callable[[], None]:
    """A call that fills ``buf`` (``[replica, n]``, its own array) with ``src[:, index]``:
    strided block copies where :func:`plan` finds them, else one ``take`` (the addresses
    are in range: ``"clip"`` skips the check)."""
    index = np.asarray(index, dtype=np.int64).reshape(-1)
    copy = copier(src, index, buf, np.arange(index.size, dtype=np.int64))
    if copy is not None:
        return copy

    def take() -> None:
        np.take(src, index, axis=1, out=buf, mode="clip")

    return take
