"""Lowering of ``popxl/ops/shape.py``: ``Concat`` copies the concatenated view of its inputs
into a new tensor, ``ConcatInplace`` binds the view itself (writes reach the inputs).
(``slice``, ``subsample``, ``split`` and ``squeeze`` create ``Slice`` / ``Reshape`` ops,
lowered in ``tensor_ops.py``.)"""

from __future__ import annotations

from tremula import poplar
from tremula.lowering.context import Env, Lowerer, rule
from tremula.popxl.ops.base import Op


@rule("Concat", "ConcatInplace")
def concat(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    view = poplar.concat([env[t] for t in op.inputs], op.attrs["axis"])
    if op.type == "ConcatInplace":
        env[op.outputs[0]] = view
        return
    out = lw.new_tensor(op.outputs[0])
    prog.add(poplar.Copy(view, out))
    env[op.outputs[0]] = out
