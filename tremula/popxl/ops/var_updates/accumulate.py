"""The accumulators of ``popxl.ops.var_updates``: in place on ``t``, each returning a new
tensor that aliases ``t`` (named ``<prefix><t.name>``, as PopXL names it).

* ``accumulate_(t, X, f=None)``: Accumulate (Add, DampenedAdd): ``t += X`` / ``t += f X``.
* ``accumulate_square_(t, X, f=1.0)``: Accumulate (DampenedAddSquare): ``t += f X^2``.
* ``accumulate_mean_(t, X, step)``: Accumulate (Mean): with ``b = 1 / (step + 1)``,
  ``t = (1 - b) t + b X``.
* ``accumulate_moving_average_(t, X, f)``: Accumulate (MovingAverage):
  ``t = f t + (1 - f) X``.
* ``accumulate_moving_average_square_(t, X, f)``: Accumulate (MovingAverageSquare):
  ``t = f t + (1 - f) X^2``.
* ``accumulator_scale_(t, f)``, ``accumulator_zero_(t)``: AccumulatorScale: ``t *= f``.
* ``sparse_accumulate_(t, X, indices, axis=0, f=None, W=None)``: SparseAccumulate:
  ``t[indices along axis] += f X``.
* ``copy_var_update_(t, X)``: CopyVarUpdate: ``t = X``.

``X`` and a Tensor ``f`` may have other dtypes than ``t``: they are cast to ``t``'s dtype
(PopART casts them when it lowers the op). ``f`` and ``step`` are Tensors (one element) or
numbers; a number adds no tensor to the graph, except ``step``, which PopXL always makes a
float32 constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.ops.base import OpNode, defop
from tremula.popxl.ops.shape import norm_axis
from tremula.popxl.ops.var_updates.utils import (
    Hyper,
    Operands,
    checked_inputs,
    create_update,
    operand,
)
from tremula.popxl.tensor import Tensor, TensorSpec, constant

#: accumulation type -> its update of ``t`` from ``X`` and factor ``f`` (float64 NumPy)
ACCUMULATIONS: dict[str, Any] = {
    "Add": lambda t, x, f: t + x,
    "DampenedAdd": lambda t, x, f: t + f * x,
    "DampenedAddSquare": lambda t, x, f: t + f * x * x,
    "Mean": lambda t, x, step: t * (1 - 1 / (step + 1)) + x / (step + 1),
    "MovingAverage": lambda t, x, f: f * t + (1 - f) * x,
    "MovingAverageSquare": lambda t, x, f: f * t + (1 - f) * x * x,
}


def _same(specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    return [specs[0]]


def _wide(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _ref_accumulate(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    t, x = arrays[0], arrays[1]
    x = np.asarray(x).astype(t.dtype)  # X is cast to t's dtype first
    f = operand(attrs, arrays, "f")
    f = 1.0 if f is None else _wide(f).reshape(())
    out = ACCUMULATIONS[attrs["type"]](_wide(t), _wide(x), f)
    return [out.astype(t.dtype)]


def _ref_scale(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    t = arrays[0]
    f = _wide(operand(attrs, arrays, "f")).reshape(())
    return [(_wide(t) * f).astype(t.dtype)]


def _ref_sparse(arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    t, x = arrays[0], np.asarray(arrays[1]).astype(arrays[0].dtype)
    idx = np.asarray(operand(attrs, arrays, "indices")).reshape(-1).astype(np.int64)
    f = operand(attrs, arrays, "f")
    f = 1.0 if f is None else _wide(f).reshape(())
    axis = attrs["axis"]
    out = np.moveaxis(_wide(t).copy(), axis, 0)
    rows = np.moveaxis(_wide(x).reshape(*t.shape[:axis], idx.size, *t.shape[axis + 1 :]), axis, 0)
    keep = (idx >= 0) & (idx < out.shape[0])  # multiUpdateAdd ignores indices out of range
    np.add.at(out, idx[keep], f * rows[keep])
    return [np.moveaxis(out, 0, axis).astype(t.dtype)]


defop("Accumulate", _same, _ref_accumulate, modifies=(0,))
defop("AccumulatorScale", _same, _ref_scale, modifies=(0,), differentiable=False)
defop("SparseAccumulate", _same, _ref_sparse, modifies=(0,), differentiable=False)
defop("CopyVarUpdate", _same, lambda x, a: [np.array(x[1])], modifies=(0,))


def check_update_operand(op: OpNode) -> None:
    """Refuse an ``Accumulate`` or ``CopyVarUpdate`` whose ``X`` (input 1) does not have
    ``t``'s shape (and, for the copy, dtype). The lowering calls it: PopART's var-update ops
    take any operand when made (``VarUpdateOp::setup`` copies input 0's info) and Poplar's
    scaled add / copy refuse a mismatch when the session is built.

    Raises:
        ValueError: naming both tensors.
    """
    t, X = op.inputs[0], op.inputs[1]
    what = "copy_var_update_" if op.type == "CopyVarUpdate" else "accumulate"
    if t.shape != X.shape or (op.type == "CopyVarUpdate" and t.dtype != X.dtype):
        raise ValueError(
            f"{what}: {X.id!r} ({X.dtype} {X.shape}) does not match {t.id!r} ({t.dtype} "
            f"{t.shape}), which it updates"
        )


def _scalar(value: Hyper, what: str, role: str) -> None:
    if isinstance(value, Tensor) and value.nelms != 1:
        raise ValueError(
            f"{what}: {role} {value.id!r} must have one element, got shape {value.shape}"
        )


def _required(value: Hyper, what: str, role: str) -> Tensor | float:
    if value is None:
        raise TypeError(f"{what}: {role} must be a popxl.Tensor or a number, got None")
    return value


def _accumulate(
    what: str, prefix: str, kind: str, t: Tensor, X: Tensor, f: Hyper, default: float = 1.0
) -> Tensor:
    checked_inputs(t=t, X=X, **({"f": f} if isinstance(f, Tensor) else {}))
    _scalar(f, what, "f")
    o = Operands(what)
    o.tensor("t", t)
    o.tensor("X", X)
    if kind != "Add":
        o.hyper("f", f, default)
    return create_update("Accumulate", o, prefix + t.name, type=kind)


def accumulate_(t: Tensor, X: Tensor, f: Hyper = None) -> Tensor:
    """``t += X`` (``f`` None) or ``t += f * X``, in place.

    Args:
        t: the accumulator.
        X: the values added (``t``'s shape; cast to ``t``'s dtype).
        f: None, a number or a one-element Tensor.

    Returns:
        ``accumulate__<t.name>``, an alias of the updated ``t``.

    Raises:
        TypeError: ``t`` or ``X`` is not a Tensor, or ``f`` neither a Tensor nor a number.
        ValueError: a tensor of another graph, ``f`` of more than one element, or tensors
            on different IPUs / tile sets; when the session lowers it, ``X`` not of ``t``'s
            shape (PopART's op takes any operand when made).
    """
    kind = "Add" if f is None else "DampenedAdd"
    return _accumulate("accumulate_", "accumulate__", kind, t, X, f)


def accumulate_square_(t: Tensor, X: Tensor, f: Hyper = 1.0) -> Tensor:
    """``t += f * X^2``, in place; returns ``accumulate_square__<t.name>``. Arguments and
    errors as :func:`accumulate_`."""
    return _accumulate("accumulate_square_", "accumulate_square__", "DampenedAddSquare", t, X, f)


def accumulate_mean_(t: Tensor, X: Tensor, step: Tensor | float) -> Tensor:
    """The running mean after ``step`` earlier values: with ``b = 1 / (step + 1)``,
    ``t = (1 - b) * t + b * X``, in place; returns ``accumulate_mean__<t.name>``.

    ``step`` is a one-element Tensor or a number (made a float32 constant, as PopXL does).
    Errors as :func:`accumulate_`.
    """
    what = "accumulate_mean_"
    step = _required(step, what, "step")
    if not isinstance(step, Tensor):
        step = constant(float(step), dtypes.float32, "step")
    return _accumulate(what, "accumulate_mean__", "Mean", t, X, step)


def accumulate_moving_average_(t: Tensor, X: Tensor, f: Tensor | float) -> Tensor:
    """``t = f * t + (1 - f) * X``, in place; returns ``accumulate_moving_avg__<t.name>``.
    Errors as :func:`accumulate_`."""
    what = "accumulate_moving_average_"
    f = _required(f, what, "f")
    return _accumulate(what, "accumulate_moving_avg__", "MovingAverage", t, X, f)


def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Tensor | float) -> Tensor:
    """``t = f * t + (1 - f) * X^2``, in place; returns
    ``accumulate_moving_avg_square__<t.name>``. Errors as :func:`accumulate_`."""
    what = "accumulate_moving_average_square_"
    f = _required(f, what, "f")
    return _accumulate(what, "accumulate_moving_avg_square__", "MovingAverageSquare", t, X, f)


def accumulator_scale_(t: Tensor, f: Tensor | float) -> Tensor:
    """``t *= f``, in place (a constant 0 zeroes ``t``); returns
    ``accumulator_scale__<t.name>``.

    Raises:
        TypeError, ValueError: as :func:`accumulate_`.
    """
    what = "accumulator_scale_"
    f = _required(f, what, "f")
    checked_inputs(t=t, **({"f": f} if isinstance(f, Tensor) else {}))
    _scalar(f, what, "f")
    o = Operands(what)
    o.tensor("t", t)
    o.hyper("f", f)
    return create_update("AccumulatorScale", o, "accumulator_scale__" + t.name)


def accumulator_zero_(t: Tensor) -> Tensor:
    """``t = 0``, in place: :func:`accumulator_scale_` with ``f = 0``."""
    return accumulator_scale_(t, 0.0)


def sparse_accumulate_(
    t: Tensor,
    X: Tensor,
    indices: Tensor,
    axis: int = 0,
    f: Hyper = None,
    W: Tensor | None = None,
) -> Tensor:
    """``t[indices along axis] += f * X`` in place (``f`` None: 1), the transpose of
    ``ops.gather(t, indices, axis)``: ``X`` has the gathered shape ``t.shape[:axis] +
    indices.shape + t.shape[axis + 1:]``. Repeated indices add up; indices outside
    ``[0, t.shape[axis])`` are ignored (as PopLibs' ``multiUpdateAdd``). ``W`` only names
    a tensor whose layout ``t`` should follow; it does not change the values.

    Returns:
        ``sparse_accumulate__<t.name>``, an alias of the updated ``t``.

    Raises:
        TypeError: a non-Tensor input, or integer ``indices`` missing.
        ValueError: ``X`` not of the gathered shape, a bad ``axis``, and as
            :func:`accumulate_`.
    """
    what = "sparse_accumulate_"
    extra = {"f": f} if isinstance(f, Tensor) else {}
    checked_inputs(t=t, X=X, indices=indices, W=W, **extra)
    if not indices.dtype.is_int:
        raise TypeError(f"{what}: indices {indices.id!r} must be integers, got {indices.dtype}")
    ax = norm_axis(axis, t.rank, what, repr(t.id))
    want = (*t.shape[:ax], *indices.shape, *t.shape[ax + 1 :])
    if X.shape != want:
        raise ValueError(
            f"{what}: {X.id!r} has shape {X.shape}; rows of {t.id!r} {t.shape} at "
            f"{indices.id!r} {indices.shape} along axis {ax} have shape {want}"
        )
    _scalar(f, what, "f")
    o = Operands(what)
    o.tensor("t", t)
    o.tensor("X", X)
    o.hyper("f", f, 1.0)
    o.tensor("indices", indices)
    if W is not None:
        o.tensor("W", W)
    kind = "Add" if f is None else "DampenedAdd"
    return create_update("SparseAccumulate", o, "sparse_accumulate__" + t.name, type=kind, axis=ax)


def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """``t = X``, in place; returns ``updated__<t.name>``.

    Raises:
        TypeError: a non-Tensor input.
        ValueError: a tensor of another graph; when the session lowers it, ``X``'s shape or
            dtype not ``t``'s (PopART's op takes any when made).
    """
    what = "copy_var_update_"
    checked_inputs(t=t, X=X)
    o = Operands(what)
    o.tensor("t", t)
    o.tensor("X", X)
    return create_update("CopyVarUpdate", o, "updated__" + t.name)
