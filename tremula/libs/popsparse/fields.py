"""How PopSparse's codelets read their fields (see :mod:`codelets`): views of all vertices
of a type as ``[replica, *grid, *field]``, the grid axes an operand repeats along (used
once), gathers of values by precomputed offsets, gathers and scatters of the block rows a
product reads or writes, and the cache of structures built from meta-info contents.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def unique(view: np.ndarray, ngrid: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``view [replica, *grid, *field]`` without the grid axes it repeats along (stride 0,
    kept as axes of one element; still a view), and for each vertex the index of its field
    among the remaining ``m`` (row-major)."""
    grid = view.shape[1 : 1 + ngrid]
    keep = repeats(view, ngrid)
    sel = (slice(None), *(slice(None) if k else slice(0, 1) for k in keep))
    kept = tuple(n if k else 1 for n, k in zip(grid, keep))
    u = view[sel]
    coords = np.indices(grid).reshape(ngrid, -1)
    index = np.ravel_multi_index(tuple(c * k for c, k in zip(coords, keep)), kept)
    return u, index


def repeats(view: np.ndarray, ngrid: int = 3) -> tuple[bool, ...]:
    """For each grid axis of ``view [replica, *grid, ...]``: False where the view repeats
    along it (stride 0, or a single element)."""
    grid = view.shape[1 : 1 + ngrid]
    return tuple(bool(n > 1 and view.strides[1 + i] != 0) for i, n in enumerate(grid))


def flat(view: np.ndarray) -> np.ndarray | None:
    """A 1-D view of the memory a view with non-negative element strides spans (from its
    first element), so that a gather is one ``np.take`` of precomputed offsets; None for
    other views."""
    item = view.itemsize
    if view.size == 0 or any(st < 0 or st % item for st in view.strides):
        return None
    span = 1 + sum((n - 1) * st // item for n, st in zip(view.shape, view.strides))
    return np.lib.stride_tricks.as_strided(view, shape=(span,), strides=(item,), writeable=False)


def offsets(view: np.ndarray, index: tuple[np.ndarray, ...]) -> np.ndarray:
    """Element offsets (for :func:`flat`) of ``view[index]`` (integer index arrays)."""
    out = np.zeros(np.broadcast_shapes(*(i.shape for i in index)), dtype=np.int64)
    for i, st in zip(index, view.strides):
        out += i * (st // view.itemsize)
    return out.reshape(-1)


def take(view: np.ndarray, index: tuple[np.ndarray, ...], cache: dict, key: str) -> np.ndarray:
    """``view[index]`` flattened, as float32: one ``np.take`` of cached offsets when the
    view allows it."""
    base = flat(view)
    if base is None:
        return view[index].reshape(-1).astype(np.float32, copy=False)
    if key not in cache:
        cache[key] = offsets(view, index)
    return np.take(base, cache[key]).astype(np.float32, copy=False)


@dataclass(frozen=True)
class Rows:
    """Distinct block rows of a field that a product reads or writes: the grid coordinates
    (``[k, 1]`` each) and element rows (``[k, b]``) of each, for one NumPy gather or
    scatter of ``[k, b, Z]``. Dense operands are batch-major (``[*grid, Z, N]``: their rows
    are the last axis), partials row-major (``[*grid, N, Z]``, ``rows_first``)."""

    coords: tuple[np.ndarray, np.ndarray, np.ndarray]
    cols: np.ndarray
    rows_first: bool = False

    @staticmethod
    def of(
        coords: tuple[np.ndarray, ...],
        start: np.ndarray,
        keep: tuple[bool, ...],
        grid: tuple[int, ...],
        size: int,
        block: int,
        rows_first: bool = False,
    ) -> tuple[Rows, np.ndarray]:
        """The distinct rows ``(coords, start)`` of entries (coordinates along axes the
        field repeats on count as 0), and each entry's position among them."""
        canon = tuple(c * k for c, k in zip(coords, keep))
        key = np.ravel_multi_index((*canon, start // block), (*grid, max(size // block, 1)))
        uniq, pos = np.unique(key, return_inverse=True)
        *cs, row = np.unravel_index(uniq, (*grid, max(size // block, 1)))
        cols = (row * block)[:, None] + np.arange(block)
        rows = Rows(tuple(c[:, None] for c in cs), cols, rows_first)  # type: ignore[arg-type]
        return rows, pos.reshape(-1)

    @property
    def size(self) -> int:
        return int(self.cols.shape[0])

    def _index(self) -> tuple:
        c0, c1, c2 = self.coords
        return (c0, c1, c2, self.cols) if self.rows_first else (c0, c1, c2, slice(None), self.cols)

    def gather(self, view: np.ndarray) -> np.ndarray:
        """``[k b, Z]`` float32 from one replica's view."""
        rows = view[self._index()]
        return rows.reshape(-1, rows.shape[-1]).astype(np.float32, copy=False)

    def scatter(self, view: np.ndarray, rows: np.ndarray, add: bool) -> None:
        if self.size == 0:
            return
        block = rows.reshape(self.size, self.cols.shape[1], -1)
        if add:
            view[self._index()] += block
        else:
            view[self._index()] = block


class ContentCache:
    """Structures built from meta-info, looked up by the meta-info's content: the last one
    by comparison, older ones (e.g. the buckets each propagation step holds) by digest."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.last: tuple[np.ndarray, Any] | None = None
        self.older: OrderedDict[bytes, Any] = OrderedDict()

    def get(self, content: np.ndarray, build: Callable[[], Any]) -> Any:
        if (
            self.last is not None
            and self.last[0].shape == content.shape
            and np.array_equal(self.last[0], content)
        ):
            return self.last[1]
        key = hashlib.blake2b(np.ascontiguousarray(content).data, digest_size=16).digest()
        value = self.older.get(key)
        if value is None:
            value = build()
            self.older[key] = value
            if len(self.older) > self.size:
                self.older.popitem(last=False)
        else:
            self.older.move_to_end(key)
        self.last = (content.copy(), value)
        return value
