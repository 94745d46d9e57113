"""Lowering of ``popxl/ops/var_updates``: each update writes its
first input in place, as PopART's var-update Opx do.

* ``Accumulate``: Add / DampenedAdd of float data are ``popops.scaled_add_to`` (PopLibs'
  ``scaledAddTo``); the other accumulation types, and integer data, one fused
  ``popops.map_in_place`` expression. ``X`` and a Tensor factor are cast to ``t``'s dtype.
* ``AccumulatorScale``: ``t *= f`` (a constant 0: ``popops.zero``).
* ``SparseAccumulate``: ``popops.multi_update_add`` of ``X``'s rows into ``t`` along the axis.
* ``AdamUpdater``: the time step incremented in place, then one expression for the update
  term (bias corrections computed per element from the scalars, in float32).
* ``AdamVarUpdate``: the trust ratio (a float32 scalar), then ``t -= lr * ratio * x``.

A constant factor of 0 for DampenedAdd / DampenedAddSquare, and a constant
``max_weight_norm`` of 0, are refused as PopART refuses them when it lowers the op.
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.errors import PopartInternalException
from tremula.libs import popops
from tremula.libs.popops import expr as pe
from tremula.lowering.driver import Env, Lowerer, rule
from tremula.popxl.ops.base import OpNode
from tremula.popxl.ops.var_updates.accumulate import check_update_operand
from tremula.popxl.ops.var_updates.adam_updater import MODES

F32 = poplar.FLOAT


class Terms:
    """The inputs of one ``popops.map`` expression and the terms that read them: a Tensor
    role is a placeholder (cast to the type asked for), a constant role a ``Const``."""

    def __init__(self, op: OpNode, env: Env) -> None:
        self.op, self.env = op, env
        self.inputs: list[poplar.Tensor] = []

    def add(self, t: poplar.Tensor, dtype: poplar.Type) -> pe.Expr:
        if t.num_elements == 1 and t.rank:  # one-element hyper-parameters broadcast
            t = t.reshape(())
        self.inputs.append(t)
        ph = pe.PlaceHolder(len(self.inputs))
        return ph if t.dtype is dtype else pe.Cast(ph, dtype)

    def role(self, role: str, dtype: poplar.Type) -> pe.Expr | None:
        slot = self.op.attrs["slots"].get(role)
        if slot is not None:
            return self.add(self.env[self.op.inputs[slot]], dtype)
        value = self.op.attrs["values"].get(role)
        return None if value is None else pe.Const(value, dtype)

    def tensor(self, role: str) -> poplar.Tensor:
        return self.env[self.op.inputs[self.op.attrs["slots"][role]]]


def _refuse_zero(op: OpNode, role: str, why: str) -> None:
    if role not in op.attrs["slots"] and op.attrs["values"].get(role) == 0:
        raise PopartInternalException(
            f"{op.type} {op.outputs[0].id!r}: a constant {role} of 0 is not allowed ({why}); "
            f"PopART refuses it when lowering the op"
        )


def _cast(lw: Lowerer, t: poplar.Tensor, dtype: poplar.Type, prog: poplar.Sequence) -> Any:
    return t if t.dtype is dtype else popops.cast(lw.graph, t, dtype, prog)


#: accumulation type -> the new t from t, X and the factor f (placeholder terms)
_EXPRESSIONS = {
    "Add": lambda t, x, f: t + x,
    "DampenedAdd": lambda t, x, f: t + f * x,
    "DampenedAddSquare": lambda t, x, f: t + f * x * x,
    "Mean": lambda t, x, s: t * (s / (s + 1)) + x / (s + 1),
    "MovingAverage": lambda t, x, f: f * t + (1 - f) * x,
    "MovingAverageSquare": lambda t, x, f: f * t + (1 - f) * x * x,
}


@rule("Accumulate")
def accumulate(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    check_update_operand(op)
    kind, terms = op.attrs["type"], Terms(op, env)
    t = terms.tensor("t")
    name = op.outputs[0].id
    if kind in ("DampenedAdd", "DampenedAddSquare"):
        _refuse_zero(op, "f", "factor of 0 for a dampened accumulation")
    if kind in ("Add", "DampenedAdd") and t.dtype.numpy.kind == "f":
        x = _cast(lw, terms.tensor("X"), t.dtype, prog)
        f: Any = op.attrs["values"].get("f", 1.0)
        if "f" in op.attrs["slots"]:
            scale_type = F32 if t.dtype is poplar.HALF else t.dtype
            f = _cast(lw, terms.tensor("f").reshape((1,)), scale_type, prog)
        popops.scaled_add_to(lw.graph, t, x, f, prog, name=name)
    else:
        tt = terms.add(t, t.dtype)
        x = terms.role("X", t.dtype)
        f = terms.role("f", t.dtype)
        e = _EXPRESSIONS[kind](tt, x, f)
        popops.map_in_place(lw.graph, e, terms.inputs, prog, name=name)
    env[op.outputs[0]] = t


@rule("AccumulatorScale")
def accumulator_scale(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    terms = Terms(op, env)
    t = terms.tensor("t")
    name = op.outputs[0].id
    if "f" not in op.attrs["slots"] and op.attrs["values"]["f"] == 0:
        popops.zero(lw.graph, t, prog, name=name)
    else:
        tt = terms.add(t, t.dtype)
        popops.map_in_place(lw.graph, tt * terms.role("f", t.dtype), terms.inputs, prog, name=name)
    env[op.outputs[0]] = t


@rule("SparseAccumulate")
def sparse_accumulate(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    """``X`` (the gathered shape) becomes one row per index of ``t``'s axis moved first."""
    terms, axis, name = Terms(op, env), op.attrs["axis"], op.outputs[0].id
    t, x, idx = terms.tensor("t"), terms.tensor("X"), terms.tensor("indices")
    n = idx.num_elements
    table = t.dim_roll(axis, 0)
    width = table.num_elements // table.shape[0] if table.shape[0] else 0
    rows = x.reshape((*t.shape[:axis], n, *t.shape[axis + 1 :])).dim_roll(axis, 0)
    rows = _cast(lw, rows.reshape((n, width)), t.dtype, prog)
    if idx.dtype not in (poplar.INT, poplar.UNSIGNED_INT):
        idx = popops.cast(lw.graph, idx, poplar.INT, prog)
    f: Any = op.attrs["values"].get("f", 1.0)
    if "f" in op.attrs["slots"]:
        scale_type = F32 if t.dtype is poplar.HALF else t.dtype
        f = _cast(lw, terms.tensor("f").reshape((1,)), scale_type, prog)
    popops.multi_update_add(
        lw.graph, table.reshape((table.shape[0], width)), idx.flatten(), rows, f, prog, name=name
    )
    env[op.outputs[0]] = t


