"""``Axpy``'s run as one compiled loop (the ``fast`` extra): each element's
``data + b * deltas`` in one pass over memory, with the bits of the NumPy path's two calls.

The NumPy path (``scaled_add.Axpy``) multiplies each part's deltas by its scale into a
temporary, then adds the temporary into the data: two float32 roundings per element,
``np.add(data, np.multiply(b, deltas))``. The loop makes the same two operations (numba
does not contract them into one fused multiply-add without ``fastmath``) without the
temporary. Where both operands of an operation are NaN, x86 keeps the first one's payload
and the compiler may swap commutative operands, so the loop then computes ``b + b`` or
``deltas + deltas`` (``data + data`` or ``t + t``): the NaN NumPy's ``b * deltas``
(``data + t``) gives, quieted; which one NumPy gives differs between its versions (2.4
keeps the first operand's, 2.2 the second's). On first use the loop is checked bit for bit
against the NumPy path on a grid of special values (NaNs of several payloads, signalling
ones, infinities, signed zeros, subnormals) and random data with each choice
(:func:`_rules`); where none matches, or without numba, the NumPy path runs.

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


def compiled(parts: list[Part], data: np.ndarray, root: np.ndarray) -> Callable[[], None] | None:
    """The compiled run of ``Axpy(parts, data)`` over device memory ``root`` (see the
    module docstring), or None."""
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
    rules = _rules()
    if rules is None:
        return None
    args = (root, start, np.array(offsets, np.int64), np.array(lengths, np.int64), scales, rules)
    kernel = _axpy

    def run() -> None:
        kernel(*args)

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
def _axpy(mem, start, offsets, lengths, scales, rules):  # type: ignore[no-untyped-def]
    """``mem[r, start + ...] += scales[r, p] * mem[r, offsets[p] + ...]``, part after
    part, two roundings per element. Where both operands of the product (the sum) are
    NaN, the result is the scale's (the data's) quieted if ``rules[0]`` (``rules[1]``) is
    1, else the deltas' (the product's): NumPy's choice, which its versions differ on."""
    scale_first, data_first = rules[0] == 1, rules[1] == 1
    for r in range(mem.shape[0]):
        row = mem[r]
        at = start
        for p in range(lengths.shape[0]):
            s = scales[r, p]
            n = lengths[p]
            d = row[at : at + n]
            g = row[offsets[p] : offsets[p] + n]
            for j in range(n):
                x = d[j]
                e = g[j]
                t = s * e
                if t != t and s != s and e != e:
                    t = s + s if scale_first else e + e
                y = x + t
                if y != y and x != x and t != t:
                    y = x + x if data_first else t + t
                d[j] = y
            at += n


@cache
def _rules() -> np.ndarray | None:
    """The NaN rules (see :func:`_axpy`) with which the loop gives the NumPy path's bits:
    every pair of special values (and random numbers) as data and deltas, under a finite
    scale and a NaN one; None where no choice does."""
    bits = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
    bits += [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0x7F7FFFFF]
    special = np.array(bits, np.uint32).view(F32)
    n = special.size
    rng = np.random.default_rng(0)
    data = np.concatenate([np.repeat(special, n), rng.standard_normal(1000).astype(F32)])
    deltas = np.concatenate([np.tile(special, n), rng.standard_normal(1000).astype(F32)])
    wants = []
    for scale in (np.float32(-0.05), special[2], special[3]):
        want = data[None, :].copy()
        with np.errstate(all="ignore"):
            np.add(want, np.multiply(np.full((1, 1), scale, F32), deltas[None, :]), out=want)
        wants.append((scale, want))
    for rules in ((1, 1), (1, 0), (0, 1), (0, 0)):
        chosen = np.array(rules, np.int64)
        if all(_matches(data, deltas, scale, want, chosen) for scale, want in wants):
            return chosen
    return None


def _matches(
    data: np.ndarray, deltas: np.ndarray, scale: np.float32, want: np.ndarray, rules: np.ndarray
) -> bool:
    mem = np.concatenate([data, deltas])[None, :].copy()
    size = np.array([data.size], np.int64)
    _axpy(mem, 0, size, size, np.full((1, 1), scale, F32), rules)
    return bool(np.array_equal(mem[:, : data.size].view(np.uint32), want.view(np.uint32)))
