"""``decompose_sum``: PopART's ``DecomposeSum`` transform, which PopXL applies to a graph.

Each ``Sum`` op of more than two inputs (autodiff's sum of a tensor's gradient
contributions) becomes an ``Init`` (zeros of the sum's shape and type) and a chain of
in-place additions, one per summand (``AddLhsInplace``; Tremula's type ``AddInplace``):
``acc = Init(); acc += x1; acc += x2; ...``. The summands are taken in the order they
become available in the graph's schedule (made, and written by any in-place op before the
sum, which the addition is then constrained to follow), and each addition is placed right
after that point, so a partial gradient can die as soon as it is added instead of living
until all of them are made (the GPT-J fine-tuning's gradients of a serialised loop).
Summands the graph does not make (its inputs, constants) are added with the first one it
makes. The last addition's output is the sum's output tensor (same id, same consumers),
and the sum's topological constraints become its.

A two-input sum is already one addition and stays. The result is the sum's left fold in
the summands' order (that of the ``Sum``'s inputs for autodiff's sums), but for the sign
of zero: ``0 + (-0.0)`` is ``+0.0``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tremula.popxl import context
from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode, create_op
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.aliases import Aliases


def decompose_sum(graph: Graph) -> Graph:
    """Decompose the ``Sum`` ops of more than two inputs of ``graph`` into ``Init`` and
    in-place additions (module docstring); returns ``graph``. Called graphs are not
    changed.

    Raises:
        TypeError: ``graph`` is not a Graph.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"decompose_sum: expected a Graph, got {type(graph).__name__}")
    for op in [op for op in graph.ops if op.type == "Sum" and len(op.inputs) > 2]:
        _decompose(graph, op, Aliases(graph))
    return graph


def _decompose(graph: Graph, op: OpNode, aliases: Aliases) -> None:
    ops = list(graph._ops)
    at = {id(o): i for i, o in enumerate(ops)}
    here = at[id(op)]
    writers = [_writers(t, ops[:here], aliases) for t in op.inputs]
    ready = [  # the position after which each summand holds the value the sum reads
        max([at.get(id(t.producer), -1), *(at[id(w)] for w in ws)])
        for t, ws in zip(op.inputs, writers)
    ]
    made = [r for r in ready if r >= 0]
    first = min(made) if made else here - 1  # where the first summand made here is
    order = sorted(range(len(op.inputs)), key=lambda k: (max(ready[k], first), k))
    out = op.outputs[0]
    with _placed_as(op):
        chain = [_op("Init", [], _zeros(out))]
        for k in order:
            chain.append(_op("AddInplace", [chain[-1].outputs[0], op.inputs[k]]))
    last = chain[-1]
    del graph._tensors[last.outputs[0].id]  # the last addition writes the sum's output
    last.outputs, out._producer = (out,), last
    after: dict[int, list[OpNode]] = {}  # position -> the new ops placed after it
    for k, new in zip([order[0], *order], chain):  # the Init goes with the first add
        after.setdefault(max(ready[k], first), []).append(new)
    placed = after.get(-1, [])
    for i, o in enumerate(ops):
        if o is not op:
            placed.append(o)
        placed.extend(after.get(i, ()))
    graph._ops[:] = placed
    graph._replace_ops([op], last)  # the sum's order constraints become the last add's
    for k, add in zip(order, chain[1:]):  # each add reads its summand after its writes
        for w in writers[k]:
            graph._add_topocon(w, add)
    from tremula.popxl._ir.graph import restore_order  # (the bindings import transforms)

    restore_order(graph)


def _op(op_type: str, inputs: list[Tensor], attrs: dict[str, object] | None = None) -> OpNode:
    """A new op of the current graph (appended to its ops)."""
    create_op(op_type, inputs, attrs)
    return get_current_graph()._ops[-1]


def _writers(t: Tensor, before: list[OpNode], aliases: Aliases) -> list[OpNode]:
    """The ops of ``before`` (those before the sum) that write ``t``'s storage in place."""
    return [o for o in before if any(aliases.same(o.inputs[k], t) for k in o.modified)]


def _zeros(t: Tensor) -> dict[str, object]:
    """The attributes of an ``Init`` of zeros shaped like ``t`` (``ops.init``'s)."""
    return {"shape": t.shape, "dtype": t.dtype, "init_type": "zero", "meta_shape": t.meta_shape}


@contextmanager
def _placed_as(op: OpNode) -> Iterator[None]:
    """Create ops as ``op`` was created: in its graph, name scope, IPU, tile set and
    execution context (whatever the caller's context is), in no ``in_sequence`` order."""
    ctx = context.get_current_context()
    saved = ctx.scopes, ctx.ipus, ctx.tile_sets, ctx.execution_contexts
    scope = op.debug_name.rpartition("/")[0]
    ctx.scopes = scope.split("/") if scope else []
    ctx.ipus = [] if op.ipu is None else [op.ipu]
    ctx.tile_sets, ctx.execution_contexts = [op.tile_set], [op.execution_context]
    try:
        with op.graph, context.in_sequence("pass"):
            yield
    finally:
        ctx.scopes, ctx.ipus, ctx.tile_sets, ctx.execution_contexts = saved
