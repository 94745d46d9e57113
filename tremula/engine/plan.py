"""Precomputed data movement: where a flat list of element addresses lives in storage.

A :class:`Gather` is either a slice (the addresses are consecutive: zero-copy views) or an
index array. Compile builds them once; the run path only replays them.
"""

from __future__ import annotations

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
        if isinstance(rsel, slice) or isinstance(self.index, slice):
            return arr[rsel, self.index]
        return arr[rsel[:, None], self.index[None, :]]

    def write(
        self, storage: dict[Type, np.ndarray], rsel: slice | np.ndarray, values: np.ndarray
    ) -> None:
        arr = storage[self.dtype]
        if isinstance(rsel, slice) or isinstance(self.index, slice):
            arr[rsel, self.index] = values
        else:
            arr[rsel[:, None], self.index[None, :]] = values
