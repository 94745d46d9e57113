"""Stage 2 fused with the block products before it, for replayed runs (``Codelet.fuse``,
``tremula/engine/fusion.py``).

A one-step plan's products write ``blocks_k`` partial slabs that stage 2 then sums in slab
order into the output: ``out = ((p0 + p1) + p2) + ...`` in float32 (NumPy's reduction over
the slab axis, which is never its inner loop here, adds the slabs one after the other into
a copy of the first). The fused run computes the same numbers without storing the slabs:
per slab, in slab order, each product group's block products (the same ``np.matmul`` calls
as ``_Partial.prepare``'s, on the same operand views, into arrays of the same strides) are
written straight into the output for slab 0, and into a scratch slab kept for the plan and
added into the output for the others. The engine takes the run only where the partials are
carried from the products to stage 2 and read nowhere else (``fusion.Carried``).

Taken for float32 operands, partials and output with stage 2 as :class:`ReducePartials`
(no accumulation, ``matmul_acc`` and K loops excepted), every field a view of device memory,
and the layout checked here: each stage-2 piece reads its partials at one offset and slab
stride from its output piece with the output's strides, the pieces cover a run of the
output once, and the products write every partial of every piece exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tremula import poplar
from tremula.libs import jit
from tremula.libs.poplin import codelets as cl
from tremula.libs.poplin import exact, sgemm

F32 = np.dtype(np.float32)
#: plans with fewer bytes of partials run apart: their slabs stay in the caches, and one
#: call per K slice and region costs more than the stacked product and the reduction
#: (measured on a 2-core Xeon: 64 x 4096 x 64, 43 slices of 16 KB, 0.34 ms fused against
#: 0.28 apart; 256 x 512 x 64, 16 of 64 KB, 0.20 against 0.23)
MIN_PARTIALS_BYTES = 1 << 20


def fuse(before: list[poplar.Batch], after: list[poplar.Batch]) -> tuple[Any, list] | None:
    """The fused run of product groups ``before`` and stage-2 groups ``after`` and the
    fields it does not store (every product group's partials), or None."""
    if not before or not all(map(_plain_products, before)) or not all(map(_plain_sum, after)):
        return None
    layout = _layout(after)
    if layout is None:
        return None
    compiled = _exact(before, after, layout)
    if compiled is not None:
        return compiled, [(0, "c")]
    st, _, _, count, _, size = layout
    if count * size * F32.itemsize < MIN_PARTIALS_BYTES:
        return None
    marks = np.zeros((count, size), np.uint8)  # partials written, by (slab, output)
    scratch = np.empty((st.shape[0], size), F32)
    jobs: list[tuple[int, Callable[[], None]]] = []
    for v in before:
        found = _jobs(v, layout, marks, scratch)
        if found is None:
            return None
        jobs.extend(found)
    written = sum(int(v.lengths("c").sum()) for v in before)  # (each written once, below)
    if written != count * size or not np.all(marks == 1):
        return None
    jobs.sort(key=lambda job: job[0])  # slab order (stable: the groups' order within one)
    steps = [step for _, step in jobs]

    def run() -> None:
        for step in steps:
            step()

    return run, [(i, "c") for i in range(len(before))]


def _plain_products(v: poplar.Batch) -> bool:
    codelet = v.vertex_type.codelet
    if not (isinstance(codelet, type) and issubclass(codelet, cl._Partial)):
        return False
    return not codelet.accumulate and all(v.dtype(f).numpy == F32 for f in ("a", "b", "c"))


def _plain_sum(v: poplar.Batch) -> bool:
    codelet = v.vertex_type.codelet
    dtypes = (v.dtype("partials").numpy, v.dtype("out").numpy)
    return codelet is cl.ReducePartials and dtypes == (F32, F32)


def _offset(view: np.ndarray, st: np.ndarray) -> int:
    """Element offset of ``view``'s first element in the storage row array ``st``."""
    return (view.__array_interface__["data"][0] - st.__array_interface__["data"][0]) // F32.itemsize


def _strides(view: np.ndarray) -> tuple[int, ...] | None:
    """Element strides of ``view``'s axes after the replica axis (0 for axes of one
    element); None when a longer axis does not step forwards by whole elements."""
    out = []
    for n, s in zip(view.shape[1:], view.strides[1:]):
        if n == 1:
            out.append(0)
        elif s <= 0 or s % F32.itemsize:
            return None
        else:
            out.append(s // F32.itemsize)
    return tuple(out)


def _last(offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    return offset + sum((n - 1) * s for n, s in zip(shape, strides))


def _mark(
    marks: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray:
    """The elements of a strided view (element ``offset``, ``strides``) of the flat
    ``marks`` array, as a writable view (each counts the writes of one element)."""
    return as_strided(marks[offset:], shape=shape, strides=strides)


def _layout(after: list[poplar.Batch]) -> tuple[np.ndarray, int, int, int, int, int] | None:
    """``(storage, delta, slab, count, lo, size)``: stage 2 reads partial ``j`` of the output
    element at address ``o`` at ``o + delta + j * slab``, for ``count`` partials, and its
    outputs are the addresses ``[lo, lo + size)``, each written once; None otherwise."""
    found: set[tuple[int, int, int]] = set()
    pieces = []
    st = None
    for v in after:
        p, g, r, c = _cached_shape(v)
        grid = _cached_grid(v)
        out = v.stable_view("out", (*grid, g, r, c))
        parts = v.stable_view("partials", (*grid, p, g, r, c))
        runs = v.stable_runs("out")
        if out is None or parts is None or runs is None or out[0].size < 2:
            return None  # (a reduction of one element may sum pairwise)
        st = runs[0]
        so, sp = _strides(out), _strides(parts)
        if so is None or sp is None or so != sp[:4] + sp[5:]:
            return None
        delta = _offset(parts, st) - _offset(out, st)
        found.add((delta, sp[4] if p > 1 else 0, p))
        pieces.append((_offset(out, st), out.shape[1:], so))
    if st is None or len(found) != 1:
        return None
    delta, slab, count = found.pop()
    lo = min(off for off, _, _ in pieces)
    hi = max(_last(*piece) for piece in pieces)
    size = hi - lo + 1
    if count > 1 and slab < size:
        return None
    if sum(int(np.prod(shape)) for _, shape, _ in pieces) != size:
        return None  # (with every mark 1 below: each output written once)
    marks = np.zeros(size, np.uint8)
    for off, shape, strides in pieces:
        _mark(marks, off - lo, shape, strides)[...] += 1
    if not np.all(marks == 1):
        return None
    return st, delta, slab, count, lo, size


def _jobs(
    v: poplar.Batch, layout: tuple, marks: np.ndarray, scratch: np.ndarray
) -> list[tuple[int, Callable[[], None]]] | None:
    """Group ``v``'s products as ``(slab, step)`` pairs: each K slice into its output
    elements (slab 0) or through ``scratch`` added into them; None when the group's
    operands are not the whole-matrix views ``_Partial.prepare`` computes on."""
    st, delta, slab, count, lo, size = layout
    g, m, k, n = _cached_shape(v)
    grid = _cached_grid(v)
    a = v.stable_view("a", (*grid, g, m, k))
    b = v.stable_view("b", (*grid, g, k, n))
    c = v.stable_view("c", (*grid, g, m, n))
    if a is None or b is None or c is None or c.size == 0:
        return None
    if not ((grid[2] == 1 or a.strides[3] == 0) and (grid[1] == 1 or b.strides[2] == 0)):
        return None  # products of stacked blocks (``_stacked``)
    views = cl._whole_views(a, b, c)
    if views is None or views[2] is None:
        return None
    wa, wb, wc, _ = views
    one = wa.shape[:3] == (1, 1, 1)  # prepare's single 2-D product (``_product_2d``)
    jobs = []
    for i in range(wc.shape[1]):
        ci = wc[:, i]
        strides = _strides(ci)
        if strides is None:
            return None
        off = _offset(ci, st)
        j = (off - delta - lo) // slab if count > 1 else 0
        o = off - delta - j * slab  # the output address of the slice's first element
        if not (0 <= j < count and lo <= o and _last(o, ci.shape[1:], strides) < lo + size):
            return None
        _mark(marks[j], o - lo, ci.shape[1:], strides)[...] += 1
        dest = as_strided(st[:, o:], shape=ci.shape, strides=ci.strides)
        temp = as_strided(scratch[:, o - lo :], ci.shape, (scratch.strides[0], *ci.strides[1:]))
        ai, bi = wa[:, i], wb[:, i]
        if j == 0:
            jobs.append((j, _product(ai, bi, dest, one)))
            continue
        added = None if one and cl._transposed_2d(ai[0, 0], bi[0, 0]) else sgemm.plan(ai, bi, dest)
        jobs.append((j, added or _added(_product(ai, bi, temp, one), dest, temp)))
    return jobs


def _exact(
    before: list[poplar.Batch], after: list[poplar.Batch], layout: tuple
) -> Callable[[], None] | None:
    """The fused run as ``exact.py``'s compiled kernel, one call per replica and group:
    for a single product group whose K slice ``i`` writes partial ``i`` of each output
    element (every partial once, nothing else), of any size; None otherwise. Its first
    call runs the two compute sets' prepared runs apart (a program run once compiles
    nothing), the later ones the kernel (or the runs apart where its check fails, and
    after it where it stored a NaN: ``exact.or_numpy``)."""
    if len(before) != 1 or not exact.available():
        return None
    v = before[0]
    st, delta, slab, count, lo, size = layout
    g, m, k, n = _cached_shape(v)
    grid = _cached_grid(v)
    a = v.stable_view("a", (*grid, g, m, k))
    b = v.stable_view("b", (*grid, g, k, n))
    c = v.stable_view("c", (*grid, g, m, n))
    if a is None or b is None or c is None or c.size == 0 or count < 2:
        return None
    if not ((grid[2] == 1 or a.strides[3] == 0) and (grid[1] == 1 or b.strides[2] == 0)):
        return None
    views = cl._whole_views(a, b, c)
    if views is None or views[2] is None or int(v.lengths("c").sum()) != count * size:
        return None
    wa, wb, wc, _ = views  # [R, K slices, G, M, k], [R, slices, G, k, N], [R, slices, G, M, N]
    first = wc[:, 0]
    strides = _strides(first)
    if wa.shape[1] != count or strides is None:
        return None
    o = _offset(first, st) - delta  # the output address of each slice's first partial
    marks = np.zeros((count, size), np.uint8)
    for i in range(count):
        ci = wc[:, i]
        if _strides(ci) != strides or _offset(ci, st) - delta - i * slab != o:
            return None
        if not (lo <= o and _last(o, ci.shape[1:], strides) < lo + size):
            return None
        _mark(marks[i], o - lo, ci.shape[1:], strides)[...] += 1
    if not np.all(marks == 1):
        return None
    dest = as_strided(st[:, o:], shape=first.shape, strides=first.strides)  # [R, G, M, N]
    calls = [
        (wa[r, :, gi], wb[r, :, gi], dest[r, gi])
        for r in range(wa.shape[0])
        for gi in range(wa.shape[2])
    ]
    if any(exact.candidate(*call) is None for call in calls):
        return None
    product = v.vertex_type.codelet  # (a ``_Partial``, a ``ReducePartials``: ``fuse``)
    apart = [product.prepare(v) if issubclass(product, cl._Partial) else None]
    apart += [cl.ReducePartials.prepare(u) for u in after]
    steps = [run for run in apart if run is not None]
    if len(steps) != len(apart):
        return None  # (no NumPy path to hand a NaN output back to)
    # the two compute sets apart on the first run, the kernel from the second one on
    numpy_run = _in_order(steps)
    return jit.deferred(numpy_run, lambda: exact.or_numpy(_compiled(calls), numpy_run))


def _compiled(calls: list[tuple]) -> Callable[[], bool] | None:
    """One run of :func:`exact.sliced_sum`'s kernels for ``calls`` (False where one
    stored a NaN), or None."""
    runs = [exact.sliced_sum(*call) for call in calls]
    if any(run is None for run in runs):
        return None
    if len(runs) == 1:
        return runs[0]
    kernels: list[Callable[[], bool]] = runs  # type: ignore[assignment]

    def each() -> bool:
        no_nan = True
        for run in kernels:
            no_nan &= run()
        return no_nan

    return each


def _in_order(runs: list[Callable[[], None]]) -> Callable[[], None]:
    def each() -> None:
        for run in runs:
            run()

    return each


def _cached_shape(v: poplar.Batch) -> tuple[int, ...]:
    return v.cached("shape", lambda: cl._shape(v))  # (the codelets' cache keys)


def _cached_grid(v: poplar.Batch) -> tuple[int, int, int, int]:
    return v.cached("grid", lambda: cl._grid(v))


def _product(a: np.ndarray, b: np.ndarray, c: np.ndarray, one: bool) -> Callable[[], None]:
    """``c = a @ b`` as ``_Partial.prepare`` computes it for these operands."""
    if one:
        return cl._product_2d(a[0, 0], b[0, 0], c[0, 0])  # type: ignore[no-any-return]

    def product() -> None:
        np.matmul(a, b, out=c)

    return product


def _added(product: Callable[[], None], dest: np.ndarray, temp: np.ndarray) -> Callable[[], None]:
    add = np.add

    def step() -> None:
        product()
        add(dest, temp, out=dest)

    return step
