"""``ops.matmul`` over NumPy's shape rules (rank 1, batched, broadcast batches) with each
``partials_type`` PopXL allows, on float32 and float16 operands, against ``np.matmul``
(the partials type reaches PopLin as ``"float"`` / ``"half"``)."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops

SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (5, 3, 4)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)),
    ((4, 1, 2, 3), (1, 3, 3, 2)),
]


@pytest.mark.parametrize("partials", [None, popxl.float32, popxl.float16], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_matches_numpy(shapes, dtype, partials) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shapes[0]).astype(dtype)
    b = rng.standard_normal(shapes[1]).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        c = ops.matmul(popxl.variable(a), popxl.variable(b), partials_type=partials)
        s = popxl.d2h_stream(c.shape, c.dtype)
        ops.host_store(s, c)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[s]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape and got.dtype == dtype
    tol = 2e-2 if dtype == np.float16 or partials is popxl.float16 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
