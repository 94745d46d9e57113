"""popxl-addons' ``static_sparse_ops`` (``dense_const_sparse_matmul``) served in Python:
dense ``lhs @ S`` for a constant CSR matrix ``S``, against NumPy, through popxl-addons'
wrapper (float32 and float16, ``[m, k]`` and ``[1, m, k]``, uniform and skewed patterns),
the binding's checks of the CSR structure, the profile."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.popxl.custom_ops import SERVED
from tremula.popxl.custom_ops import static_sparse_ops as served


def _pattern(rng, k, n, density, skewed=False):
    s = rng.normal(size=(k, n)).astype(np.float32)
    keep = rng.random((k, n)) < density
    if skewed:  # one full row and one full column, the rest very sparse
        keep[3, :] = True
        keep[:, 5] = True
    s[~keep] = 0
    return s


@pytest.mark.parametrize(
    "m, k, n, density, dtype, lead, skewed",
    [
        (8, 64, 48, 0.1, np.float32, False, False),
        (4, 32, 40, 0.25, np.float16, True, False),
        (16, 96, 64, 0.02, np.float32, False, True),
    ],
)
def test_dense_times_constant_sparse(addons, check_profile, m, k, n, density, dtype, lead, skewed):
    from scipy.sparse import csr_matrix

    sparse_ops = addons("static_sparse_ops")
    rng = np.random.default_rng(m + k + n)
    s = _pattern(rng, k, n, density, skewed)
    lhs = rng.normal(size=(1, m, k) if lead else (m, k)).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        y = sparse_ops.dense_const_sparse_matmul(popxl.variable(lhs), csr_matrix(s), n)
        d = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d, y)
    assert y.shape == (*lhs.shape[:-1], n) and y.dtype == popxl.dtype.as_dtype(dtype)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[d]
    want = lhs.astype(np.float64) @ s.astype(dtype).astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 4)
    check_profile(session, "SparseMatmul")


def test_binding_checks_the_csr_structure() -> None:
    assert SERVED[("popxl.addons.ops", "SparseMatmul", 1)] == served.__name__
    P = served.DenseSparseMatMulParams
    ir = popxl.Ir()
    g = ir.main_graph
    make = served.DenseSparseMatMulOp.create_op_in_graph
    with g:
        lhs = popxl.variable(np.zeros((2, 3), np.float32))
        lhs_int = popxl.variable(np.zeros((2, 3), np.int32))
        lhs_g2 = popxl.variable(np.zeros((2, 2, 3), np.float32))
        good = P([1.0, 2.0], [0, 3], [0, 1, 1, 2], 4)
        cases = [
            (P([1.0], [0], [0, 1], 4), ValueError, "has 3 columns but the sparse matrix has 1"),
            (P([1.0, 2.0], [0, 4], [0, 1, 1, 2], 4), ValueError, "column index 4 is outside"),
            (P([1.0, 2.0], [1, 1], [0, 2, 2, 2], 4), ValueError, r"element \(0, 1\) .* twice"),
            (P([1.0, 2.0], [0, 1], [0, 2, 1, 2], 4), ValueError, "must be CSR row offsets"),
            (P([1.0, 2.0], [0], [0, 1, 1, 2], 4), ValueError, "1 column indices for 2 values"),
        ]
        for params, err, match in cases:
            with pytest.raises(err, match=match):
                make(g._pb_graph, {0: lhs.id}, {}, params, None)
        with pytest.raises(TypeError, match="lhs must be float16 or float32"):
            make(g._pb_graph, {0: lhs_int.id}, {}, good, None)
        with pytest.raises(ValueError, match="one group"):
            make(g._pb_graph, {0: lhs_g2.id}, {}, good, None)
        op = make(g._pb_graph, {0: lhs.id}, {}, good, None)
    assert op.opType() == "SparseMatmul" and op.outTensor(0).info.shape() == [2, 4]
    np.testing.assert_array_equal(good.dense(), [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 2]])
    from tremula.popxl.ops.base import OPS

    assert not OPS["SparseMatmul"].differentiable  # inference only: no getGradOps
