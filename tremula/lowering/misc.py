"""Lowering of ``popxl/ops/misc.py``: ``where``, ``clip`` and ``increment_mod`` as popops
maps (in place for the ``_`` forms), ``scaled_add`` through popops' ``scaled_add_to`` /
``a_x_plus_b_y``. (``maximum`` creates ``Max`` ops, lowered in ``elementwise.py``.)"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode


@rule("Where")
def where(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    cond, lhs, rhs = (env[t] for t in op.inputs)
    env[op.outputs[0]] = popops.map(
        lw.graph, pe.Select(pe._2, pe._3, pe._1), [cond, lhs, rhs], prog, name=op.outputs[0].id
    )


@rule("Clip")
def clip(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    e: Any = pe._1
    if op.attrs["min"] is not None:
        e = pe.Max(e, op.attrs["min"])
    if op.attrs["max"] is not None:
        e = pe.Min(e, op.attrs["max"])
    t = env[op.inputs[0]]
    if e is pe._1:
        out = lw.new_tensor(op.outputs[0])
        prog.add(poplar.Copy(t, out))
    else:
        out = popops.map(lw.graph, e, [t], prog, name=op.outputs[0].id)
    env[op.outputs[0]] = out


def _scale_tensor(lw: Lowerer, s: poplar.Tensor, data: poplar.Type, prog: poplar.Sequence):
    """A one-element scale of the data's type (float stays float for half data)."""
    s = s.reshape((1,))
    if s.dtype is data or (data is poplar.HALF and s.dtype is poplar.FLOAT):
        return s
    return popops.cast(lw.graph, s, data, prog, name="scaled_add/scale")


@rule("ScaledAdd", "ScaledAddInplace")
def scaled_add(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    x, y, *rest = (env[t] for t in op.inputs)
    shape = op.outputs[0].shape
    if op.definition.inplace_of:
        out = x
    else:
        out = lw.new_tensor(op.outputs[0])
        prog.add(poplar.Copy(x if x.shape == shape else x.broadcast_to(shape), out))
    y = y if y.shape == shape else y.broadcast_to(shape)
    scales = []
    for key in ("a", "b"):
        value = op.attrs[key]
        if value is not None and x.dtype.is_integral and value != int(value):
            what = "scaled_add_" if op.definition.inplace_of else "scaled_add"
            raise ValueError(
                f"{what}: {key}={value!r} must be an integer for {op.inputs[0].dtype} data"
            )
        scales.append(value if value is not None else _scale_tensor(lw, rest.pop(0), x.dtype, prog))
    a, b = scales
    name = op.outputs[0].id
    if y.dtype is not x.dtype:
        env[op.outputs[0]] = _mixed_scaled_add(lw, out, y, a, b, prog, name)
        return
    if isinstance(a, float) and a == 1.0:
        popops.scaled_add_to(lw.graph, out, y, b, prog, name=name)
    else:
        popops.a_x_plus_b_y(lw.graph, out, a, y, b, prog, name=name)
    env[op.outputs[0]] = out


def _mixed_scaled_add(
    lw: Lowerer,
    out: poplar.Tensor,
    y: poplar.Tensor,
    a: float | poplar.Tensor,
    b: float | poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """``out = a out + b y`` where ``out`` and ``y`` are half and float (either way round):
    computed in float and rounded once to ``out``'s type, as PopLibs' mixed-precision
    scaledAddTo; one element-wise map (its cost is the map's)."""
    ins: list[poplar.Tensor] = [out, y]
    terms: list[Any] = []
    for s in (a, b):
        if isinstance(s, poplar.Tensor):
            ins.append(s.broadcast_to(out.shape) if s.shape != out.shape else s)
            terms.append(pe.Cast(pe.PlaceHolder(len(ins)), poplar.FLOAT))
        else:
            terms.append(float(s))
    e = terms[0] * pe.Cast(pe._1, poplar.FLOAT) + terms[1] * pe.Cast(pe._2, poplar.FLOAT)
    return popops.map_in_place(lw.graph, pe.Cast(e, out.dtype), ins, prog, name=f"{name}/mixed")


@rule("IncrementMod", "IncrementModInplace")
def increment_mod(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    e = pe.Rem(pe._1 + op.attrs["increment"], op.attrs["modulus"])
    t, name = env[op.inputs[0]], op.outputs[0].id
    if op.definition.inplace_of:
        env[op.outputs[0]] = popops.map_in_place(lw.graph, e, [t], prog, name=name)
    else:
        env[op.outputs[0]] = popops.map(lw.graph, e, [t], prog, name=name)
