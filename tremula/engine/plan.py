"""Precomputed data movement: where a flat list of element addresses lives in storage.

A :class:`Gather` is either a slice (the addresses are consecutive: zero-copy views) or an
index array. Compile builds them once; the run path only replays them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.poplar import blocks
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


class CopyPlan:
    """``dst <- src`` for two :class:`Gather` s of one type and size (a ``Copy`` program).

    Copies whose address lists are made of runs of consecutive elements, the runs' starts
    stepping evenly in both lists (a tensor moved between tiles, buckets shifted by one
    partition, the rows of a matrix: a few blocks of equal rows), run as strided block
    copies (``tremula.poplar.blocks``; through a kept buffer when source and destination
    overlap, so that every element is read before any is written): memory-speed copies
    instead of an index gather and scatter of every element. Copies between two slices
    (one NumPy copy already), copies that would need more than one block per
    ``blocks.ELEMENTS_PER_BLOCK`` elements and runs on a subset of the replicas use the
    gather and scatter. The plan is made on first use."""

    __slots__ = ("_blocks", "_views", "dst", "src")

    def __init__(self, src: Gather, dst: Gather) -> None:
        self.src, self.dst = src, dst
        self._blocks: list[blocks.Block] | None = None
        self._views: tuple[np.ndarray, list[tuple[Any, ...]]] | None = None

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
        buffer only when some element is both read and written."""
        planned = self._blocks or []
        if not self._overlap():
            return [(s, None, d) for s, d in blocks.views(arr, arr, planned)]
        buf = np.empty((arr.shape[0], self.src.size), dtype=arr.dtype)
        views, at = [], 0  # each block's place in the buffer: after the previous ones
        for _, sa, da, sb, db, count, length in planned:
            held = buf[:, at : at + count * length].reshape(buf.shape[0], count, length)
            views.append(
                (
                    blocks.strided(arr, sa, da, count, length),
                    held,
                    blocks.strided(arr, sb, db, count, length),
                )
            )
            at += count * length
        return views

    def _overlap(self) -> bool:
        return blocks.overlap(self.src.addresses(), self.dst.addresses())

    def _plan(self) -> list[blocks.Block]:
        """Blocks covering the copy (``blocks.plan``); empty when the gather and scatter
        are the better way."""
        if self.src.dtype != self.dst.dtype or self.dst.size != self.src.size:
            return []
        if self.src.is_view and self.dst.is_view:
            return []  # one slice copy
        return blocks.plan(self.src.addresses(), self.dst.addresses())
