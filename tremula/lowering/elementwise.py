"""Lowering of ``popxl/ops/elementwise.py``: each op onto a popops function (in-place forms
onto ``*_in_place``); ops popops has no name for become fused expressions."""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.context import Env, Lowerer, rule
from tremula.popxl.ops.base import Op
from tremula.popxl.ops.elementwise import TABLE

#: PopXL op type -> popops function name or expression
POPOPS: dict[str, Any] = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Fmod": "rem",
    "Atan2": "atan2",
    "Max": "max",
    "Min": "min",
    "Equal": "eq",
    "Greater": "gt",
    "Less": "lt",
    "And": "logical_and",
    "Or": "logical_or",
    "Not": "logical_not",
    "Neg": "neg",
    "Abs": "abs",
    "Sqrt": "sqrt",
    "Exp": "exp",
    "Log": "log",
    "Log2": "log2",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Erf": "erf",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Relu": "relu",
    "Gelu": "gelu",
    "GeluErf": "gelu_erf",
    "Swish": pe._1 * pe.Sigmoid(pe._1),
    "Ceil": "ceil",
    "Floor": "floor",
    "Sign": "sign",
    "IsNaN": "is_nan",
    "IsInf": "is_inf",
    "IsFinite": "is_finite",
}


def _lower(lw: Lowerer, op: Op, env: Env, prog: poplar.Sequence) -> None:
    inplace = op.type.endswith("Inplace")
    base = op.type.removesuffix("Inplace")
    target = POPOPS[base]
    args = [env[t] for t in op.inputs]
    name = op.outputs[0].id
    if isinstance(target, str):
        fn = getattr(popops, target + ("_in_place" if inplace else ""))
        out = fn(lw.graph, *args, prog, name=name)
    elif inplace:
        out = popops.map_in_place(lw.graph, target, args, prog, name=name)
    else:
        out = popops.map(lw.graph, target, args, prog, name=name)
    env[op.outputs[0]] = args[0] if inplace else out


for _e in TABLE:
    rule(*([_e.op, _e.op + "Inplace"] if _e.inplace else [_e.op]))(_lower)
