"""Gradient rules of ``popxl/ops/control.py``: a conditional's gradient is a conditional of
its branches' grad graphs.

Each branch's grad graph is wrapped in a graph that returns a gradient for every input of
the conditional (its own branch's, and zeros for the other branch's), so that the two
branches of the grad conditional have the same outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl import ops
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor, graph_input, graph_output
from tremula.popxl.transforms.grad_info import ExpectedConnectionType, GradGraphInfo
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


def _grad_args(
    c: GradContext, op: OpNode, g: OutputGrads, branch: Graph, first: int, info: GradGraphInfo
) -> list[Tensor]:
    """The grad graph's inputs at the conditional: output gradients and forward values."""
    args = []
    for conn in info.expected_inputs:
        t = conn.fwd_tensor
        j = next((k for k, o in enumerate(branch.outputs) if o is t), None)
        i = next((k for k, x in enumerate(branch.inputs) if x is t), None)
        if conn.connection_type is ExpectedConnectionType.FwdGrad:
            if j is not None and j < len(g):
                args.append(g[j])
            else:  # an output autodiff has just added: no gradient
                args.append(ops.init(t.shape, t.dtype, "zero_grad"))
        elif i is not None:
            args.append(c.fwd(op.inputs[first + i]))
        elif j is not None:
            args.append(c.fwd(op.outputs[j]))
        else:
            raise ValueError(
                f"autodiff: {info.graph.name!r} expects {t.id!r}, neither an input nor an "
                f"output of {branch.name!r}"
            )
    return args


def _wrapper(
    op: OpNode,
    branch: Graph,
    first: int,
    info: GradGraphInfo,
    args: list[Tensor],
    wanted: list[int],
) -> Graph:
    """A graph calling ``info.graph`` that returns the gradients of the conditional's
    inputs ``wanted`` (zeros for those not of this branch)."""
    names = {g.name for g in op.graph.ir.graphs}
    name, n = f"{info.graph.name}_select", 0
    while name in names:
        n += 1
        name = f"{info.graph.name}_select_{n}"
    wrapper = op.graph.ir.create_empty_graph(name)
    with wrapper:
        ins = [graph_input(a.shape, a.dtype, a.name) for a in args]
        outs = ops.call(info.graph, *ins)
        by_input = {id(conn.fwd_tensor): o for conn, o in zip(info.expected_outputs, outs)}
        for i in wanted:
            k = i - first
            mine = 0 <= k < len(branch.inputs)
            o = by_input.get(id(branch.inputs[k])) if mine else None
            t = op.inputs[i]
            graph_output(o if o is not None else ops.init(t.shape, t.dtype, "zero_grad"))
    return wrapper


@grad("If")
def _conditional(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    then_g, else_g = op.attrs["graphs"]
    firsts = (1, 1 + len(then_g.inputs))
    infos = [c.grad_info(b) for b in (then_g, else_g)]  # may give the conditional outputs
    wanted = [i for i in range(1, len(op.inputs)) if need[i]]
    args = [_grad_args(c, op, g, b, f, info) for b, f, info in zip((then_g, else_g), firsts, infos)]
    wrappers = [
        _wrapper(op, b, f, info, a, wanted)
        for b, f, info, a in zip((then_g, else_g), firsts, infos, args)
    ]
    outs = ops.conditional(
        c.fwd(op.inputs[0]), wrappers[0], wrappers[1], then_inputs=args[0], else_inputs=args[1]
    )
    result: list[Tensor | None] = [None] * len(op.inputs)
    for i, o in zip(wanted, outs):
        result[i] = o
    return result
