"""How the reduce vertices read device memory in place (``Codelet.prepare`` paths), so that
a reduction costs about one pass over its input:

* :func:`direct`: one ``ufunc.reduce`` / ``reduceat`` from views of the partials straight
  into views of the outputs, for float reductions in the accumulator type;
* whole rows summed per unit (stage 1 of a strided reduction, e.g. a column sum: each
  tile's vertex reduces the two or three rows it holds) without gathering them:
  :func:`reduce_rows`, compiled (the ``fast`` extra, :mod:`tremula.libs.jit`: one loop per
  unit, a single pass over the input) or in NumPy (units in chunks whose outputs fit the
  cache; per chunk the first row of every unit is taken into the output, then the next
  row of every unit that has one into a small buffer and combined, and so on). Both
  combine a unit's rows in order from the operation's identity, as a reduce vertex's
  accumulator does, ``((identity op r0) op r1) ...``: the same numbers as each other and
  as a reduction over a gathered ``[units, count, row]`` block (the compute);
* equal pieces listed tile by tile that lie on a grid of memory (a later stage):
  :func:`strided_partials`, reduced over the grid and taken into the outputs' order (many
  small pieces gathered in piece order and reduced in one call, :func:`_gathered`);
* runs with gaps (input elements another stage uses directly): :func:`covered_runs`, one
  ``reduceat`` over the memory covering them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs import jit
from tremula.libs.popops.reduce_chain import GridRun, RowsRun
from tremula.libs.popops.reduce_ops import OpSpec, identity

#: Bytes of output rows per chunk of the NumPy path (about half an L2 cache).
CHUNK_BYTES = 1 << 18


@dataclass(frozen=True)
class Chunk:
    """Units ``[lo, hi)``; their first rows; then, for each further rank, the units that
    have such a row (None: all of them) and the rows."""

    lo: int
    hi: int
    first: np.ndarray
    ranks: tuple[tuple[np.ndarray | None, np.ndarray], ...]


@dataclass(frozen=True)
class RowRuns:
    """The units' row runs and how the NumPy path walks them (built once per compile)."""

    first: np.ndarray  # [units] int64
    count: np.ndarray  # [units] int64, each >= 1
    chunks: tuple[Chunk, ...]
    widest: int  # most units with a row of one rank in a chunk (the buffer's rows)


