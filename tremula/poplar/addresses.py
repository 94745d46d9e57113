"""Ordered lists of element addresses that stay compact.

A vertex field connected in bulk to a view of one variable (a slice, a transpose, a
broadcast with stride 0 ...) has addresses ``first + i*s0 + j*s1 + ...``: an affine layout.
:class:`AddressList` keeps such a list as that layout and answers what compilation asks
(its runs of consecutive addresses, its size) without materialising one address per
element; the flat array is built only if something needs it, once.
"""

from __future__ import annotations

import numpy as np

from tremula.poplar.intervals import runs as runs_of
from tremula.poplar.tensor import affine_layout


class AddressList:
    """Element addresses in order: an N-d address view (``source``) whose C-order
    flattening is the list, with its affine layout when it has one, or a flat array."""

    __slots__ = ("_flat", "_runs", "layout", "source")

    def __init__(self, source: np.ndarray, roots: dict[int, int] | None = None) -> None:
        self.source = source
        self.layout = affine_layout(source, roots) if roots is not None else None
        self._flat: np.ndarray | None = None
        self._runs: tuple[np.ndarray, np.ndarray] | None = None
        if source.ndim == 1 and source.dtype == np.int64 and source.flags.c_contiguous:
            self._flat = source

    @staticmethod
    def of(addresses: np.ndarray | AddressList) -> AddressList:
        if isinstance(addresses, AddressList):
            return addresses
        return AddressList(np.ascontiguousarray(np.asarray(addresses, np.int64).reshape(-1)))

    @property
    def size(self) -> int:
        return int(self.source.size)

    def flat(self) -> np.ndarray:
        """The addresses as one int64 array (built on first use)."""
        if self._flat is None:
            self._flat = np.ascontiguousarray(self.source.reshape(-1), dtype=np.int64)
        return self._flat

    def runs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, lengths)`` of the maximal runs of consecutive addresses, in order."""
        if self._runs is None:
            # (from the layout even where the flat array is made: no pass over the elements)
            self._runs = self._affine_runs() if self.layout else None
            if self._runs is None:
                flat = self.flat()
                starts, ends = runs_of(flat)
                if starts.size == flat.size:  # runs of one element (a strided view): the
                    starts = flat  # addresses themselves, kept once
                self._runs = (starts, ends - starts)
        return self._runs

    def _affine_runs(self) -> tuple[np.ndarray, np.ndarray] | None:
        assert self.layout is not None
        first, strides = self.layout
        shape = self.source.shape
        if self.size == 0:
            z = np.zeros(0, np.int64)
            return z, z
        inner, k = 1, len(shape)
        while k > 0 and (shape[k - 1] == 1 or strides[k - 1] == inner):
            inner *= shape[k - 1]
            k -= 1
        if inner == 1:
            return self._strided_runs(shape, strides)
        outer = np.full((1,) * k, first, dtype=np.int64)
        for d in range(k):
            axis = np.arange(shape[d], dtype=np.int64) * strides[d]
            outer = outer + axis.reshape((1,) * d + (-1,) + (1,) * (k - d - 1))
        starts = outer.reshape(-1)
        join = np.ones(starts.size, dtype=bool)  # merge runs that continue each other
        join[1:] = starts[1:] != starts[:-1] + inner
        heads = np.flatnonzero(join)
        lengths = np.empty(heads.size, dtype=np.int64)
        np.subtract(heads[1:], heads[:-1], out=lengths[:-1])
        lengths[-1] = starts.size - heads[-1]
        lengths *= inner
        return starts[join], lengths

    def _strided_runs(
        self, shape: tuple[int, ...], strides: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The runs of a layout whose last axis (of more than one element) does not step
        by 1: one-element runs, but for those joined across the end of an axis whose step
        there is 1 (found from the layout: where the index of axis ``d`` goes up by one
        and the axes after it start again, the address moves by ``strides[d]`` less the
        span of the axes after it)."""
        flat = self.flat()
        size = flat.size
        joined = []  # positions that continue the run before them
        after = 1  # elements of the axes after d
        span = 0  # addresses the axes after d cover
        for d in range(len(shape) - 1, -1, -1):
            n = shape[d]
            if n > 1 and strides[d] - span == 1:
                # the first element after each step of axis d
                joined.append(np.arange(after, size + 1, after).reshape(-1, n)[:, :-1].ravel())
            span += (n - 1) * strides[d]
            after *= n
        if not joined:  # every run one element: the addresses themselves, kept once
            return flat, np.ones(size, dtype=np.int64)
        join = np.sort(np.concatenate(joined)) if len(joined) > 1 else joined[0]
        # each joined element makes the run of the element before it two long (the step
        # after it, along the last axis, is not 1: no run is longer)
        lengths = np.ones(size - join.size, dtype=np.int64)
        lengths[join - 1 - np.arange(join.size)] = 2
        return np.delete(flat, join), lengths

    def bounds(self) -> tuple[int, int]:
        """The lowest address and one past the highest (of a non-empty list): from the
        layout where there is one, without a pass over the addresses."""
        if self.layout is not None:
            lo, strides = self.layout
            hi = lo
            for n, stride in zip(self.source.shape, strides):
                if stride < 0:
                    lo += stride * (n - 1)
                else:
                    hi += stride * (n - 1)
            return lo, hi + 1
        flat = self.flat()
        return int(flat.min()), int(flat.max()) + 1

    def is_consecutive(self) -> bool:
        """One run (or empty): the list is ``range(first, first + size)``."""
        return self.size == 0 or self.runs()[0].size == 1

    def first(self) -> int:
        return int(self.runs()[0][0])
