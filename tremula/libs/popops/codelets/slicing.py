"""Slicing codelets: the multi-slice, multi-update and multi-update-add (gather / scatter
/ scatter-add by index) vertices; dynamic slice / update with a runtime offset are in
``dynamic_slice.py`` (both families are in :data:`CODELETS`).

``popops::MultiSlice<T,TI>`` (supervisor): ``base`` holds rows ``baseRow ..`` of a table
(``rowElems`` elements each); ``out`` row ``i`` is ``base`` row ``indices[i] - baseRow`` or,
when that row is not in ``base``, ``fill`` (0 for a whole table, -0.0 for a float partition,
so that adding the partitions' results is exact). ``popops::MultiUpdate<T,TI>`` writes
``rows[i]`` to those rows (the last of duplicate indices wins) and
``popops::MultiUpdateAdd<T,TI,TS>`` adds ``scale * rows[i]`` (duplicates accumulate); rows
not in ``base`` are ignored.

The batched scatter-add (:func:`scatter_add`) sorts the (row, update) pairs once by
destination with a radix sort, sums each destination's updates into a compact accumulator
in one pass per rank of duplicate and adds each sum to the table once: no per-index Python
work and no ``np.add.at``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popops import estimators as E
from tremula.libs.popops.codelets.dynamic_slice import (
    DynamicSlice,
    DynamicSliceInt,
    DynamicUpdate,
    DynamicUpdateInt,
)


def _starts(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size, dtype=np.int64)
    if lengths.size > 1:
        np.cumsum(lengths[:-1], out=out[1:])
    return out


# ---- multi slice / update ----


def _multi_layout(v: Any) -> dict[str, Any]:
    """Per index (flat over vertices): its vertex, its vertex's row count, the first row of
    its vertex's ``base`` among all ``base`` rows and its vertex's ``baseRow``; the same per
    vertex (``v_...``)."""
    E = v.rowElems.astype(np.int64)
    if not np.all(E[0] == E):
        raise ValueError(f"{v.vertex_type.name}: vertices of one compute set must share rowElems")
    rows = v.lengths("base").astype(np.int64) // max(int(E[0]), 1)
    base_row = v.baseRow.astype(np.int64)
    vertex = v.segments("indices")
    row0 = _starts(rows)
    ends = base_row + rows
    return {
        "E": int(E[0]),
        "vertex": vertex,
        "rows": rows[vertex],
        "row0": row0[vertex],
        "base_row": base_row[vertex],
        "v_rows": rows,
        "v_row0": row0,
        "v_base_row": base_row,
        "ascending": bool(np.all(base_row[1:] >= ends[:-1])),
    }


def _local_rows(v: poplar.Batch) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """(layout, row of each index within its vertex's ``base`` [replica, index], valid)."""
    lay = v.cached("multi", lambda: _multi_layout(v))
    local = v.indices.astype(np.int64) - lay["base_row"]
    valid = (local >= 0) & (local < lay["rows"])
    return lay, local, valid


def _multi_slice_compute(v: poplar.Batch) -> None:
    lay, local, valid = _local_rows(v)
    R, K, E = local.shape[0], local.shape[1], lay["E"]
    fill = v.expand(v.fill, "indices")[None, :, None]
    base = v.base.reshape(R, -1, E)
    if base.shape[1] == 0:
        out = np.broadcast_to(fill, (R, K, E))
    else:
        rows = np.where(valid, lay["row0"] + local, 0)
        got = np.take_along_axis(base, rows[:, :, None], axis=1)
        out = np.where(valid[:, :, None], got, fill)
    v.out = out.reshape(R, -1)


def _shared_indices(v: poplar.Batch, lay: dict[str, Any]) -> np.ndarray | None:
    """``[replica, index]`` when every vertex reads the same indices (a broadcast view of
    one tensor) and the vertices' rows are disjoint and ascending; else None."""
    per = v.lengths("indices")
    if v.n == 0 or not np.all(per == per[0]) or not lay["ascending"]:
        return None
    view = v.view("indices", (v.n, int(per[0])))
    if v.n > 1 and view.strides[1] != 0:
        return None
    return view[:, 0, :]


def _update_pairs(
    v: poplar.Batch,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """``(dest, updates, src, scale, E)``: the valid pairs of a destination row (in the
    concatenated ``base`` rows, replica-major) and an update row (``updates[src]``), with
    the pair's scale. When all vertices share their indices each index is placed by one
    binary search over the partitions (the per-vertex search, vectorised); otherwise every
    (vertex, index) pair is tested."""
    lay = v.cached("multi", lambda: _multi_layout(v))
    E = lay["E"]
    total_rows = v.base.shape[1] // max(E, 1)
    shared = _shared_indices(v, lay)
    if shared is not None:
        R, n = shared.shape
        idx = shared.astype(np.int64)
        if v.n == 1:
            part = np.zeros((1, 1), dtype=np.int64)
        else:
            part = np.maximum(np.searchsorted(lay["v_base_row"], idx, side="right") - 1, 0)
        local = idx - lay["v_base_row"][part]
        valid = (local >= 0) & (local < lay["v_rows"][part])
        dest = lay["v_row0"][part] + local
        if R > 1:
            dest = dest + np.arange(R)[:, None] * total_rows
        updates = v.view("rows", (v.n, n, E))[:, 0].reshape(R * n, E)
        vertex = np.broadcast_to(part, (R, n))
    else:
        _, local, valid = _local_rows(v)
        R, n = local.shape
        dest = lay["row0"] + local + np.arange(R)[:, None] * total_rows
        updates = v.rows.reshape(-1, E)
        vertex = np.broadcast_to(lay["vertex"], (R, n))
    src = np.arange(R * n).reshape(R, n)
    if "scale" in v.fields:
        scale = v.scale.astype(np.float64)[np.arange(R)[:, None], vertex]
    else:
        scale = np.ones((R, n))
    if valid.all():
        return dest.reshape(-1), updates, src.reshape(-1), scale.reshape(-1), E
    return dest[valid], updates, src[valid], scale[valid], E


def _multi_update_compute(v: poplar.Batch) -> None:
    dest, updates, src, _, E = _update_pairs(v)
    if dest.size == 0:
        return
    base = v["base"]
    base = base.reshape(base.shape[0], -1, E)  # a view of the field (replica, row, element)
    order = stable_argsort(dest)
    d = dest[order]
    last = np.r_[d[1:] != d[:-1], True]  # the last update of each destination wins
    base[np.unravel_index(d[last], base.shape[:2])] = updates[src[order][last]]


def _multi_update_add_compute(v: poplar.Batch) -> None:
    dest, updates, src, scale, E = _update_pairs(v)
    if dest.size:
        base = v["base"]
        scatter_add(base.reshape(base.shape[0], -1, E), updates, dest, src, scale)


#: MultiUpdateOp's operations: how an update row combines with the table row
UPDATE_OPS = {"MAX": np.maximum, "MIN": np.minimum, "MUL": np.multiply}


def _multi_update_op_compute(v: poplar.Batch) -> None:
    dest, updates, src, _, E = _update_pairs(v)
    if dest.size:
        base = v["base"]
        base = base.reshape(-1, E)  # (replica x row, element)
        UPDATE_OPS[v.params["OP"]].at(base, dest, updates[src])


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """A stable argsort of non-negative integer keys: LSD radix passes on 16-bit digits
    (NumPy's radix sort) when the keys fit in 32 bits, a merge sort otherwise."""
    keys = np.asarray(keys)
    top = int(keys.max(initial=0))
    if top >= 1 << 32:
        return np.argsort(keys, kind="stable")
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    if top >= 1 << 16:
        high = (keys[order] >> 16).astype(np.uint16)
        order = order[np.argsort(high, kind="stable")]
    return order


def scatter_add(
    table: np.ndarray,
    updates: np.ndarray,
    dest: np.ndarray,
    src: np.ndarray,
    scale: np.ndarray,
    unrolled: int = 64,
    block: int = 1024,
) -> None:
    """``table[dest[i]] += scale[i] * updates[src[i]]`` for every ``i``, duplicates
    accumulating, ``table`` modified in place. Rows are the last axis of both; ``dest``
    numbers the rows of ``table`` in row-major order over its other axes (e.g. replica,
    row), so that ``table`` may be a strided view.

    The pairs are sorted by destination (a stable radix sort) and the destinations by
    decreasing multiplicity. Each block of ``block`` destinations gets an accumulator (the
    table rows themselves when every scale is 1); pass ``j`` adds the ``j``-th update of
    every destination that has more than ``j`` (a prefix of the block), so each update row
    is read once and the accumulator stays in cache; ranks past ``unrolled`` (heavy
    hitters) are summed with one ``reduceat``. Each destination row is written once. With
    scales of 1 a float table gets exactly ``numpy.add.at``'s result (the same additions in
    the same order). Sums run in float for half tables; the updates of one destination
    share one scale (one per vertex and replica); integer tables multiply in float and
    truncate.
    """
    order = stable_argsort(dest)
    d = dest[order]
    s = src[order]
    starts = np.r_[0, np.flatnonzero(d[1:] != d[:-1]) + 1]
    lengths = np.diff(np.r_[starts, d.size])
    by_len = stable_argsort(lengths.max() - lengths)  # most updates first
    st, ln = starts[by_len], lengths[by_len]
    acc_type = np.dtype(np.float32) if table.dtype.kind == "f" else table.dtype
    rows_out = np.unravel_index(d[st], table.shape[:-1])
    sc = scale[st]
    plain = bool(np.all(sc == 1))
    if plain:
        acc = table[rows_out].astype(acc_type)
    else:
        acc = np.zeros((st.size, table.shape[-1]), dtype=acc_type)
    for a in range(0, st.size, block):  # blocks of destinations, then ranks (bounded)
        lens, firsts, part = np.minimum(ln[a : a + block], unrolled), st[a : a + block], acc[a:]
        alive = np.searchsorted(-lens, -np.arange(int(lens[0])), side="left")
        for j, count in enumerate(alive.tolist()):
            part[:count] += np.take(updates, s[firsts[:count] + j], axis=0)
    if ln[0] > unrolled:
        _add_heavy_hitters(acc, updates, s, st, ln, unrolled)
    if not plain:
        if acc_type.kind == "f":
            acc *= sc[:, None].astype(acc_type)
        else:
            acc = (acc * sc[:, None]).astype(acc_type)
        acc += table[rows_out].astype(acc_type, copy=False)
    table[rows_out] = acc.astype(table.dtype, copy=False)


def _add_heavy_hitters(
    acc: np.ndarray,
    updates: np.ndarray,
    s: np.ndarray,
    st: np.ndarray,
    ln: np.ndarray,
    unrolled: int,
) -> None:
    """Add the updates of rank ``unrolled`` and beyond (one ``reduceat`` over all of them)."""
    heavy = np.flatnonzero(ln > unrolled)
    rest = ln[heavy] - unrolled
    first = np.cumsum(rest) - rest
    pos = np.repeat(st[heavy] + unrolled - first, rest) + np.arange(int(rest.sum()))
    rows = np.take(updates, s[pos], axis=0).astype(acc.dtype, copy=False)
    acc[heavy] += np.add.reduceat(rows, first, axis=0)


class MultiSlice(poplar.Codelet):
    """Gather rows by index from a partition of a table (see the module docstring)."""

    name = "popops::MultiSlice"
    templates = ("T", "TI")
    supervisor = True
    indices = poplar.Input("TI")
    base = poplar.Input("T")
    out = poplar.Output("T")
    baseRow = poplar.State(poplar.UNSIGNED_INT)
    rowElems = poplar.State(poplar.UNSIGNED_INT)
    fill = poplar.State("T")

    compute = staticmethod(_multi_slice_compute)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.multi_slice_cycles(v, "MultiSlice")


class MultiUpdate(poplar.Codelet):
    """Write rows by index into a partition of a table (the last duplicate wins)."""

    name = "popops::MultiUpdate"
    templates = ("T", "TI")
    supervisor = True
    indices = poplar.Input("TI")
    rows = poplar.Input("T")
    base = poplar.InOut("T")
    baseRow = poplar.State(poplar.UNSIGNED_INT)
    rowElems = poplar.State(poplar.UNSIGNED_INT)

    compute = staticmethod(_multi_update_compute)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.multi_slice_cycles(v, "MultiUpdate")


class MultiUpdateAdd(poplar.Codelet):
    """Add ``scale * rows[i]`` to the rows of a partition of a table (duplicates add up)."""

    name = "popops::MultiUpdateAdd"
    templates = ("T", "TI", "TS")
    supervisor = True
    indices = poplar.Input("TI")
    rows = poplar.Input("T")
    scale = poplar.Input("TS", kind="scalar")
    base = poplar.InOut("T")
    baseRow = poplar.State(poplar.UNSIGNED_INT)
    rowElems = poplar.State(poplar.UNSIGNED_INT)

    compute = staticmethod(_multi_update_add_compute)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.multi_slice_cycles(v, "MultiUpdateAdd")

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return 2.0 * v.lengths("rows")


class MultiUpdateOp(MultiUpdate):
    """Combine rows by index into a partition of a table with ``OP`` (MAX, MIN or MUL;
    duplicates combine in turn): PopLibs' ``multiUpdateMax`` generalised. MultiUpdate's
    fields."""

    name = "popops::MultiUpdateOp"
    templates = ("T", "TI", "OP")  # type: ignore[assignment]

    compute = staticmethod(_multi_update_op_compute)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return E.multi_slice_cycles(v, "MultiUpdateOp")

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return 1.0 * v.lengths("rows")


CODELETS = (
    DynamicSlice,
    DynamicUpdate,
    DynamicSliceInt,
    DynamicUpdateInt,
    MultiSlice,
    MultiUpdate,
    MultiUpdateAdd,
    MultiUpdateOp,
)
