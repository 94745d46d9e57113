"""``Axpy``'s run as one compiled loop (the ``fast`` extra): each element's
``data + b * deltas`` in one pass over memory, with the bits of the NumPy path's two calls.

The NumPy path (``scaled_add.Axpy``) multiplies each part's deltas by its scale into a
temporary, then adds the temporary into the data: two float32 roundings per element,
``np.add(data, np.multiply(b, deltas))``. The loop makes the same two operations (numba
does not contract them into one fused multiply-add without ``fastmath``) without the
temporary. An operation with one NaN operand gives that NaN quieted, in NumPy and in the
loop alike; where both operands are NaN, which payload NumPy keeps depends on the loop it
picks (measured with NumPy 2.4 on AVX-512: the first operand's in whole vectors of 16, the
second's in the tail of a row longer than 16 and for an in-place add of one element), which
a loop cannot follow. Two NaNs meet only where a scale is NaN (with a NaN delta) or a data
element is NaN (with a NaN product), so those runs are the NumPy path's: a NaN scale (a
constant) keeps the update off the loop, and the loop first scans the data and hands a run
with a NaN in it back untouched. On first use the loop is checked bit for bit against the
NumPy path on a grid of special values (NaNs of several payloads, signalling ones,
infinities, signed zeros, subnormals) and random data (:func:`_checked`); where it differs,
or without numba, the NumPy path runs.

Taken where the data and every part's deltas are row-contiguous views of one device
memory (rows: replicas) that do not overlap, and each scale is one number per row that is
not device memory (a vertex state: ``ScaledAdd1D``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from tremula.libs import jit

F32 = np.dtype(np.float32)


Part = tuple[Any, np.ndarray, np.ndarray]  # (scale, deltas, temporary): ``scaled_add.Axpy``


def compiled(parts: list[Part], data: np.ndarray, root: np.ndarray) -> Callable[[], bool] | None:
    """The compiled run of ``Axpy(parts, data)`` over device memory ``root`` (see the
    module docstring), or None. The run returns False, having written nothing, where the
    data holds a NaN: the NumPy path's run."""
    if not jit.available() or root.ndim != 2 or root.dtype != F32 or not root.flags.c_contiguous:
        return None
    rows, row_bytes = root.shape[0], root.strides[0]
    start = _offset(data, root, rows)
    if start is None:
        return None
    offsets, lengths, scales = [], [], np.empty((rows, len(parts)), F32)
    for p, (b, deltas, tmp) in enumerate(parts):
        at = _offset(deltas, root, rows)
        b = np.asarray(b)
        if at is None or tmp.shape != deltas.shape or b.dtype != F32 or b.ndim != 2:
            return None
        if b.shape not in ((rows, 1), (1, 1)) or np.may_share_memory(b, root):
            return None
        offsets.append(at)
        lengths.append(deltas.shape[1])
        scales[:, p] = b[:, 0]
    end = start + sum(lengths)
    if end != start + data.shape[1] or end * F32.itemsize > row_bytes:
        return None
    if any(at < end and start < at + n for at, n in zip(offsets, lengths)):
        return None  # deltas overlapping the data: the NumPy path reads them all first
    if np.isnan(scales).any() or not _checked():
        return None  # a NaN scale meets each NaN delta: the NumPy path's payloads
    args = (root, start, np.array(offsets, np.int64), np.array(lengths, np.int64), scales)
    kernel = _axpy

    def run() -> bool:
        return bool(kernel(*args))

    return run


def _offset(view: np.ndarray, root: np.ndarray, rows: int) -> int | None:
    """The element offset in each row of ``root`` of a ``[rows, n]`` float32 view whose
    rows lie in ``root``'s rows (its addresses within theirs: ``root``'s memory), or None."""
    if view.ndim != 2 or view.dtype != F32 or view.shape[0] != rows or view.shape[1] == 0:
        return None
    if view.strides[1] != F32.itemsize or (rows > 1 and view.strides[0] != root.strides[0]):
        return None
    offset = view.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if offset < 0 or offset % F32.itemsize:
        return None
    offset //= F32.itemsize
    return offset if offset + view.shape[1] <= root.shape[1] else None


@jit.kernel
def _axpy(mem, start, offsets, lengths, scales):  # type: ignore[no-untyped-def]
    """``mem[r, start + ...] += scales[r, p] * mem[r, offsets[p] + ...]``, part after
    part, two roundings per element, and True; False, writing nothing, where the data
    (``mem[:, start : start + sum(lengths)]``) holds a NaN."""
    end = start + lengths.sum()
    for r in range(mem.shape[0]):
        data = mem[r, start:end]
        nans = False
        for j in range(data.size):  # (from 0, with no early exit: a vectorised scan)
            x = data[j]
            nans |= x != x
        if nans:
            return False
    for r in range(mem.shape[0]):
        row = mem[r]
        at = start
        for p in range(lengths.shape[0]):
            s = scales[r, p]
            n = lengths[p]
            d = row[at : at + n]
            g = row[offsets[p] : offsets[p] + n]
            for j in range(n):
                d[j] = d[j] + s * g[j]
            at += n
    return True


@cache
def _checked() -> bool:
    """Whether the loop gives the NumPy path's bits: every pair of special values (and
    random numbers) as data and deltas under scales of each kind but NaN (a grid whose data
    holds NaNs is handed back untouched)."""
    bits = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
    nans = np.array(bits, np.uint32).view(F32)
    bits = [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0x7F7FFFFF]
    others = np.array(bits, np.uint32).view(F32)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(1000).astype(F32)
    special = np.concatenate([nans, others])
    data = np.concatenate([np.repeat(others, special.size), noise])
    deltas = np.concatenate([np.tile(special, others.size), noise[::-1]])
    for scale in (np.float32(-0.05), *others):
        want = data[None, :].copy()
        with np.errstate(all="ignore"):
            np.add(want, np.multiply(np.full((1, 1), scale, F32), deltas[None, :]), out=want)
        mem = np.concatenate([data, deltas])[None, :].copy()
        size = np.array([data.size], np.int64)
        if not _axpy(mem, 0, size, size, np.full((1, 1), scale, F32)):
            return False
        if not np.array_equal(mem[:, : data.size].view(np.uint32), want.view(np.uint32)):
            return False
    mem = np.concatenate([nans, special])[None, :].copy()
    before = mem.copy()
    size = np.array([nans.size], np.int64)
    handed_back = not _axpy(mem, 0, size, size, np.ones((1, 1), F32))
    return handed_back and np.array_equal(mem.view(np.uint32), before.view(np.uint32))
