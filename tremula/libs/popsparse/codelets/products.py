"""The sparse x dense products of the Fwd and GradA passes (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels, run_cost
from tremula.libs.popsparse.codelets.common import (
    geometry,
    select_blocks,
    template_sizes,
    zeroing_cycles,
)
from tremula.libs.popsparse.fields import ContentCache, Rows, repeats, take, unique


class ProductVertex(poplar.Codelet):
    """Sparse x dense products of the Fwd and GradA passes; see the module docstring."""

    supervisor = True
    meta_info = poplar.Input(poplar.UNSIGNED_SHORT)
    nz = poplar.Input("T")
    s = poplar.Input("T")
    q = poplar.Output("P")
    sub_group_id = poplar.State(poplar.UNSIGNED_SHORT)
    words = poplar.State(poplar.UNSIGNED_INT)
    nz_per_bucket = poplar.State(poplar.UNSIGNED_INT)
    num_z = poplar.State(poplar.UNSIGNED_INT)
    est_rows = poplar.State(poplar.UNSIGNED_INT)
    est_blocks = poplar.State(poplar.UNSIGNED_INT)
    grid_x = poplar.State(poplar.UNSIGNED_INT)
    grid_y = poplar.State(poplar.UNSIGNED_INT)
    grid_z = poplar.State(poplar.UNSIGNED_INT)
    accumulate: ClassVar[bool] = False
    transposed: ClassVar[bool] = False  # GradA: rows of q are the forward columns
    grad_a_info: ClassVar[bool] = False  # reads element-wise GradA meta-info
    block: ClassVar[bool] = False
    method: ClassVar[str] = ""  # the plan's method name (estimator)

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        geo = v.cached("geometry", lambda: geometry(v, cls))
        grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        nb, words, nzb = geo["buckets"], geo["fmt"].words, geo["fmt"].nz
        views = {
            "mi": v.view("meta_info", (*grid, nb, words)),
            "nz": v.view("nz", (*grid, nb, nzb)),
            "s": v.view("s", (*grid, z, c_cols)),
            "q": v.view("q", (*grid, r_rows, z)),
        }
        sid = v.sub_group_id
        cycles_of = _cycles_of(cls, v, geo, views["mi"], sid)
        merged = _merge_z(views, sid, geo)
        if merged is not None:  # the Z partitions of a group as one wider vertex
            views, sid, geo = merged
            grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        mi, nz, s, q = views["mi"], views["nz"], views["s"], views["q"]
        keeps = v.cached("repeats", lambda: {"nz": repeats(nz), "s": repeats(s)})
        mi_u, mi_idx = unique(mi)
        cache = v.cached("structures", ContentCache)
        if cls.block:
            build: Callable[..., Any] = _block_structure
        else:
            rows = v.cached("rows", lambda: _row_table(q))
            build = partial(_product_structure, rows=rows)
        for r in range(q.shape[0]):  # replicas (one, unless the graph is replicated)
            content = mi_u[r]
            st, cycles = cache.get(
                content, lambda c=content: (build(cls, geo, sid, c, mi_idx, keeps), cycles_of(c))
            )
            if r == 0:  # the timeline follows the first replica
                v.cached("run_cycles", dict)["cycles"] = cycles
            if cls.block:
                _block_run(st, nz[r], s[r], q[r], cls.accumulate)
                continue
            values = take(nz[r], st.values, st.offsets, "nz")
            if st.span:  # the product adds straight into the partials in device memory
                if not cls.accumulate:
                    q[r] = 0
                flat = np.lib.stride_tricks.as_strided(q[r], (st.span, z), (z * 4, 4))
                st.product.add_into(values, st.ins.gather(s[r]), flat)
                continue
            res = st.product.apply(values, st.ins.gather(s[r]))
            if st.outs is None:  # most output rows written: one strided pass
                res = res.reshape(*grid, r_rows, z)
                if cls.accumulate:
                    q[r] += res
                else:
                    q[r] = res
                continue
            if not cls.accumulate:
                q[r] = 0
            st.outs.scatter(q[r], res, add=cls.accumulate)

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        """PopLibs' estimate of the product on the plan's uniform pattern, plus zeroing
        the partials in a first compute (the distribution's vertex writes them,
        "zeroInfo"): the graph profile's estimate."""
        return cls.product_cycles(v) + cls.zeroing_cycles(v)

    @classmethod
    def zeroing_cycles(cls, v: poplar.VertexInfo | poplar.Batch) -> np.ndarray | int:
        """Zeroing the partials in a first compute ("zeroInfo")."""
        return zeroing_cycles(v, "q", cls.accumulate)

    @classmethod
    def run_cycles(cls, v: poplar.Batch) -> np.ndarray | None:
        """The cycles of this run: each vertex on the sub-groups it read
        (:mod:`run_cost`, with zeroing; noted by ``compute``, one array per meta-info
        content)."""
        return v.cached("run_cycles", dict).get("cycles")

    @classmethod
    def kind(cls, v: poplar.VertexInfo) -> run_cost.VertexKind:
        """What :mod:`run_cost` needs to know of these vertices."""
        _, _, z = template_sizes(v, "SHAPE")
        sizes = (v.dtype("s").size, v.dtype("q").size)
        if cls.block:
            return run_cost.VertexKind("block", sizes, z, template_sizes(v, "BLOCK")[0])
        return run_cost.VertexKind(cls.method, sizes, z, assembly=cls.method == "Forward")

    @classmethod
    def product_cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        ts = v.dtype("s").size
        _, _, z = template_sizes(v, "SHAPE")
        nb = v.lengths("meta_info") // np.maximum(v.state("words").astype(np.int64), 1)
        rows = v.state("est_rows").astype(np.int64)
        blocks = v.state("est_blocks").astype(np.int64)
        t = v.target
        if cls.block:
            edge = template_sizes(v, "BLOCK")[0]
            return est.block_fwd_cycles(t, edge, (ts, v.dtype("q").size), z, blocks, rows, nb, nb)
        if cls.method == "Transpose":
            return est.ew_transpose_product_cycles(t, ts, z, blocks, nb)
        gz = t.vector_width(ts)
        z_grains = np.full(rows.shape, max(z // gz, 1))
        assembly = cls.method == "Forward"
        return est.ew_product_cycles(
            t, ts, z_grains, gz, rows, blocks, nb, cls.transposed, assembly
        )

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:
        _, _, z = template_sizes(v, "SHAPE")
        area = template_sizes(v, "BLOCK")[0] ** 2 if cls.block else 1
        nb = v.lengths("meta_info") // np.maximum(v.state("words").astype(np.int64), 1)
        return 2.0 * v.state("est_blocks") * area * z * nb


def _cycles_of(
    cls: Any, v: poplar.Batch, geo: dict[str, Any], mi: np.ndarray, sid: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """The cycles of every vertex (:mod:`run_cost`, plus zeroing) from the distinct
    meta-info fields ``content`` of a replica (as :func:`unique` gives them; the same with
    the Z partitions merged, whose field repeats along Z)."""
    rows_of = v.cached("vertex_rows", lambda: unique(mi)[1])  # vertex -> its field
    kind = v.cached("kind", lambda: cls.kind(v))
    zeroing = v.cached("zeroing", lambda: np.asarray(cls.zeroing_cycles(v), dtype=np.int64))

    def cycles(content: np.ndarray) -> np.ndarray:
        words = content.reshape(int(np.prod(content.shape[:3])), -1)
        own = run_cost.vertex_cycles(v.target, kind, words, geo["fmt"], rows_of, sid)
        return own + zeroing

    return cycles


def _merge_z(
    views: dict[str, np.ndarray], sid: np.ndarray, geo: dict[str, Any]
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, Any]] | None:
    """The vertices of a Z group read the same buckets (stride 0 along Z): their products
    are one product over the group's whole batch, ``[gx, gy, 1]`` vertices of ``Pz Zt``
    columns, when the dense input and the partials view that way without a copy; else
    None."""
    gx, gy, gz = geo["grid"]
    r_rows, c_cols, z = geo["shape"]
    if gz == 1 or repeats(views["mi"])[2] or repeats(views["nz"])[2]:
        return None
    rep = views["q"].shape[0]
    try:
        s = np.reshape(views["s"], (rep, gx, gy, 1, gz * z, c_cols), copy=False)
        q = views["q"].transpose(0, 1, 2, 4, 3, 5)
        q = np.reshape(q, (rep, gx, gy, 1, r_rows, gz * z), copy=False)
    except ValueError:
        return None
    merged = {"mi": views["mi"][:, :, :, :1], "nz": views["nz"][:, :, :, :1], "s": s, "q": q}
    return (
        merged,
        sid.reshape(gx, gy, gz)[:, :, 0].reshape(-1),
        {
            **geo,
            "grid": (gx, gy, 1),
            "shape": (r_rows, c_cols, gz * z),
        },
    )


@dataclass(frozen=True)
class _Structure:
    """What a compute set's vertices do for one meta-info content: where their blocks'
    values are (an index of the nz view), the input rows they read and the output rows
    they write (None: all, as one array), and the product. ``span``: when not 0, the
    product's rows are the ``span`` rows of ``Z`` elements from the partials' first
    element in device memory (see :func:`_row_table`), written in place."""

    values: tuple[np.ndarray, ...]
    ins: Rows
    outs: Rows | None
    product: kernels.Product
    offsets: dict = field(default_factory=dict)  # flat offsets of ``values`` per view
    span: int = 0


def _row_table(q: np.ndarray) -> np.ndarray | None:
    """For a float32 partials view ``q [replica, *grid, R, Z]`` whose rows are runs of Z
    elements at multiples of Z from its first element: ``[vertices, R]``, the position of
    every row in those runs; else None."""
    z = q.shape[-1]
    unit = z * q.itemsize
    steps = q.strides[1:-1]
    if q.dtype != np.float32 or q.strides[-1] != q.itemsize or q.size == 0:
        return None
    if any(st < 0 or st % unit for st in steps):
        return None
    table = np.zeros(q.shape[1:-1], dtype=np.int64)
    for axis, st in enumerate(steps):
        shape = [1] * len(steps)
        shape[axis] = q.shape[1 + axis]
        table += (np.arange(q.shape[1 + axis]) * (st // unit)).reshape(shape)
    return table.reshape(-1, q.shape[-2])


#: Write the whole output at once when at least this share of its rows is written.
FULL_OUTPUT_SHARE = 0.25


def _value_index(
    geo: dict[str, Any], entries: kernels.Entries, ei: np.ndarray, coords: tuple, keep: tuple
) -> tuple[np.ndarray, ...]:
    """Index of the values of every processed block in a ``[*grid, buckets, nz]`` view."""
    fmt = geo["fmt"]
    k, off = np.divmod(entries.slot[ei], fmt.nz)
    canon = tuple((c * kk)[:, None] for c, kk in zip(coords, keep))
    return (*canon, k[:, None], off[:, None] + np.arange(fmt.area))


def _product_structure(
    cls: Any,  # the codelet class (its transposed / accumulate flags)
    geo: dict[str, Any],
    sid: np.ndarray,
    content: np.ndarray,
    mi_idx: np.ndarray,
    keeps: dict[str, tuple[bool, ...]],
    rows: np.ndarray | None = None,
) -> _Structure:
    """The product of every vertex's matching non-zeros, from the decoded meta-info;
    ``rows``: the partials' row table (:func:`_row_table`), if they have one."""
    grid = geo["grid"]
    r_rows, c_cols, _ = geo["shape"]
    entries, vert, ei, coords = select_blocks(geo, sid, content, mi_idx)
    x, y = entries.x[ei], entries.y[ei]
    out_off, in_off = (y, x) if cls.transposed else (x, y)
    bad = np.flatnonzero((out_off >= r_rows) | (in_off >= c_cols))
    if bad.size:
        raise kernels.MetaInfoError(
            f"Invalid meta-info read on the device: a non-zero at ({out_off[bad[0]]}, "
            f"{in_off[bad[0]]}) lies outside the {r_rows} x {c_cols} tile of the vertex "
            f"processing sub-group {int(sid[vert[bad[0]]])}"
        )
    ins, in_pos = Rows.of(coords, in_off, keeps["s"], grid, c_cols, 1)
    outs, span = None, 0
    if rows is not None and kernels.writes_in_place():
        span = int(rows.max()) + 1
        out_row, out_total = rows[vert, out_off], span
    else:
        n = int(np.prod(grid))
        outs, out_pos = Rows.of(coords, out_off, (True, True, True), grid, r_rows, 1, True)
        if outs.size >= FULL_OUTPUT_SHARE * n * r_rows:
            outs, out_row, out_total = None, vert * r_rows + out_off, n * r_rows
        else:
            out_row, out_total = out_pos, outs.size
    product = kernels.Product(out_total, ins.size, out_row, in_pos)
    order = product.order  # the values are gathered in the order the product reads them
    picked = tuple(c[order] for c in coords)
    index = _value_index(geo, entries, ei[order], picked, keeps["nz"])
    return _Structure(index, ins, outs, product, span=span)


@dataclass(frozen=True)
class _BlockGroup:
    """One batched product of a block structure (see :class:`kernels.BlockGroups`): the
    index of its ``[m, k, bo, bi]`` blocks in the nz view seen as ``[*grid, buckets, rows,
    bi]``; of its ``[m, k, Z, bi]`` dense slabs in the dense view seen as ``[*grid, Z,
    slabs, bi]`` (the Z axis left as a slice; or in the distinct slabs, ``[d, Z, bi]``);
    of its ``[m, bo, Z]`` output rows in the partials view."""

    w: tuple[np.ndarray, ...]
    s: tuple[np.ndarray, ...]
    q: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class _BlockStructure:
    """What a compute set's block vertices do for one meta-info content: the groups of
    batched products, the distinct dense slabs they read when there are few of them (an
    operand repeated over a grid axis, or blocks sharing columns: gathered and widened
    once), and the partial rows no block writes (zeroed by a distribution vertex; None:
    zero the whole output first)."""

    groups: list[_BlockGroup]
    slabs: tuple[np.ndarray, ...] | None
    empty: tuple[np.ndarray, ...] | None
    block: tuple[int, int]
    rows: kernels.BlockRows  # the same products for the compiled kernel


def _block_structure(
    cls: Any,  # the codelet class (its transposed / accumulate flags)
    geo: dict[str, Any],
    sid: np.ndarray,
    content: np.ndarray,
    mi_idx: np.ndarray,
    keeps: dict[str, tuple[bool, ...]],
) -> _BlockStructure:
    """The batched block products of every vertex's matching blocks."""
    fmt, grid = geo["fmt"], geo["grid"]
    r_rows, c_cols, _ = geo["shape"]
    entries, vert, ei, coords = select_blocks(geo, sid, content, mi_idx)
    x, y = entries.x[ei], entries.y[ei]
    out_off, in_off = (y, x) if cls.transposed else (x, y)
    bo, bi = fmt.block[::-1] if cls.transposed else fmt.block
    bad = np.flatnonzero((out_off + bo > r_rows) | (in_off + bi > c_cols) | (in_off % bi != 0))
    if bad.size:
        raise kernels.MetaInfoError(
            f"Invalid meta-info read on the device: a {bo}x{bi} block at ({out_off[bad[0]]}, "
            f"{in_off[bad[0]]}) lies outside the {r_rows} x {c_cols} tile of the vertex "
            f"processing sub-group {int(sid[vert[bad[0]]])}, or off its column grain"
        )
    bucket, slot = np.divmod(entries.slot[ei], fmt.nz)
    w_at = (*(c * k for c, k in zip(coords, keeps["nz"])), bucket, slot // bi)
    s_at = (*(c * k for c, k in zip(coords, keeps["s"])), in_off // bi)
    rows = kernels.BlockRows.of(
        vert * r_rows + out_off,
        in_off,
        (*w_at[:-1], slot),
        (*s_at[:-1], in_off),
        (*coords, out_off),
    )
    key = np.ravel_multi_index(s_at, (*grid, max(c_cols // bi, 1)))
    distinct, which = np.unique(key, return_inverse=True)
    slabs = None
    if 2 * distinct.size <= key.size:  # gather the distinct slabs once, then from them
        slabs = np.unravel_index(distinct, (*grid, max(c_cols // bi, 1)))
        s_at = (which.reshape(-1),)
    rows_bo = np.arange(bo)
    groups = []
    for _, lead, ids in kernels.BlockGroups.of(vert * r_rows + out_off, in_off).groups:
        groups.append(
            _BlockGroup(
                w=(*(a[ids][..., None] for a in w_at[:-1]), w_at[-1][ids][..., None] + rows_bo),
                s=tuple(a[ids] for a in s_at),
                q=(*(c[lead][:, None] for c in coords), out_off[lead][:, None] + rows_bo),
            )
        )
    n = int(np.prod(grid))
    written = np.zeros((n, r_rows), dtype=bool)
    written[vert[:, None], out_off[:, None] + rows_bo] = True
    empty = None
    if not cls.accumulate and 2 * int(written.sum()) >= written.size:
        v_e, row_e = np.nonzero(~written)
        empty = (*(c[:, None] for c in np.unravel_index(v_e, grid)), row_e[:, None])
    return _BlockStructure(groups, slabs, empty, (bo, bi), rows)


def _blocks_view(view: np.ndarray, axis: int, bi: int) -> np.ndarray:
    """``view`` with axis ``axis`` split into ``[n / bi, bi]`` (a copy only when the view's
    strides do not allow it)."""
    shape = (*view.shape[:axis], view.shape[axis] // bi, bi, *view.shape[axis + 1 :])
    try:
        return np.reshape(view, shape, copy=False)
    except ValueError:
        return np.ascontiguousarray(view).reshape(shape)


def _block_run(
    st: _BlockStructure, nz: np.ndarray, s: np.ndarray, q: np.ndarray, accumulate: bool
) -> None:
    """One replica's block products: ``nz [*grid, b, nzb]``, the dense input ``s [*grid,
    Z, C]`` and the partials ``q [*grid, R, Z]``."""
    bi = st.block[1]
    if not accumulate:
        if st.empty is None:
            q[...] = 0
        elif st.empty[0].size:
            q[st.empty] = 0
    if kernels.block_rows_product(st.rows, nz, s, q, st.block, accumulate):
        return
    w_view = _blocks_view(nz, nz.ndim - 1, bi)  # [*grid, b, nzb / bi, bi]
    s_view = _blocks_view(s, s.ndim - 1, bi)  # [*grid, Z, C / bi, bi]
    if st.slabs is not None:  # [d, Z, bi]
        c0, c1, c2, col = st.slabs
        s_view = s_view[c0, c1, c2, :, col].astype(np.float32)
    for g in st.groups:
        if st.slabs is not None:
            slabs = s_view[g.s[0]]
        else:
            c0, c1, c2, col = g.s
            slabs = s_view[c0, c1, c2, :, col]  # [m, k, Z, bi]
        res = kernels.block_product(slabs, w_view[g.w])  # [m, Z, bo]
        if accumulate:
            q[g.q] += res.transpose(0, 2, 1)
        else:
            q[g.q] = res.transpose(0, 2, 1)
