"""Two reduction stages in one pass over memory, when a replayed program runs them back to
back (the engine's hook for consecutive prepared runs, ``fuse_next``; see
``Codelet.prepare``).

Stage 1 of a strided reduction (ReduceBlock summing each unit's whole rows, e.g. a column
sum: each tile's vertex adds the two or three rows it holds) writes one partial row per
unit, and the next stage (ReducePartials over a grid of those rows) reads them back: for a
column sum of a 4096 x 4096 float matrix on 1472 tiles, 24 MB written and read again after
the 64 MB of input. Run in cache-sized chunks, the read-back comes from cache but the
writes stay: measured, that pays nothing on a host whose last-level cache holds the
partials anyway. One compiled loop over the next stage's groups instead sums each unit's
rows, writes the sum to the unit's partial row (device memory ends as the two stages leave
it) and adds it to its group's sum while it is in registers: the partials are written
once and never read.

The numbers are the two stages' own, bit for bit: each partial is
``((0 + r0) + r1) + r2 ...`` over the unit's rows in order, from the accumulator's ``+0.0``
(:func:`reduce_inplace.reduce_rows`), and each group's sum starts from ``0`` and adds its
pieces in piece order, as the grid's prepared run does (``reduce_inplace._piece_reducer``).
Anything else (another operation or type, a scale on stage 1, pieces that are not whole
unit rows, memory the two stages share, no compiled kernels) keeps the two runs apart.

Where the partials are only carried from stage 1 to the grid stage (written by the one,
read by the other, used nowhere else: the engine's ``fusion.Carried``, asked through
``Codelet.fuse``), the same loop need not store them at all (:func:`fuse_carried`): each
unit's sum is added to its group's sum straight from registers, and the pass reads the
input and nothing else. The sums are the same bits; the partials' memory keeps what it
held, which no program can read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.libs import jit

if TYPE_CHECKING:
    from tremula import poplar


@dataclass(frozen=True, eq=False)
class RowsRun:
    """ReduceBlock's prepared run of whole rows per unit (``reduce_inplace._rows_direct``):
    ``dst[:, u]`` is ``ufunc`` over ``rows[:, first[u] : first[u] + count[u]]`` in row
    order, times the vertices' scale when ``scaled``."""

    run: Callable[[], None]
    ufunc: np.ufunc
    rows: np.ndarray  # [replica, rows, N], a view of device memory
    dst: np.ndarray  # [replica, units, N], a view of device memory
    first: np.ndarray  # [units] int64
    count: np.ndarray  # [units] int64, each >= 1
    scaled: bool

    def __call__(self) -> None:
        self.run()

    def fuse_next(self, after: Callable[[], None]) -> Callable[[], None] | None:
        """One call running this stage, then ``after`` (see the module docstring)."""
        return fuse(self, after) if isinstance(after, GridRun) else None


@dataclass(frozen=True, eq=False)
class GridRun:
    """ReducePartials' prepared run over a grid of pieces (``reduce_inplace._grid_direct``):
    ``ufunc.reduce(partials, axis=pieces, out=sums)``, then ``finish()`` (the sums taken
    into the outputs' order and scaled)."""

    run: Callable[[], None]
    finish: Callable[[], None]
    ufunc: np.ufunc
    partials: np.ndarray  # [replica, *grid, *pieces, L], a view of device memory
    pieces: tuple[int, ...]
    sums: np.ndarray  # [replica, *grid, L]

    def __call__(self) -> None:
        self.run()


def fuse(first: RowsRun, then: GridRun) -> Callable[[], None] | None:
    """The two runs as one compiled pass when ``then``'s pieces are ``first``'s unit rows
    (each unit once) and the numbers cannot differ; None otherwise. Without compiled
    kernels at call time (``jit.set_enabled(False)``) the call runs the two in turn."""
    plan = _group_units(first, then)
    if plan is None:
        return None
    units, sums = plan
    rows, dst, starts, counts = first.rows, first.dst, first.first, first.count
    finish = then.finish

    def run() -> None:
        if not jit.available():
            first.run()
            then.run()
            return
        _sum_rows_into_groups(rows, starts, counts, dst, units, sums)
        finish()

    return run


def fuse_carried(
    before: list[poplar.Batch], after: list[poplar.Batch]
) -> tuple[Callable[[], None], list[tuple[int, str]]] | None:
    """``Codelet.fuse`` of the grid stage (``after``, one group) after a strided stage 1
    (``before``, one group): the two as one compiled pass that does not store stage 1's
    partials (field ``out`` of group 0 of ``before``), which the engine takes only where
    nothing else reads them; None where :func:`fuse` would not fuse the two prepared runs.
    Without compiled kernels at call time the call runs the two in turn (storing)."""
    if len(before) != 1 or len(after) != 1:
        return None
    if getattr(before[0].vertex_type.codelet, "name", None) != "popops::ReduceBlock":
        return None  # (other codelets' prepared runs are not asked for twice)
    first, then = _prepared(before[0]), _prepared(after[0])
    if not isinstance(first, RowsRun) or not isinstance(then, GridRun):
        return None
    plan = _group_units(first, then)
    if plan is None:
        return None
    units, sums = plan
    rows, starts, counts, finish = first.rows, first.first, first.count, then.finish
    spare = np.empty(rows.shape[2], dtype=rows.dtype)  # a unit of more than three rows

    def run() -> None:
        if not jit.available():
            first.run()
            then.run()
            return
        _sum_units_into_groups(rows, starts, counts, units, sums, spare)
        finish()

    return run, [(0, "out")]


