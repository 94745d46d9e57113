"""float8 ops: ``pow2scale_cast_to_fp8``, ``pow2scale_cast_from_fp8``, ``matmul_pow2scaled``,
``conv_pow2scaled`` and ``conv_transpose_pow2scaled``.

Formats, rounding and scaling are ``popxl.fp8_utils``'s (the references below call the same
conversions): to float8 is ``cast(t * 2^log2_scale)``, from float8 ``cast(t) *
2^log2_scale``, and the float8 matmul and convolutions compute in wider precision on the
decoded values, multiply by ``2^log2_scale`` and round once to float16.

``log2_scale`` is an int32 tensor of one element (a Python int becomes an int32 constant).
Its value is read when the program runs and must lie in ``[-32, 31]`` (6 signed bits):
otherwise the run raises :class:`~tremula.errors.ApplicationRuntimeError` (PopXL's
``popart.poplar_application_runtime_error``) naming the op and the scale tensor. None of
these ops is differentiable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tremula.errors import ApplicationRuntimeError
from tremula.poplar import quarter
from tremula.popxl import dtypes
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.ops.conv import (
    PadType,
    _conv_ref,
    _conv_transpose_ref,
    check_conv_shapes,
    conv_attrs,
    conv_transpose_attrs,
)
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.ops.tensor_ops import _matmul_shape
from tremula.popxl.tensor import Tensor, TensorSpec, constant

FLOAT8 = (dtypes.float8_143, dtypes.float8_152)
FLOATS = (dtypes.float16, dtypes.float32)
_FORMAT = {dtypes.float8_143: quarter.F143, dtypes.float8_152: quarter.F152}


# ---- argument checks ----


def _require(t: Tensor, allowed: tuple[dtypes.dtype, ...], what: str, arg: str) -> None:
    check_tensor(t, what, arg)
    if t.dtype not in allowed:
        names = " or ".join(d.name for d in allowed)
        raise TypeError(f"{what}: {arg} {t.id!r} must be {names}, got {t.dtype}")


def _dtype(value: Any, allowed: tuple[dtypes.dtype, ...], what: str) -> dtypes.dtype:
    try:
        dt = dtypes.dtype.as_dtype(value)
    except (TypeError, ValueError):
        dt = None
    if dt not in allowed:
        names = " or ".join(f"popxl.{d.name}" for d in allowed)
        raise TypeError(f"{what}: data_type must be {names}, got {value!r}")
    return dt


def _log2_scale(log2_scale: Any, what: str) -> Tensor:
    """The scale as an int32 tensor of one element (an int becomes a constant)."""
    if isinstance(log2_scale, Tensor):
        if log2_scale.dtype is not dtypes.int32:
            raise TypeError(
                f"{what}: log2_scale {log2_scale.id!r} must be of type popxl.int32, got "
                f"{log2_scale.dtype}"
            )
        if log2_scale.nelms != 1:
            raise ValueError(
                f"{what}: log2_scale {log2_scale.id!r} must be a scalar tensor, has shape "
                f"{log2_scale.shape}"
            )
        return log2_scale
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, (int, np.integer)):
        raise TypeError(f"{what}: log2_scale must be an int32 tensor or an int, got {log2_scale!r}")
    return constant(np.int32(log2_scale), dtypes.int32, name="log2_scale")


# ---- references (host numerics of fp8_utils) ----


def _codes(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype.fields else a.astype(np.uint8)


def check_scale(s: np.ndarray, what: str) -> int:
    """The scale value, or :class:`ApplicationRuntimeError` outside ``[-32, 31]``."""
    v = int(np.asarray(s).reshape(-1)[0])
    if not quarter.LOG2_SCALE_MIN <= v <= quarter.LOG2_SCALE_MAX:
        raise ApplicationRuntimeError(
            f"{what}: log2_scale = {v} is outside the float8 scale range "
            f"[{quarter.LOG2_SCALE_MIN}, {quarter.LOG2_SCALE_MAX}] (6 signed bits)"
        )
    return v


def _decoded(a: np.ndarray, dt: dtypes.dtype) -> np.ndarray:
    return quarter.decode(_codes(a), _FORMAT[dt], 0, np.float64)


def _half(x: np.ndarray, s: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.ldexp(x, s).astype(np.float16)


def _to_fp8_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = check_scale(x[1], "Pow2ScaleCastToFp8")
    codes = quarter.encode(x[0], _FORMAT[a["dtype"]], s, a["nan_on_overflow"])
    return [codes.astype(a["dtype"].as_numpy())]


def _from_fp8_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = check_scale(x[1], "Pow2ScaleCastFromFp8")
    return [quarter.decode(_codes(x[0]), _FORMAT[a["src"]], s, a["dtype"].as_numpy())]


def _matmul_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = check_scale(x[2], "MatMulPow2Scaled")
    product = np.matmul(_decoded(x[0], a["lhs"]), _decoded(x[1], a["rhs"]))
    return [_half(np.asarray(product), s)]


def _conv_pow2_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = check_scale(x[2], "ConvPow2Scaled")
    (out,) = _conv_ref([_decoded(x[0], a["lhs"]), _decoded(x[1], a["rhs"])], a)
    return [_half(out, s)]


def _conv_transpose_pow2_ref(x: Sequence[np.ndarray], a: dict[str, Any]) -> list[np.ndarray]:
    s = check_scale(x[2], "ConvTransposePow2Scaled")
    (out,) = _conv_transpose_ref([_decoded(x[0], a["lhs"]), _decoded(x[1], a["rhs"])], a)
    return [_half(out, s)]


def _cast_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(specs[0].shape, a["dtype"])]


def _matmul_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec(_matmul_shape(specs[0].shape, specs[1].shape), dtypes.float16)]


def _conv_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    t, w = specs[0], specs[1]
    return [TensorSpec((t.shape[0], w.shape[0], *a["out"]), dtypes.float16)]


def _conv_transpose_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [TensorSpec((specs[0].shape[0], a["out_channels"], *a["out"]), dtypes.float16)]


# outputs named after PopXL's functions (pow2scale_cast_to_fp8, matmul_pow2scaled ...)
defop("Pow2ScaleCastToFp8", _cast_spec, _to_fp8_ref, differentiable=False,
      out="pow2scale_cast_to_fp8_out")  # fmt: skip
defop("Pow2ScaleCastFromFp8", _cast_spec, _from_fp8_ref, differentiable=False,
      out="pow2scale_cast_from_fp8_out")  # fmt: skip
defop("MatMulPow2Scaled", _matmul_spec, _matmul_ref, differentiable=False,
      out="matmul_pow2scaled_out")  # fmt: skip
defop("ConvPow2Scaled", _conv_spec, _conv_pow2_ref, differentiable=False,
      out="conv_pow2scaled_out")  # fmt: skip
defop("ConvTransposePow2Scaled", _conv_transpose_spec, _conv_transpose_pow2_ref,
      differentiable=False, out="conv_transpose_pow2scaled_out")  # fmt: skip


# ---- the ops ----


def pow2scale_cast_to_fp8(
    t: Tensor,
    log2_scale: Tensor | int,
    data_type: dtypes.dtype = dtypes.float8_143,
    nan_on_overflow: bool = True,
) -> Tensor:
    """``cast(t * 2^log2_scale, data_type)``: float16 / float32 to float8, rounded to
    nearest even.

    Args:
        t: A float16 or float32 tensor.
        log2_scale: An int32 tensor of one element (or an int), in ``[-32, 31]`` at run
            time.
        data_type: ``popxl.float8_143`` or ``popxl.float8_152``.
        nan_on_overflow: Values beyond the format's range become NaN (else the largest
            value of their sign).

    Raises:
        TypeError: ``t`` not float16 / float32, ``data_type`` not float8, a bad scale type.
        ValueError: a scale tensor of more than one element.
    """
    what = "pow2scale_cast_to_fp8"
    _require(t, FLOATS, what, "t")
    dt = _dtype(data_type, FLOAT8, what)
    scale = _log2_scale(log2_scale, what)
    attrs = {"dtype": dt, "nan_on_overflow": bool(nan_on_overflow)}
    (out,) = create_op("Pow2ScaleCastToFp8", [t, scale], attrs)
    return out


def pow2scale_cast_from_fp8(
    t: Tensor, log2_scale: Tensor | int, data_type: dtypes.dtype = dtypes.float16
) -> Tensor:
    """``cast(t, data_type) * 2^log2_scale``: float8 to float16 / float32, rounded once.

    Args:
        t: A float8 tensor.
        log2_scale: An int32 tensor of one element (or an int), in ``[-32, 31]`` at run
            time.
        data_type: ``popxl.float16`` or ``popxl.float32``.

    Raises:
        TypeError: ``t`` not float8, ``data_type`` not float16 / float32, a bad scale type.
        ValueError: a scale tensor of more than one element.
    """
    what = "pow2scale_cast_from_fp8"
    _require(t, FLOAT8, what, "t")
    dt = _dtype(data_type, FLOATS, what)
    scale = _log2_scale(log2_scale, what)
    (out,) = create_op("Pow2ScaleCastFromFp8", [t, scale], {"dtype": dt, "src": t.dtype})
    return out


def matmul_pow2scaled(
    lhs: Tensor,
    rhs: Tensor,
    log2_scale: Tensor | int,
    available_memory_proportion: float | None = None,
    partials_type: dtypes.dtype | None = None,
) -> Tensor:
    """``(lhs @ rhs) * 2^log2_scale`` as float16, for float8 ``lhs`` and ``rhs`` (either
    format each), with NumPy ``matmul`` shapes (batch broadcasting, 1-D operands). The
    products are summed in float32 and the scaled sum rounded once to float16.

    Raises:
        TypeError: operands that are not float8, a bad scale type.
        ValueError: shapes that do not multiply, a scale of more than one element.
    """
    what = "matmul_pow2scaled"
    _require(lhs, FLOAT8, what, "lhs")
    _require(rhs, FLOAT8, what, "rhs")
    _matmul_shape(lhs.shape, rhs.shape)  # before the scale constant: a refused call adds nothing
    scale = _log2_scale(log2_scale, what)
    attrs = {
        "lhs": lhs.dtype,
        "rhs": rhs.dtype,
        "available_memory_proportion": available_memory_proportion,
        "partials_type": partials_type,
    }
    (out,) = create_op("MatMulPow2Scaled", [lhs, rhs, scale], attrs)
    return out


def conv_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor | int,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    available_memory_proportions: Any = None,
    partials_types: Any = None,
    enable_conv_dithering: Any = None,
) -> Tensor:
    """``ops.conv(t, weight, ...) * 2^log2_scale`` as float16, for float8 ``t`` and
    ``weight``; arguments and shapes as :func:`popxl.ops.conv`.

    Raises:
        TypeError: operands that are not float8, a bad scale type.
        ValueError: as :func:`popxl.ops.conv`.
    """
    what = "conv_pow2scaled"
    _require(t, FLOAT8, what, "t")
    _require(weight, FLOAT8, what, "weight")
    check_conv_shapes(what, t, weight, groups)
    attrs = conv_attrs(what, t, weight, stride, padding, dilation, groups, pad_type)
    scale = _log2_scale(log2_scale, what)
    attrs.update(lhs=t.dtype, rhs=weight.dtype)
    (out,) = create_op("ConvPow2Scaled", [t, weight, scale], attrs)
    return out


def conv_transpose_pow2scaled(
    t: Tensor,
    weight: Tensor,
    log2_scale: Tensor | int,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
    pad_type: PadType | str = "not_set",
    output_padding: Sequence[int] = (),
    output_shape: Sequence[int] = (),
    available_memory_proportions: Any = None,
    partials_types: Any = None,
    enable_conv_dithering: Any = None,
) -> Tensor:
    """``ops.conv_transpose(t, weight, ...) * 2^log2_scale`` as float16, for float8 ``t``
    and ``weight``; arguments and shapes as :func:`popxl.ops.conv_transpose`.

    Raises:
        TypeError: operands that are not float8, a bad scale type.
        ValueError: as :func:`popxl.ops.conv_transpose`.
    """
    what = "conv_transpose_pow2scaled"
    _require(t, FLOAT8, what, "t")
    _require(weight, FLOAT8, what, "weight")
    check_conv_shapes(what, t, weight, groups)
    attrs = conv_transpose_attrs(what, t, weight, stride, padding, dilation, groups, pad_type,
                                 output_padding, output_shape)  # fmt: skip
    scale = _log2_scale(log2_scale, what)
    attrs.update(lhs=t.dtype, rhs=weight.dtype)
    (out,) = create_op("ConvTransposePow2Scaled", [t, weight, scale], attrs)
    return out


__all__ = [
    "conv_pow2scaled",
    "conv_transpose_pow2scaled",
    "matmul_pow2scaled",
    "pow2scale_cast_from_fp8",
    "pow2scale_cast_to_fp8",
]
