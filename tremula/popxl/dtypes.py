"""PopXL data types: ``popxl.float32``, ``popxl.half`` ... each tied to a NumPy dtype, a
torch dtype where torch has one, and a Poplar element type.

``dtype.as_dtype`` takes what PopXL takes: a dtype, a registered name, a Python type, a
``popart.DataType``, a NumPy dtype or scalar type, a torch dtype, anything ``np.dtype``
parses, or an array or torch tensor (its dtype). torch is never imported here: a torch
value can only exist once the program has imported torch.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any, ClassVar

import numpy as np

from tremula import poplar
from tremula.errors import DtypeError


class dtype:
    """A PopXL element type. Instances are singletons (compare with ``is`` or ``==``, which
    is identity); they cannot be created by calling ``dtype()``."""

    __slots__ = ("_itemsize", "_name", "_numpy", "_popart", "_poplar", "_torch")
    _name: str
    _numpy: np.dtype
    _poplar: poplar.Type | None
    _popart: str
    _itemsize: int  # bytes per element (private: PopXL's dtype has no itemsize)
    _torch: str
    _by_name: ClassVar[builtins.dict[str, dtype]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("Cannot create popxl.dtypes.dtype instances.")

    @classmethod
    def _new(
        cls, name: str, numpy: Any, poplar_type: poplar.Type | None, popart: str, torch: str
    ) -> dtype:
        self = object.__new__(cls)
        self._name, self._numpy, self._poplar = name, np.dtype(numpy), poplar_type
        self._popart, self._torch = popart, torch
        self._itemsize = self._numpy.itemsize
        cls._by_name[name] = self
        return self

    # ---- properties ----
    @property
    def name(self) -> str:
        return self._name

    @property
    def is_complex(self) -> builtins.bool:
        return self._numpy.kind == "c"

    @property
    def is_int(self) -> builtins.bool:
        return self._numpy.kind in "iu"

    @property
    def is_floating_point(self) -> builtins.bool:
        return self._numpy.kind == "f" or self._name.startswith("float8")

    @property
    def is_signed(self) -> builtins.bool:
        return self._numpy.kind in "ifc" or self._name.startswith("float8")

    # PopXL's private fields, which its tests read (views of the values above)
    @property
    def _np_type(self) -> np.dtype:
        return self._numpy

    @property
    def _pt_type(self) -> str | None:
        """The torch dtype's name (``torch.<name>``), None where torch has none."""
        return self._torch or None

    @property
    def _is_complex(self) -> builtins.bool:
        return self.is_complex

    @property
    def _is_int(self) -> builtins.bool:
        return self.is_int

    @property
    def _is_floating_point(self) -> builtins.bool:
        return self.is_floating_point

    @property
    def _is_signed(self) -> builtins.bool:
        return self.is_signed

    @property
    def _pb_dtype(self) -> Any:
        """PopART's ``DataType`` member of this dtype (the private attribute PopXL's dtypes
        carry and its tests compare ``TensorInfo.dataType()`` with)."""
        from tremula.popxl._ir.core.enums import DataType

        return DataType[self._popart]

    # ---- conversions ----
    def as_numpy(self) -> np.dtype:
        """The NumPy dtype (float8 types: PopXL's structured uint8 dtypes)."""
        return self._numpy

    def as_torch(self) -> Any:
        """The torch dtype.

        Raises:
            ModuleNotFoundError: torch is not installed.
            TypeError: torch has no such dtype (uint16/32/64, float8).
        """
        import torch

        if not self._torch:
            raise TypeError(f"popxl.{self._name} has no equivalent torch dtype")
        return getattr(torch, self._torch)

    def as_poplar(self) -> poplar.Type:
        """The Poplar element type (a Tremula extension).

        Raises:
            TypeError: the dtype has no device representation (complex types).
        """
        if self._poplar is None:
            raise TypeError(f"popxl.{self._name} has no device representation in Tremula")
        return self._poplar

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """The dtype registered as ``name`` (exact names: ``"float32"``, not ``"float"``).

        Raises:
            ValueError: no dtype has that name.
        """
        try:
            return cls._by_name[name]
        except (KeyError, TypeError):
            raise DtypeError(f"There is not a `popxl.dtype` that has a name: {name!r}") from None

    @classmethod
    def as_dtype(cls, value: Any) -> dtype:
        """The PopXL dtype of ``value``: a dtype, a registered name, a Python type (``int``:
        int64, ``float``: float32, ``bool``), a ``popart.DataType``, a NumPy dtype or
        scalar type, a torch dtype, anything ``np.dtype`` parses (``"float"`` is float64,
        as in NumPy), or an array or torch tensor (its dtype).

        Raises:
            ValueError: (a :class:`tremula.errors.DtypeError`, also a ``TypeError``) no
                PopXL dtype matches.
        """
        found = _lookup(value)
        if found is None:
            raise DtypeError(
                f"There is not a `popxl.dtype` that is compatible with value: {value!r}"
            )
        return found

    def __repr__(self) -> str:
        return f"popxl.dtypes.{self._name}"

    def __reduce__(self) -> str:
        return self._name


