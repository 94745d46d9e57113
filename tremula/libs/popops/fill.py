"""``popops.fill`` and ``popops.zero``: set every element of a tensor, in place.

Codelet ``popops::Fill<T>``: a worker vertex writing one value (its state) over one part of
the tensor, at most one per worker context on each tile holding the tensor. Estimator
(PopLibs' Fill): 8-bit types ``28 + n/4`` below 64 elements, else ``39 + n/8``; 64-bit
types ``5 + n``; 16- and 32-bit types [proposal] a 64-bit store loop, ``16 + ceil(bytes/8)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs import util
from tremula.libs.popops.codelets.elementwise import type_arg
from tremula.libs.popops.codelets.fill import Fill
from tremula.libs.popops.expr_eval import scalar_value


def fill(
    graph: poplar.Graph, t: poplar.Tensor, value: Any, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """Set every element of ``t`` to ``value`` (PopLibs' ``fill``).

    Args:
        graph: The graph to add to.
        t: The tensor to fill; it must be mapped to tiles and have no aliased elements.
        value: A number representable in ``t``'s type (integers exactly).
        prog: The sequence the compute set is appended to.
        name: Debug prefix of the compute set.

    Returns:
        ``t``.

    Raises:
        GraphError: ``t`` is not a tensor of ``graph``, is not mapped, or ``value`` does not
            fit its type.
        TensorError: ``t`` has aliased elements.
    """
    what = f"popops.fill({name or t!r})"
    if not isinstance(t, poplar.Tensor) or t.graph is not graph.state:
        raise GraphError(f"{what}: expected a Tensor of this graph, got {t!r}")
    if not isinstance(value, (bool, int, float, np.generic)) or np.ndim(value) != 0:
        raise GraphError(f"{what}: the value must be a number, got {value!r}")
    scalar = scalar_value(value, t.dtype, f"{what}: value")
    util.refuse_aliased(t, what)
    if t.num_elements == 0:
        return t
    part = util.partition(graph, t, graph.target.vector_width(t.dtype.size))
    util.ensure_codelets(graph, [Fill])
    cs = graph.add_compute_set(f"{name or 'fill'}/Fill")
    vtype = f"{Fill.name}<{type_arg(t.dtype)}>"
    graph.add_vertices(cs, vtype, {"out": part.segments(t), "value": scalar}, part.tiles)
    prog.add(poplar.Execute(cs))
    return t


def zero(
    graph: poplar.Graph, t: poplar.Tensor, prog: poplar.Sequence, name: str = ""
) -> poplar.Tensor:
    """Set every element of ``t`` to zero (PopLibs' ``zero``); see :func:`fill`."""
    return fill(graph, t, 0, prog, name or "zero")
