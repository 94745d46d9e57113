"""Element types: PopART's ``DataType``, NumPy dtypes, ONNX element types and PopXL dtypes,
in one table, and ``TensorInfo`` (PopART's type and shape of a tensor)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popxl._ir.core.enums import DataType


@dataclass(frozen=True)
class _Type:
    name: str  # PopART's DataType name ("FLOAT")
    numpy: np.dtype | None
    onnx: int  # onnx.TensorProto element type
    popxl: str | None  # popxl dtype name


#: one row per element type
_ROWS = [
    _Type("FLOAT", np.dtype(np.float32), 1, "float32"),
    _Type("UINT8", np.dtype(np.uint8), 2, "uint8"),
    _Type("INT8", np.dtype(np.int8), 3, "int8"),
    _Type("UINT16", np.dtype(np.uint16), 4, "uint16"),
    _Type("INT16", np.dtype(np.int16), 5, "int16"),
    _Type("INT32", np.dtype(np.int32), 6, "int32"),
    _Type("INT64", np.dtype(np.int64), 7, "int64"),
    _Type("STRING", None, 8, None),
    _Type("BOOL", np.dtype(np.bool_), 9, "bool"),
    _Type("FLOAT16", np.dtype(np.float16), 10, "float16"),
    _Type("DOUBLE", np.dtype(np.float64), 11, "float64"),
    _Type("UINT32", np.dtype(np.uint32), 12, "uint32"),
    _Type("UINT64", np.dtype(np.uint64), 13, "uint64"),
    _Type("COMPLEX64", np.dtype(np.complex64), 14, "complex64"),
    _Type("COMPLEX128", np.dtype(np.complex128), 15, "complex128"),
    _Type("BFLOAT16", None, 16, None),
    _Type("FLOAT8_143", None, 17, "float8_143"),
    _Type("FLOAT8_152", None, 19, "float8_152"),
    _Type("UNDEFINED", None, 0, None),
]
BY_NAME = {r.name: r for r in _ROWS}
BY_ONNX = {r.onnx: r for r in _ROWS}
BY_NUMPY = {r.numpy: r for r in _ROWS if r.numpy is not None}
_ALIASES = {"FLOAT32": "FLOAT", "HALF": "FLOAT16", "FLOAT64": "DOUBLE"}


def type_row(value: Any) -> _Type:
    """The table row of a DataType, a type name (``"FLOAT"``, ``"float32"``), a NumPy
    dtype or a Python type.

    Raises:
        PopartException: a type PopART does not know.
    """
    if isinstance(value, DataType):
        return BY_NAME[value.name]
    if isinstance(value, str):
        key = value.upper()
        key = _ALIASES.get(key, key)
        if key in BY_NAME:
            return BY_NAME[key]
    try:
        row = BY_NUMPY.get(np.dtype(value))
    except TypeError:
        row = None
    if row is None:
        raise PopartException(f"TensorInfo: {value!r} is not a data type PopART knows")
    return row


def onnx_to_numpy(elem_type: int, where: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type (``where`` names the tensor for errors)."""
    row = BY_ONNX.get(int(elem_type))
    if row is None or row.numpy is None:
        name = row.name if row else str(elem_type)
        raise PopartException(f"{where}: ONNX element type {name} is not supported by Tremula")
    return row.numpy


def popxl_dtype(np_dtype: np.dtype) -> popxl.dtype:
    """The PopXL dtype of a NumPy dtype."""
    return popxl.dtypes.dtype.as_dtype(np.dtype(np_dtype))


class TensorInfo:
    """PopART's ``TensorInfo``: a data type and a shape.

    ``TensorInfo(dtype, shape)`` (``dtype`` a name such as ``"FLOAT"``, a ``DataType``, a
    NumPy dtype or a Python type) or ``TensorInfo(array)``.
    """

    def __init__(self, dtype_or_array: Any, shape: Iterable[int] | None = None) -> None:
        if shape is None and isinstance(dtype_or_array, np.ndarray):
            self._row = type_row(dtype_or_array.dtype)
            self._shape = tuple(int(d) for d in dtype_or_array.shape)
            return
        if shape is None:
            raise PopartException(
                f"TensorInfo: give (dtype, shape) or a NumPy array, got only {dtype_or_array!r}"
            )
        self._row = type_row(dtype_or_array)
        self._shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self._shape):
            raise PopartException(f"TensorInfo: negative dimension in shape {list(shape)}")

    def shape(self) -> list[int]:
        return list(self._shape)

    def rank(self) -> int:
        return len(self._shape)

    def nelms(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def nbytes(self) -> int:
        item = self._row.numpy.itemsize if self._row.numpy is not None else 1
        return self.nelms() * item

    def dim(self, i: int) -> int:
        return self._shape[i]

    def dataType(self) -> Any:
        return DataType[self._row.name]

    def data_type(self) -> str:
        return self._row.name

    def data_type_lcase(self) -> str:
        """The NumPy name of the type (``"float32"``)."""
        return str(self._row.numpy) if self._row.numpy is not None else self._row.name.lower()

    def numpy_dtype(self) -> np.dtype:
        if self._row.numpy is None:
            raise PopartException(f"TensorInfo: {self._row.name} has no NumPy type")
        return self._row.numpy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorInfo):
            return NotImplemented
        return self._row.name == other._row.name and self._shape == other._shape

    def __hash__(self) -> int:
        return hash((self._row.name, self._shape))

    def __repr__(self) -> str:
        dims = " ".join(str(d) for d in self._shape)
        return f"{self._row.name}   [{dims}]"  # PopART's operator<<

    __str__ = __repr__
