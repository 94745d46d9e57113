"""poplin's codelets: block products (AMP and dot-product) and the reduction of partials.

Each vertex type is specialised for one block shape, its last template argument ``SHAPE``
(like PopLibs' vertices specialised on compile-time constants), so that all vertices of a
type in a compute set have equal fields (a ``.i`` suffix, e.g. ``4x1x23x32.1``, tells apart
groups of equal shape in one compute set):

* ``poplin::AmpPartial<IN,P,GxMxKxN>`` / ``poplin::MacPartial<IN,P,GxMxKxN>``: ``c = a @ b``
  for a vertex's ``G`` products of an ``[M, K]`` block of A (row-major, groups outermost) by
  a ``[K, N]`` block of B, into a ``[G, M, N]`` block of partials. The ``...Acc`` variants
  add to ``c`` (serial steps after the first). They differ only in their cycle estimators.
* ``poplin::ReducePartials<P,OUT,PxGxRxC>``: a vertex's ``P`` partials (one ``[G, R, C]``
  slab each, one after the other) summed into its ``[G, R, C]`` outputs and cast to
  ``OUT``; ``poplin::ReducePartialsAcc`` adds ``scale`` times the sum to the output
  (``matmul_acc``). With a single partial this is the output cast.

State ``grid_g, grid_m, grid_n, grid_k`` tells the batched compute how the vertices of the
type are arranged: a row-major grid of that many blocks along ``G``, ``M``, ``N`` and the
K slices (for a reduction: the pieces of a block). It only changes how fast the vertices
run, never what they compute: each field is viewed as ``[*grid, *block]`` (zero-copy when
the engine can, see ``Batch.view``) and every vertex's block product is part of one
``np.matmul``. When the A blocks repeat along ``N`` and the B blocks along ``M`` (stride-0
views: the vertices of a grid read the operands' blocks in place) that product is, per K
slice, one matrix product of whole operands writing all the partials of the slice (BLAS's
summation order inside a block); otherwise a stacked product of the blocks. A grid that
does not match the vertex count counts as one row of blocks. Products and sums of floats
are computed in float32 (the AMP's and the reduction's accumulators), of ints in their type
(wrapping like the IPU's).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.libs import jit
from tremula.libs.poplin import estimators as est
from tremula.libs.poplin import exact

GRID = ("grid_g", "grid_m", "grid_n", "grid_k")


def shape_arg(sizes: tuple[int, ...]) -> str:
    """The ``SHAPE`` template argument of a block shape."""
    return "x".join(str(int(s)) for s in sizes)


def _shape(v: poplar.VertexInfo | poplar.Batch) -> tuple[int, ...]:
    return tuple(int(s) for s in v.vertex_type.params["SHAPE"].split(".")[0].split("x"))


def _math_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32) if dtype.kind == "f" else np.dtype(dtype)


def _grid(v: poplar.Batch) -> tuple[int, int, int, int]:
    """The vertices' grid (a single row of blocks when the states do not describe one)."""
    if v.n == 0:
        return (1, 1, 1, 0)
    rows = [v.state(name) for name in GRID]
    grid = tuple(int(r[0]) for r in rows)
    if all(np.all(r == r[0]) for r in rows) and int(np.prod(grid)) == v.n:
        return grid  # type: ignore[return-value]
    return (1, 1, 1, v.n)


