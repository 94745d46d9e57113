"""popops element-wise operations, all in one namespace: ``map`` / ``map_in_place`` over an
expression (``elementwise_map.py``) and one function per op of the table (``add``, ``exp``,
``select`` ... and ``add_in_place`` ...; generated from ``ops.py`` into
``elementwise_unary.py`` and ``elementwise_binary.py`` by ``tools/gen_popops_elementwise.py``).

    from tremula.libs.popops.elementwise import add, map
    from tremula.libs.popops.expr import _1, _2, Relu

    c = add(graph, a, b, prog)                      # c = a + b
    d = map(graph, Relu(_1 * _2 + 1), [a, b], prog)  # one fused compute set

Named functions take tensors or numbers as operands (at least one tensor; the first one for
the in-place forms): ``add(graph, a, 2.0, prog)`` adds a constant. They return their output
(the in-place forms return the tensor they wrote). Semantics per op: see ``ops.py``.
"""

from __future__ import annotations

from tremula.libs.popops import elementwise_binary, elementwise_unary
from tremula.libs.popops.elementwise_binary import *  # noqa: F403
from tremula.libs.popops.elementwise_map import map, map_in_place
from tremula.libs.popops.elementwise_unary import *  # noqa: F403

__all__ = ["map", "map_in_place"]
__all__ += elementwise_unary.__all__
__all__ += elementwise_binary.__all__
