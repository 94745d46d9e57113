"""PopSparse's device codelets (spec 4.2 to 4.7): the sparse products of the three passes,
the transpose of block buckets for GradA, and the control of the propagation phase.

Product vertices (supervisor vertices, one per processing node's tile and compute set):

| vertex (``popsparse::...``) | pass | computes (tile frame) |
|---|---|---|
| ``SparseDenseMatMulElementWise<T,P,SHAPE>`` | Fwd | ``Q[x] += r S[y]`` |
| ``SparseDenseMatMulElementWiseTranspose<T,P,SHAPE>`` | GradA (shared) | ``Sg[y] += r Qg[x]`` |
| ``SparseDenseMatMulGradAElementWise<T,P,SHAPE>`` | GradA (own meta-info) | the same |
| ``SparseDenseMatMulBlock<T,P,BLOCK,SHAPE>`` | Fwd | ``Q[x:x+b] += B S[y:y+b]`` |
| ``SparseDenseMatMulBlockGradA<T,P,BLOCK,SHAPE>`` | GradA | ``Sg[y:y+b] += B^T Qg[x:x+b]`` |
| ``SparseDenseMatMulGradWElementWise<T,P,SHAPE>`` | GradW | ``g += sum_z Qg[x] S[y]`` |
| ``SparseDenseMatMulBlockGradW`` / ``...BlockAmpGradW`` | GradW | ``G += Qg[x:x+b] S[y:y+b]^T`` |

The shared-bucket GradA reads the forward meta-info; the other GradA element-wise vertex
reads the bucket's own GradA meta-info; block GradA reads buckets whose blocks were
transposed first (``popsparse::BucketTranspose<T,BLOCK>``).

Each has a ``...Acc`` twin for the propagation phase: the distribution vertex writes its
partials (``Output``: it zeroes them, PopLibs' ``zeroInfo``), the propagation one adds to
them (``InOut``). Fields: ``meta_info`` (the buckets the vertex reads, ``[buckets][words]``
of the meta-info part it uses), ``nz`` (``[buckets][nzPerBucket]``; GradW: ``acc``, the
bucket's partials), the dense input batch-major as the layer's tensors (``s``: ``[Z][C]``,
S for Fwd and GradW, Qgrad for GradA; GradW also ``qgrad`` ``[Z][R]``) and the partials
``q`` (``[R][Z]``, row-major). ``SHAPE`` is ``RxCxZ``: the rows of the partials (of
``qgrad`` for GradW), the columns of the dense input and the batch columns of the tile;
``BLOCK`` the grain block. State: ``sub_group_id`` (the id the vertex processes,
``x Py + y + 1``), the bucket geometry, the cycle-estimate inputs and ``grid_x/y/z``.

The grid (like poplin's) tells the batched compute that the vertices of the type form a
row-major ``[gx, gy, gz]`` grid of processing nodes; the fields are viewed as
``[*grid, *field]`` (zero-copy when the engine can) and operands repeated along a grid axis
(stride 0: the vertices of a Z group read the same buckets, the X partitions the same dense
slice) are used once. It never changes what a vertex computes. The meta-info is decoded
(:mod:`kernels`) and the product's structure built only when the meta-info's content
changes (a small cache keyed by content): a new pattern written into the same engine is
read on the next run. The values are read from the nz field on every run.

Estimators (spec 3.6, :mod:`estimators`) are those of the planner's cost model, per vertex,
from the expected rows and blocks of a matching sub-group per bucket (the uniform-pattern
expectation the plan was made with; state ``est_rows`` / ``est_blocks``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels
from tremula.libs.popsparse.cost import _worker_pieces
from tremula.libs.popsparse.layout import DIMS, propagation_steps

GRID = ("grid_x", "grid_y", "grid_z")


def shape_arg(*sizes: int) -> str:
    """The ``SHAPE`` (or ``BLOCK``) template argument of sizes."""
    return "x".join(str(int(s)) for s in sizes)


def _sizes(v: poplar.VertexInfo, name: str) -> tuple[int, ...]:
    return tuple(int(s) for s in v.vertex_type.params[name].split("x"))


def _grid(v: poplar.VertexInfo) -> tuple[int, int, int]:
    """The vertices' grid, or a single row of them when the states do not describe one."""
    if v.n == 0:
        return (1, 1, 0)
    rows = [v.state(name) for name in GRID]
    grid = tuple(int(r[0]) for r in rows)
    if all(np.all(r == r[0]) for r in rows) and int(np.prod(grid)) == v.n:
        return grid  # type: ignore[return-value]
    return (1, 1, v.n)


