"""Precomputed data movement: where a flat list of element addresses lives in storage.

A :class:`Gather` is either a slice (the addresses are consecutive: zero-copy views) or an
index array. Compile builds them once; the run path only replays them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.poplar.addresses import AddressList
from tremula.poplar.types import Type


class Gather:
    """Elements ``addrs`` of the space of ``dtype``, in order. The index used at run time
    (a slice when the addresses are consecutive, else an index array) is built on first
    use; compile-time questions (size, runs) need no per-element array."""

    __slots__ = ("_index", "addrs", "dtype")

    def __init__(self, dtype: Type, addrs: AddressList) -> None:
        self.dtype = dtype
        self.addrs = addrs
        self._index: slice | np.ndarray | None = None

    @staticmethod
    def of(dtype: Type, addresses: np.ndarray | AddressList) -> Gather:
        return Gather(dtype, AddressList.of(addresses))

    @property
    def size(self) -> int:
        return self.addrs.size

    @property
    def index(self) -> slice | np.ndarray:
        if self._index is None:
            if self.addrs.is_consecutive():
                lo = self.addrs.first() if self.size else 0
                self._index = slice(lo, lo + self.size)
            else:
                self._index = self.addrs.flat()
        return self._index

    @property
    def is_view(self) -> bool:
        return self.addrs.is_consecutive()

    def addresses(self) -> np.ndarray:
        return self.addrs.flat()

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)`` of the runs of consecutive addresses."""
        return self.addrs.runs()

    def read(self, storage: dict[Type, np.ndarray], rsel: slice | np.ndarray) -> np.ndarray:
        """``[replica, element]``; a view when possible (do not write to it)."""
        arr = storage[self.dtype]
        index = self.index
        if isinstance(index, slice):
            return arr[rsel, index]
        if isinstance(rsel, slice):
            # ``take`` along the element axis: the same copy as ``arr[rsel, index]``, about
            # twice as fast (NumPy's fancy indexing of a column index is the slow path)
            return arr[rsel].take(index, axis=1)
        return arr[rsel[:, None], index[None, :]]

    def write(
        self, storage: dict[Type, np.ndarray], rsel: slice | np.ndarray, values: np.ndarray
    ) -> None:
        arr = storage[self.dtype]
        if isinstance(rsel, slice) or isinstance(self.index, slice):
            arr[rsel, self.index] = values
        else:
            arr[rsel[:, None], self.index[None, :]] = values


#: below this many elements a copy is one gather and one scatter (block plans cost more)
_BLOCK_COPY_MIN = 4096
#: at most one block per this many elements, else the gather and scatter are cheaper
_ELEMENTS_PER_BLOCK = 1024


