"""The host's SGD update as compiled loops (the ``fast`` extra, numba through
:mod:`tremula.libs.jit`): one pass over the batch sums the repeats, a second writes each
distinct row once. Used for float32 tables whose spec is plain SGD (or SGD with gradient
accumulation) when numba is installed; otherwise :mod:`kernels` (NumPy) does the same work,
and both give the same bits.

The numbers are those of the NumPy path: a row's gradients are summed in order of
occurrence, the first copied and the others added one by one (``((g_1 + g_2) + ...) + g_k``,
as ``np.add.at`` into zeros sums them), then ``row = row + (-lr) * sum`` once. With gradient
accumulation each step's sums are summed in step order, the first copied.

Why it is faster than NumPy: ``np.add.at`` makes a ufunc call per index; the NumPy path
sorts the indices and gathers and scatters the rows in separate passes. Here a dense
``mark`` array (one int32 per table row, zero but for the rows of the batch being summed;
allocated lazily, so untouched pages cost nothing) maps a row to its slot in one random
access, the rows seen once are never copied (their gradient is read from the batch when the
row is written), and each distinct row of the table is read and written back in one go.

Nothing here can fail part way: indices are checked before anything is written (an index out
of range writes nothing), so an update is all or nothing like the NumPy path's.
"""

from __future__ import annotations

import numpy as np

from tremula.libs import jit


@jit.kernel
def _segment(
    idx: np.ndarray, grads: np.ndarray, mark: np.ndarray, rows: np.ndarray, src: np.ndarray,
    acc: np.ndarray,
) -> int:  # fmt: skip
    """Give each distinct row of ``idx`` a slot ``j`` (in order of first occurrence):
    ``rows[j]`` the row, ``mark[row] = j + 1``, and its summed gradient: ``grads[src[j]]``
    for a row seen once (``src[j] >= 0``, not copied), ``acc[-1 - src[j]]`` for a repeated
    row (the first occurrence copied, the others added in order). Returns the number of
    slots, or ``-1 - k`` when ``idx[k]`` is the first index outside ``[0, mark.size)``
    (nothing is marked then)."""
    t = mark.size
    for k in range(idx.size):
        if idx[k] < 0 or idx[k] >= t:
            return -1 - k
    u = 0
    d = 0
    for k in range(idx.size):
        r = idx[k]
        s = mark[r]
        if s == 0:
            mark[r] = u + 1
            rows[u] = r
            src[u] = k
            u += 1
            continue
        j = s - 1
        a = src[j]
        if a >= 0:  # the second occurrence: the sum starts
            for c in range(grads.shape[1]):
                acc[d, c] = grads[a, c] + grads[k, c]
            src[j] = -1 - d
            d += 1
        else:
            for c in range(grads.shape[1]):
                acc[-1 - a, c] += grads[k, c]
    return u


@jit.kernel
def _apply(
    table: np.ndarray, lr: np.float32, rows: np.ndarray, src: np.ndarray, grads: np.ndarray,
    acc: np.ndarray, u: int, mark: np.ndarray,
) -> None:  # fmt: skip
    """``table[rows[j]] = table[rows[j]] + lr * sum_j`` for the ``u`` slots of
    :func:`_segment` (``lr`` the negated learning rate, float32), clearing their marks."""
    for j in range(u):
        r = rows[j]
        a = src[j]
        g = grads[a] if a >= 0 else acc[-1 - a]
        for c in range(table.shape[1]):
            table[r, c] = table[r, c] + lr * g[c]
        mark[r] = 0