def _prepared(v: poplar.Batch) -> Any:
    """The prepared run of the codelet of batch ``v`` (set up by the engine), or None."""
    prepare = getattr(v.vertex_type.codelet, "prepare", None)
    return None if prepare is None else prepare(v)


def _group_units(first: RowsRun, then: GridRun) -> tuple[np.ndarray, np.ndarray] | None:
    """``(units, sums)``: ``units[g, p]`` the unit whose row is piece ``p`` of group ``g``,
    ``sums`` ``then.sums`` as ``[replica, groups, N]`` (a view); None when the runs do not
    chain (see :func:`fuse`)."""
    rows, dst, partials, sums = first.rows, first.dst, then.partials, then.sums
    dtype = rows.dtype
    if first.ufunc is not np.add or then.ufunc is not np.add or first.scaled:
        return None
    if dtype != np.float32 or any(a.dtype != dtype for a in (dst, partials, sums)):
        return None
    if len(then.pieces) != 1 or then.pieces[0] != partials.ndim - 2:
        return None
    R, U, N = dst.shape
    item = dtype.itemsize
    if N < 2 or dst.strides[1:] != (N * item, item) or dst.ctypes.data % item:
        return None  # (streaming stores need float-aligned rows to find 16-byte lines)
    if R > 1 and not partials.strides[0] == dst.strides[0] == rows.strides[0]:
        return None  # not rows of one storage array
    offset = partials.ctypes.data - dst.ctypes.data
    if offset < 0 or offset % (N * item):
        return None
    shape = partials.shape[1:]
    strides = [s // item if s % item == 0 else -1 for s in partials.strides[1:]]
    split = _column_axes(shape, strides, N)
    if split is None:
        return None
    group_shape = shape[:split]
    P, step = shape[-2], strides[-2]
    outer = [*zip(group_shape, strides[:split]), (P, step)]
    if any(n > 1 and (s <= 0 or s % N) for n, s in outer):
        return None  # groups and pieces step by whole rows, forwards
    units = np.full((*group_shape, P), offset // (N * item), dtype=np.int64)
    for axis, (n, s) in enumerate(outer):
        where = [1] * len(outer)
        where[axis] = n
        units += (np.arange(n, dtype=np.int64) * (s // N)).reshape(where)
    units = units.reshape(-1, P)
    if not np.array_equal(np.sort(units, axis=None), np.arange(U)):
        return None  # every unit exactly once
    grouped = sums.reshape(R, units.shape[0], N)
    if not np.may_share_memory(grouped, sums):
        return None  # a reshape copied
    apart = ((rows, dst), (rows, grouped), (dst, grouped))
    if any(_may_overlap(a, b) for a, b in apart):
        return None  # the fused order would read or overwrite what the stages did not
    return units, grouped


def _may_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two ``[replica, ...]`` arrays may share memory. Views of one storage array
    (one row per replica, the same row step) are compared on the first replica's row, as
    each lies within its rows; their bounds over all replicas always overlap."""
    if a.shape[0] > 1 and a.strides[0] == b.strides[0]:
        return bool(np.may_share_memory(a[:1], b[:1]))
    return bool(np.may_share_memory(a, b))


def _column_axes(shape: tuple[int, ...], strides: list[int], N: int) -> int | None:
    """The first grid axis of the trailing axes that, with the pieces' inner axis, walk one
    row's ``N`` columns in C order (strides ``..., L, 1``); None if no such split."""
    rank = len(shape) - 2
    size, split = shape[-1], rank
    while size < N and split > 0:
        split -= 1
        size *= shape[split]
    if size != N:
        return None
    expected = 1
    for axis in (len(shape) - 1, *range(rank - 1, split - 1, -1)):
        if shape[axis] > 1 and strides[axis] != expected:
            return None
        expected *= shape[axis]
    return split


@jit.kernel
def _sum_rows_into_groups(
    rows: np.ndarray,
    first: np.ndarray,
    count: np.ndarray,
    dst: np.ndarray,
    units: np.ndarray,
    sums: np.ndarray,
) -> None:
    """For each group ``g`` and piece ``p`` in order, unit ``u = units[g, p]``:
    ``dst[r, u] = ((0 + rows[r, f]) + rows[r, f + 1]) + ...`` over its ``count[u]`` rows from
    ``f = first[u]``, and ``sums[r, g] = ((0 + dst[r, u0]) + dst[r, u1]) + ...`` (float32).

    Units of two or three rows (a tile holds a few rows) are one pass: the partials go out
    in streaming stores (``jit.stream4``), and a two-row unit adds a row of ``-0.0`` as its
    third (``x + -0.0`` is ``x``, bit for bit, for every sum of two floats). A unit of one
    row is copied; one of more rows sums its first three, adds the others in place (in
    cache) and the last in the pass that adds the unit to its group."""
    n = dst.shape[2]
    nothing = np.full(n, -0.0, dtype=np.float32)
    zero = np.float32(0.0)  # each unit's sum starts at +0.0, as the vertex's accumulator
    for r in range(rows.shape[0]):
        for g in range(units.shape[0]):
            acc = sums[r, g]
            for c in range(n):
                acc[c] = 0
            for p in range(units.shape[1]):
                u = units[g, p]
                out, f, k = dst[r, u], first[u], count[u]
                if k == 2 or k == 3:
                    a, b = rows[r, f], rows[r, f + 1]
                    e = rows[r, f + 2] if k == 3 else nothing
                    lead = min(n, (16 - out.ctypes.data % 16) % 16 // 4)
                    c = 0
                    while c < lead:
                        v = zero + a[c] + b[c] + e[c]
                        out[c] = v
                        acc[c] += v
                        c += 1
                    if k == 3:
                        while c + 4 <= n:
                            v0 = zero + a[c] + b[c] + e[c]
                            v1 = zero + a[c + 1] + b[c + 1] + e[c + 1]
                            v2 = zero + a[c + 2] + b[c + 2] + e[c + 2]
                            v3 = zero + a[c + 3] + b[c + 3] + e[c + 3]
                            jit.stream4(out, c, v0, v1, v2, v3)
                            acc[c] += v0
                            acc[c + 1] += v1
                            acc[c + 2] += v2
                            acc[c + 3] += v3
                            c += 4
                    else:
                        while c + 4 <= n:
                            v0 = zero + a[c] + b[c]
                            v1 = zero + a[c + 1] + b[c + 1]
                            v2 = zero + a[c + 2] + b[c + 2]
                            v3 = zero + a[c + 3] + b[c + 3]
                            jit.stream4(out, c, v0, v1, v2, v3)
                            acc[c] += v0
                            acc[c + 1] += v1
                            acc[c + 2] += v2
                            acc[c + 3] += v3
                            c += 4
                    while c < n:
                        v = zero + a[c] + b[c] + e[c]
                        out[c] = v
                        acc[c] += v
                        c += 1
                    continue
                a = rows[r, f]  # one row, or more than three: plain stores
                if k == 1:
                    for c in range(n):
                        v = zero + a[c]
                        out[c] = v
                        acc[c] += v
                    continue
                b, e = rows[r, f + 1], rows[r, f + 2]
                for c in range(n):
                    out[c] = zero + a[c] + b[c] + e[c]
                for i in range(3, k - 1):
                    src = rows[r, f + i]
                    for c in range(n):
                        out[c] += src[c]
                last = rows[r, f + k - 1]
                for c in range(n):
                    v = out[c] + last[c]
                    out[c] = v
                    acc[c] += v
    jit.stream_fence()


@jit.kernel
def _sum_units_into_groups(
    rows: np.ndarray,
    first: np.ndarray,
    count: np.ndarray,
    units: np.ndarray,
    sums: np.ndarray,
    spare: np.ndarray,
) -> None:
    """:func:`_sum_rows_into_groups` without storing the units' sums: for each group ``g``
    and piece ``p`` in order, unit ``u = units[g, p]``, ``sums[r, g]`` adds
    ``((0 + rows[r, f]) + rows[r, f + 1]) + ...`` over the unit's ``count[u]`` rows from
    ``f = first[u]`` (float32), from ``0``. A unit of more than three rows is summed in
    ``spare`` (one row) first."""
    n = sums.shape[2]
    zero = np.float32(0.0)  # each unit's sum starts at +0.0, as the vertex's accumulator
    for r in range(rows.shape[0]):
        for g in range(units.shape[0]):
            acc = sums[r, g]
            for c in range(n):
                acc[c] = 0
            for p in range(units.shape[1]):
                u = units[g, p]
                f, k = first[u], count[u]
                a = rows[r, f]
                if k == 1:
                    for c in range(n):
                        acc[c] += zero + a[c]
                elif k == 2:
                    b = rows[r, f + 1]
                    for c in range(n):
                        acc[c] += zero + a[c] + b[c]
                elif k == 3:
                    b, e = rows[r, f + 1], rows[r, f + 2]
                    for c in range(n):
                        acc[c] += zero + a[c] + b[c] + e[c]
                else:
                    b, e = rows[r, f + 1], rows[r, f + 2]
                    for c in range(n):
                        spare[c] = zero + a[c] + b[c] + e[c]
                    for i in range(3, k):
                        src = rows[r, f + i]
                        for c in range(n):
                            spare[c] += src[c]
                    for c in range(n):
                        acc[c] += spare[c]