def plan_runs(first: np.ndarray, count: np.ndarray, row_bytes: int) -> RowRuns:
    """Chunks of units whose output rows take about :data:`CHUNK_BYTES`."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    step = max(1, CHUNK_BYTES // max(row_bytes, 1))
    chunks, widest = [], 0
    for lo in range(0, first.size, step):  # a loop per cache-sized chunk of units
        f, c = first[lo : lo + step], count[lo : lo + step]
        ranks = []
        for i in range(1, int(c.max(initial=1))):
            sel = np.flatnonzero(c > i)
            ranks.append((None if sel.size == c.size else sel, f[sel] + i))
            widest = max(widest, sel.size)
        chunks.append(Chunk(lo, lo + f.size, f, tuple(ranks)))
    return RowRuns(first, count, tuple(chunks), widest)


def reduce_rows(ufunc: np.ufunc, rows: np.ndarray, out: np.ndarray, runs: RowRuns) -> None:
    """``out[:, u] = ufunc.reduce(rows[:, first[u]:first[u] + count[u]], axis=1)`` for every
    unit, combining in row order from the identity. ``rows`` is ``[replica, rows, row]`` and ``out``
    ``[replica, units, row]``, both of one float type."""
    if ufunc is np.add and jit.available() and rows.dtype == out.dtype:
        _add_runs(rows, runs.first, runs.count, out, out.dtype.type(0))
        return
    R, L = rows.shape[0], rows.shape[2]
    buf = np.empty((R, runs.widest, L), dtype=out.dtype)
    start = ufunc.identity
    for ch in runs.chunks:  # one pass per rank over a cache-resident chunk of outputs
        o = out[:, ch.lo : ch.hi]
        np.take(rows, ch.first, axis=1, out=o, mode="clip")  # clip: no defensive copy
        if start is not None:  # the identity first (maximum, minimum have none)
            ufunc(start, o, out=o)
        for sel, idx in ch.ranks:
            b = buf[:, : idx.size]
            np.take(rows, idx, axis=1, out=b, mode="clip")
            if sel is None:
                ufunc(o, b, out=o)
            else:
                o[:, sel] = ufunc(o[:, sel], b)


@jit.kernel
def _add_runs(
    rows: np.ndarray, first: np.ndarray, count: np.ndarray, out: np.ndarray, zero: Any
) -> None:
    for r in range(rows.shape[0]):
        for u in range(first.size):
            dst = out[r, u]
            src = rows[r, first[u]]
            for c in range(dst.size):
                dst[c] = zero + src[c]  # from +0.0: a sum of -0.0 rows is +0.0
            for i in range(1, count[u]):
                src = rows[r, first[u] + i]
                for c in range(dst.size):
                    dst[c] += src[c]


#: Layouts of views that only :func:`direct` reads (whole-memory covers, permuted grids).
IN_PLACE_ONLY = ("cover", "grid")


def direct(
    ufunc: np.ufunc,
    partials: np.ndarray,
    out: np.ndarray,
    lay: dict[str, Any],
    scale: np.ndarray | None,
) -> Any:
    """One ``ufunc.reduce`` (or ``reduceat``) from views of ``partials`` straight into views
    of ``out`` (then scaled in place: the numbers of :func:`_finished`), for a float
    reduction in the accumulator type; None when the layout has no such form or a reshape
    would copy."""
    R, path = partials.shape[0], lay["path"]
    if scale is not None:
        scale = scale.astype(out.dtype)
    if path == "cover":
        starts, keep = lay["starts"], lay["keep"]
        sums = np.empty((R, starts.size), dtype=out.dtype)

        def run_cover() -> None:
            ufunc.reduceat(partials, starts, axis=-1, out=sums)
            np.take(sums, keep, axis=1, out=out, mode="clip")
            if scale is not None:
                np.multiply(out, scale, out=out)

        return run_cover
    if path == "runs":
        lengths = lay["lengths"]
        if not lengths.size or not np.all(lengths > 0):
            return None
        starts = lay["starts"]

        def run_runs() -> None:
            ufunc.reduceat(partials, starts, axis=-1, out=out)
            if scale is not None:
                np.multiply(out, scale, out=out)

        return run_runs
    if path == "uniform" and len(lay["shape"]) == 3:  # ReduceBlock [outer, N, inner]
        O, N, I = lay["shape"]
        src, dst, axes = partials.reshape(R, -1, O, N, I), out.reshape(R, -1, N), (2, 4)
    elif path == "uniform":  # ReducePartials: equal pieces per output region
        C, L = lay["shape"]
        src, dst, axes = partials.reshape(R, -1, C, L), out.reshape(R, -1, L), (2,)  # type: ignore[assignment]
    elif path == "pieces":
        src, dst, axes = partials, out.reshape(R, -1, partials.shape[-1]), (2,)  # type: ignore[assignment]
    elif path == "grid":
        return _grid_direct(ufunc, partials, out, lay, scale)
    elif path == "rows" and lay["row"][1] == 1:  # whole rows summed in place (I == 1)
        return _rows_direct(ufunc, partials, out, lay, scale)
    else:
        return None
    if not (np.may_share_memory(src, partials) and np.may_share_memory(dst, out)):
        return None  # a reshape copied: later runs would not see device memory
    reduce_into = _reducer(ufunc, src, dst, axes)
    if scale is None:
        return reduce_into
    factor = scale.reshape(dst.shape[1:])

    def run_scaled() -> None:
        reduce_into()
        np.multiply(dst, factor, out=dst)

    return run_scaled


#: ReduceBlock blocks of fewer inner elements than this (one outer row) are combined by
#: whole-array ufunc calls over strided views, in NumPy's order for such short axes.
SHORT_INNER = 8


def _reducer(ufunc: np.ufunc, src: np.ndarray, dst: np.ndarray, axes: tuple[int, ...]) -> Any:
    """``ufunc.reduce(src, axis=axes, out=dst)`` as a closure; blocks ``[1, N, I]`` with a
    short ``I`` (e.g. a row sum whose tiles hold 4 elements each) as ``I - 1`` ufunc calls
    over strided views, ``((x0 op x1) op x2) ...``: the same numbers (NumPy combines an axis
    under 8 elements in that order) without ``reduce``'s cost per output."""
    inner = src.shape[-1]
    if axes == (2,):  # ReducePartials: [R, outputs, pieces, length]
        return _piece_reducer(ufunc, src, dst, axes)
    if axes != (2, 4) or src.shape[2] != 1 or not 1 < inner < SHORT_INNER:
        return lambda: ufunc.reduce(src, axis=axes, out=dst)
    return _folder(ufunc, [src[:, :, 0, :, i] for i in range(inner)], dst)


