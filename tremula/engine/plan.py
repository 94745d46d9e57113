"""Precomputed data movement: where a flat list of element addresses lives in storage.

A :class:`Gather` is either a slice (the addresses are consecutive: zero-copy views) or an
index array. Compile builds them once; the run path only replays them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.poplar.types import Type


@dataclass(frozen=True)
class Gather:
    """Elements ``addresses`` of the space of ``dtype``, in order."""

    dtype: Type
    index: slice | np.ndarray
    size: int

    @staticmethod
    def of(dtype: Type, addresses: np.ndarray) -> Gather:
        addr = np.asarray(addresses, dtype=np.int64).reshape(-1)
        n = addr.size
        if n == 0:
            return Gather(dtype, slice(0, 0), 0)
        lo = int(addr[0])
        if int(addr[-1]) - lo == n - 1 and (n == 1 or bool(np.all(np.diff(addr) == 1))):
            return Gather(dtype, slice(lo, lo + n), n)
        return Gather(dtype, addr, n)

    @property
    def is_view(self) -> bool:
        return isinstance(self.index, slice)

    def addresses(self) -> np.ndarray:
        if isinstance(self.index, slice):
            return np.arange(self.index.start, self.index.stop, dtype=np.int64)
        return self.index

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
