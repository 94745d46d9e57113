"""Lowering of ``popxl/ops/call.py``: a call copies the inputs into the subgraph's input
tensors, calls its function, and copies the outputs out (and modified inputs back); a
repeat loops the call, copying each output back into its loop-carried input."""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.context import Env, Lowerer, rule
from tremula.popxl.ops.base import Op


def _copy_in(lw: Lowerer, op: Op, env: Env, inputs: list, prog: poplar.Sequence) -> None:
    for parent, dst in zip(op.inputs, inputs):
        lw.copy(env[parent], dst, prog)


def _copy_back(lw: Lowerer, op: Op, env: Env, inputs: list, prog: poplar.Sequence) -> None:
    for i in op.modified:
        lw.copy(inputs[i], env[op.inputs[i]], prog)


@rule("Call")
def call(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    sub = lw.subgraph(op.attrs["graphs"][0])
    _copy_in(lw, op, env, sub.inputs, prog)
    prog.add(poplar.Call(sub.function))
    for out, src in zip(op.outputs, sub.outputs):
        env[out] = lw.new_tensor(out)
        lw.copy(src, env[out], prog)
    _copy_back(lw, op, env, sub.inputs, prog)


@rule("Repeat")
def repeat(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    sub = lw.subgraph(op.attrs["graphs"][0])
    _copy_in(lw, op, env, sub.inputs, prog)
    body = poplar.Sequence([poplar.Call(sub.function)])
    carried = []
    for i, src in enumerate(sub.outputs):  # through temporaries: outputs may alias inputs
        tmp = lw.new_tensor(op.outputs[i], name=f"{op.outputs[i].id}/carry")
        lw.copy(src, tmp, body)
        carried.append(tmp)
    for i, tmp in enumerate(carried):
        lw.copy(tmp, sub.inputs[i], body)
    prog.add(poplar.Repeat(op.attrs["count"], body))
    for i, out in enumerate(op.outputs):
        env[out] = lw.new_tensor(out)
        lw.copy(sub.inputs[i], env[out], prog)
    _copy_back(lw, op, env, sub.inputs, prog)