def _piece_reducer(
    ufunc: np.ufunc, src: np.ndarray, dst: np.ndarray, pieces: tuple[int, ...]
) -> Any:
    """``src`` reduced over its piece axes ``pieces`` (the last but one axes, the piece
    index in C order over them) into ``dst`` as a ReducePartials vertex adds: from the
    identity, piece after piece (:func:`reduce_ops.fold_pieces`; NumPy's ``reduce``
    over a strided view of the pieces would walk them in memory order). Regions of one
    element keep NumPy's ``reduce``, as the compute does."""
    if src.shape[-1] < 2:
        return lambda: ufunc.reduce(src, axis=pieces, out=dst)
    gathered = _gathered(ufunc, src, dst, pieces)
    if gathered is not None:
        return gathered
    lead = (slice(None),) * pieces[0]
    shape = tuple(src.shape[a] for a in pieces)
    return _folder(ufunc, [src[lead + p] for p in np.ndindex(*shape)], dst)


#: Pieces from which :func:`_gathered` takes over from one ufunc call per piece, and the
#: most bytes it gathers (a small reduction, e.g. a bias gradient over a batch of rows).
GATHER_PIECES = 8
GATHER_BYTES = 1 << 18


def _gathered(ufunc: np.ufunc, src: np.ndarray, dst: np.ndarray, pieces: tuple[int, ...]) -> Any:
    """:func:`_piece_reducer`'s fold in one or two calls, for many small float pieces: one
    ``ufunc.reduce`` over a leading piece axis from the identity (from the first piece
    where there is none), over the pieces in place where they already lie one after
    another in memory (:func:`_ascending`), else copied in piece order (C order over the
    piece axes) into a kept ``[pieces, *dst]`` buffer first. With the piece axis outermost
    in memory, NumPy's reduce combines whole pieces one after another, ``dst = dst op
    piece``, through the same element-wise loop as the fold: the same numbers (signed
    zeros, NaN and infinities included). None where the fold stays (few pieces, other
    types, too large a buffer, ``dst`` sharing memory with ``src``)."""
    count = int(np.prod([src.shape[a] for a in pieces], dtype=np.int64))
    rest = tuple(n for a, n in enumerate(src.shape) if a not in pieces)
    floats = src.dtype == dst.dtype and src.dtype in (np.float32, np.float64)
    size = count * dst.size * dst.itemsize
    if not floats or count < GATHER_PIECES or size > GATHER_BYTES or rest != dst.shape:
        return None
    if np.may_share_memory(src, dst):
        return None
    moved = np.moveaxis(src, pieces, tuple(range(len(pieces))))
    start = ufunc.identity
    kwargs: dict[str, Any] = {} if start is None else {"initial": start}
    flat = moved.reshape((count, *dst.shape))  # a copy unless the pieces step evenly
    if np.may_share_memory(flat, src) and _ascending(flat):

        def in_place() -> None:
            ufunc.reduce(flat, axis=0, out=dst, **kwargs)

        return in_place
    buffer = np.empty((count, *dst.shape), dtype=src.dtype)
    into = buffer.reshape(moved.shape)

    def gathered() -> None:
        np.copyto(into, moved)
        ufunc.reduce(buffer, axis=0, out=dst, **kwargs)

    return gathered


def _ascending(flat: np.ndarray) -> bool:
    """Whether the pieces of ``flat`` (``[pieces, ...]``) lie apart one after another in
    memory, each within one step of the piece axis, every other axis stepping forwards:
    the piece axis is then the outermost of NumPy's iteration, as in a C-ordered buffer."""
    step, item = flat.strides[0], flat.itemsize
    inner = [(n, s) for n, s in zip(flat.shape[1:], flat.strides[1:], strict=True) if n > 1]
    span = item + sum((n - 1) * s for n, s in inner)
    return step > 0 and all(0 < s < step for _, s in inner) and span <= step