class CopyPlan:
    """``dst <- src`` for two :class:`Gather` s of one type and size (a ``Copy`` program).

    Large copies whose address lists are made of runs of consecutive elements, the runs'
    starts stepping evenly in both lists (a tensor moved between tiles, buckets shifted by
    one partition: a few blocks of equal rows), run as strided block copies through a kept
    buffer (so overlapping source and destination read before they write): memory-speed
    copies instead of an index gather and scatter of every element. Other copies, and runs
    on a subset of the replicas, use the gather and scatter. The plan is made on first use."""

    __slots__ = ("_blocks", "_views", "dst", "src")

    def __init__(self, src: Gather, dst: Gather) -> None:
        self.src, self.dst = src, dst
        self._blocks: list[tuple[int, int, int, int, int, int, int]] | None = None
        self._views: tuple[np.ndarray, list[tuple[np.ndarray, ...]]] | None = None

    def run(self, storage: dict[Type, np.ndarray], rsel: slice | np.ndarray) -> None:
        if self._blocks is None:
            self._blocks = self._plan()
        if not self._blocks or not isinstance(rsel, slice):
            self.dst.write(storage, rsel, self.src.read(storage, rsel))
            return
        arr = storage[self.src.dtype]
        views = self._views
        if views is None or views[0] is not arr:  # made once per loaded storage
            views = self._views = (arr, self._make_views(arr))
        for src, buf, dst in views[1]:
            if buf is None:  # source and destination do not overlap: copy directly
                np.copyto(dst, src)
            else:
                np.copyto(buf, src)
        for _, buf, dst in views[1]:
            if buf is not None:
                np.copyto(dst, buf)

    def _make_views(self, arr: np.ndarray) -> list[tuple[Any, ...]]:
        """(source, buffer or None, destination) views of every block over ``arr``; the
        buffer only when some element is both read and written. Blocks that are one block
        repeated at even steps in both lists (a tensor moved into or out of block-interleaved
        order) become one 4-D view, so that NumPy walks the copy in memory order rather
        than block by block."""
        buf = None
        if self._overlap():
            buf = np.empty((arr.shape[0], self.src.size), dtype=arr.dtype)
        elif (merged := _merged(self._blocks or [])) is not None:
            sa, ea, da, sb, eb, db, k, count, length = merged
            return [
                (
                    _strided(arr, sa, da, count, length, (k, ea)),
                    None,
                    _strided(arr, sb, db, count, length, (k, eb)),
                )
            ]
        views, at = [], 0  # each block's place in the buffer: after the previous ones
        for _, sa, da, sb, db, count, length in self._blocks or ():
            held = None
            if buf is not None:
                held = buf[:, at : at + count * length].reshape(buf.shape[0], count, length)
            views.append(
                (_strided(arr, sa, da, count, length), held, _strided(arr, sb, db, count, length))
            )
            at += count * length
        return views

    def _overlap(self) -> bool:
        a, b = self.src.addresses(), self.dst.addresses()
        lo, hi = max(int(a.min()), int(b.min())), min(int(a.max()), int(b.max()))
        if lo > hi:
            return False
        seen = np.zeros(hi - lo + 1, dtype=bool)
        inside = a[(a >= lo) & (a <= hi)]
        seen[inside - lo] = True
        inside = b[(b >= lo) & (b <= hi)]
        return bool(seen[inside - lo].any())

    def _plan(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """Blocks ``(position, src start, src step, dst start, dst step, rows, row length)``
        covering the copy (in order, or as interleaved progressions when every element is
        written once); empty when the gather and scatter are the better way."""
        n = self.src.size
        if n < _BLOCK_COPY_MIN or self.src.dtype != self.dst.dtype or self.dst.size != n:
            return []
        a = self.src.addresses().astype(np.int64, copy=False)
        b = self.dst.addresses().astype(np.int64, copy=False)
        cut = np.flatnonzero((a[1:] != a[:-1] + 1) | (b[1:] != b[:-1] + 1)) + 1
        if cut.size + 1 > n // 8:  # short runs: nothing to gain
            return []
        starts = np.concatenate(([0], cut))
        lens = np.diff(np.concatenate((starts, [n])))
        interleaved = _interleaved(starts, lens, a[starts], b[starts])
        if interleaved and np.unique(b).size == n:  # each written once: any order will do
            return interleaved
        lens = lens.tolist()
        sa, sb, starts = a[starts].tolist(), b[starts].tolist(), starts.tolist()
        blocks = []
        i, runs = 0, len(starts)
        while i < runs:
            j, da, db = i + 1, 0, 0
            if j < runs and lens[j] == lens[i]:
                da, db = sa[j] - sa[i], sb[j] - sb[i]
                while (
                    j < runs
                    and lens[j] == lens[i]
                    and sa[j] - sa[j - 1] == da
                    and sb[j] - sb[j - 1] == db
                ):
                    j += 1
            blocks.append((starts[i], sa[i], da, sb[i], db, j - i, lens[i]))
            if len(blocks) > n // _ELEMENTS_PER_BLOCK:
                return []
            i = j
        return blocks


#: most interleaved progressions :func:`_interleaved` looks for
_INTERLEAVE = 8


def _interleaved(
    pos: np.ndarray, lens: np.ndarray, sa: np.ndarray, sb: np.ndarray
) -> list[tuple[int, int, int, int, int, int, int]]:
    """The runs as ``k <= _INTERLEAVE`` blocks, block ``c`` holding runs ``c, c + k, ...``
    when each such class has runs of one length stepping evenly in both address lists
    (buckets swapped in pairs, rolled within groups: a few long blocks instead of one per
    group); empty when no ``k`` fits."""
    runs = lens.size
    for k in range(2, min(_INTERLEAVE, runs // 2) + 1):
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


def _strided(
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


def _merged(
    blocks: list[tuple[int, int, int, int, int, int, int]],
) -> tuple[int, ...] | None:
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
