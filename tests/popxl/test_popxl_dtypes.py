"""``popxl.dtypes`` as spec/popxl-fidelity.md section 3 states it: singletons, properties,
conversions to NumPy and torch, ``from_name`` and ``as_dtype`` over every kind of value
PopXL takes (torch values only once the program has imported torch)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import popxl
from popxl import dtypes
from popxl.dtypes import _NP_TO_POPXL

# name: (is_complex, is_int, is_floating_point, is_signed, numpy, torch name or "")
TABLE = {
    "bool": (False, False, False, False, np.bool_, "bool"),
    "int8": (False, True, False, True, np.int8, "int8"),
    "int16": (False, True, False, True, np.int16, "int16"),
    "int32": (False, True, False, True, np.int32, "int32"),
    "int64": (False, True, False, True, np.int64, "int64"),
    "uint8": (False, True, False, False, np.uint8, "uint8"),
    "uint16": (False, True, False, False, np.uint16, ""),
    "uint32": (False, True, False, False, np.uint32, ""),
    "uint64": (False, True, False, False, np.uint64, ""),
    "float8_143": (False, False, True, True, np.dtype([("float8_143", "u1")]), ""),
    "float8_152": (False, False, True, True, np.dtype([("float8_152", "u1")]), ""),
    "float16": (False, False, True, True, np.float16, "float16"),
    "float32": (False, False, True, True, np.float32, "float32"),
    "float64": (False, False, True, True, np.float64, "float64"),
    "complex64": (True, False, False, True, np.complex64, "complex64"),
    "complex128": (True, False, False, True, np.complex128, "complex128"),
}


@pytest.mark.parametrize("name", TABLE)
def test_properties_and_numpy(name) -> None:
    cplx, is_int, flt, signed, np_type, _ = TABLE[name]
    dt = dtypes.dtype.from_name(name)
    assert dt is getattr(popxl, name) and dt.name == name and repr(dt) == f"popxl.dtypes.{name}"
    assert (dt.is_complex, dt.is_int, dt.is_floating_point, dt.is_signed) == (
        cplx, is_int, flt, signed)  # fmt: skip
    assert dt.as_numpy() == np.dtype(np_type)
    assert _NP_TO_POPXL[np.dtype(np_type)] is dt
    assert dtypes.dtype.as_dtype(dt.as_numpy()) is dt
    # PopXL's dtype has no public ``itemsize`` (the spec's member list); the byte size is
    # the NumPy dtype's
    assert not hasattr(dt, "itemsize")
    assert dt._itemsize == np.dtype(np_type).itemsize


def test_aliases_singletons_and_no_construction() -> None:
    assert popxl.half is popxl.float16 and popxl.float is popxl.float32
    assert popxl.double is popxl.float64
    with pytest.raises(TypeError, match=r"Cannot create popxl.dtypes.dtype instances\."):
        popxl.dtype()
    import pickle

    assert pickle.loads(pickle.dumps(popxl.int16)) is popxl.int16


def test_from_name_takes_exact_names_only() -> None:
    for alias in ("half", "float", "double"):
        with pytest.raises(ValueError, match=r"There is not a `popxl\.dtype` that has a name"):
            dtypes.dtype.from_name(alias)


@pytest.mark.parametrize(
    "value, want",
    [
        ("float16", popxl.float16),
        ("half", popxl.float16),  # not a registered name: NumPy parses it
        ("float", popxl.float64),  # NumPy's "float" is float64 (popxl.float is float32)
        (int, popxl.int64),
        (float, popxl.float32),
        (bool, popxl.bool),
        (np.float16, popxl.float16),
        (np.uint32, popxl.uint32),
        (np.dtype("int8"), popxl.int8),
        (np.zeros(3, np.uint16), popxl.uint16),
        (np.float64(1.0), popxl.float64),
        ("<i4", popxl.int32),
    ],
)
def test_as_dtype_takes_every_kind_of_value_popxl_takes(value, want) -> None:
    assert dtypes.dtype.as_dtype(value) is want


@pytest.mark.parametrize("value", [np.str_, "nonsense", object(), np.dtype("U3")])
def test_as_dtype_refuses_with_popxls_value_error(value) -> None:
    with pytest.raises(ValueError, match=r"There is not a `popxl\.dtype` that is compatible"):
        dtypes.dtype.as_dtype(value)


def test_as_dtype_takes_popart_data_types_by_name() -> None:
    class DataType:  # popart.DataType's shape: an enum member with a name
        def __init__(self, name: str) -> None:
            self.name = name

    assert dtypes.dtype.as_dtype(DataType("FLOAT16")) is popxl.float16
    assert dtypes.dtype.as_dtype(DataType("DOUBLE")) is popxl.float64
    assert dtypes.dtype.as_dtype(DataType("FLOAT8_143")) is popxl.float8_143


def test_torch_dtypes_tensors_and_as_torch() -> None:
    torch = pytest.importorskip("torch")
    from popxl.dtypes import _PT_TO_POPXL

    for name, row in TABLE.items():
        dt = dtypes.dtype.from_name(name)
        if row[5]:
            assert dt.as_torch() is getattr(torch, row[5])
            assert dtypes.dtype.as_dtype(getattr(torch, row[5])) is dt
            assert _PT_TO_POPXL[getattr(torch, row[5])] is dt
        else:
            with pytest.raises(TypeError, match="no equivalent torch dtype"):
                dt.as_torch()
    assert dtypes.dtype.as_dtype(torch.int32) is popxl.int32
    assert dtypes.dtype.as_dtype(torch.zeros(2, dtype=torch.float16)) is popxl.float16
    with pytest.raises(ValueError, match=r"compatible with value: torch\.bfloat16"):
        dtypes.dtype.as_dtype(torch.bfloat16)
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(torch.ones(2, 3, dtype=torch.float64), dtype=torch.float16)
    assert v.dtype is popxl.float16 and v.shape == (2, 3)


def test_import_popxl_does_not_import_torch() -> None:
    code = (
        "import sys, popxl, numpy as np\n"
        "assert popxl.dtype.as_dtype(np.int8) is popxl.int8\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_values_are_recognised_without_torch_installed(monkeypatch) -> None:
    """The torch path, duck-typed: a stand-in ``torch`` module in ``sys.modules`` (what a
    program that imported torch has) with dtypes and a tensor class."""
    import types

    fake = types.ModuleType("torch")

    class dtype_:  # torch.dtype
        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return f"torch.{self.name}"

    class Tensor:
        def __init__(self, data: np.ndarray, dt: dtype_) -> None:
            self.data, self.dtype = data, dt

        def detach(self) -> Tensor:
            return self

        def cpu(self) -> Tensor:
            return self

        def numpy(self) -> np.ndarray:
            return self.data

    fake.dtype, fake.Tensor = dtype_, Tensor
    for n in ("int32", "float16", "bfloat16"):
        setattr(fake, n, dtype_(n))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert dtypes.dtype.as_dtype(fake.int32) is popxl.int32
    assert dtypes.dtype.as_dtype(Tensor(np.zeros(2, np.float16), fake.float16)) is popxl.float16
    assert popxl.float16.as_torch() is fake.float16
    with pytest.raises(ValueError, match="compatible with value"):
        dtypes.dtype.as_dtype(fake.bfloat16)
    got = popxl.utils.to_numpy(Tensor(np.arange(3, dtype=np.float64), fake.float16))
    assert got.dtype == np.float32 and popxl.utils.torch_imported()
