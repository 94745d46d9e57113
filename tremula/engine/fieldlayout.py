"""Address layouts of a vertex field, decided once per compile: whether its addresses form
an affine view of storage (:func:`numeric_affine`), increase inside a short span
(:func:`cover_layout`) or are blocks of one layout on an affine grid (:func:`grid_layout`).

:class:`tremula.engine.group.CompiledGroup` serves fields through them as zero-copy views.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.engine.plan import Gather
from tremula.poplar.intervals import distinct as distinct_values


def cover_layout(gather: Gather) -> tuple[int, int, np.ndarray] | None:
    starts, lengths = gather.runs()
    if starts.size == 0 or np.any(starts[1:] < starts[:-1] + lengths[:-1]):
        return None
    lo = int(starts[0])
    span = int(starts[-1] + lengths[-1]) - lo
    if span > 2 * gather.size:
        return None
    within = np.arange(gather.size, dtype=np.int64) - np.repeat(
        np.cumsum(lengths) - lengths, lengths
    )
    return lo, span, np.repeat(starts - lo, lengths) + within


def grid_layout(source: np.ndarray | None, block: tuple[int, ...]) -> Any:
    """``(first, grid + block shape, strides, order, grid rank)`` of
    :meth:`CompiledGroup.permuted_grid`, or None."""
    size = int(np.prod(block, dtype=np.int64))
    if source is None or size == 0 or source.size % size or source.size == size:
        return None
    a = source.reshape(-1, size).astype(np.int64, copy=False)
    bases = a[:, 0]
    rel = a[0] - bases[0]
    if not np.all(a - bases[:, None] == rel):
        return None
    inner = _affine_block(rel.reshape(block))
    if inner is None:
        return None
    sorted_bases = np.sort(bases)
    if np.any(sorted_bases[1:] == sorted_bases[:-1]):
        return None
    grid = _first_run_shape(sorted_bases)
    if grid is None:
        return None
    outer = numeric_affine(sorted_bases.reshape(grid))
    if outer is None:
        return None
    order = np.searchsorted(sorted_bases, bases)
    shape, strides = inner
    return int(sorted_bases[0]), (*grid, *shape), (*outer[1], *strides), order, len(grid)


def _first_run_shape(a: np.ndarray) -> tuple[int, ...] | None:
    """``(n,)`` when ``a`` steps evenly, else ``(n // row, row)`` with ``row`` the length of
    the first run of equal steps (None when it does not divide ``n``)."""
    if a.size < 3:
        return (a.size,)
    steps = np.diff(a)
    change = np.flatnonzero(steps != steps[0])
    if change.size == 0:
        return (a.size,)
    row = int(change[0]) + 1
    return (a.size // row, row) if a.size % row == 0 else None


def _affine_block(rel: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape, strides) of a block's relative addresses: its own shape when affine, else
    with its first axis split in two (e.g. pieces from two planes of memory)."""
    found = numeric_affine(rel)
    if found is not None:
        return rel.shape, found[1]
    split = _first_run_shape(rel.reshape(rel.shape[0], -1)[:, 0])
    if split is None or len(split) < 2:
        return None
    shape = (*split, *rel.shape[1:])
    found = numeric_affine(rel.reshape(shape))
    return None if found is None else (shape, found[1])


def numeric_affine(
    addresses: np.ndarray, distinct: bool = False
) -> tuple[int, tuple[int, ...]] | None:
    """``(first address, element strides)`` when ``addresses[i, j, ...] == first + i*s0 +
    j*s1 + ...`` holds for every element (checked in full), else None; with ``distinct``,
    also None when two elements share an address (a written view must not alias)."""
    if addresses.size == 0:
        return None
    a = addresses.astype(np.int64, copy=False)
    first = int(a.flat[0])
    strides = []
    expected = np.full((1,) * a.ndim, first, dtype=np.int64)
    for axis, n in enumerate(a.shape):
        step = 0
        if n > 1:
            step = int(a[(0,) * axis + (1,) + (0,) * (a.ndim - axis - 1)]) - first
        strides.append(step)
        shape = [1] * a.ndim
        shape[axis] = n
        expected = expected + (np.arange(n, dtype=np.int64) * step).reshape(shape)
    if not np.array_equal(expected, a):
        return None
    if distinct and not _injective(a.shape, strides) and distinct_values(a).size != a.size:
        return None
    return first, tuple(strides)


def _injective(shape: tuple[int, ...], strides: list[int]) -> bool:
    """True when an affine map of ``shape`` with ``strides`` never repeats an address: each
    axis (by increasing stride) steps past everything the smaller ones reach (sufficient;
    the caller counts distinct addresses otherwise)."""
    reach = 0
    for step, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True
