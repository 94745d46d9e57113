"""Lowering of ``popxl/ops/shape.py``: ``Concat`` copies the concatenated view of its inputs
into a new tensor, ``ConcatInplace`` binds the view itself (writes reach the inputs).
``Split`` is one view per part, each copied unless the copy is unobservable (as a
``Slice``). (``slice``, ``subsample`` and ``squeeze`` create ``Slice`` / ``Subsample`` /
``Reshape`` ops, lowered in ``tensor_ops.py``.)"""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.lowering.tensor_ops import copy_unobservable
from tremula.popxl.ops.base import OpNode


@rule("Concat", "ConcatInplace")
def concat(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    view = poplar.concat([env[t] for t in op.inputs], op.attrs["axis"])
    if op.definition.view:
        env[op.outputs[0]] = view
        return
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(view, out))
    env[op.outputs[0]] = out


@rule("Split")
def split(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    t = env[op.inputs[0]]
    for k, (out, key) in enumerate(zip(op.outputs, op.attrs["keys"])):
        if copy_unobservable(op, k):
            env[out] = t[key]  # no copy: no one can tell the difference
            continue
        env[out] = lw.new_tensor(out)
        prog.add(poplar.Copy(t[key], env[out]))
