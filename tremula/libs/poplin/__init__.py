"""poplin: matrix multiplication with a planner (PopLibs' ``poplin``).

``from tremula.libs import poplin``; with a graph and a ``prog = poplar.Sequence()``::

    c = poplin.matmul(graph, a, b, prog)            # a [M, K] @ b [K, N]
    c = poplin.matmul_grouped(graph, a, b, prog)    # [G, M, K] @ [G, K, N]
    poplin.matmul_acc(graph, c, a, b, 0.5, prog)    # c += 0.5 * a @ b
    a = poplin.create_matmul_input_lhs(graph, poplar.HALF, (M, K), (K, N))

See ``OVERVIEW.md`` for the codelets, the planner and the estimators.
"""

from tremula.libs.poplin.codelets import CODELETS
from tremula.libs.poplin.matmul import (
    create_matmul_grouped_input_lhs,
    create_matmul_grouped_input_rhs,
    create_matmul_input_lhs,
    create_matmul_input_rhs,
    matmul,
    matmul_acc,
    matmul_grouped,
    matmul_grouped_acc,
    matmul_plan,
)
from tremula.libs.poplin.norms import (
    NormReduceCallback,
    distributed_norm_statistics,
    distributed_norm_statistics_gradients,
)
from tremula.libs.poplin.options import MatMulError, MatMulOptions, parse_options
from tremula.libs.poplin.plan import MatMulParams, Plan, plan_matmul

__all__ = [
    "CODELETS",
    "MatMulError",
    "MatMulOptions",
    "MatMulParams",
    "NormReduceCallback",
    "Plan",
    "create_matmul_grouped_input_lhs",
    "create_matmul_grouped_input_rhs",
    "create_matmul_input_lhs",
    "create_matmul_input_rhs",
    "distributed_norm_statistics",
    "distributed_norm_statistics_gradients",
    "matmul",
    "matmul_acc",
    "matmul_grouped",
    "matmul_grouped_acc",
    "matmul_plan",
    "parse_options",
    "plan_matmul",
]
