"""Lowering of ``popxl/ops/control.py``: a conditional is a Poplar ``If`` whose two
branches each copy their inputs into the branch graph's function, call it, copy its outputs
into the op's outputs (and modified inputs back to the parent)."""

from __future__ import annotations

from tremula import poplar
from tremula.errors import PopartException
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


def _check_branch_outputs(op: OpNode) -> None:
    then_g, else_g = op.attrs["graphs"]
    for i, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs)):
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            raise PopartException(
                f"conditional {op.outputs[i].id!r}: output {i} is {a.dtype} {a.shape} in "
                f"{then_g.name!r} but {b.dtype} {b.shape} in {else_g.name!r}; both branches "
                f"must produce the then-branch's output infos"
            )


@rule("If")
def conditional(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    _check_branch_outputs(op)
    then_g, else_g = op.attrs["graphs"]
    outs = [lw.new_tensor(o) for o in op.outputs]
    branches = []
    first = 1
    for g in (then_g, else_g):
        sub = lw.subgraph(g)
        body = poplar.Sequence(name=f"{op.outputs[0].id if op.outputs else g.name}/{g.name}")
        parents = range(first, first + len(g.inputs))
        for i, dst in zip(parents, sub.inputs):
            lw.copy(env[op.inputs[i]], dst, body)
        body.add(poplar.Call(sub.function))
        for src, dst in zip(sub.outputs, outs):
            lw.copy(src, dst, body)
        for i in op.modified:
            if i in parents:
                lw.copy(sub.inputs[i - first], env[op.inputs[i]], body)
        branches.append(body)
        first += len(g.inputs)
    prog.add(poplar.If(env[op.inputs[0]].flatten(), branches[0], branches[1]))
    env.update(zip(op.outputs, outs))
