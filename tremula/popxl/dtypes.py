"""PopXL data types: ``popxl.float32``, ``popxl.half`` ... each tied to a NumPy dtype and a
Poplar element type."""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula import poplar


class dtype:
    """A PopXL element type. Instances are singletons; compare with ``==`` or ``is``."""

    __slots__ = ("_name", "_numpy", "_poplar", "_size")
    _by_name: dict[str, dtype] = {}
    _by_numpy: dict[np.dtype, dtype] = {}

    def __init__(self, name: str, numpy: Any, poplar_type: poplar.Type | None, size: int):
        self._name, self._numpy, self._poplar, self._size = name, np.dtype(numpy), poplar_type, size
        dtype._by_name.setdefault(name, self)
        dtype._by_numpy.setdefault(self._numpy, self)

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_floating_point(self) -> bool:
        return self._numpy.kind == "f" or self._name.startswith("float8")

    @property
    def is_int(self) -> bool:
        return self._numpy.kind in "iu" and not self._name.startswith("float8")

    @property
    def is_signed(self) -> bool:
        return self._numpy.kind in "if"

    @property
    def is_complex(self) -> bool:
        return self._numpy.kind == "c"

    @property
    def itemsize(self) -> int:
        return self._size

    def as_numpy(self) -> np.dtype:
        return self._numpy

    def as_poplar(self) -> poplar.Type:
        if self._poplar is None:
            raise TypeError(f"popxl.{self._name} has no device representation in Tremula")
        return self._poplar

    @classmethod
    def as_dtype(cls, value: Any) -> dtype:
        """The PopXL dtype of a dtype, a NumPy dtype or type, or a name."""
        if isinstance(value, dtype):
            return value
        if isinstance(value, str) and value in cls._by_name:
            return cls._by_name[value]
        try:
            return cls._by_numpy[np.dtype(value)]
        except (TypeError, KeyError):
            raise TypeError(f"{value!r} is not a PopXL dtype") from None

    def __repr__(self) -> str:
        return f"popxl.dtypes.{self._name}"

    def __reduce__(self) -> str:
        return self._name


bool = dtype("bool", np.bool_, poplar.BOOL, 1)
int8 = dtype("int8", np.int8, poplar.CHAR, 1)
int16 = dtype("int16", np.int16, poplar.SHORT, 2)
int32 = dtype("int32", np.int32, poplar.INT, 4)
int64 = dtype("int64", np.int64, poplar.LONGLONG, 8)
uint8 = dtype("uint8", np.uint8, poplar.UNSIGNED_CHAR, 1)
uint16 = dtype("uint16", np.uint16, poplar.UNSIGNED_SHORT, 2)
uint32 = dtype("uint32", np.uint32, poplar.UNSIGNED_INT, 4)
uint64 = dtype("uint64", np.uint64, poplar.UNSIGNED_LONGLONG, 8)
float16 = dtype("float16", np.float16, poplar.HALF, 2)
half = float16
float32 = dtype("float32", np.float32, poplar.FLOAT, 4)
float = float32
float64 = dtype("float64", np.float64, poplar.DOUBLE, 8)
double = float64
complex64 = dtype("complex64", np.complex64, None, 8)
complex128 = dtype("complex128", np.complex128, None, 16)
# float8: uint8 codes, on the host in PopXL's structured NumPy dtypes (fp8_utils converts)
np_dtype_float8_143 = np.dtype([("float8_143", np.uint8)])
np_dtype_float8_152 = np.dtype([("float8_152", np.uint8)])
float8_143 = dtype("float8_143", np_dtype_float8_143, poplar.QUARTER_F143, 1)
float8_152 = dtype("float8_152", np_dtype_float8_152, poplar.QUARTER_F152, 1)

#: PopXL's private maps, used by tests written for PopXL.
_NP_TO_POPXL = dict(dtype._by_numpy)
_PT_TO_POPXL: dict[str, dtype] = {}

__all__ = [
    "bool",
    "complex64",
    "complex128",
    "double",
    "dtype",
    "float",
    "float8_143",
    "float8_152",
    "float16",
    "float32",
    "float64",
    "half",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
