"""popxl-addons' ``SparseMatmul`` custom op (``static_sparse_ops/dense_sparse_matmul_impl``,
a PopART ``ParameterizedOp`` whose binding class is ``DenseSparseMatMulOp``), served in
Python: a dense matrix times a constant sparse one, as its C++ source defines it.

``SparseMatmul(lhs)``, parameters ``DenseSparseMatMulParams(nz, cols, rows,
output_cols)``: the right-hand side ``S [k][n]`` is the CSR matrix with values ``nz``,
column indices ``cols`` and row offsets ``rows`` (``k + 1`` of them), ``n = output_cols``;
``lhs`` is ``[m, k]`` or ``[1, m, k]`` (one group: the C++ takes ``[G][m][k]`` only for
``G = 1``), float16 or float32; the output is ``lhs``'s shape with its last dimension
``n`` and its dtype, ``lhs @ S`` with ``S``'s values in ``lhs``'s type. The pattern and
values are fixed when the program is built (the opx sets them as initial values).

The C++ op declares no gradient (it is meant for inference): not differentiable. Its
setup checks nothing; what its opx (``popsparse::static_::CSRMatrix``) would refuse is
refused here when the op is created: a CSR structure that is not one (offsets of the
wrong count, decreasing or not ending at the number of values, column indices out of
``[0, n)`` or repeated in a row), ``k`` other than ``lhs``'s last dimension, more than one
group. ``setAvailableMemoryProportion`` (a method of the C++ op object) is not served.
Lowering: ``static_sparse_ops_lowering.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupError, OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.custom_ops._op_binding import OperatorIdentifier, parameterized_binding
from tremula.popxl.ops.base import defop
from tremula.popxl.tensor import TensorSpec

__all__ = ["DenseSparseMatMulOp", "DenseSparseMatMulParams", "dense_sparse_matmul"]

OP = "SparseMatmul"
OPID = OperatorIdentifier("popxl.addons.ops", OP, 1, (1, 1), 1)
_WHAT = "DenseSparseMatMulOp"


class DenseSparseMatMulParams:
    """``DenseSparseMatMulParams(nz, cols, rows, output_cols)``: a CSR matrix (float32
    values, column indices, row offsets) with ``output_cols`` columns."""

    def __init__(self, nz: Any, cols: Any, rows: Any, output_cols: int) -> None:
        self.nz = np.asarray(nz, dtype=np.float32).reshape(-1).copy()
        self.cols = np.asarray(cols, dtype=np.int64).reshape(-1).copy()
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1).copy()
        if isinstance(output_cols, bool) or not isinstance(output_cols, (int, np.integer)):
            raise TypeError(f"{_WHAT}: output_cols must be an int, got {output_cols!r}")
        self.output_cols = int(output_cols)

    def dense(self) -> np.ndarray:
        """``S [k][n]`` as a dense float32 matrix."""
        k = self.rows.size - 1
        s = np.zeros((k, self.output_cols), np.float32)
        row_of = np.repeat(np.arange(k), np.diff(self.rows))
        s[row_of, self.cols] = self.nz
        return s


def check_csr(p: DenseSparseMatMulParams) -> None:
    """The CSR structure of ``p`` (``ValueError`` naming what is wrong)."""
    n, rows, cols = p.output_cols, p.rows, p.cols
    if n < 1:
        raise ValueError(f"{_WHAT}: output_cols must be >= 1, got {n}")
    if rows.size < 2 or rows[0] != 0 or np.any(np.diff(rows) < 0) or rows[-1] != p.nz.size:
        raise ValueError(
            f"{_WHAT}: rows must be CSR row offsets: k + 1 >= 2 non-decreasing values from 0 "
            f"to the number of values ({p.nz.size}), got {rows.size} offsets"
            + (f" from {int(rows[0])} to {int(rows[-1])}" if rows.size else "")
        )
    if cols.size != p.nz.size:
        raise ValueError(
            f"{_WHAT}: {cols.size} column indices for {p.nz.size} values (one per value)"
        )
    if cols.size and (cols.min() < 0 or cols.max() >= n):
        bad = int(cols.min() if cols.min() < 0 else cols.max())
        raise ValueError(f"{_WHAT}: column index {bad} is outside [0, output_cols = {n})")
    row_of = np.repeat(np.arange(rows.size - 1), np.diff(rows))
    values, counts = np.unique(row_of * n + cols, return_counts=True)
    if np.any(counts > 1):
        dup = int(values[np.flatnonzero(counts > 1)[0]])
        raise ValueError(
            f"{_WHAT}: element ({dup // n}, {dup % n}) of the sparse matrix is given twice"
        )


def _attrs(params: Any) -> dict[str, Any]:
    if not isinstance(params, DenseSparseMatMulParams):
        raise TypeError(
            f"{_WHAT}.create_op_in_graph: params must be DenseSparseMatMulParams, got "
            f"{type(params).__name__}"
        )
    check_csr(params)
    return {
        "nz": params.nz,
        "cols": params.cols,
        "rows": params.rows,
        "output_cols": params.output_cols,
    }


def _infer(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    (lhs,) = specs
    if lhs.dtype not in (dtypes.float16, dtypes.float32):
        raise OpSetupTypeError(f"{_WHAT}: lhs must be float16 or float32, got {lhs.dtype}")
    k = a["rows"].size - 1
    if len(lhs.shape) not in (2, 3) or (len(lhs.shape) == 3 and lhs.shape[0] != 1):
        raise OpSetupError(
            f"{_WHAT}: lhs must be [m, k] or [1, m, k] (one group), got shape {lhs.shape}"
        )
    if lhs.shape[-1] != k:
        raise OpSetupError(
            f"{_WHAT}: lhs {lhs.shape} has {lhs.shape[-1]} columns but the sparse matrix has "
            f"{k} rows"
        )
    return [TensorSpec((*lhs.shape[:-1], int(a["output_cols"])), lhs.dtype)]


def dense_sparse_matmul(lhs: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    """NumPy reference: ``lhs @ S`` in float64, in ``lhs``'s dtype."""
    p = DenseSparseMatMulParams(a["nz"], a["cols"], a["rows"], a["output_cols"])
    s = p.dense().astype(lhs.dtype).astype(np.float64)
    return (lhs.astype(np.float64) @ s).astype(lhs.dtype)


def _ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    return [dense_sparse_matmul(x[0], a)]


defop(OP, _infer, _ref, differentiable=False)

DenseSparseMatMulOp = parameterized_binding(
    "DenseSparseMatMulOp", OPID, _attrs, "popxl-addons' ``DenseSparseMatMulOp`` binding."
)
