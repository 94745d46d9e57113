"""``popsparse::dynamic``'s sparse x dense matmul (``popsparse/MatMul.hpp``): a
thin layer over the fully-connected passes. ``[G][m][k] (sparse) x [G][k][n]`` is the layer
with batch ``n``, input channels ``k`` and output channels ``m`` (planned with GradA, as
PopLibs does): the product is its forward pass on ``rhs^T``, and ``transpose_lhs``
(``[k][m] x [m][n]``) its GradA pass. Groups must be 1 (``G = 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tremula import poplar
from tremula.libs.popsparse import fully_connected as fc
from tremula.libs.popsparse.device import SparseTensor
from tremula.libs.popsparse.errors import PopsparseError
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import MatMulParams
from tremula.libs.popsparse.plan import PlanningCache

OptionsArg = Mapping[str, Any] | Options | None


def _check_params(params: Any, where: str) -> MatMulParams:
    if not isinstance(params, MatMulParams):
        raise PopsparseError(f"{where}: params must be dynamic.MatMulParams, got {params!r}")
    return params


def create_sparse_dense_matmul_lhs(
    graph: poplar.Graph,
    input_type: Any,
    params: MatMulParams,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> SparseTensor:
    """The sparse ``[G][m][k]`` left operand (``createSparseDenseMatMulLHS``): the weights
    of the matmul's layer, recording ``params`` and ``options``."""
    params = _check_params(params, "create_sparse_dense_matmul_lhs")
    return fc.create_fully_connected_weights(graph, input_type, params, options, cache, name)


def create_sparse_dense_matmul_rhs(
    graph: poplar.Graph,
    input_type: Any,
    params: MatMulParams,
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    name: str = "",
) -> poplar.Tensor:
    """The dense ``[G][k][n]`` right operand (``createSparseDenseMatMulRHS``): a view of
    the layer's ``[n][k]`` input, mapped where it is read."""
    params = _check_params(params, "create_sparse_dense_matmul_rhs")
    t = fc.create_fully_connected_input(graph, input_type, params, options, cache, name or "rhs")
    return t.transpose().expand([0])


def sparse_dense_matmul(
    graph: poplar.Graph,
    lhs: SparseTensor,
    rhs: poplar.Tensor,
    prog: poplar.Sequence,
    transpose_lhs: bool = False,
    transpose_rhs: bool = False,
    name: str = "",
    options: OptionsArg = None,
    cache: PlanningCache | None = None,
    params: MatMulParams | None = None,
) -> poplar.Tensor:
    """``lhs x rhs`` (``sparseDenseMatMul``): ``[G][m][n]``, or with ``transpose_lhs``
    ``lhs^T x rhs`` (``[G][k][n]``, the GradA pass; ``rhs`` is then ``[G][m][n]``).
    ``transpose_rhs`` takes ``rhs`` as ``[G][n][k]`` (a dim shuffle). ``rhs`` may also be
    2-D (no group dimension); the result then is too.

    The params come from ``lhs`` (made by :func:`create_sparse_dense_matmul_lhs`); a
    SparseTensor of two plain tensors needs ``params``.

    Raises:
        PopsparseError: an ``lhs`` without params, params or options other than those
            it was created with, operands of the wrong shape or type.
    """
    where = "sparse_dense_matmul"
    meta = lhs.op_meta_data if isinstance(lhs, SparseTensor) else None
    if meta is not None:
        if params is not None and params != meta.params:
            raise PopsparseError(
                f"{where}: params {params} differ from those lhs was created with ({meta.params})"
            )
        params = meta.params  # type: ignore[assignment]
    if params is None:
        raise PopsparseError(
            f"{where}: lhs records no MatMulParams (it was not made by "
            f"create_sparse_dense_matmul_lhs); pass params="
        )
    params = _check_params(params, where)
    if meta is not None and options is None:
        options = meta.options
    if not isinstance(rhs, poplar.Tensor) or rhs.rank not in (2, 3):
        raise PopsparseError(f"{where}: rhs must be a 2-D or [G][k][n] tensor, got {rhs!r}")
    grouped = rhs.rank == 3
    r = rhs if grouped else rhs.expand([0])
    if transpose_rhs:
        r = r.dim_shuffle([0, 2, 1])
    inner = params.m if transpose_lhs else params.k
    if r.shape != (1, inner, params.n):
        raise PopsparseError(
            f"{where}: rhs must be [1][{inner}][{params.n}] ({'m' if transpose_lhs else 'k'} x "
            f"n{', after transpose_rhs' if transpose_rhs else ''}) for {params}, got "
            f"{list(rhs.shape)}"
        )
    dense = r[0].transpose()  # [n][inner]: the layer's batch-major operand
    if transpose_lhs:
        out = fc.fully_connected_grad_a(graph, lhs, dense, params, prog, options, cache, name)
    else:
        out = fc.fully_connected_fwd(graph, lhs, dense, params, prog, options, cache, name)
    res = out.transpose()
    return res.expand([0]) if grouped else res