def _no_copy(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    try:
        return np.reshape(x, shape, copy=False)
    except ValueError:
        return None


class _Partial(poplar.Codelet):
    """Block products; see the module docstring."""

    templates = ("IN", "P", "SHAPE")
    supervisor = True
    a = poplar.Input("IN")
    b = poplar.Input("IN")
    c = poplar.Output("P")
    grid_g = poplar.State(poplar.UNSIGNED_INT)
    grid_m = poplar.State(poplar.UNSIGNED_INT)
    grid_n = poplar.State(poplar.UNSIGNED_INT)
    grid_k = poplar.State(poplar.UNSIGNED_INT)
    accumulate: ClassVar[bool] = False

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        g, m, k, n = v.cached("shape", lambda: _shape(v))
        grid = v.cached("grid", lambda: _grid(v))
        a = v.view("a", (*grid, g, m, k))
        b = v.view("b", (*grid, g, k, n))
        c = v.view("c", (*grid, g, m, n))
        if a.size == 0 or c.size == 0:
            return
        math = _math_dtype(a.dtype)
        if (grid[2] == 1 or a.strides[3] == 0) and (grid[1] == 1 or b.strides[2] == 0):
            views = _kept_whole_views(v, a, b, c)
            if views is not None:
                _products(*views, math, cls.accumulate)  # type: ignore[call-arg]
            else:
                _whole_products(a, b, c, math, cls.accumulate)
            return
        _stacked(a, b, c, math, cls.accumulate)

    @classmethod
    def prepare(cls, v: poplar.Batch) -> Any:
        """The products of :meth:`compute` over arrays kept for later runs: views of device
        memory, or buffers of gathered operands refilled at the start of each run."""
        g, m, k, n = v.cached("shape", lambda: _shape(v))
        grid = v.cached("grid", lambda: _grid(v))
        refresh: list[Any] = []  # gathers of operands read through kept buffers
        a = _operand(v, "a", (*grid, g, m, k), refresh)
        b = _operand(v, "b", (*grid, g, k, n), refresh)
        c = v.stable_view("c", (*grid, g, m, n))
        if a is None or b is None or c is None or a.size == 0 or c.size == 0:
            return None
        math, accumulate = _math_dtype(a.dtype), cls.accumulate
        # the path compute takes for these operands, over the same arrays
        if not ((grid[2] == 1 or a.strides[3] == 0) and (grid[1] == 1 or b.strides[2] == 0)):
            return _refreshed(refresh, lambda: _stacked(a, b, c, math, accumulate))
        views = _whole_views(a, b, c)
        if views is None:  # the whole-matrix product through copies
            return _refreshed(refresh, lambda: _whole_products(a, b, c, math, accumulate))
        wa, wb, wc, _ = views
        one = wa.shape[:3] == (1, 1, 1) and not accumulate and not refresh
        if one and wc is not None and wc.dtype == math:
            # one product (one replica, K slice and group): 2-D operands skip NumPy's
            # stacked-matmul loop; the operands need no cast (math is their type)
            a2, b2, c2 = wa[0, 0, 0], wb[0, 0, 0], wc[0, 0, 0]
            if a2.dtype == b2.dtype == math:
                plain = _product_2d(a2, b2, c2)
                if exact.candidate(a2[None], b2[None], c2, _product_2d) is None:
                    return plain
                return jit.deferred(  # the compiled kernel from the second run on
                    plain,
                    lambda: exact.or_numpy(
                        exact.sliced_sum(a2[None], b2[None], c2, _product_2d), plain
                    ),
                )

        return _refreshed(refresh, lambda: _products(*views, math, accumulate))  # type: ignore[call-arg]

    @staticmethod
    def flops(v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, 2.0 * float(np.prod(_shape(v))))

    @classmethod
    def _sizes(cls, v: poplar.VertexInfo) -> tuple[int, int, tuple[int, ...]]:
        return v.dtype("a").size, v.dtype("c").size, _shape(v)


def _stacked(a: np.ndarray, b: np.ndarray, c: np.ndarray, math: np.dtype, accumulate: bool) -> None:
    """``c = a @ b`` (``c += a @ b``) as one stacked product of the grid's blocks."""
    prod = np.matmul(a.astype(math, copy=False), b.astype(math, copy=False))
    if accumulate:
        prod += c
    c[...] = prod


def _refreshed(refresh: list[Any], run: Any) -> Any:
    """``run`` after refilling the kept operand buffers (``run`` alone when none)."""
    if not refresh:
        return run

    def refreshed() -> None:
        for gather in refresh:
            gather()
        run()

    return refreshed


def _operand(
    v: poplar.Batch, name: str, shape: tuple[int, ...], refresh: list[Any]
) -> np.ndarray | None:
    """A product operand for a prepared run, as :meth:`poplar.Batch.view` would give it:
    a view of device memory, else a broadcast of its distinct blocks, else the gathered
    field, the last two in buffers kept across runs that ``refresh`` fills again."""
    view = v.stable_view(name, shape)
    if view is not None:
        return view
    found = v.stable_repeated(name, shape) or v.stable_gather(name, shape)
    if found is None:
        return None
    refresh.append(found[1])
    return found[0]


def _product_2d(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Any:
    """``c = a @ b`` for fixed 2-D views. A short, wide product by a transposed ``b`` (a
    weight read as ``W^T``) is computed as ``(b^T a^T)^T`` into a kept row-major temporary:
    the same product, which OpenBLAS runs about 1.5x faster in that orientation; the choice
    depends only on the layouts, so runs stay deterministic."""
    if _transposed_2d(a, b):
        m, n = a.shape[0], b.shape[1]
        bt, at = b.T, a.T
        tmp = np.empty((n, m), dtype=c.dtype)

        def transposed() -> None:
            np.matmul(bt, at, out=tmp)
            np.copyto(c, tmp.T)

        return transposed
    return lambda: np.matmul(a, b, out=c)


def _transposed_2d(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether :func:`_product_2d` computes ``a @ b`` as ``(b^T a^T)^T``."""
    c_major, f_major = a.flags.c_contiguous, b.flags.f_contiguous and not b.flags.c_contiguous
    return bool(f_major and c_major and a.shape[0] < b.shape[1])


def _kept_whole_views(v: poplar.Batch, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple | None:
    """``_whole_views(a, b, c)``, kept across runs while the field views are the same
    objects (stable views of device memory). The kept entry holds the views it was made
    from and is checked by identity: a key of ``id()`` values would match a later run's
    new gathered buffers at a recycled address and compute on stale data."""
    kept = v.cached("whole", lambda: [None])
    entry = kept[0]
    if entry is not None and entry[0] is a and entry[1] is b and entry[2] is c:
        return entry[3]
    views = _whole_views(a, b, c)
    kept[0] = (a, b, c, views)
    return views


def _whole_views(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple | None:
    """The views ``_whole_products`` works on, when reshaping needs no copy (so that they
    stay views of device memory and can be reused by later runs); else None."""
    R, Ig, Im, In, Ik, g, m, k = a.shape
    n = b.shape[-1]
    G, M, N = Ig * g, Im * m, In * n
    whole_a = _no_copy(a[:, :, :, 0].transpose(0, 3, 1, 4, 2, 5, 6), (R, Ik, G, M, k))
    whole_b = _no_copy(b[:, :, 0].transpose(0, 3, 1, 4, 5, 2, 6), (R, Ik, G, k, N))
    c_t = c.transpose(0, 4, 1, 5, 2, 6, 3, 7)
    if whole_a is None or whole_b is None:
        return None
    return whole_a, whole_b, _no_copy(c_t, (R, Ik, G, M, N)), c_t


def _products(
    whole_a: np.ndarray,
    whole_b: np.ndarray,
    whole_c: np.ndarray | None,
    c_t: np.ndarray,
    math: np.dtype,
    accumulate: bool,
) -> None:
    whole_a, whole_b = whole_a.astype(math, copy=False), whole_b.astype(math, copy=False)
    if whole_c is not None and whole_c.dtype == math and not accumulate:
        np.matmul(whole_a, whole_b, out=whole_c)
        return
    prod = np.matmul(whole_a, whole_b)
    target = whole_c if whole_c is not None else c_t
    prod = prod.reshape(target.shape)
    if accumulate:
        prod += target
    target[...] = prod


def _whole_products(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, math: np.dtype, accumulate: bool
) -> None:
    """``c = a @ b`` over a grid whose A blocks do not change along ``N`` and B blocks
    along ``M``: per replica and K slice, one product of the A rows by the B columns of the
    grid, written into the partials of the slice (in place when they form a matrix)."""
    R, Ig, Im, In, Ik, g, m, k = a.shape
    n = b.shape[-1]
    G, M, N = Ig * g, Im * m, In * n
    # [R, Ik, G, M, k] and [R, Ik, G, k, N]: the grid's A rows and B columns per K slice
    whole_a = a[:, :, :, 0].transpose(0, 3, 1, 4, 2, 5, 6).reshape(R, Ik, G, M, k)
    whole_b = b[:, :, 0].transpose(0, 3, 1, 4, 5, 2, 6).reshape(R, Ik, G, k, N)
    whole_a, whole_b = whole_a.astype(math, copy=False), whole_b.astype(math, copy=False)
    c_t = c.transpose(0, 4, 1, 5, 2, 6, 3, 7)  # [R, Ik, Ig, g, Im, m, In, n]
    whole_c = _no_copy(c_t, (R, Ik, G, M, N))
    if whole_c is not None and whole_c.dtype == math and not accumulate:
        np.matmul(whole_a, whole_b, out=whole_c)
        return
    prod = np.matmul(whole_a, whole_b)
    target = whole_c if whole_c is not None else c_t
    prod = prod.reshape(target.shape)
    if accumulate:
        prod += target
    target[...] = prod


class AmpPartial(_Partial):
    """Block products on the AMP (PopLibs' ConvPartial1x1Out estimator, ``amp_cycles``)."""

    name = "poplin::AmpPartial"
    code_bytes = 1024

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        in_size, p_size, (g, m, k, n) = cls._sizes(v)
        return np.full(v.n, est.amp_cycles(v.target, in_size, p_size, g, m, k, n))


class AmpPartialAcc(AmpPartial):
    """:class:`AmpPartial` adding to the partials (serial steps after the first)."""

    name = "poplin::AmpPartialAcc"
    c = poplar.InOut("P")
    accumulate = True


class MacPartial(_Partial):
    """Block products as dot products, one 64-bit vector per cycle (no AMP)."""

    name = "poplin::MacPartial"
    code_bytes = 384

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        in_size, _, (g, m, k, n) = cls._sizes(v)
        integral = v.dtype("a").is_integral
        return np.full(v.n, est.mac_cycles(v.target, in_size, integral, g, m, k, n))


class MacPartialAcc(MacPartial):
    """:class:`MacPartial` adding to the partials."""

    name = "poplin::MacPartialAcc"
    c = poplar.InOut("P")
    accumulate = True


class ReducePartials(poplar.Codelet):
    """Sum of partials per output element, cast to the output type."""

    name = "poplin::ReducePartials"
    templates = ("P", "OUT", "SHAPE")
    supervisor = True
    code_bytes = 512
    partials = poplar.Input("P")
    out = poplar.Output("OUT")
    grid_g = poplar.State(poplar.UNSIGNED_INT)
    grid_m = poplar.State(poplar.UNSIGNED_INT)
    grid_n = poplar.State(poplar.UNSIGNED_INT)
    grid_k = poplar.State(poplar.UNSIGNED_INT)
    accumulate: ClassVar[bool] = False

    @classmethod
    def compute(cls, v: poplar.Batch) -> None:
        p, g, r, c = v.cached("shape", lambda: _shape(v))
        grid = v.cached("grid", lambda: _grid(v))
        out = v.view("out", (*grid, g, r, c))
        if out.size == 0:
            return
        parts = v.view("partials", (*grid, p, g, r, c))
        math = np.dtype(np.float32) if parts.dtype.kind == "f" else np.dtype(np.int64)
        if cls.accumulate:
            scale = v.state("scale").astype(math).reshape(1, *grid, 1, 1, 1)
            sums = np.add.reduce(parts, axis=5, dtype=math)
            out[...] = out.astype(math) + scale * sums
        elif out.dtype == math and parts.dtype == math:
            np.add.reduce(parts, axis=5, out=out)
        else:
            out[...] = np.add.reduce(parts, axis=5, dtype=math)

    @classmethod
    def prepare(cls, v: poplar.Batch) -> Any:
        """The reduction over zero-copy views of device memory, for later runs (the same
        NumPy calls as :meth:`compute`); None when a field needs a gather."""
        p, g, r, c = v.cached("shape", lambda: _shape(v))
        grid = v.cached("grid", lambda: _grid(v))
        out = v.stable_view("out", (*grid, g, r, c))
        parts = v.stable_view("partials", (*grid, p, g, r, c))
        if out is None or parts is None or out.size == 0:
            return None
        math = np.dtype(np.float32) if parts.dtype.kind == "f" else np.dtype(np.int64)
        reduce = np.add.reduce
        if cls.accumulate:
            scale = v.state("scale").astype(math).reshape(1, *grid, 1, 1, 1)

            def accumulate() -> None:
                sums = reduce(parts, axis=5, dtype=math)
                out[...] = out.astype(math) + scale * sums

            return accumulate
        if out.dtype == math and parts.dtype == math:
            return _reduce_into(parts, out) or (lambda: reduce(parts, axis=5, out=out))

        def cast() -> None:
            out[...] = reduce(parts, axis=5, dtype=math)

        return cast

    @classmethod
    def fuse(cls, before: list[poplar.Batch], after: list[poplar.Batch]) -> Any:
        """The block products before this stage 2 and the stage 2 itself in one replayed
        run that does not store the partials (``fused.py``), or None."""
        from tremula.libs.poplin.fused import fuse

        return fuse(before, after)

    @classmethod
    def cycles(cls, v: poplar.VertexInfo) -> np.ndarray:
        p, g, r, c = _shape(v)
        sizes = (v.dtype("partials").size, v.dtype("out").size)
        return np.full(v.n, est.reduce_cycles(v.target, g * r * c, p, *sizes, cls.accumulate))

    @classmethod
    def flops(cls, v: poplar.VertexInfo) -> np.ndarray:
        p, g, r, c = _shape(v)
        outs = float(g * r * c)
        return np.full(v.n, max(p - 1, 0) * outs + (2.0 * outs if cls.accumulate else 0.0))


#: outputs of at least this many bytes that are not one run of memory are reduced through
#: a contiguous buffer of about :data:`CHUNK_BYTES` at a time (:func:`_reduce_into`)
MIN_BUFFERED_BYTES = 1 << 18
CHUNK_BYTES = 1 << 18
#: the effort ``np.shares_memory`` may spend deciding an overlap (NumPy's stubs type the
#: argument as its two named values only)
_OVERLAP_WORK: Any = 1 << 16


def _reduce_into(parts: np.ndarray, out: np.ndarray) -> Any:
    """``np.add.reduce(parts, axis=5, out=out)`` for a large ``out`` that is a strided view
    (blocks of a matrix: NumPy writes such views at about half the speed of a contiguous
    array, once per partial): chunks of ``out`` along its outermost axes in memory are
    reduced into a compact buffer whose axes lie in ``out``'s memory order, and copied
    into place. Each output element is the same reduction
    of the same partials (only the output's strides differ, and the partial axis keeps its
    place in NumPy's iteration, decided by the input's strides), so the numbers are equal.
    None (reduce in place) for small or contiguous outputs and where ``out`` and ``parts``
    share memory (a chunk's copy could overwrite partials a later chunk reads)."""
    if out.nbytes < MIN_BUFFERED_BYTES or out.flags.c_contiguous:
        return None
    try:
        if np.shares_memory(parts, out, max_work=_OVERLAP_WORK):
            return None
    except np.exceptions.TooHardError:
        return None
    pairs = [(parts, out)]
    order = sorted(range(out.ndim), key=lambda a: -abs(out.strides[a]))
    for axis in order:  # split the outermost axes in memory until chunks fit the buffer
        if pairs[0][1].nbytes <= CHUNK_BYTES:
            break
        size = out.shape[axis]
        if size == 1:
            continue
        per = max(1, size * CHUNK_BYTES // pairs[0][1].nbytes)
        src = axis + 1 if axis >= 5 else axis  # parts has the partial axis at 5
        pairs = [
            (
                p[(slice(None),) * src + (slice(i, i + per),)],
                o[(slice(None),) * axis + (slice(i, i + per),)],
            )
            for p, o in pairs
            for i in range(0, size, per)
        ]
    largest = max(o.size for _, o in pairs)
    buf = np.empty(largest, dtype=out.dtype)
    back = np.argsort(order)  # the buffer's axes in out's memory order: compact, same walk
    chunks = [
        (p, o, buf[: o.size].reshape([o.shape[a] for a in order]).transpose(back)) for p, o in pairs
    ]
    reduce = np.add.reduce

    def run() -> None:
        for p, o, b in chunks:
            reduce(p, axis=5, out=b)
            np.copyto(o, b)

    return run


class ReducePartialsAcc(ReducePartials):
    """``out += scale * sum(partials)`` per output element."""

    name = "poplin::ReducePartialsAcc"
    out = poplar.InOut("OUT")
    scale = poplar.State(poplar.FLOAT)
    accumulate = True


CODELETS = (
    AmpPartial,
    AmpPartialAcc,
    MacPartial,
    MacPartialAcc,
    ReducePartials,
    ReducePartialsAcc,
)

#: Vertex type of the block product, by (method, accumulate).
PARTIAL_TYPES = {
    ("amp", False): AmpPartial.name,
    ("amp", True): AmpPartialAcc.name,
    ("mac", False): MacPartial.name,
    ("mac", True): MacPartialAcc.name,
}
