"""popops: element-wise operations, casts, fills, scaled adds, reductions, slicing and
gather/scatter, sorting, iota and histograms, each with its codelets and estimators.

``popops.add(graph, a, b, prog)``, ``popops.map(graph, expr, [a, b], prog)``,
``popops.reduce(graph, t, dims, popops.Operation.ADD, prog)``,
``popops.multi_update_add(graph, table, indices, rows, scale, prog)`` ... (see OVERVIEW.md).
Names shadow a few Python builtins inside this namespace (``map``, ``min``, ``max``, ``abs``,
``pow``), as PopLibs' names do.
"""

from tremula.libs.popops import expr
from tremula.libs.popops.cast import cast
from tremula.libs.popops.elementwise import *  # noqa: F403  (one function per op)
from tremula.libs.popops.elementwise import __all__ as _elementwise_all
from tremula.libs.popops.elementwise_binary import *  # noqa: F403  (for static tools)
from tremula.libs.popops.elementwise_unary import *  # noqa: F403
from tremula.libs.popops.expr import BinaryOpType, TernaryOpType, UnaryOpType
from tremula.libs.popops.fill import fill, zero
from tremula.libs.popops.fp8 import pow2scale_cast
from tremula.libs.popops.histogram import histogram
from tremula.libs.popops.iota import iota
from tremula.libs.popops.reduce import Operation, reduce, reduce_with_output
from tremula.libs.popops.scaled_add import a_x_plus_b_y, scaled_add_to, scaled_subtract_from
from tremula.libs.popops.slicing import (
    create_sliceable_tensor,
    dynamic_slice,
    dynamic_update,
    multi_slice,
    multi_update,
    multi_update_add,
    multi_update_op,
)
from tremula.libs.popops.sort import sort, sort_key_value, top_k

__all__ = [
    *_elementwise_all,
    "BinaryOpType",
    "Operation",
    "TernaryOpType",
    "UnaryOpType",
    "a_x_plus_b_y",
    "cast",
    "create_sliceable_tensor",
    "dynamic_slice",
    "dynamic_update",
    "expr",
    "fill",
    "histogram",
    "iota",
    "multi_slice",
    "multi_update",
    "multi_update_add",
    "multi_update_op",
    "pow2scale_cast",
    "reduce",
    "reduce_with_output",
    "scaled_add_to",
    "scaled_subtract_from",
    "sort",
    "sort_key_value",
    "top_k",
    "zero",
]
