"""Lowering of ``popxl/ops/elementwise.py``: each op onto the popops function its record
names (``Elementwise.popops``; in-place forms onto ``*_in_place``); ops popops has no
name for become fused expressions. A variadic op of one input is a copy; of more, one
binary op per further input (``variadic="pairwise"``, PopART's ``MaxOpx``) or one map of
the left fold over all of them (``"map"``, ``SumOpx``: one compute set)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.libs.popops import ops as popops_ops
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import INPLACE, OpNode
from tremula.popxl.ops.elementwise import BY_OP, TABLE

#: ops that run as a fused popops expression instead of their record's popops function
#: (``Elementwise.popops`` names the function, and the op whose dtypes they take)
EXPRESSIONS: dict[str, Any] = {"Swish": pe._1 * pe.Sigmoid(pe._1)}
#: PopXL op type -> popops function name or expression
POPOPS: dict[str, Any] = {e.op: EXPRESSIONS.get(e.op, e.popops) for e in TABLE}


def left_fold(op_type: str, operands: Sequence[pe.Expr]) -> pe.Expr:
    """The expression ``((x1 op x2) op x3) ...`` of the variadic op ``op_type``."""
    kind = popops_ops.get(POPOPS[op_type]).op
    node = operands[0]
    for x in operands[1:]:
        node = pe.make(kind, node, x)
    return node


def _lower(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    inplace = bool(op.definition.inplace_of)
    base = op.definition.outplace
    target = POPOPS[base]
    variadic = BY_OP[base].variadic
    BY_OP[base].check_dtypes([t.spec for t in op.inputs])  # PopART's ops refuse them here
    args = [env[t] for t in op.inputs]
    name = op.outputs[0].id
    if variadic and len(args) == 1:
        env[op.outputs[0]] = out = lw.new_tensor(op.outputs[0])
        prog.add(poplar.Copy(args[0], out))
        return
    if variadic == "map":
        holders = [pe.PlaceHolder(k + 1) for k in range(len(args))]
        env[op.outputs[0]] = popops.map(lw.graph, left_fold(base, holders), args, prog, name=name)
        return
    if variadic and len(args) > 2:  # ONNX Max of 3+ inputs: one op per further input
        out = args[0]
        for k, arg in enumerate(args[1:]):
            out = getattr(popops, target)(lw.graph, out, arg, prog, name=f"{name}/{k}")
        env[op.outputs[0]] = out
        return
    if isinstance(target, str):
        fn = getattr(popops, target + ("_in_place" if inplace else ""))
        out = fn(lw.graph, *args, prog, name=name)
    elif inplace:
        out = popops.map_in_place(lw.graph, target, args, prog, name=name)
    else:
        out = popops.map(lw.graph, target, args, prog, name=name)
    env[op.outputs[0]] = args[0] if inplace else out


for _e in TABLE:
    rule(_e.op, *([INPLACE[_e.op]] if _e.inplace else []))(_lower)
