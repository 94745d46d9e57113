"""Lowering of ``grad_reduce_square_add.py`` as its C++ Opx grows it: one
``popops.reduce`` of the flattened input with ``SQUARE_ADD`` into float, then the scale
tensor applied by a ``popops.map`` (Tremula's reduction takes number scales only; PopLibs
applies a tensor scale in the reduction's last stage: one small compute set more here).
Cycles and memory are popops' estimates; compute sets carry the op's debug name."""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.popxl.ops.base import OpNode


def grad_reduce_square_add(lw: Any, op: OpNode, env: Any, prog: poplar.Sequence) -> None:
    t, scale = (env[i] for i in op.inputs)
    name = lw.name(op.debug_name)
    total = popops.reduce(
        lw.graph, t.flatten(), [0], popops.Operation.SQUARE_ADD, prog,
        name=f"{name}/GradReduceSquareAddOpx", out_dtype=poplar.FLOAT,
    )  # fmt: skip
    s = scale.reshape(())
    factor = pe._2 if s.dtype is poplar.FLOAT else pe.Cast(pe._2, poplar.FLOAT)
    env[op.outputs[0]] = popops.map(
        lw.graph, pe._1 * factor, [total, s], prog, name=f"{name}/scale"
    )


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {"GradReduceSquareAdd": grad_reduce_square_add}