@rule("CopyVarUpdate")
def copy_var_update(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    check_update_operand(op)
    t = env[op.inputs[0]]
    prog.add(poplar.Copy(env[op.inputs[1]], t))
    env[op.outputs[0]] = t


def _bias_corrections(op: OpNode, terms: Terms) -> tuple[Any, Any]:
    """``(c1, c2)`` float32 terms (1 without bias correction; ``c2`` 1 for AdaMax)."""
    bias, adamax = MODES[op.attrs["mode"]]
    if not bias:
        return 1.0, 1.0
    step = terms.role("step", F32)
    c1 = pe.Const(1.0, F32) - pe.Pow(terms.role("beta1", F32), step)
    c2 = 1.0 if adamax else pe.Const(1.0, F32) - pe.Pow(terms.role("beta2", F32), step)
    return c1, c2


def _as(e: Any, dtype: poplar.Type) -> Any:
    return e if isinstance(e, float) else pe.Cast(e, dtype)


@rule("AdamUpdater")
def adam_updater(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    name, terms = op.outputs[0].id, Terms(op, env)
    if "step" in op.attrs["slots"]:  # t <- t + 1, first
        step = terms.tensor("step")
        popops.map_in_place(lw.graph, pe.PlaceHolder(1) + 1, [step], prog, name=f"{name}/step")
    m_t, v_t = terms.tensor("m"), terms.tensor("v")
    dtype = v_t.dtype  # the update is computed in v's type
    m = terms.add(m_t, m_t.dtype)
    v = terms.add(v_t, dtype)
    c1, c2 = _bias_corrections(op, terms)
    mc = m / _as(c1, m_t.dtype) if not isinstance(c1, float) else m
    mc = mc if m_t.dtype is dtype else pe.Cast(mc, dtype)
    eps = terms.role("epsilon", dtype)
    if MODES[op.attrs["mode"]][1]:  # AdaMax
        x = mc / (v + eps)
    else:
        vc = v / _as(c2, dtype) if not isinstance(c2, float) else v
        x = mc / (pe.Sqrt(vc) + eps)
    if "w" in op.attrs["slots"]:
        x = x + terms.role("weight_decay", dtype) * terms.role("w", dtype)  # type: ignore[operator]
    out_type = op.outputs[0].dtype.as_poplar()
    x = x if out_type is dtype else pe.Cast(x, out_type)
    env[op.outputs[0]] = popops.map(lw.graph, x, terms.inputs, prog, name=name)


@rule("AdamVarUpdate")
def adam_var_update(lw: Lowerer, op: OpNode, env: Env, prog: poplar.Sequence) -> None:
    name = op.outputs[0].id
    _refuse_zero(op, "max_weight_norm", "a max_weight_norm of 0")
    ratio_terms = Terms(op, env)
    r1, r2 = ratio_terms.role("r1", F32), ratio_terms.role("r2", F32)
    n1, zero = pe.Sqrt(r1), pe.Const(0.0, F32)
    forced = pe.Or(pe.Equal(r1, zero), pe.Equal(r2, zero))
    mwn = ratio_terms.role("max_weight_norm", F32)
    if mwn is not None:
        n1 = pe.Min(n1, mwn)
        if "max_weight_norm" in op.attrs["slots"]:
            forced = pe.Or(forced, pe.Equal(mwn, zero))
    n2 = pe.Select(pe.Const(1.0, F32), pe.Sqrt(r2), forced)  # no division by 0
    ratio_e = pe.Select(pe.Const(1.0, F32), n1 / n2, forced)
    ratio = popops.map(lw.graph, ratio_e, ratio_terms.inputs, prog, name=f"{name}/ratio")
    terms = Terms(op, env)
    t = terms.tensor("t")
    tt = terms.add(t, t.dtype)
    x = terms.role("x", t.dtype)
    scale = terms.role("learning_rate", F32) * terms.add(ratio, F32)
    update = tt - pe.Cast(scale, t.dtype) * x if t.dtype is not F32 else tt - scale * x
    popops.map_in_place(lw.graph, update, terms.inputs, prog, name=name)
    env[op.outputs[0]] = t
