"""Lowering of ``SparseMatmul`` (``static_sparse_ops.py``) onto PopSparse.

The C++ opx calls ``popsparse::static_::denseSparseMatMul`` with the CSR matrix as the
right-hand side. Tremula's PopSparse has the dynamic API only (``tremula/libs/popsparse``,
"Not done here: ... the static API"), so the product runs as the dynamic layer's forward
pass, which computes the same thing: ``lhs [m, k] @ S [k, n] = x W^T`` with ``x = lhs``
(batch ``m``, ``k`` input channels) and the sparse weights ``W = S^T [n][k]``, element
sparsity (1x1 blocks) planned for the pattern's number of non-zeros on the graph's target.
As in the opx, the pattern is partitioned on the host while the program is built and
written as the initial values of the layer's ``meta_info`` and ``nz_values`` tensors
(``nz`` cast to ``lhs``'s type). Cycles and memory are the dynamic layer's (its planner,
bucket exchanges and vertex estimators); compute sets are named under the op's debug name
(``SparseMatmul``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.popxl.custom_ops.static_sparse_ops import OP


def dense_sparse(
    graph: poplar.Graph,
    lhs: poplar.Tensor,
    a: dict[str, Any],
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``lhs @ S`` through PopSparse's dynamic fully-connected forward pass."""
    from tremula.libs.popsparse import COOMatrix, dynamic

    shape = lhs.shape
    x = lhs.reshape(shape[-2:])
    m, k = x.shape
    n = int(a["output_cols"])
    rows = np.asarray(a["rows"], np.int64)
    cols = np.asarray(a["cols"], np.int64)
    nz = np.asarray(a["nz"], np.float32)
    row_of = np.repeat(np.arange(k), np.diff(rows))
    input_type = "half" if lhs.dtype is poplar.HALF else "float"
    params = dynamic.FullyConnectedParams.create_with_num_non_zero_values(
        dynamic.SparsityParams(), max(int(nz.size), 1), m, 1, k, n
    )
    options: dict[str, Any] = {}
    # W = S^T: W[j][i] = S[i][j]
    pattern = COOMatrix(nz, cols, row_of, (1, 1), n, k)
    impl = dynamic.Partitioner(params, input_type, graph.target, options).create_sparsity_data_impl(
        pattern
    )
    w = dynamic.create_fully_connected_weights(graph, input_type, params, options, name=name)
    graph.set_initial_value(w.meta_info, impl.meta_info)
    graph.set_initial_value(w.nz_values, np.asarray(impl.nz_values, np.float32))
    out = dynamic.fully_connected_fwd(graph, w, x, params, prog, options, name=name)
    return out.reshape((*shape[:-1], n))


def _lower(lw: Any, op: Any, env: Any, prog: poplar.Sequence) -> None:
    env[op.outputs[0]] = dense_sparse(lw.graph, env[op.inputs[0]], op.attrs, prog, op.debug_name)


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {OP: _lower}