@jit.kernel
def _merge(
    rows: np.ndarray, src: np.ndarray, grads: np.ndarray, acc: np.ndarray, u: int,
    mark: np.ndarray, wmark: np.ndarray, wrows: np.ndarray, wacc: np.ndarray, w: int,
) -> int:  # fmt: skip
    """Add the ``u`` slots of a step (:func:`_segment`) into a gradient-accumulation window
    (``w`` slots so far, kept as ``mark``, ``rows``, ``acc`` are: ``wacc`` holds every
    sum), clearing the step's marks; returns the window's new slot count."""
    for j in range(u):
        r = rows[j]
        a = src[j]
        g = grads[a] if a >= 0 else acc[-1 - a]
        m = wmark[r]
        if m == 0:
            wmark[r] = w + 1
            wrows[w] = r
            for c in range(g.size):
                wacc[w, c] = g[c]
            w += 1
        else:
            for c in range(g.size):
                wacc[m - 1, c] += g[c]
        mark[r] = 0
    return w


class FusedSGD:
    """The compiled SGD update of one float32 table ``[tokens, encoding]`` and its scratch
    (reused across calls): the marks, a step's slots, and the gradient-accumulation window.

    Call only when :func:`tremula.libs.jit.available` says so.
    """

    def __init__(self, tokens: int, encoding: int) -> None:
        self.encoding = encoding
        self.mark = np.zeros(tokens, np.int32)  # zero pages: resident only where touched
        self.wmark = np.zeros(tokens, np.int32)
        self.rows = np.empty(0, np.int64)
        self.src = np.empty(0, np.int64)
        self.acc = np.empty((0, encoding), np.float32)
        self.wrows = np.empty(0, np.int64)
        self.wacc = np.empty((0, encoding), np.float32)
        self.pending = 0  # slots in the window

    def _segment(self, indices: np.ndarray, grads: np.ndarray) -> int:
        n = indices.size
        if self.rows.size < n:
            self.rows, self.src = np.empty(n, np.int64), np.empty(n, np.int64)
            self.acc = np.empty((n // 2, self.encoding), np.float32)  # < n / 2 sums
        return int(_segment(indices, grads, self.mark, self.rows, self.src, self.acc))

    def update(self, table: np.ndarray, indices: np.ndarray, grads: np.ndarray, lr: float) -> int:
        """``table[i] += -lr * (the sum of row i's gradients)`` for every row of ``indices``
        (``[n]``, in range; ``grads`` ``[n, encoding]`` float32). Returns the number of
        distinct rows, or ``-1 - k`` (nothing written) when ``indices[k]`` is out of
        range."""
        u = self._segment(indices, grads)
        if u > 0:
            lr32 = np.float32(-lr)
            _apply(table, lr32, self.rows, self.src, grads, self.acc, u, self.mark)
        return u

    def accumulate(self, indices: np.ndarray, grads: np.ndarray) -> int:
        """Add a step's sums to the window (applied by :meth:`flush`). Returns the step's
        number of distinct rows, or ``-1 - k`` (nothing added) as :meth:`update`."""
        u = self._segment(indices, grads)
        if u <= 0:
            return u
        w = self.pending
        if self.wrows.size < w + u:  # grow the window (amortised: doubling)
            size = max(2 * self.wrows.size, w + u)
            wrows, wacc = np.empty(size, np.int64), np.empty((size, self.encoding), np.float32)
            wrows[:w], wacc[:w] = self.wrows[:w], self.wacc[:w]
            self.wrows, self.wacc = wrows, wacc
        self.pending = int(
            _merge(self.rows, self.src, grads, self.acc, u, self.mark, self.wmark, self.wrows,
                   self.wacc, w)
        )  # fmt: skip
        return u

    def flush(self, table: np.ndarray, lr: float) -> int:
        """Apply the window's sums (``table[i] += -lr * sum``) and empty it; returns the
        number of rows written."""
        w = self.pending
        if w:
            lr32 = np.float32(-lr)
            src = np.arange(w, dtype=np.int64)
            _apply(table, lr32, self.wrows, src, self.wacc, self.wacc, w, self.wmark)
        self.pending = 0
        return w

    def discard(self) -> None:
        """Empty the window without applying it."""
        self.wmark[self.wrows[: self.pending]] = 0
        self.pending = 0
