"""Element-wise ops with attributes or several forms: ``where``, ``clip`` / ``clamp``,
``maximum`` (of any number of tensors), ``scaled_add`` / ``scaled_add_`` and
``increment_mod`` / ``increment_mod_``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import OpSetupTypeError
from tremula.popxl import dtypes
from tremula.popxl.ops.base import check_in_current_graph, create_op, definplace, defop
from tremula.popxl.ops.elementwise import broadcast_shape
from tremula.popxl.ops.shape import check_tensor, require_numeric
from tremula.popxl.ops.utils import check_tensor_ipu_and_tile_set
from tremula.popxl.tensor import Tensor, TensorSpec, constant

# ---- where ----


def _where_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    cond, lhs, rhs = specs
    if lhs.dtype != rhs.dtype:
        raise OpSetupTypeError(f"where: lhs is {lhs.dtype}, rhs is {rhs.dtype}; they must match")
    shape = broadcast_shape([cond.shape, lhs.shape, rhs.shape], "where")
    return [TensorSpec(shape, lhs.dtype)]


defop("Where", _where_spec, lambda x, a: [np.where(x[0], x[1], x[2])])


def where(condition: Tensor, lhs: Tensor | Any, rhs: Tensor | Any) -> Tensor:
    """``lhs`` where ``condition`` holds, else ``rhs``, with NumPy broadcasting. A number or
    host array for ``lhs`` / ``rhs`` becomes a constant of the other operand's dtype; a
    non-bool condition is cast to bool.

    Raises:
        TypeError: neither operand is a tensor, or their dtypes differ (then
            ``popart.popart_exception`` too, as PopART's op setup raises it).
        ValueError: shapes that do not broadcast.
    """
    check_tensor(condition, "where", "condition")
    if not isinstance(lhs, Tensor) and not isinstance(rhs, Tensor):
        raise TypeError("where: lhs or rhs must be a popxl.Tensor")
    given = {n: x for n, x in (("lhs", lhs), ("rhs", rhs)) if isinstance(x, Tensor)}
    check_in_current_graph("where", **given)
    check_tensor_ipu_and_tile_set(condition=condition, **given)  # before adding anything
    if not isinstance(lhs, Tensor):
        lhs = constant(lhs, rhs.dtype, name="lhs")
    if not isinstance(rhs, Tensor):
        rhs = constant(rhs, lhs.dtype, name="rhs")
    if condition.dtype != dtypes.bool:
        from tremula.popxl.ops.tensor_ops import cast

        condition = cast(condition, dtypes.bool)
    (out,) = create_op("Where", [condition, lhs, rhs])
    return out


# ---- clip ----


def _clip_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0]
    if a["min"] is not None:
        v = np.maximum(v, np.asarray(a["min"]).astype(v.dtype))
    if a["max"] is not None:
        v = np.minimum(v, np.asarray(a["max"]).astype(v.dtype))
    return [np.asarray(v)]


defop("Clip", lambda specs, a: [specs[0]], _clip_ref)


def _bound(t: Tensor, value: float | None, default: float) -> float | int | None:
    if value is None or value == default:
        return None
    if t.dtype.is_int:
        info = np.iinfo(t.dtype.as_numpy())
        return int(
            min(max(math.ceil(value) if default < 0 else math.floor(value), info.min), info.max)
        )
    return float(value)


def clip(t: Tensor, min: float | None = float("-inf"), max: float | None = float("inf")) -> Tensor:
    """``t`` clamped to ``[min, max]`` (``max`` wins if ``min > max``); NaN propagates.

    Raises:
        TypeError: ``t`` is not a float or integer tensor.
    """
    check_tensor(t, "clip")
    require_numeric(t, "clip")
    attrs = {"min": _bound(t, min, float("-inf")), "max": _bound(t, max, float("inf"))}
    (out,) = create_op("Clip", [t], attrs)
    return out


clamp = clip

# ---- maximum ----


def maximum(*ts: Tensor) -> Tensor:
    """The element-wise maximum of one or more tensors of one dtype, with broadcasting: one
    ``Max`` op taking them all (ONNX's variadic ``Max``, as PopXL makes it; one tensor
    gives a copy).

    Raises:
        ValueError: no tensors, or shapes that do not broadcast.
        TypeError: dtypes that differ.
    """
    if not ts:
        raise ValueError("maximum: needs at least one tensor")
    for i, t in enumerate(ts):
        check_tensor(t, "maximum", f"ts[{i}]")
    if len(ts) > 1:
        check_tensor_ipu_and_tile_set(**{f"t{i}": t for i, t in enumerate(ts)})
    (out,) = create_op("Max", list(ts))
    return out


# ---- scaled_add ----


#: the types X and Y may mix (float16 weights updated by float32 optimizer state)
_MIXED = {dtypes.float16, dtypes.float32}


def _scaled_add_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    x, y = specs[:2]
    if x.dtype != y.dtype and not {x.dtype, y.dtype} <= _MIXED:
        raise TypeError(
            f"scaled_add: X is {x.dtype}, Y is {y.dtype}; they must match, or be float16 and "
            f"float32 (PopLibs' mixed-precision scaledAddTo: the result has X's type)"
        )
    shape = broadcast_shape([x.shape, y.shape], "scaled_add")
    if a["inplace"] and shape != x.shape:
        raise ValueError(
            f"scaled_add_: the result shape {shape} must equal X's shape {x.shape} (X is "
            f"updated in place)"
        )
    return [TensorSpec(shape, x.dtype)]


def _scaled_add_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    rest = list(x[2:])
    sa = rest.pop(0).reshape(()) if a["a"] is None else a["a"]
    sb = rest.pop(0).reshape(()) if a["b"] is None else a["b"]
    wide = np.float64 if x[0].dtype.kind == "f" else np.int64
    out = np.asarray(sa, wide) * x[0].astype(wide) + np.asarray(sb, wide) * x[1].astype(wide)
    return [out.astype(x[0].dtype)]


defop("ScaledAdd", _scaled_add_spec, _scaled_add_ref)
definplace("ScaledAddInplace", "ScaledAdd", modifies=(0,), out="scaled_add_lhs_inplace_out")


def _scale(value: Any, x: Tensor, what: str, arg: str) -> tuple[list[Tensor], float | None]:
    if isinstance(value, Tensor):
        if value.nelms != 1:
            raise ValueError(f"{what}: {arg} {value.id!r} must have one element, got {value.shape}")
        require_numeric(value, what)
        return [value], None
    # a fraction for integer data is refused when the session lowers the op (PopART's
    # ScaledAddOp keeps any float attribute; Poplar's integer scaled add takes whole scales)
    return [], float(value)


def _scaled_add(X: Tensor, Y: Tensor, a: Any, b: Any, inplace: bool) -> Tensor:
    what = "scaled_add_" if inplace else "scaled_add"
    check_tensor(X, what, "X")
    check_tensor(Y, what, "Y")
    require_numeric(X, what)
    ta, va = _scale(a, X, what, "a")
    tb, vb = _scale(b, X, what, "b")
    attrs = {"a": va, "b": vb, "inplace": inplace}
    op_type = "ScaledAddInplace" if inplace else "ScaledAdd"
    (out,) = create_op(op_type, [X, Y, *ta, *tb], attrs)
    return out


def scaled_add(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """``a * X + b * Y`` with broadcasting; ``a`` and ``b`` are numbers or one-element
    tensors. X and Y have one dtype, or are float16 and float32 (computed in float32, the
    result of X's type).

    Raises:
        TypeError: X and Y of different dtypes (other than float16 with float32).
        ValueError: shapes that do not broadcast, a scale tensor of several elements; when
            the session lowers it, a fractional scale number for integer data.
    """
    return _scaled_add(X, Y, a, b, False)


def scaled_add_(X: Tensor, Y: Tensor, a: float | Tensor = 1.0, b: float | Tensor = 1.0) -> Tensor:
    """``X = a * X + b * Y`` in place (``Y`` broadcasts to ``X``'s shape)."""
    return _scaled_add(X, Y, a, b, True)


# ---- increment_mod ----


def _increment_mod_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    v = x[0]
    inc, mod = np.asarray(a["increment"]).astype(v.dtype), np.asarray(a["modulus"]).astype(v.dtype)
    return [np.asarray(np.fmod(v + inc, mod)).astype(v.dtype)]


defop("IncrementMod", lambda specs, a: [specs[0]], _increment_mod_ref, differentiable=False)
definplace("IncrementModInplace", "IncrementMod", modifies=(0,))


def _increment_mod(t: Tensor, increment: float, modulus: float, inplace: bool) -> Tensor:
    what = "increment_mod_" if inplace else "increment_mod"
    check_tensor(t, what)
    require_numeric(t, what)
    if modulus == 0:
        raise ValueError(f"{what}: modulus must not be 0")
    if t.dtype.is_int and (increment != int(increment) or modulus != int(modulus)):
        raise ValueError(f"{what}: increment and modulus must be integers for {t.id!r} ({t.dtype})")
    cast = int if t.dtype.is_int else float
    attrs = {"increment": cast(increment), "modulus": cast(modulus)}
    (out,) = create_op("IncrementModInplace" if inplace else "IncrementMod", [t], attrs)
    return out


def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """``(t + increment) mod modulus`` (C's remainder: the sign of the dividend).

    Raises:
        ValueError: ``modulus`` is 0; non-integer arguments for integer ``t``.
    """
    return _increment_mod(t, increment, modulus, False)


def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """:func:`increment_mod` written into ``t`` in place."""
    return _increment_mod(t, increment, modulus, True)


__all__ = [
    "clamp",
    "clip",
    "increment_mod",
    "increment_mod_",
    "maximum",
    "scaled_add",
    "scaled_add_",
    "where",
]
