"""Fusing chains of element-wise ops into one ``popops.map`` expression.

A chain is a run of consecutive element-wise ops (``lowering/elementwise.py``'s table and
``Cast``) in which each op's output is used once, by the next op of the run, and is not an
output of the graph: ``matmul + bias`` then ``relu``, or autodiff's ``relu`` gradient
(``greater``, ``cast``, ``mul``). The chain lowers to one compute set evaluating the whole
expression, in place of one compute set (and one intermediate tensor) per op.

The numbers are unchanged: a fused expression evaluates op by op in each op's own type
(``popops.map``), element-wise ops commute with broadcasting, and only the chain's last
output, the one tensor anything else can see, is materialised. Only the cycles (fewer
compute sets and syncs) and the memory (no intermediates) differ.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.libs.popops import ops as popops_ops
from tremula.libs.popops.expr_eval import infer
from tremula.lowering.elementwise import POPOPS, left_fold
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.elementwise import BY_OP
from tremula.popxl.tensor import Tensor


@dataclass
class Chain:
    """Two or more element-wise ops lowered as one expression."""

    ops: list[OpNode]


def plan(graph: Graph, ops: Sequence[OpNode] | None = None) -> list[OpNode | Chain]:
    """``graph``'s ops (or those of ``ops``) in order, with fusible chains grouped."""
    uses = Counter(t for op in graph.ops for t in op.inputs)
    visible = set(graph.outputs)
    items: list[OpNode | Chain] = []
    run: list[OpNode] = []

    def flush() -> None:
        if len(run) > 1:
            items.append(Chain(list(run)))
        else:
            items.extend(run)
        run.clear()

    for op in graph.ops if ops is None else ops:
        if not _fusible(op):
            flush()
            items.append(op)
            continue
        if run and not _continues(run[-1], op, uses, visible):
            flush()
        run.append(op)
    flush()
    return items


def _fusible(op: OpNode) -> bool:
    if len(op.outputs) != 1 or op.modified or op.called_graphs:
        return False
    if op.type == "Cast":
        return True
    if len(op.inputs) == 1 and op.type in BY_OP and BY_OP[op.type].arity == 2:
        return False  # a variadic op of one input is a copy (its rule)
    return isinstance(POPOPS.get(op.type), str)  # named popops ops, out of place


def _continues(prev: OpNode, op: OpNode, uses: Counter, visible: set[Tensor]) -> bool:
    """True when ``op`` consumes ``prev``'s output, its only use, hidden from the graph."""
    out = prev.outputs[0]
    return (
        out in op.inputs
        and uses[out] == 1
        and out not in visible
        and (prev.ipu, prev.tile_set) == (op.ipu, op.tile_set)
    )


def expression(chain: Chain) -> tuple[pe.Expr, list[Tensor]]:
    """The chain as one expression over placeholders, and the IR tensors they stand for
    (``_1`` is the first)."""
    leaves: list[Tensor] = []
    values: dict[Tensor, pe.Expr] = {}

    def operand(t: Tensor) -> pe.Expr:
        if t in values:
            return values[t]
        if t not in leaves:
            leaves.append(t)
        return pe.PlaceHolder(leaves.index(t) + 1)

    for op in chain.ops:
        args = [operand(t) for t in op.inputs]
        if op.type == "Cast":
            node: pe.Expr = pe.Cast(args[0], op.attrs["dtype"].as_poplar())
        elif BY_OP[op.type].variadic:  # ONNX Max, autodiff's Sum: of 2+ inputs here
            node = left_fold(op.type, args)
        else:
            node = pe.make(popops_ops.get(POPOPS[op.type]).op, *args)
        values[op.outputs[0]] = node
    return values[chain.ops[-1].outputs[0]], leaves


def lower_chain(lw: Any, chain: Chain, env: Any, prog: poplar.Sequence) -> bool:
    """Lower ``chain`` as one ``popops.map``; False (nothing added) when the expression
    does not type-check as one (the caller then lowers the ops one by one)."""
    expr, leaves = expression(chain)
    last = chain.ops[-1].outputs[0]
    args = [env[t] for t in leaves]
    try:
        if infer(expr, tuple(a.dtype for a in args)).dtype is not last.dtype.as_poplar():
            return False
    except pe.ExprError:
        return False
    env[last] = popops.map(lw.graph, expr, args, prog, name=last.id)
    return True