def unique(view: np.ndarray, ngrid: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """``view [replica, *grid, *field]`` without the grid axes it repeats along (stride 0):
    ``([replica, m, *field], index [vertices] into m)``."""
    grid = view.shape[1 : 1 + ngrid]
    keep = repeats(view, ngrid)
    sel = (slice(None), *(slice(None) if k else slice(0, 1) for k in keep))
    kept = tuple(n if k else 1 for n, k in zip(grid, keep))
    u = view[sel].reshape(view.shape[0], int(np.prod(kept)), *view.shape[1 + ngrid :])
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


# ---- sparse products (Fwd and GradA) ----


class _Product(poplar.Codelet):
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
        geo = v.cached("geometry", lambda: _geometry(v, cls))
        grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        nb, words, nzb = geo["buckets"], geo["fmt"].words, geo["fmt"].nz
        views = {
            "mi": v.view("meta_info", (*grid, nb, words)),
            "nz": v.view("nz", (*grid, nb, nzb)),
            "s": v.view("s", (*grid, z, c_cols)),
            "q": v.view("q", (*grid, r_rows, z)),
        }
        sid = v.sub_group_id
        merged = _merge_z(views, sid, geo)
        if merged is not None:  # the Z partitions of a group as one wider vertex
            views, sid, geo = merged
            grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        mi, nz, s, q = views["mi"], views["nz"], views["s"], views["q"]
        keeps = v.cached("repeats", lambda: {"nz": repeats(nz), "s": repeats(s)})
        mi_u, mi_idx = unique(mi)
        cache = v.cached("structures", ContentCache)
        for r in range(q.shape[0]):  # replicas (one, unless the graph is replicated)
            content = mi_u[r]
            st = cache.get(
                content,
                lambda c=content: _product_structure(cls, geo, sid, c, mi_idx, keeps),
            )
            values = take(nz[r], st.values, st.offsets, "nz")
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
        ts = v.dtype("s").size
        _, _, z = _sizes(v, "SHAPE")
        nb = v.lengths("meta_info") // np.maximum(v.state("words").astype(np.int64), 1)
        rows = v.state("est_rows").astype(np.int64)
        blocks = v.state("est_blocks").astype(np.int64)
        t = v.target
        w = t.num_worker_contexts
        if cls.block:
            edge = _sizes(v, "BLOCK")[0]
            return est.block_fwd_cycles(t, edge, ts, z, blocks, rows, nb, nb)
        if cls.method == "Transpose":
            sup = est.ew_supervisor(68, nb, nb, search=44, found=0)
            return sup + w * nb * est.ew_transpose_worker(ts, z, est.cdiv(blocks, w))
        gz = t.vector_width(ts)
        r_w, z_w = _worker_pieces(rows, np.full(rows.shape, max(z // gz, 1)), w)
        per_row = np.where(rows > 0, est.cdiv(blocks, np.maximum(rows, 1)), 0)
        worker = est.ew_fwd_worker(ts, z_w * gz, r_w, per_row[:, None]).max(axis=1)
        return est.ew_supervisor(46 if cls.transposed else 30, nb, nb) + w * nb * worker

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:
        _, _, z = _sizes(v, "SHAPE")
        area = _sizes(v, "BLOCK")[0] ** 2 if cls.block else 1
        nb = v.lengths("meta_info") // np.maximum(v.state("words").astype(np.int64), 1)
        return 2.0 * v.state("est_blocks") * area * z * nb


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


def _geometry(v: poplar.Batch, cls: type) -> dict[str, Any]:
    """The sizes every run of a vertex group uses (from its type and state)."""
    shape = _sizes(v, "SHAPE")
    edge = _sizes(v, "BLOCK")[0] if getattr(cls, "block", False) else 1
    words = int(v.state("words")[0]) if v.n else 1
    lengths = v.lengths("meta_info")
    fmt = kernels.BucketFormat(
        (edge, edge),
        words,
        int(v.state("nz_per_bucket")[0]) if v.n else 1,
        v.dtype("s").size,
        int(v.state("num_z")[0]) if v.n else 1,
        getattr(cls, "grad_a_info", False),
    )
    return {
        "grid": _grid(v),
        "shape": shape,
        "fmt": fmt,
        "buckets": int(lengths[0]) // max(words, 1) if v.n else 1,
    }


@dataclass(frozen=True)
class _Structure:
    """What a compute set's vertices do for one meta-info content: where their blocks'
    values are (an index of the nz view), the input rows they read and the output rows
    they write (None: all, as one array), and the product."""

    values: tuple[np.ndarray, ...]
    ins: Rows
    outs: Rows | None
    product: kernels.Product
    offsets: dict = field(default_factory=dict)  # flat offsets of ``values`` per view


#: Write the whole output at once when at least this share of its rows is written.
FULL_OUTPUT_SHARE = 0.25


def _select(
    geo: dict[str, Any], sid: np.ndarray, content: np.ndarray, mi_idx: np.ndarray
) -> tuple[kernels.Entries, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """Decoded blocks, the (vertex, block) pairs the vertices process, and the grid
    coordinates of each pair's vertex."""
    entries = kernels.decode(content.reshape(content.shape[0], -1), geo["fmt"])
    vert, ei = kernels.select(entries, mi_idx, sid)
    return entries, vert, ei, np.unravel_index(vert, geo["grid"])


def _value_index(
    geo: dict[str, Any], entries: kernels.Entries, ei: np.ndarray, coords: tuple, keep: tuple
) -> tuple[np.ndarray, ...]:
    """Index of the values of every processed block in a ``[*grid, buckets, nz]`` view."""
    fmt = geo["fmt"]
    k, off = np.divmod(entries.slot[ei], fmt.nz)
    canon = tuple((c * kk)[:, None] for c, kk in zip(coords, keep))
    return (*canon, k[:, None], off[:, None] + np.arange(fmt.area))


def _product_structure(
    cls: type,
    geo: dict[str, Any],
    sid: np.ndarray,
    content: np.ndarray,
    mi_idx: np.ndarray,
    keeps: dict[str, tuple[bool, ...]],
) -> _Structure:
    """The product of every vertex's matching blocks, from the decoded meta-info."""
    fmt, grid = geo["fmt"], geo["grid"]
    r_rows, c_cols, _ = geo["shape"]
    entries, vert, ei, coords = _select(geo, sid, content, mi_idx)
    x, y = entries.x[ei], entries.y[ei]
    out_off, in_off = (y, x) if cls.transposed else (x, y)
    bo, bi = fmt.block if not cls.transposed else fmt.block[::-1]
    bad = np.flatnonzero((out_off + bo > r_rows) | (in_off + bi > c_cols))
    if bad.size:
        raise kernels.MetaInfoError(
            f"Invalid meta-info read on the device: a block at ({out_off[bad[0]]}, "
            f"{in_off[bad[0]]}) lies outside the {r_rows} x {c_cols} tile of the vertex "
            f"processing sub-group {int(sid[vert[bad[0]]])}"
        )
    ins, in_pos = Rows.of(coords, in_off, keeps["s"], grid, c_cols, bi)
    n = int(np.prod(grid))
    outs, out_pos = Rows.of(coords, out_off, (True, True, True), grid, r_rows, bo, True)
    if outs.size * bo >= FULL_OUTPUT_SHARE * n * r_rows:
        outs, out_row, out_total = None, vert * r_rows + out_off, n * r_rows
    else:
        out_row, out_total = out_pos * bo, outs.size * bo
    product = kernels.Product(out_total, ins.size * bi, out_row, in_pos * bi, (bo, bi))
    order = product.order  # the values are gathered in the order the product reads them
    picked = tuple(c[order] for c in coords)
    index = _value_index(geo, entries, ei[order], picked, keeps["nz"])
    return _Structure(index, ins, outs, product)


# ---- GradW ----


class _GradW(poplar.Codelet):
    """GradW: the bucket's partials at its blocks += Qgrad S^T over the tile's batch."""

    supervisor = True
    meta_info = poplar.Input(poplar.UNSIGNED_SHORT)
    acc = poplar.Output("P")
    qgrad = poplar.Input("T")
    s = poplar.Input("T")
    sub_group_id = poplar.State(poplar.UNSIGNED_SHORT)
    words = poplar.State(poplar.UNSIGNED_INT)
    nz_per_bucket = poplar.State(poplar.UNSIGNED_INT)
    num_z = poplar.State(poplar.UNSIGNED_INT)
    z_grain = poplar.State(poplar.UNSIGNED_INT, default=1)
    est_rows = poplar.State(poplar.UNSIGNED_INT)
    est_blocks = poplar.State(poplar.UNSIGNED_INT)
    grid_x = poplar.State(poplar.UNSIGNED_INT)
    grid_y = poplar.State(poplar.UNSIGNED_INT)
    grid_z = poplar.State(poplar.UNSIGNED_INT)
    accumulate: ClassVar[bool] = False
    block: ClassVar[bool] = False
    method: ClassVar[str] = "GradW"

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        geo = v.cached("geometry", lambda: _geometry(v, cls))
        grid, (r_rows, c_cols, z) = geo["grid"], geo["shape"]
        fmt = geo["fmt"]
        mi = v.view("meta_info", (*grid, 1, fmt.words))
        acc = v.view("acc", (*grid, fmt.nz))
        qg = v.view("qgrad", (*grid, z, r_rows))
        s = v.view("s", (*grid, z, c_cols))
        keeps = v.cached("repeats", lambda: {"qgrad": repeats(qg), "s": repeats(s)})
        mi_u, mi_idx = unique(mi)
        cache = v.cached("structures", ContentCache)
        for r in range(acc.shape[0]):
            content = mi_u[r]
            a, b, index = cache.get(
                content,
                lambda c=content: _grad_w_structure(geo, v.sub_group_id, c, mi_idx, keeps),
            )
            prods = kernels.sampled_products(
                a[0].gather(qg[r]), b[0].gather(s[r]), a[1], b[1], fmt.block
            )
            if not cls.accumulate:
                acc[r] = 0
            acc[r][index] += prods

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        ts = v.dtype("s").size
        _, _, z = _sizes(v, "SHAPE")
        t = v.target
        rows = v.state("est_rows").astype(np.int64)
        blocks = v.state("est_blocks").astype(np.int64)
        if cls.method == "GradWBlock":
            return est.block_gradw_cycles(t, _sizes(v, "BLOCK")[0], ts, z, blocks)
        if cls.method == "GradWAMPBlock":
            zg = int(v.state("z_grain")[0]) if v.n else 1
            return est.block_gradw_amp_cycles(t, _sizes(v, "BLOCK")[0], ts, z, blocks, zg)
        w = t.num_worker_contexts
        worker = est.ew_gradw_worker(ts, z, est.cdiv(rows, w), est.cdiv(blocks, w))
        return est.ew_supervisor(30, 1, 1) + w * worker

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:
        _, _, z = _sizes(v, "SHAPE")
        area = _sizes(v, "BLOCK")[0] ** 2 if cls.block else 1
        return 2.0 * v.state("est_blocks") * area * z


def _grad_w_structure(
    geo: dict[str, Any],
    sid: np.ndarray,
    content: np.ndarray,
    mi_idx: np.ndarray,
    keeps: dict[str, tuple[bool, ...]],
) -> tuple[tuple[Rows, np.ndarray], tuple[Rows, np.ndarray], tuple[np.ndarray, ...]]:
    """The rows of Qgrad and S each processed block reads, and the index of its partials
    in the ``[*grid, nz]`` partial buckets."""
    fmt, grid = geo["fmt"], geo["grid"]
    r_rows, c_cols, _ = geo["shape"]
    entries, _, ei, coords = _select(geo, sid, content, mi_idx)
    x, y = entries.x[ei], entries.y[ei]
    bx, by = fmt.block
    if np.any(x + bx > r_rows) or np.any(y + by > c_cols):
        raise kernels.MetaInfoError(
            f"Invalid meta-info read on the device: a block lies outside the {r_rows} x "
            f"{c_cols} tile of a GradW vertex"
        )
    a, a_pos = Rows.of(coords, x, keeps["qgrad"], grid, r_rows, bx)
    b, b_pos = Rows.of(coords, y, keeps["s"], grid, c_cols, by)
    slot = entries.slot[ei][:, None] + np.arange(fmt.area)
    index = (*(c[:, None] for c in coords), slot)
    return (a, a_pos * bx), (b, b_pos * by), index


# ---- the transpose of block buckets (GradA) ----


class BucketTranspose(poplar.Codelet):
    """Every block of a bucket's nz values transposed (block GradA reads ``B^T``)."""

    name = "popsparse::BucketTranspose"
    templates = ("T", "BLOCK")
    supervisor = True
    src = poplar.Input("T")
    dst = poplar.Output("T")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        bx, by = _sizes(v, "BLOCK")
        src = v["src"]
        dst = v["dst"]
        dst[...] = src.reshape(src.shape[0], -1, bx, by).swapaxes(-1, -2).reshape(dst.shape)

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        bx, by = _sizes(v, "BLOCK")
        blocks = v.lengths("src") // (bx * by)
        return est.block_bucket_transpose_cycles(v.target, bx, v.dtype("src").size, blocks)


# ---- per-PN copies of the dense operands (propagation) ----

#: [choice] cycles of a copy vertex: the exchange before it writes the slice into the
#: tile's buffer (as the Copy program it stands for would), the vertex only starts.
COPY_CYCLES = 10


class DenseSlice(poplar.Codelet):
    """A PN's ``[Zt][N]`` slice of a dense operand copied into its tile's buffer: what the
    distribution and propagation compute sets read when the pattern propagates (spec
    4.2's per-tile copies of the dense input). It stands for a ``Copy`` program: the slice
    reaches the tile through the compute set's exchange, which is where the time goes; the
    vertex costs :data:`COPY_CYCLES` (and lets the host copy through strided views rather
    than lists of element addresses). ``OPERAND`` names the
    operand (``s`` or ``qgrad``), ``REGION`` the PNs' tile shape ``XtxYt`` (a type per
    region), ``SHAPE`` is ``ZtxN``."""

    name = "popsparse::DenseSlice"
    templates = ("T", "OPERAND", "REGION", "SHAPE")
    supervisor = True
    src = poplar.Input("T")
    dst = poplar.Output("T")
    grid_x = poplar.State(poplar.UNSIGNED_INT)
    grid_y = poplar.State(poplar.UNSIGNED_INT)
    grid_z = poplar.State(poplar.UNSIGNED_INT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        grid = v.cached("grid", lambda: _grid(v))
        shape = _sizes(v, "SHAPE")
        dst = v.view("dst", (*grid, *shape))
        dst[...] = v.view("src", (*grid, *shape))

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, COPY_CYCLES)


# ---- propagation control (spec 4.3) ----

#: [choice] cycles of the control vertices: reading the overflow info and the step counter,
#: testing the X-distance bit (PopLibs' ``BitIsSet``), writing the codes.
CONTROL_CYCLES = {"init": 40, "step": 30}


def schedule(
    partition: tuple[int, int, int], overflow_info: np.ndarray, return_home: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The propagation steps of an overflow info (:func:`layout.propagation_steps`) as
    codes: per step, the shift (0 none, ``1 + 2 dim + buffer written``), the compute
    (0 none, ``1 + buffer``) and the buffer then current. Shifts along a dimension of one
    partition move nothing and are dropped (so is a step left with nothing to do).
    ``return_home`` appends the shifts that bring every bucket back to its own PN (GradW,
    whose partial buckets travel)."""
    steps = propagation_steps(partition, overflow_info)
    moves: list[tuple[int | None, bool]] = [
        (None if s.shift is None else DIMS.index(s.shift), s.compute) for s in steps
    ]
    if return_home and steps:
        offset = steps[-1].offset
        for d in (2, 1, 0):
            moves += [(d, False)] * ((partition[d] - offset[d]) % partition[d])
    shift, comp, bufs = [], [], []
    buf = 0
    for k, (d, compute) in enumerate(moves):
        moved = d is not None and partition[d] > 1
        if k and not moved and not compute:
            continue
        if moved:
            buf ^= 1
        shift.append(1 + 2 * d + buf if moved else 0)
        comp.append(1 + buf if compute else 0)
        bufs.append(buf)
    return (
        np.array(shift, dtype=np.uint32),
        np.array(comp, dtype=np.uint32),
        np.array(bufs, dtype=np.uint32),
    )


class _Control(poplar.Codelet):
    """One step of the propagation loop's control on the control tile: the codes of step
    ``step`` of the schedule the overflow info gives (see :func:`schedule`)."""

    overflow_info = poplar.Input(poplar.UNSIGNED_SHORT)
    step = poplar.InOut(poplar.UNSIGNED_INT, kind="scalar")
    compute_code = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    shift_code = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    buffer = poplar.InOut(poplar.UNSIGNED_INT, kind="scalar")
    more = poplar.Output(poplar.UNSIGNED_INT, kind="scalar")
    px = poplar.State(poplar.UNSIGNED_INT)
    py = poplar.State(poplar.UNSIGNED_INT)
    pz = poplar.State(poplar.UNSIGNED_INT)
    return_home = poplar.State(poplar.UNSIGNED_INT)
    init: ClassVar[bool] = False

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        info = v.overflow_info  # [replica, words]; one vertex
        part = (int(v.px[0]), int(v.py[0]), int(v.pz[0]))
        home = bool(v.return_home[0])
        cache = v.cached("schedules", dict)
        rows, inverse = np.unique(info, axis=0, return_inverse=True)
        tables = []
        for row in rows:
            key = row.tobytes()
            if key not in cache:
                cache[key] = schedule(part, row, home)
            tables.append(cache[key])
        inverse = inverse.reshape(-1)
        count = np.array([t[0].size for t in tables], dtype=np.int64)[inverse]
        i = np.zeros_like(count) if cls.init else v.step[:, 0].astype(np.int64)
        live = i < count
        codes = np.zeros((3, info.shape[0]), dtype=np.uint32)  # shift, compute, buffer
        codes[2] = v.buffer[:, 0]
        for k, table in enumerate(tables):
            sel = np.flatnonzero((inverse == k) & live)
            for c in range(3):
                codes[c, sel] = table[c][i[sel]]
        v.more = live.astype(np.uint32)[:, None]
        if cls.init:  # nothing runs yet: step 0 is read by the loop's first condition
            v.step = 0
            v.buffer = 0
            v.compute_code = 0
            v.shift_code = 0
            return
        v.shift_code = codes[0][:, None]
        v.compute_code = codes[1][:, None]
        v.buffer = codes[2][:, None]
        v.step = np.where(live, i + 1, i).astype(np.uint32)[:, None]

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, CONTROL_CYCLES["init" if cls.init else "step"])


class PropagationInit(_Control):
    """Start of the propagation phase: step 0, ``more`` when the schedule has steps."""

    name = "popsparse::PropagationInit"
    init = True


class PropagationStep(_Control):
    """The codes of the next step (the loop's condition), then ``step += 1``."""

    name = "popsparse::PropagationStep"


# ---- the product families, from a table ----

#: method -> (vertex name, block, transposed, reads GradA meta-info)
PRODUCTS = {
    "Forward": ("SparseDenseMatMulElementWise", False, False, False),
    "Transpose": ("SparseDenseMatMulElementWiseTranspose", False, True, False),
    "GradA": ("SparseDenseMatMulGradAElementWise", False, True, True),
    "ForwardAMPBlock": ("SparseDenseMatMulBlock", True, False, False),
    "TransposeAMPBlock": ("SparseDenseMatMulBlockGradA", True, True, False),
}
#: method -> (vertex name, block)
GRAD_W = {
    "GradW": ("SparseDenseMatMulGradWElementWise", False),
    "GradWBlock": ("SparseDenseMatMulBlockGradW", True),
    "GradWAMPBlock": ("SparseDenseMatMulBlockAmpGradW", True),
}


def _make(base: type, method: str, name: str, block: bool, accumulate: bool, **attrs: Any) -> type:
    body: dict[str, Any] = {
        "name": f"popsparse::{name}{'Acc' if accumulate else ''}",
        "templates": ("T", "P", "BLOCK", "SHAPE") if block else ("T", "P", "SHAPE"),
        "block": block,
        "accumulate": accumulate,
        "method": method,
        **attrs,
    }
    out_field = "acc" if base is _GradW else "q"
    if accumulate:
        body[out_field] = poplar.InOut("P")
    return type(f"{name}{'Acc' if accumulate else ''}", (base,), body)


VERTICES: dict[tuple[str, bool], type[poplar.Codelet]] = {}
for _method, (_name, _block, _tr, _ga) in PRODUCTS.items():
    for _acc in (False, True):
        VERTICES[_method, _acc] = _make(
            _Product, _method, _name, _block, _acc, transposed=_tr, grad_a_info=_ga
        )
for _method, (_name, _block) in GRAD_W.items():
    for _acc in (False, True):
        VERTICES[_method, _acc] = _make(_GradW, _method, _name, _block, _acc)

CODELETS: list[type[poplar.Codelet]] = [
    *VERTICES.values(),
    BucketTranspose,
    DenseSlice,
    PropagationInit,
    PropagationStep,
]


def vertex_name(method: str, accumulate: bool, dtype: str, partials: str, **sizes: Any) -> str:
    """The vertex type of a method's product: ``popsparse::<name><T,P[,BLOCK],SHAPE>``."""
    cls = VERTICES[method, accumulate]
    args = [dtype, partials]
    if cls.block:  # type: ignore[attr-defined]
        args.append(shape_arg(*sizes["block"]))
    args.append(shape_arg(*sizes["shape"]))
    return f"{cls.name}<{','.join(args)}>"
