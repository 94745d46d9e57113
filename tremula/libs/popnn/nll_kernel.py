"""The NLL loss's gathers and gradient as one compiled loop (the ``fast`` extra).

The NumPy path of a prepared ``Nll`` / ``NllLog`` loss over float32 rows
(``codelets._nll_flat``) makes about ten NumPy calls on a batch's few dozen labels: it
widens the labels, checks them, gathers each row's label element (``picked``), writes
``deltas = y * ds`` (``y``: the probabilities, or ``exp`` of the log-probabilities, which
stays NumPy's), gathers the label elements of ``deltas`` again, subtracts ``ds`` and
scatters them back, then takes ``log`` (NumPy's) and negates. :func:`_gradient` makes the
checks, the gathers, the product and the correction in one pass, in the same order and with
the same float32 operations: every label is checked before anything is written, ``picked``
is gathered before ``deltas`` (which may be the probabilities' memory) is written. ``log``,
``exp`` and the negation stay NumPy calls, so their bits are NumPy's.

A NaN deltas scale (never one in practice: it is the loss's ``1 / batch`` or the like)
leaves the run to the NumPy path: where two NaNs meet in the product or the correction,
which payload survives depends on the loop NumPy picks (measured: ``np.multiply`` of a row
by a broadcast scalar keeps the row's NaN for 16 elements or fewer and the scalar's from 17
on), which a loop cannot follow. With any other scale, no two NaNs meet. On first use the
loop is checked bit for bit against the NumPy path on every pair of special values (NaNs of
several payloads, signalling ones, infinities, signed zeros, subnormals) as probability and
scale, at rows of several lengths (:func:`_checked`); where it differs, or without numba,
the NumPy path runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from tremula.libs import jit

F32 = np.dtype(np.float32)


def compiled(
    probs: np.ndarray,
    labels: np.ndarray,
    ds: np.ndarray,
    deltas: np.ndarray,
    loss: np.ndarray,
    numpy_run: Callable[[], None],
) -> Callable[[], None] | None:
    """The compiled run of ``codelets._nll_flat``'s ``Nll`` loss (from probabilities; the
    same arguments: ``probs`` and ``deltas`` ``[R, rows * c]`` C-contiguous float32,
    ``labels`` and ``loss`` ``[R, rows]``, ``ds`` ``[R or 1, 1]``), which leaves a run
    with a label out of range or a NaN scale to ``numpy_run`` (the NumPy path), or None."""
    if not jit.available() or labels.dtype.kind not in "iu" or ds.dtype != F32:
        return None
    R, rows = labels.shape
    if ds.shape not in ((R, 1), (1, 1)) or loss.shape != (R, rows) or loss.dtype != F32:
        return None
    if rows == 0 or probs.shape[1] % rows or not _checked():
        return None
    c = probs.shape[1] // rows
    picked = np.empty((R, rows), F32)
    scale = np.broadcast_to(ds, (R, 1))
    kernel = _gradient

    def run() -> None:
        if not kernel(probs, labels, scale, deltas, picked, c):
            numpy_run()
            return
        np.log(picked, out=picked)
        np.negative(picked, out=loss)

    return run


@jit.kernel
def _gradient(y, labels, ds, deltas, picked, c):  # type: ignore[no-untyped-def]
    """Per replica ``r``: False (nothing written) if a label is outside ``[0, c)`` or a
    scale is NaN; else ``picked[r, i] = y[r, i * c + label]``, ``deltas[r] = y[r] * ds[r]``,
    then the label element of each row less ``ds[r]``."""
    R, rows = labels.shape
    for r in range(R):
        if ds[r, 0] != ds[r, 0]:
            return False
        for i in range(rows):
            if labels[r, i] < 0 or labels[r, i] >= c:
                return False
    for r in range(R):
        s = ds[r, 0]
        for i in range(rows):
            picked[r, i] = y[r, i * c + labels[r, i]]
        yr, dr = y[r], deltas[r]
        for j in range(yr.shape[0]):
            dr[j] = yr[j] * s
        for i in range(rows):
            at = i * c + labels[r, i]
            dr[at] = dr[at] - s
    return True


@cache
def _checked() -> bool:
    """Whether :func:`_gradient` gives the NumPy path's bits on every pair of special
    values as probability and (non-NaN) scale, the label element of each row included, at
    rows whose special values fall in the vector loop and in the scalar loop around it."""
    nans = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
    others = [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0x3D000000]
    special = np.array(nans + others, np.uint32).view(F32)
    scales = np.array(others, np.uint32).view(F32)
    n, m = special.size, scales.size
    rng = np.random.default_rng(0)
    ds = scales.reshape(m, 1).copy()  # replica r: scale scales[r]
    labels = np.tile(np.arange(n, dtype=np.int32), (m, 1))  # row i: label i
    for extra in range(17):  # rows of c = n + extra elements: special values first
        c = n + extra
        y = rng.standard_normal((m, n, c)).astype(F32)
        y[:, :, :n] = special
        y = y.reshape(m, n * c)
        at = np.arange(n) * c + np.arange(n)  # row i's label element
        want = np.empty_like(y)
        with np.errstate(all="ignore"):
            for r in range(m):  # one replica at a time, as the NumPy path runs it
                np.multiply(y[r : r + 1], ds[r : r + 1], out=want[r : r + 1])
                want[r, at] = np.subtract(want[r, at], ds[r])
        deltas, picked = np.empty_like(y), np.empty(labels.shape, F32)
        if not _gradient(y, labels, ds, deltas, picked, c):
            return False
        if not (_same(deltas, want) and _same(picked, y[:, at])):
            return False
    return True


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
