"""``popsparse::dynamic``: the dynamic sparse fully-connected layer and matmul.

``from tremula.libs.popsparse import dynamic``::

    sp = dynamic.SparsityParams(dynamic.SparsityType.Block,
                                dynamic.SparsityStructure.Unstructured, (4, 4))
    params = dynamic.FullyConnectedParams.create_with_nz_ratio(sp, 0.1, batch, 1, in_, out)
    plan = dynamic.get_plan(target, "half", params, {"doGradWPass": True})
    part = dynamic.Partitioner(params, "half", target, {"doGradWPass": True})
    impl = part.create_sparsity_data_impl(coo)           # impl.meta_info, impl.nz_values
    back = part.sparsity_data_impl_to_coo_matrix(impl)   # bit-exact round trip

    w = dynamic.create_fully_connected_weights(graph, poplar.HALF, params, opts)
    x = dynamic.create_fully_connected_input(graph, poplar.HALF, params, opts)
    y = dynamic.fully_connected_fwd(graph, w, x, params, prog, opts)  # [batch][out]
    # engine.write_tensor of impl.meta_info / impl.nz_values into w's tensors: a pattern
"""

from tremula.libs.popsparse.device import OpMetaData, SparseTensor
from tremula.libs.popsparse.fully_connected import (
    create_fully_connected_input,
    create_fully_connected_weights,
    fully_connected_fwd,
    fully_connected_grad_a,
    fully_connected_sparse_grad_w,
)
from tremula.libs.popsparse.layout import PropagationStep, propagation_steps
from tremula.libs.popsparse.matmul import (
    create_sparse_dense_matmul_lhs,
    create_sparse_dense_matmul_rhs,
    sparse_dense_matmul,
)
from tremula.libs.popsparse.options import Options, PlanConstraints, parse_options
from tremula.libs.popsparse.params import (
    FullyConnectedParams,
    MatMulParams,
    SparsityParams,
    SparsityStructure,
    SparsityType,
)
from tremula.libs.popsparse.partitioner import Partitioner, SparsityDataImpl
from tremula.libs.popsparse.plan import Cost, ExchangePlan, Partition, Plan, PlanningCache
from tremula.libs.popsparse.planner import estimate_cost, get_plan

__all__ = [
    "Cost",
    "ExchangePlan",
    "FullyConnectedParams",
    "MatMulParams",
    "OpMetaData",
    "Options",
    "Partition",
    "Partitioner",
    "Plan",
    "PlanConstraints",
    "PlanningCache",
    "PropagationStep",
    "SparseTensor",
    "SparsityDataImpl",
    "SparsityParams",
    "SparsityStructure",
    "SparsityType",
    "create_fully_connected_input",
    "create_fully_connected_weights",
    "create_sparse_dense_matmul_lhs",
    "create_sparse_dense_matmul_rhs",
    "estimate_cost",
    "fully_connected_fwd",
    "fully_connected_grad_a",
    "fully_connected_sparse_grad_w",
    "get_plan",
    "parse_options",
    "propagation_steps",
    "sparse_dense_matmul",
]
