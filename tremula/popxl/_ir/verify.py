"""Consistency of an Ir edited through the bindings: what ``Op.setup()`` checks of a call
site, and what a ``Session`` checks of the whole Ir before lowering it (an op or graph left
half-edited is refused, naming it, instead of failing somewhere inside the lowering)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tremula.errors import PopartException
from tremula.popxl._ir.graph import restore_order
from tremula.popxl.ops.repeat import CONDITION, IN_OFFSET, ITERATOR, loop_plan
from tremula.popxl.tensor import Constant, Variable

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ir import Ir


def _name(op: Any) -> str:
    return op.debugName() if hasattr(type(op), "debugName") else repr(op)


def check_site(op: Any) -> None:
    """A ``Call`` feeds every input of its graph with a tensor of the input's shape and type
    (PopART's CallOp message); a ``Repeat`` (a ``Loop``) feeds its wrapper graph's inputs
    after the iterator and condition likewise, takes every wrapper output after the
    condition, and has a wrapper Tremula can loop (``ops.repeat.loop_plan``).

    Raises:
        PopartException: the site does not match its graph.
    """
    use = op.definition.graphs
    if use not in ("call", "loop"):
        return
    graph = op.attrs["graphs"][0]
    skip_in, skip_out = (IN_OFFSET, 1) if use == "loop" else (0, 0)
    g_ins = graph.inputs[skip_in:]
    if len(op.inputs) != len(g_ins):
        raise PopartException(
            f"{_name(op)}: {len(op.inputs)} inputs connected, graph {graph.name!r} has "
            f"{len(g_ins)}" + (f" after {ITERATOR} and {CONDITION}" if skip_in else "")
        )
    for i, (p, g) in enumerate(zip(op.inputs, g_ins)):
        if p is not None and (p.shape != g.shape or p.dtype != g.dtype):
            raise PopartException(
                f"CallOp input (@{i + skip_in}) does not match callee input tensor "
                f"(@{i + skip_in}): {p.id!r} is {p.dtype} {p.shape}, {g.id!r} of "
                f"{graph.name!r} is {g.dtype} {g.shape}"
            )
    n_out = len(graph.outputs) - skip_out
    if use == "loop":
        if len(op.outputs) != n_out:
            raise PopartException(
                f"{_name(op)}: {len(op.outputs)} outputs, its graph {graph.name!r} has "
                f"{n_out} after {CONDITION}"
            )
        if all(t is not None for t in op.inputs):
            loop_plan(op)
    elif len(op.outputs) > n_out:
        raise PopartException(
            f"{_name(op)}: {len(op.outputs)} outputs, graph {graph.name!r} has {n_out}"
        )


def _check_graph(graph: Graph) -> None:
    available = {id(t) for t in graph._inputs}
    available |= {id(t) for t in graph._tensors.values() if isinstance(t, (Variable, Constant))}
    for op in graph._ops:
        for i, t in enumerate(op.inputs):
            if t is None:
                raise PopartException(f"{_name(op)} in {graph.name!r}: input {i} is not connected")
            if graph._tensors.get(t.id) is not t:
                raise PopartException(f"{_name(op)}: input {t.id!r} is not in {graph.name!r}")
            if id(t) not in available:
                raise PopartException(
                    f"{_name(op)} in {graph.name!r}: input {t.id!r} has no producer before it"
                )
        for i, t in enumerate(op.outputs):
            if t is None or t._producer is not op:
                raise PopartException(f"{_name(op)} in {graph.name!r}: output {i} not connected")
            available.add(id(t))
        check_site(op)
    for t in graph._outputs:
        if id(t) not in available:
            raise PopartException(f"graph {graph.name!r}: output {t.id!r} is never produced")


def _keep_constraints(graph: Graph) -> None:
    """Reorder the graph's ops (:func:`restore_order`) where edits left an op before one it
    is constrained to follow (``transferToSubgraph`` gives a replacement op made last the
    constraints of the ops it replaced)."""
    pos = {id(op): i for i, op in enumerate(graph._ops)}
    if any(pos[id(b)] > pos[id(a)] for b, a in graph.topocons()):
        restore_order(graph)


def verify_ir(ir: Ir) -> None:
    """Check every graph of ``ir``: each op's inputs connected and produced before it, its
    outputs connected, its call sites matching their graphs, the graph outputs produced;
    and put ops after those they are constrained to follow.

    Raises:
        PopartException: naming the op or graph left inconsistent, or the constraints and
            data dependencies of a graph making a cycle.
    """
    for graph in ir.graphs:
        _keep_constraints(graph)
        _check_graph(graph)
