"""Gradient rules of ``popxl/ops/call.py``: a call's gradient is a call of the called
graph's grad graph."""

from __future__ import annotations

from collections.abc import Sequence

from tremula.popxl import ops
from tremula.popxl.ops.base import OpNode
from tremula.popxl.tensor import Tensor
from tremula.popxl.transforms.grad_info import ExpectedConnectionType
from tremula.popxl.transforms.grads.base import GradContext, Grads, OutputGrads, grad


@grad("Call")
def _call(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    """Call the called graph's grad graph (made once, by ``autodiff`` of it); that may give
    the called graph, and so this call, more outputs (the forward values its grad reads)."""
    sub = op.attrs["graphs"][0]
    info = c.grad_info(sub)
    out_index = {id(t): j for j, t in enumerate(sub.outputs)}
    in_index = {id(t): i for i, t in enumerate(sub.inputs)}
    args: list[Tensor] = []
    for conn in info.expected_inputs:
        t = conn.fwd_tensor
        j = out_index.get(id(t))
        if conn.connection_type is ExpectedConnectionType.FwdGrad:
            if j is not None and j < len(g):
                args.append(g[j])
            else:  # an output autodiff has just added: no gradient
                args.append(ops.init(t.shape, t.dtype, "zero_grad"))
        elif id(t) in in_index:
            args.append(c.fwd(op.inputs[in_index[id(t)]]))
        elif j is not None:
            args.append(c.fwd(op.outputs[j]))
        else:
            raise ValueError(
                f"autodiff: the grad graph {info.graph.name!r} expects {t.id!r}, which is "
                f"neither an input nor an output of {sub.name!r}"
            )
    outs = ops.call(info.graph, *args)
    result: list[Tensor | None] = [None] * len(op.inputs)
    for conn, o in zip(info.expected_outputs, outs):
        i = in_index.get(id(conn.fwd_tensor))
        if i is not None and need[i]:
            result[i] = o
    return result


@grad("Repeat")
def _repeat(c: GradContext, op: OpNode, g: OutputGrads, need: Sequence[bool]) -> Grads:
    raise NotImplementedError(
        f"autodiff: differentiating through ops.repeat ({op!r}, body "
        f"{op.attrs['graphs'][0].name!r}) is not supported; differentiate the body graph "
        f"and repeat its grad graph instead"
    )