def _torch_dtype(value: Any) -> builtins.bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.dtype)


def _from_numpy(value: Any) -> dtype | None:
    try:
        return _NP_TO_POPXL.get(np.dtype(value))
    except (TypeError, ValueError):
        return None


def _lookup(value: Any) -> dtype | None:
    """``as_dtype``'s search, in PopXL's order; None when nothing matches."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, str) and value in dtype._by_name:
        return dtype._by_name[value]
    if isinstance(value, type) and value in _PY_TO_POPXL:
        return _PY_TO_POPXL[value]
    if type(value).__name__ == "DataType" and hasattr(value, "name"):  # popart.DataType
        return _POPART_TO_POPXL.get(str(value.name))
    if isinstance(value, np.dtype):
        return _NP_TO_POPXL.get(value)
    if _torch_dtype(value):
        return _PT_BY_NAME.get(str(value).removeprefix("torch."))
    found = _from_numpy(value)
    if found is not None:
        return found
    inner = getattr(value, "dtype", None)  # an array or a torch tensor
    if isinstance(inner, np.dtype):
        return _NP_TO_POPXL.get(inner)
    if _torch_dtype(inner):
        return _PT_BY_NAME.get(str(inner).removeprefix("torch."))
    return None


_D = dtype._new
bool = _D("bool", np.bool_, poplar.BOOL, "BOOL", "bool")
int8 = _D("int8", np.int8, poplar.CHAR, "INT8", "int8")
int16 = _D("int16", np.int16, poplar.SHORT, "INT16", "int16")
int32 = _D("int32", np.int32, poplar.INT, "INT32", "int32")
int64 = _D("int64", np.int64, poplar.LONGLONG, "INT64", "int64")
uint8 = _D("uint8", np.uint8, poplar.UNSIGNED_CHAR, "UINT8", "uint8")
uint16 = _D("uint16", np.uint16, poplar.UNSIGNED_SHORT, "UINT16", "")
uint32 = _D("uint32", np.uint32, poplar.UNSIGNED_INT, "UINT32", "")
uint64 = _D("uint64", np.uint64, poplar.UNSIGNED_LONGLONG, "UINT64", "")
# float8: uint8 codes, on the host in PopXL's structured NumPy dtypes (fp8_utils converts)
np_dtype_float8_143 = np.dtype([("float8_143", np.uint8)])
np_dtype_float8_152 = np.dtype([("float8_152", np.uint8)])
float8_143 = _D("float8_143", np_dtype_float8_143, poplar.QUARTER_F143, "FLOAT8_143", "")
float8_152 = _D("float8_152", np_dtype_float8_152, poplar.QUARTER_F152, "FLOAT8_152", "")
float16 = _D("float16", np.float16, poplar.HALF, "FLOAT16", "float16")
half = float16
float32 = _D("float32", np.float32, poplar.FLOAT, "FLOAT", "float32")
float = float32
float64 = _D("float64", np.float64, poplar.DOUBLE, "DOUBLE", "float64")
double = float64
complex64 = _D("complex64", np.complex64, None, "COMPLEX64", "complex64")
complex128 = _D("complex128", np.complex128, None, "COMPLEX128", "complex128")
del _D

#: PopXL's private maps (tests written for PopXL import them).
_NP_TO_POPXL: builtins.dict[np.dtype, dtype] = {d._numpy: d for d in dtype._by_name.values()}
_PY_TO_POPXL: builtins.dict[type, dtype] = {builtins.bool: bool, builtins.float: float32}
_POPART_TO_POPXL = {d._popart: d for d in dtype._by_name.values()}
_STR_TO_POPXL: builtins.dict[str, dtype] = dtype._by_name  # name -> dtype (from_name's table)
_PT_BY_NAME = {d._torch: d for d in dtype._by_name.values() if d._torch}


def __getattr__(name: str) -> Any:
    """``_PT_TO_POPXL`` (torch dtype -> dtype) is built when first asked for, importing torch
    then (empty without torch), so that ``import popxl`` never imports torch; likewise
    ``_PB_TO_POPXL`` (``popart.DataType`` -> dtype)."""
    if name == "_PB_TO_POPXL":  # popart.DataType -> dtype (the enum is imported lazily)
        return {d._pb_dtype: d for d in dtype._by_name.values()}
    if name == "_PT_TO_POPXL":
        try:
            import torch
        except ModuleNotFoundError:
            return {}
        return {getattr(torch, n): d for n, d in _PT_BY_NAME.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
