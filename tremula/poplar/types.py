"""Poplar element types.

A :class:`Type` pairs Poplar's name (``float``, ``half``, ``unsigned int`` ...) with the NumPy
dtype that stores it and its size on a tile. Instances are singletons; compare with ``is``
or ``==``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.errors import GraphError


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
