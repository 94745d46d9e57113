"""``c += a @ b`` through NumPy's own BLAS (``poplin/sgemm.py``): the bits of
``np.add(c, np.matmul(a, b))`` for every matrix NumPy multiplies with ``sgemm``, and no
plan where NumPy would not call it."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.libs.poplin import sgemm

F32 = np.float32


def _operand(rng, shape, transposed, pad):
    """A float32 ``shape`` matrix: a window of a wider array (rows ``pad`` longer), stored
    transposed when asked."""
    rows, cols = shape[::-1] if transposed else shape
    x = rng.standard_normal((rows, cols + pad)).astype(F32)[:, :cols]
    return x.T if transposed else x


needs_blas = pytest.mark.skipif(sgemm._sgemm() is None, reason="no checked BLAS here")


@needs_blas
@pytest.mark.parametrize(
    "m,k,n", [(882, 128, 1000), (142, 128, 24), (147, 128, 40), (5, 300, 7), (16, 64, 126)]
)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_accumulated_products_have_numpys_bits(m, k, n, ta, tb):
    rng = np.random.default_rng(m + n)
    a = _operand(rng, (m, k), ta, 3)
    b = _operand(rng, (k, n), tb, 5)
    c = rng.standard_normal((m, n + 24)).astype(F32)[:, :n]  # a strided output
    want = np.add(c, np.matmul(a, b))
    run = sgemm.plan(a, b, c)
    assert run is not None
    run()
    np.testing.assert_array_equal(c.view(np.int32), want.view(np.int32))


@needs_blas
def test_stacks_add_every_matrix():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 17, 9)).astype(F32)
    b = rng.standard_normal((2, 3, 9, 11)).astype(F32)
    c = rng.standard_normal((2, 3, 17, 11)).astype(F32)
    want = np.add(c, np.matmul(a, b))
    run = sgemm.plan(a, b, c)
    assert run is not None
    run()
    run()  # twice: twice the product added
    want = np.add(want, np.matmul(a, b))
    np.testing.assert_array_equal(c.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("a_shape,b_shape", [((1, 8), (8, 5)), ((6, 8), (8, 1)), ((6, 1), (1, 5))])
def test_no_plan_where_numpy_calls_no_sgemm(a_shape, b_shape):
    """A unit dimension (NumPy's gemv / dot cases), a column stride, doubles: None."""
    a, b = np.ones(a_shape, F32), np.ones(b_shape, F32)
    assert sgemm.plan(a, b, np.ones((a_shape[0], b_shape[1]), F32)) is None
    wide = np.ones((6, 16), F32)[:, ::2]  # no unit stride either way
    assert sgemm.plan(wide, np.ones((8, 5), F32), np.ones((6, 5), F32)) is None
    d = np.ones((6, 8))
    assert sgemm.plan(d, np.ones((8, 5)), np.ones((6, 5))) is None


@pytest.mark.parametrize("m,k,n", [(64, 513, 64), (200, 2048, 300), (16, 4096, 16), (2, 1000, 3)])
def test_a_k_past_the_blas_k_block_keeps_numpys_bits(m, k, n):
    """Past OpenBLAS's K block, ``beta = 1`` adds each block's product into ``c`` in turn
    and rounds differently from ``np.add(c, a @ b)``: such a shape either gets no plan or
    one with NumPy's bits, over several draws."""
    rng = np.random.default_rng(k)
    for _ in range(3):
        a, b = _operand(rng, (m, k), False, 0), _operand(rng, (k, n), False, 0)
        c = (100 * rng.standard_normal((m, n))).astype(F32)
        want = np.add(c, np.matmul(a, b))
        run = sgemm.plan(a, b, c)
        if run is None:
            continue
        run()
        np.testing.assert_array_equal(c.view(np.int32), want.view(np.int32))