def _folder(ufunc: np.ufunc, parts: list[np.ndarray], dst: np.ndarray) -> Any:
    """A closure setting ``dst`` to ``((identity op parts[0]) op parts[1]) ...``: the
    accumulator of a reduce vertex starts at the operation's identity (for an add, the
    sign of a sum of ``-0.0`` is ``+0.0``)."""
    start, first, rest = ufunc.identity, parts[0], parts[1:]

    def run() -> None:
        if start is None:
            np.copyto(dst, first)  # maximum, minimum: the identity is the first part
        else:
            ufunc(start, first, out=dst)
        for part in rest:
            ufunc(dst, part, out=dst)

    return run


def as_runs(lay: dict[str, Any], total: int) -> dict[str, Any] | None:
    """The layout as runs of consecutive elements each reduced to one value, when it is
    one (``runs``; ``uniform`` blocks of one output; equal pieces of length 1)."""
    path, shape = lay.get("path"), lay.get("shape", ())
    if path == "runs":
        return lay
    single = shape[:-1] == (1, 1) if len(shape) == 3 else len(shape) == 2 and shape[1] == 1
    size = int(np.prod(shape, dtype=np.int64)) if shape else 0
    if path != "uniform" or not single or size == 0 or total % size:
        return None
    lengths = np.full(total // size, size, dtype=np.int64)
    return {"path": "runs", "lengths": lengths, "starts": np.arange(lengths.size) * size}


def covered_runs(v: poplar.Batch, lay: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Runs of a field read in place from the view of device memory covering it when
    every run is contiguous there (the gaps between runs, e.g. input elements another stage
    uses directly, are reduced too and dropped): the layout of :func:`direct`'s ``cover``
    path; ``(None, lay)`` otherwise."""
    found = v.stable_cover("partials")
    lengths = lay["lengths"]
    if found is None or not lengths.size or not np.all(lengths > 0):
        return None, lay
    view, positions = found
    pos = positions[lay["starts"]]
    if not np.array_equal(positions[lay["starts"] + lengths - 1] - pos, lengths - 1):
        return None, lay
    ends = pos + lengths
    gaps = ends[:-1][ends[:-1] < pos[1:]]
    starts = np.union1d(pos, gaps)
    return view, {"path": "cover", "starts": starts, "keep": np.searchsorted(starts, pos)}


def _grid_direct(
    ufunc: np.ufunc,
    partials: np.ndarray,
    out: np.ndarray,
    lay: dict[str, Any],
    scale: np.ndarray | None,
) -> Any:
    """ReducePartials over a permuted grid of pieces: one ``ufunc.reduce`` over the piece
    axis of the grid view (reading the pieces in place), then the results taken into the
    outputs' order."""
    R, L, order, rank = partials.shape[0], lay["length"], lay["order"], lay["rank"]
    dst = out.reshape(R, -1, L)
    if dst.shape[1] != order.size or not np.may_share_memory(dst, out):
        return None
    grid = partials.shape[1 : 1 + rank]
    pieces = tuple(range(1 + rank, partials.ndim - 1))  # one axis, or two (split)
    in_order = bool(np.all(order == np.arange(order.size)))
    sums = dst.reshape(R, *grid, L) if in_order else np.empty((R, *grid, L), dtype=out.dtype)
    if not np.may_share_memory(sums, out) and in_order:
        return None
    flat = sums.reshape(R, -1, L)
    factor = None if scale is None else scale.reshape(dst.shape[1:])

    def finish() -> None:
        if not in_order:
            np.take(flat, order, axis=1, out=dst, mode="clip")
        if factor is not None:
            np.multiply(dst, factor, out=dst)

    reduce_into = _piece_reducer(ufunc, partials, sums, pieces)

    def run() -> None:
        reduce_into()
        finish()

    return GridRun(run, finish, ufunc, partials, pieces, sums)


def _rows_direct(
    ufunc: np.ufunc,
    partials: np.ndarray,
    out: np.ndarray,
    lay: dict[str, Any],
    scale: np.ndarray | None,
) -> Any:
    """ReduceBlock's strided path (every unit reduces whole rows of one length) reading the
    rows in place: :func:`reduce_rows.reduce_rows`; None when a view would copy."""
    R, (N, _) = partials.shape[0], lay["row"]
    if partials.shape[1] % N or out.shape[1] != lay["units"] * N:
        return None
    rows, dst = partials.reshape(R, -1, N), out.reshape(R, -1, N)
    if not (np.may_share_memory(rows, partials) and np.may_share_memory(dst, out)):
        return None
    runs = plan_runs(lay["first"], lay["count"], N * out.itemsize)
    factor = None if scale is None else scale.reshape(dst.shape[1:])

    def run() -> None:
        reduce_rows(ufunc, rows, dst, runs)
        if factor is not None:
            np.multiply(dst, factor, out=dst)

    return RowsRun(run, ufunc, rows, dst, runs.first, runs.count, factor is not None)


def strided_partials(v: poplar.Batch, lay: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """ReducePartials' pieces as zero-copy views when every output region has the same
    piece count ``C`` and length ``L``: a ``[replica, outputs, C, L]`` view when the pieces
    form an affine view of one variable in output order (e.g. a column sum's rows), or a
    ``[replica, *grid, C, L]`` view of a grid the regions lie on in another order (pieces
    listed tile by tile), with the order; else ``(None, lay)``."""
    if (
        lay.get("path") == "runs"
        and lay["lengths"].size
        and np.all(lay["lengths"] == lay["lengths"][0])
    ):
        C, L = int(lay["lengths"][0]), 1
    elif lay.get("path") == "uniform":
        C, L = lay["shape"]
    else:
        return None, lay
    total = int(v.lengths("partials").sum())
    if C == 0 or total % (C * L):
        return None, lay
    view = v.stable_view("partials", (total // (C * L), C, L))
    if view is not None:
        return view, {"path": "pieces"}
    found = v.stable_grid("partials", (C, L))
    if found is None:
        return None, lay
    view, order, rank = found
    return view, {"path": "grid", "order": order, "length": L, "rank": rank}


def ranked(
    v: poplar.Batch, spec: OpSpec, out: np.ndarray, lay: dict[str, Any], scale: np.ndarray | None
) -> Any:
    """ReducePartials whose pieces lie scattered over device memory (a few elements each,
    on many tiles), as a prepared run that reads each piece rank of every output region
    straight from device memory in region order (consecutive regions' pieces mostly sit
    at consecutive addresses: read in memory order, not piece by piece as a gather of the
    field in its own order is) and combines the ranks into ``out`` one by one.

    The numbers of the compute's paths: ``passes`` runs its own passes, reading the pieces
    from memory instead of a gathered field; ``uniform`` regions of two elements or more
    start from the identity and add one piece after another, as every path does
    (:func:`reduce_ops.fold_pieces`; regions of one element, which NumPy sums pairwise,
    keep the gather).
    Then scaled by ``scale`` (the vertices' scales over ``out``, or None). For a float
    operation with a ufunc in the outputs' type, without update; None otherwise.
    """
    ufunc, dtype = spec.ufunc, out.dtype
    found = v.stable_runs("partials")
    update = v.fields["out"].direction == "inout"
    if found is None or ufunc is None or update or dtype.kind != "f":
        return None
    storage, starts, lengths = found
    if storage.dtype != dtype:
        return None
    addresses = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    addresses += np.arange(addresses.size, dtype=addresses.dtype)
    passes: list[tuple[np.ndarray, np.ndarray | None]]
    if lay["path"] == "uniform":
        C, L = lay["shape"]
        if L < 2 or addresses.size != C * out.shape[1]:
            return None
        by_rank = addresses.reshape(-1, C, L).transpose(1, 0, 2).reshape(C, -1)
        passes = [(np.ascontiguousarray(a), None) for a in by_rank]
    elif lay["path"] == "passes":
        passes = [(addresses[src], dst) for src, dst in lay["passes"]]
    else:
        return None
    factor = None if scale is None else scale.astype(dtype)
    return _ranked_run(ufunc, storage, passes, identity(spec.op, dtype), out, factor)


def _ranked_run(
    ufunc: np.ufunc,
    storage: np.ndarray,
    passes: list[tuple[np.ndarray, np.ndarray | None]],
    start: Any,
    out: np.ndarray,
    factor: np.ndarray | None,
) -> Any:
    """The run of :func:`ranked`: ``out`` filled with ``start``, then each pass's pieces
    taken from ``storage`` and combined into the regions they belong to, then scaled."""
    buf = np.empty((storage.shape[0], max(a.size for a, _ in passes)), dtype=out.dtype)

    def run() -> None:
        out.fill(start)
        for addresses, regions in passes:
            piece = buf[:, : addresses.size]
            np.take(storage, addresses, axis=1, out=piece, mode="clip")
            if regions is not None:
                out[:, regions] = ufunc(out[:, regions], piece)
            else:
                ufunc(out, piece, out=out)
        if factor is not None:
            np.multiply(out, factor, out=out)

    return run
