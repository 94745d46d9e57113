"""``c += a @ b`` for float32 matrices through the BLAS NumPy itself calls (``sgemm`` with
``beta = 1``), for the fused products of ``fused.py``.

``np.matmul`` of two float32 matrices is one ``cblas_sgemm(RowMajor, ta, tb, m, n, k, 1,
a, lda, b, ldb, 0, c, ldc)`` call when no dimension is 1, each operand has rows or columns
of consecutive elements and the output has rows of them (NumPy's ``matmul.c.src``;
otherwise it calls ``gemv``, ``syrk`` or its own loop). The same call with ``beta = 1``
leaves ``round(c + acc)`` in ``c``, where ``acc`` is the product ``beta = 0`` would store:
``np.add(c, a @ b)``, as the kernel adds the product it accumulated into ``c`` once. That
is what this module offers, for the calls NumPy makes as ``sgemm`` (:func:`plan`), without
storing the product and reading it back.

The library is the OpenBLAS that NumPy loaded from its own folders (found in the process's
memory map, Linux only: a wheel's ``numpy.libs``), its 64-bit-integer ``cblas_sgemm``
(``scipy_cblas_sgemm64_`` in NumPy's wheels). On first use each of a set of shapes (full
kernels, edge rows and columns, transposed operands) is checked bit for bit against
``np.matmul`` and ``np.add``; anything else (no such library, no such symbol, one check
differing) leaves :func:`plan` returning None, and the caller keeps the NumPy path.

The identity holds only while OpenBLAS sums the whole ``k`` in one block: past its K block
(``GEMM_Q``, a few hundred floats on x86 kernels, set per CPU) it adds each block's product
into ``c`` in turn, so ``beta = 1`` rounds ``c + acc1 + acc2`` where ``np.add`` rounds
``c + (acc1 + acc2)`` (on this machine, k = 513 already differs). So each distinct call
shape (``m``, ``k``, ``n``, transpositions) is also checked itself, on random data, the
first time a plan asks for it (:func:`_shape_passes`); a plan with a shape that differs
stays on the NumPy path.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

F32 = np.dtype(np.float32)
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
#: symbols of the 64-bit-integer interface, in the order tried
SYMBOLS = ("scipy_cblas_sgemm64_", "cblas_sgemm64_")
#: the shapes checked before first use: (m, k, n, transposed a, transposed b)
CHECKS = (
    (147, 128, 40, False, False),
    (16, 128, 255, False, False),
    (5, 300, 7, False, False),
    (33, 20, 17, True, False),
    (64, 16, 96, False, True),
    (2, 3, 2, True, True),
)


@cache
def _sgemm() -> Any:
    """NumPy's ``cblas_sgemm`` (64-bit integers) if it passes :data:`CHECKS`, else None."""
    home = os.path.dirname(os.path.abspath(np.__file__))  # .../numpy: numpy.libs, numpy/.libs
    try:
        with open("/proc/self/maps") as maps:
            found = re.findall(r"(/\S*openblas\S*\.so[.\d]*)$", maps.read(), re.M)
    except OSError:
        return None
    paths = sorted(p for p in set(found) if p.startswith(home))  # NumPy's own, not another's
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in SYMBOLS:
            fn = getattr(lib, symbol, None)
            if fn is None:
                continue
            i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
            fn.argtypes = [ctypes.c_int] * 3 + [i64] * 3 + [f32, ptr, i64, ptr, i64, f32, ptr, i64]
            fn.restype = None
            return fn if _passes(fn, CHECKS) else None
    return None


def _passes(fn: Any, shapes: tuple[tuple[int, int, int, bool, bool], ...]) -> bool:
    """Whether ``fn`` with ``beta = 1`` gives ``np.add(c, a @ b)``'s bits on random data
    of each shape ``(m, k, n, a transposed, b transposed)``."""
    rng = np.random.default_rng(0)
    for m, k, n, ta, tb in shapes:
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(F32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(F32)
        a, b = (a.T if ta else a), (b.T if tb else b)
        c = rng.standard_normal((m, n)).astype(F32)
        want = np.add(c, np.matmul(a, b))
        args = _args(a, b, c)
        if args is None:
            return False
        fn(*args)
        if not np.array_equal(c.view(np.int32), want.view(np.int32)):
            return False
    return True


@cache
def _shape_passes(m: int, k: int, n: int, ta: bool, tb: bool) -> bool:
    """Whether ``beta = 1`` gives ``np.add(c, a @ b)``'s bits for this call shape (three
    draws of random data: one could agree by chance on a small output)."""
    return _passes(_sgemm(), ((m, k, n, ta, tb),) * 3)


def _blasable(rows: int, cols: int, m: int, n: int) -> bool:
    """NumPy's ``is_blasable2d``: unit column stride, a whole row stride of at least
    ``n`` elements (strides in bytes)."""
    return cols == F32.itemsize and rows % F32.itemsize == 0 and rows // F32.itemsize >= n


def _operand(s0: int, s1: int, rows: int, cols: int) -> tuple[int, int] | None:
    """How NumPy passes a ``rows x cols`` operand of byte strides ``(s0, s1)`` to ``sgemm``:
    ``(transposition, leading dimension)``, or None where it is not BLAS-able either way."""
    if _blasable(s0, s1, rows, cols):
        return NO_TRANS, s0 // F32.itemsize
    if _blasable(s1, s0, cols, rows):
        return TRANS, s1 // F32.itemsize
    return None


def _args(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> tuple | None:
    """The arguments of ``cblas_sgemm`` for ``c += a @ b`` as NumPy calls it for
    ``np.matmul(a, b, out=c)`` (2-D float32), or None where NumPy would not call it."""
    (m, k), n = a.shape, b.shape[1]
    if min(m, k, n) <= 1 or not (a.dtype == b.dtype == c.dtype == F32):
        return None
    (a0, a1), (b0, b1), (c0, c1) = a.strides, b.strides, c.strides
    if not _blasable(c0, c1, m, n):
        return None
    la, lb = _operand(a0, a1, m, k), _operand(b0, b1, k, n)
    if la is None or lb is None:
        return None
    (ta, lda), (tb, ldb) = la, lb
    pa, pb = a.ctypes.data, b.ctypes.data
    if pa == pb and m == n and a0 == b1 and a1 == b0 and ta != tb:
        return None  # NumPy's syrk case
    ldc = c0 // F32.itemsize
    return (ROW_MAJOR, ta, tb, m, n, k, 1.0, pa, lda, pb, ldb, 1.0, c.ctypes.data, ldc)


def plan(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Callable[[], None] | None:
    """``c += a @ b`` over stacks of matrices (equal leading shapes, the last two axes the
    matrices) with the bits of ``np.add(c, np.matmul(a, b), out=c)``; None where a matrix
    of the stack is not a NumPy ``sgemm`` call or no checked BLAS is found. The arrays must
    outlive the plan (their addresses are kept)."""
    fn = _sgemm()
    if fn is None or a.shape[:-2] != b.shape[:-2] or a.shape[:-2] != c.shape[:-2]:
        return None
    calls = []
    for index in np.ndindex(*a.shape[:-2]):
        args = _args(a[index], b[index], c[index])
        if args is None:
            return None
        _, ta, tb, m, n, k = args[:6]
        if not _shape_passes(m, k, n, ta == TRANS, tb == TRANS):
            return None
        calls.append(args)

    def run() -> None:
        for args in calls:
            fn(*args)

    return run
