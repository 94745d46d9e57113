"""Host float8 helpers (PopXL's ``popxl.fp8_utils``): the reference numerics of
``float8_143`` and ``float8_152``.

The formats are Graphcore's (``tremula.poplar.quarter`` gives the details):

* ``float8_143``: 1 sign, 4 exponent, 3 mantissa bits, exponent bias 8; largest value 240,
  smallest subnormal ``2^-10``;
* ``float8_152``: 1 sign, 5 exponent, 2 mantissa bits, exponent bias 16; largest value
  57344, smallest subnormal ``2^-17``;
* no infinities; one NaN, the code ``0x80`` (the negative-zero pattern); zero is ``0x00``.

Rounding is to nearest, ties to even, with subnormals. Host float8 arrays hold the uint8
codes in PopXL's structured NumPy dtypes (``popxl.dtypes.np_dtype_float8_143`` /
``np_dtype_float8_152``), so an array says which format it holds; ``arr.view(np.uint8)``
gives the bare codes.

Scaling follows PopXL's definitions of its fused casts: to float8 is
``cast(src * 2^log2_scale)``, from float8 is ``cast(src) * 2^log2_scale``. Both *multiply*
by ``2^log2_scale``, so a round trip uses opposite scales::

    codes = host_pow2scale_cast_to_fp8(x, popxl.float8_143, log2_scale=s)
    back = host_pow2scale_cast_from_fp8(codes, popxl.float32, log2_scale=-s)

The device ops (``ops.pow2scale_cast_to_fp8`` / ``pow2scale_cast_from_fp8``) compute the
same codes bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.errors import Float8DtypeError
from tremula.poplar import quarter
from tremula.popxl import dtypes

_FORMATS = {
    dtypes.np_dtype_float8_143: (dtypes.float8_143, quarter.F143),
    dtypes.np_dtype_float8_152: (dtypes.float8_152, quarter.F152),
}
_FLOAT8 = (dtypes.float8_143, dtypes.float8_152)
_FLOATS = (dtypes.float16, dtypes.float32, dtypes.float64)


def _float8(dtype: Any, what: str) -> tuple[dtypes.dtype, quarter.Float8Format]:
    """The float8 dtype and format of ``dtype`` (None: ``float8_143``).

    Raises:
        Float8DtypeError: (``TypeError`` and ``RuntimeError``, as PopXL raises) another dtype.
    """
    if dtype is None:
        dtype = dtypes.float8_143
    try:
        dt = dtypes.dtype.as_dtype(dtype)
    except (TypeError, ValueError):
        dt = None
    if dt not in _FLOAT8:
        raise Float8DtypeError(
            f"{what}: dtype must be popxl.float8_143 or popxl.float8_152, got {dtype!r}"
        )
    return _FORMATS[dt.as_numpy()]


def _int(value: Any, what: str, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what}: {arg} must be an int, got {value!r}")
    return int(value)


def _values(src: Any, what: str) -> np.ndarray:
    if hasattr(src, "detach") and hasattr(src, "numpy"):  # a torch tensor
        src = src.detach().cpu().numpy()
    arr = np.asarray(src)
    if arr.dtype in _FORMATS:
        raise TypeError(
            f"{what}: src already holds {_FORMATS[arr.dtype][0].name} codes; decode them with "
            f"host_pow2scale_cast_from_fp8 first"
        )
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{what}: src must hold real numbers, got {arr.dtype}")
    return arr


def host_pow2scale_cast_to_fp8(
    src: Any,
    dtype: dtypes.dtype | None = None,
    log2_scale: int = 0,
    nan_on_overflow: bool = True,
) -> np.ndarray:
    """``cast(src * 2^log2_scale, dtype)`` on the host.

    Args:
        src: The values (anything NumPy converts to a real array; float64 is used as it
            is, not downcast).
        dtype: ``popxl.float8_143`` (None: the default) or ``popxl.float8_152``.
        log2_scale: The power of two ``src`` is multiplied by before rounding.
        nan_on_overflow: Values beyond the format's range (infinities included) become NaN
            when True, the largest value of their sign when False.

    Returns:
        The codes, an array of ``src``'s shape in the structured dtype of ``dtype``.

    Raises:
        TypeError: ``dtype`` is not a float8 type, ``log2_scale`` is not an int, or
            ``src`` is not real numbers (or is float8 already).
    """
    what = "host_pow2scale_cast_to_fp8"
    dt, fmt = _float8(dtype, what)
    scale = _int(log2_scale, what, "log2_scale")
    codes = quarter.encode(_values(src, what), fmt, scale, bool(nan_on_overflow))
    return codes.astype(dt.as_numpy())


def host_pow2scale_cast_from_fp8(
    src: Any,
    dtype: dtypes.dtype | None = None,
    log2_scale: int = 0,
    *,
    src_dtype: dtypes.dtype | None = None,
) -> np.ndarray:
    """``cast(src, dtype) * 2^log2_scale`` on the host, rounded once.

    Args:
        src: float8 codes: an array in a float8 structured dtype (which gives the format),
            or uint8 codes with ``src_dtype``.
        dtype: ``popxl.float16`` (None: the default), ``float32`` or ``float64``.
        log2_scale: The power of two the decoded values are multiplied by.
        src_dtype: The format of uint8 codes (``popxl.float8_143`` / ``float8_152``); when
            given with a structured array it must match it.

    Returns:
        The values as ``dtype`` (values beyond float16's range become infinities).

    Raises:
        TypeError: ``src`` is not float8 codes, the formats disagree, ``dtype`` is not a
            float type or ``log2_scale`` is not an int.
    """
    what = "host_pow2scale_cast_from_fp8"
    arr = np.asarray(src)
    if arr.dtype in _FORMATS:
        dt, fmt = _FORMATS[arr.dtype]
        if src_dtype is not None and _float8(src_dtype, what)[0] is not dt:
            raise TypeError(f"{what}: src holds {dt.name} codes, src_dtype says {src_dtype!r}")
        codes = arr.view(np.uint8)
    elif arr.dtype == np.uint8:
        if src_dtype is None:
            raise TypeError(
                f"{what}: uint8 codes need src_dtype=popxl.float8_143 or popxl.float8_152 "
                f"(or pass them in that float8 structured dtype)"
            )
        fmt = _float8(src_dtype, what)[1]
        codes = arr
    else:
        raise TypeError(
            f"{what}: src must be float8 codes (a float8 structured dtype, or uint8 with "
            f"src_dtype), got {arr.dtype}"
        )
    try:
        out = dtypes.float16 if dtype is None else dtypes.dtype.as_dtype(dtype)
    except (TypeError, ValueError):
        out = None
    if out not in _FLOATS:
        raise TypeError(f"{what}: dtype must be popxl.float16, float32 or float64, got {dtype!r}")
    scale = _int(log2_scale, what, "log2_scale")
    return quarter.decode(codes, fmt, scale, out.as_numpy())


def _mse_by_scale(
    src: Any, dtype: Any, log2_scale_range: tuple[int, int], what: str
) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate ``log2_scale`` of the range (both ends included) and the mean squared
    error of the float8 round trip of ``src`` with it: encode ``src * 2^s`` saturating on
    overflow, decode with ``-s``. NaNs of ``src`` are left out of the mean."""
    _, fmt = _float8(dtype, what)
    x = _values(src, what).astype(np.float64).reshape(-1)
    lo, hi = (_int(v, what, "log2_scale_range") for v in log2_scale_range)
    if lo > hi or x.size == 0:
        raise ValueError(f"{what}: needs data and a range lo <= hi, got {x.size} values, "
                         f"range {(lo, hi)}")  # fmt: skip
    x = x[~np.isnan(x)]
    candidates = np.arange(lo, hi + 1)
    errors = np.empty(candidates.size)
    for k, s in enumerate(candidates.tolist()):  # one vectorised round trip per candidate
        back = quarter.decode(quarter.encode(x, fmt, s, False), fmt, -s, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            errors[k] = np.mean((back - x) ** 2) if x.size else 0.0
    return candidates, np.where(np.isnan(errors), np.inf, errors)


_DEVICE_RANGE = (quarter.LOG2_SCALE_MIN, quarter.LOG2_SCALE_MAX)


def host_fp8_mse_scale(
    src: Any,
    dtype: dtypes.dtype | None = None,
    *,
    log2_scale_range: tuple[int, int] = _DEVICE_RANGE,
) -> tuple[float, int]:
    """The least mean squared error of a float8 round trip of ``src`` over the candidate
    scales, as PopXL returns it: the pair ``(mse, -bias)``, the least in tuple order, where
    ``bias`` is the ``log2_scale`` of the cast to float8 (``src * 2^bias`` is encoded,
    decoded with ``-bias``). Ties in the error go to the larger ``bias``.

    Args:
        src: The values (NaNs are left out of the mean).
        dtype: ``popxl.float8_143`` (None: the default) or ``popxl.float8_152``.
        log2_scale_range: The candidate biases, both ends included (a Tremula extension;
            by default the device's ``[-32, 31]``).

    Returns:
        ``(mse, -bias)``.

    Raises:
        TypeError: as :func:`host_pow2scale_cast_to_fp8`.
        ValueError: an empty range or empty ``src``.
    """
    candidates, errors = _mse_by_scale(src, dtype, log2_scale_range, "host_fp8_mse_scale")
    return min((float(e), -int(s)) for s, e in zip(candidates.tolist(), errors.tolist()))


def host_fp8_mse_scale_pb(
    src: Any,
    dtype: dtypes.dtype | None = None,
    *,
    log2_scale_range: tuple[int, int] = _DEVICE_RANGE,
) -> int:
    """The ``log2_scale`` whose float8 round trip of ``src`` has the least mean squared
    error (see :func:`host_fp8_mse_scale`). Ties go to the scale nearest 0, then to the
    smaller one (so all-zero data give 0 when 0 is a candidate).

    Raises:
        TypeError: as :func:`host_pow2scale_cast_to_fp8`.
        ValueError: an empty range or empty ``src``.
    """
    candidates, errors = _mse_by_scale(src, dtype, log2_scale_range, "host_fp8_mse_scale_pb")
    order = np.lexsort((candidates, np.abs(candidates), errors))
    return int(candidates[order[0]])


def fp8_host_data(
    arr: np.ndarray, dtype: dtypes.dtype, log2_scale: int | None, nan_on_overflow: bool | None
) -> np.ndarray:
    """Host data for a float8 tensor (``constant`` / ``variable``): float8 codes of the
    format, or uint8 codes, are taken as they are; float16/32/64 data are converted with
    :func:`host_pow2scale_cast_to_fp8` (``log2_scale`` defaults to 0, ``nan_on_overflow``
    to True).

    Raises:
        TypeError: codes of the other float8 format, or data that are not floating point.
    """
    dt, _ = _float8(dtype, "float8 tensor data")
    if arr.dtype == dt.as_numpy():
        return arr
    if arr.dtype in _FORMATS:
        raise TypeError(
            f"float8 tensor data: the data hold {_FORMATS[arr.dtype][0].name} codes, the "
            f"tensor is {dt.name}; convert them with host_pow2scale_cast_from_fp8 and "
            f"host_pow2scale_cast_to_fp8"
        )
    if arr.dtype == np.uint8:
        return arr.astype(dt.as_numpy())
    if arr.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(
            f"Type {arr.dtype} is not supported for float8 tensors: give float16, float32 or "
            f"float64 values (converted with log2_scale), or the {dt.name} / uint8 codes"
        )
    scale = 0 if log2_scale is None else log2_scale
    flag = True if nan_on_overflow is None else bool(nan_on_overflow)
    return host_pow2scale_cast_to_fp8(arr, dt, scale, flag)


__all__ = [
    "host_fp8_mse_scale",
    "host_fp8_mse_scale_pb",
    "host_pow2scale_cast_from_fp8",
    "host_pow2scale_cast_to_fp8",
]
