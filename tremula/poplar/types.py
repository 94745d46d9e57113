"""Poplar element types.

A :class:`Type` pairs Poplar's name (``float``, ``half``, ``unsigned int`` ...) with the NumPy
dtype that stores it and its size on a tile. Instances are singletons; compare with ``is``
or ``==``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.errors import GraphError, StreamError


@dataclass(frozen=True, eq=False)
class Type:
    """An element type of a tensor."""

    name: str
    numpy: np.dtype
    size: int  # bytes per element on a tile

    def __repr__(self) -> str:
        return f"poplar.{self.name.upper().replace(' ', '_')}"

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.numpy.kind == "f"

    @property
    def is_integral(self) -> bool:
        return self.numpy.kind in "iub"

    def __reduce__(self) -> str:
        return _NAMES[self.name]


@dataclass(frozen=True, eq=False, repr=False)
class QuarterType(Type):
    """Poplar's QUARTER: an 8-bit float in one of Graphcore's formats (``quarter_f143``,
    ``quarter_f152``), stored as its uint8 codes (``tremula.poplar.quarter`` defines the
    formats and converts). Neither float nor integral to the libraries' arithmetic: only
    the scaled casts (``popops.pow2scale_cast``) read or write it."""

    @property
    def is_float(self) -> bool:
        return False

    @property
    def is_integral(self) -> bool:
        return False


def _t(name: str, dtype: type, size: int) -> Type:
    return Type(name, np.dtype(dtype), size)


FLOAT = _t("float", np.float32, 4)
HALF = _t("half", np.float16, 2)
DOUBLE = _t("double", np.float64, 8)
INT = _t("int", np.int32, 4)
UNSIGNED_INT = _t("unsigned int", np.uint32, 4)
SHORT = _t("short", np.int16, 2)
UNSIGNED_SHORT = _t("unsigned short", np.uint16, 2)
CHAR = _t("char", np.int8, 1)
SIGNED_CHAR = _t("signed char", np.int8, 1)
UNSIGNED_CHAR = _t("unsigned char", np.uint8, 1)
BOOL = _t("bool", np.bool_, 1)
LONGLONG = _t("long long", np.int64, 8)
UNSIGNED_LONGLONG = _t("unsigned long long", np.uint64, 8)
QUARTER_F143 = QuarterType("quarter_f143", np.dtype(np.uint8), 1)
QUARTER_F152 = QuarterType("quarter_f152", np.dtype(np.uint8), 1)

ALL_TYPES = (
    FLOAT,
    HALF,
    DOUBLE,
    INT,
    UNSIGNED_INT,
    SHORT,
    UNSIGNED_SHORT,
    CHAR,
    SIGNED_CHAR,
    UNSIGNED_CHAR,
    BOOL,
    LONGLONG,
    UNSIGNED_LONGLONG,
    QUARTER_F143,
    QUARTER_F152,
)
_NAMES = {t.name: repr(t).removeprefix("poplar.") for t in ALL_TYPES}
_BY_NAME = {t.name: t for t in ALL_TYPES}
_BY_NUMPY = {t.numpy: t for t in reversed(ALL_TYPES)}  # first wins: int8 -> CHAR


def as_type(value: Type | str | np.dtype | type) -> Type:
    """The :class:`Type` for a Type, a Poplar type name or a NumPy dtype."""
    if isinstance(value, Type):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        return _BY_NUMPY[np.dtype(value)]
    except (TypeError, KeyError):
        known = ", ".join(t.name for t in ALL_TYPES)
        raise GraphError(f"unknown element type {value!r}; known: {known}") from None


def exact_cast(data: object, dtype: Type, what: str) -> np.ndarray:
    """Host data as an array of ``dtype``, converted only when every value is kept.

    Data already of ``dtype``'s NumPy type are returned as they are (no copy). Otherwise:
    to an integer or bool type, every value must be a whole number in the type's range (so
    NaN, infinities, 2.7, -1 for an unsigned type and 1e10 for ``int`` are refused); to a
    float type, values are rounded to the nearest representable one, and a finite value that
    would become infinite is refused. QUARTER data must be uint8 codes (convert numbers
    with ``tremula.poplar.quarter``), or records of one uint8 field (PopXL's float8 host
    dtypes), which are taken as codes.

    Args:
        data: An array or anything ``np.asarray`` takes.
        dtype: The element type wanted.
        what: What the data are for, to begin the error message (``stream 'x'``), or "".

    Returns:
        The data as a ``dtype.numpy`` array.

    Raises:
        StreamError: Naming ``what``, the first value that cannot be kept and why.
    """
    arr = data if isinstance(data, np.ndarray) else np.asarray(data)
    want = dtype.numpy
    what = f"{what}: " if what else ""
    if arr.dtype == want:
        return arr
    if isinstance(dtype, QuarterType):
        fields = arr.dtype.fields or {}
        if len(fields) == 1 and next(iter(fields.values()))[0] == np.uint8:
            return arr.view(np.uint8)  # codes in a one-field record (PopXL's float8 dtypes)
        raise StreamError(
            f"{what}{dtype} data are uint8 codes, got {arr.dtype}; convert numbers with "
            f"tremula.poplar.quarter"
        )
    if arr.dtype.kind not in "biuf":
        raise StreamError(f"{what}{arr.dtype} data cannot become {dtype}; pass {want} data")
    with np.errstate(invalid="ignore", over="ignore"):
        out = arr.astype(want)
        bad = _lost(arr, out)
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        value = arr.reshape(-1)[i].item()
        index = tuple(int(k) for k in np.unravel_index(i, arr.shape))
        where = "" if not index else f" at index {index[0] if len(index) == 1 else index}"
        raise StreamError(
            f"{what}{value!r}{where} cannot become {dtype} ({_why(value, want)}); "
            f"{int(bad.sum())} of {arr.size} value(s) would change. Pass {want} data, or "
            f"{_rule(dtype, want)}"
        )
    return out


def _lost(arr: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Where converting ``arr`` to ``out`` changed a value (rounding to a float aside)."""
    if out.dtype.kind == "f":
        return np.isfinite(arr) & ~np.isfinite(out)
    bad = out.astype(arr.dtype) != arr  # NaN, fractions and wrapped values do not come back
    if arr.dtype.kind == "i" and out.dtype.kind == "u":
        bad |= arr < 0
    elif arr.dtype.kind == "u" and out.dtype.kind == "i":
        bad |= out < 0
    return bad


def _rule(dtype: Type, want: np.dtype) -> str:
    """The values :func:`exact_cast` takes for ``dtype`` (the end of its error)."""
    if want.kind == "f":
        top = np.finfo(want).max
        return (
            f"finite values within +-{top:.6g} (values {dtype} cannot hold exactly are "
            f"accepted, rounded to the nearest {dtype})"
        )
    if want.kind == "b":
        return "0 and 1 (or False and True)"
    info = np.iinfo(want)
    return f"whole numbers in [{info.min}, {info.max}]"


def _why(value: float | int | bool, want: np.dtype) -> str:
    if want.kind == "f":
        return f"overflows {want} to infinity"
    if isinstance(value, float) and not np.isfinite(value):
        return "not a number" if value != value else "infinite"
    if isinstance(value, float) and value != int(value):
        return "not a whole number"
    if want.kind == "b":
        return "a bool holds 0 or 1"
    info = np.iinfo(want)
    return f"outside [{info.min}, {info.max}]"
