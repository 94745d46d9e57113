"""The host's updates as compiled loops (the ``fast`` extra, numba through
:mod:`tremula.libs.jit`): one pass over the batch sums the repeats, a second writes each
distinct row (and its optimizer state) once. Used for float32 tables whose spec's rule has a
loop here (SGD, SGD with gradient accumulation, row-wise Adagrad, Adam: ``compiled_rule``)
when numba is installed; otherwise :mod:`kernels` and the spec's ``apply`` (NumPy) do the
same work, and both give the same bits.

The numbers are those of the NumPy path: a row's gradients are summed in order of
occurrence, the first copied and the others added one by one (``((g_1 + g_2) + ...) + g_k``,
as ``np.add.at`` into zeros sums them), then the rule is applied once per row with the
spec's float32 constants (``spec.constants``), operation by operation as ``apply`` does
them (no fused multiply-adds: numba does not contract without fastmath). With gradient
accumulation each step's sums are summed in step order, the first copied. Adagrad's row
means of squares stay NumPy's (its pairwise summation order).

Why it is faster than NumPy: ``np.add.at`` makes a ufunc call per index; the NumPy path
sorts the indices and gathers and scatters the rows (and the state) in separate passes. Here
a dense ``mark`` array (one int32 per table row, zero but for the rows of the batch being
summed; allocated lazily, so untouched pages cost nothing) maps a row to its slot in one
random access, the rows seen once are never copied (their gradient is read from the batch
when the row is written), and each distinct row of the table and of its state is read and
written back in one go.

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
    """Add the sums of the ``u`` slots of a step (:func:`_segment`) into a
    gradient-accumulation window of ``w`` slots (``wmark``, ``wrows`` as ``mark``, ``rows``;
    ``wacc[j]`` slot ``j``'s sum, the first step's copied), clearing the step's marks;
    returns the window's new slot count."""
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


@jit.kernel
def _sums(src: np.ndarray, grads: np.ndarray, acc: np.ndarray, u: int, out: np.ndarray) -> None:
    """``out[j]`` = the summed gradient of slot ``j`` of :func:`_segment`, for ``j < u``."""
    for j in range(u):
        a = src[j]
        g = grads[a] if a >= 0 else acc[-1 - a]
        for c in range(g.size):
            out[j, c] = g[c]


@jit.kernel(error_model="numpy")  # divisions as NumPy's: vectorised, no zero check
def _adagrad(
    table: np.ndarray, accumulator: np.ndarray, rows: np.ndarray, sums: np.ndarray,
    means: np.ndarray, u: int, mark: np.ndarray, lr: np.float32, eps: np.float32,
) -> None:  # fmt: skip
    """Row-wise Adagrad on the ``u`` slots (``sums`` their gradients, ``means`` the means
    of their squares): ``a = a + mean``, ``row = sum * (lr / (sqrt(a) + eps)) + row`` (``lr``
    negated), clearing the marks."""
    for j in range(u):
        r = rows[j]
        a = accumulator[r] + means[j]
        accumulator[r] = a
        scale = lr / (np.float32(np.sqrt(a)) + eps)
        for c in range(table.shape[1]):
            table[r, c] = sums[j, c] * scale + table[r, c]
        mark[r] = 0


@jit.kernel(error_model="numpy")  # divisions as NumPy's: vectorised, no zero check
def _adam(
    table: np.ndarray, m: np.ndarray, v: np.ndarray, rows: np.ndarray, src: np.ndarray,
    grads: np.ndarray, acc: np.ndarray, u: int, mark: np.ndarray, k: np.ndarray,
) -> None:  # fmt: skip
    """Lazy Adam on the ``u`` slots of :func:`_segment` with the float32 constants ``k``
    (:meth:`HostEmbeddingAdamOptimizerSpec.constants`: ``b1, 1 - b1, b2, 1 - b2,
    -lr / (1 - b1^t), 1 - b2^t, eps``), element by element as the NumPy rule computes them,
    clearing the marks."""
    b1, c1, b2, c2, lr, bias2, eps = k[0], k[1], k[2], k[3], k[4], k[5], k[6]
    for j in range(u):
        r = rows[j]
        a = src[j]
        g = grads[a] if a >= 0 else acc[-1 - a]
        for c in range(table.shape[1]):
            mm = m[r, c] * b1 + c1 * g[c]
            vv = v[r, c] * b2 + c2 * (g[c] * g[c])
            m[r, c] = mm
            v[r, c] = vv
            denom = np.float32(np.sqrt(vv / bias2)) + eps
            table[r, c] = mm / denom * lr + table[r, c]
        mark[r] = 0


class FusedUpdate:
    """The compiled updates of one float32 table ``[tokens, encoding]`` and their scratch
    (reused across calls): the marks, a step's slots, and the gradient-accumulation window.

    Every method takes the batch's ``indices`` (``[n]``, contiguous) and float32 ``grads``
    (``[n, encoding]``, contiguous) and returns the number of distinct rows, or ``-1 - k``
    when ``indices[k]`` is out of range (then nothing is written). Call only when
    :func:`tremula.libs.jit.available` says so.
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

    def sgd(self, table: np.ndarray, indices: np.ndarray, grads: np.ndarray, k: np.ndarray) -> int:
        """SGD: ``table[i] = table[i] + k[0] * (the sum of row i's gradients)``, ``k`` the
        spec's constants (``k[0] = -learning_rate``, float32)."""
        u = self._segment(indices, grads)
        if u > 0:
            _apply(table, k[0], self.rows, self.src, grads, self.acc, u, self.mark)
        return u

    def accumulate(self, indices: np.ndarray, grads: np.ndarray) -> int:
        """SGD + GA: add a step's sums to the window (applied by :meth:`flush`)."""
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

    def flush(self, table: np.ndarray, k: np.ndarray) -> int:
        """Apply the window's sums (``table[i] = table[i] + k[0] * sum``, as :meth:`sgd`) and
        empty it; returns the number of rows written."""
        w = self.pending
        if w:
            src = np.arange(w, dtype=np.int64)
            _apply(table, k[0], self.wrows, src, self.wacc, self.wacc, w, self.wmark)
        self.pending = 0
        return w

    def discard(self) -> None:
        """Empty the window without applying it."""
        self.wmark[self.wrows[: self.pending]] = 0
        self.pending = 0

    def adagrad(
        self, table: np.ndarray, accumulator: np.ndarray, indices: np.ndarray,
        grads: np.ndarray, k: np.ndarray,
    ) -> int:  # fmt: skip
        """Row-wise Adagrad (``accumulator`` ``[tokens]``, updated in place; ``k`` the spec's
        constants ``-learning_rate, eps``). The means of the squared sums are NumPy's (its
        pairwise order, as the NumPy rule's), the rest is compiled."""
        u = self._segment(indices, grads)
        if u > 0:
            sums = np.empty((u, self.encoding), np.float32)
            _sums(self.src, grads, self.acc, u, sums)
            means = np.mean(np.square(sums, dtype=np.float32), axis=1)
            _adagrad(table, accumulator, self.rows, sums, means, u, self.mark, k[0], k[1])
        return u

    def adam(
        self, table: np.ndarray, m: np.ndarray, v: np.ndarray, indices: np.ndarray,
        grads: np.ndarray, k: np.ndarray,
    ) -> int:  # fmt: skip
        """Lazy Adam (``m``, ``v`` ``[tokens, encoding]``, updated in place) with the spec's
        float32 constants ``k`` for this step."""
        u = self._segment(indices, grads)
        if u > 0:
            _adam(table, m, v, self.rows, self.src, grads, self.acc, u, self.mark, k)
        return u
