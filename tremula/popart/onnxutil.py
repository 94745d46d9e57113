"""The ``onnx`` package (the ``popart`` extra), imported when a model is written or read, and
the conversions between ONNX protos and NumPy that PopART's files need."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

from tremula.errors import PopartException
from tremula.popart.types import BY_NUMPY, BY_ONNX, onnx_to_numpy


def onnx() -> ModuleType:
    """The ``onnx`` module.

    Raises:
        PopartException: it is not installed.
    """
    try:
        import onnx as module
        import onnx.numpy_helper
        import onnx.shape_inference
    except ImportError:
        raise PopartException(
            "PopART models are ONNX models: install the onnx package "
            "(pip install 'tremula[popart]')"
        ) from None
    return module


def load_model(model: Any, what: str) -> Any:
    """A ``ModelProto`` from serialized bytes, a file path or a ``ModelProto`` (a path to a
    regular file is read as a file, other strings and bytes parsed, as PopART does).

    Raises:
        PopartException: neither a readable file nor a valid serialized model.
    """
    ox = onnx()
    if isinstance(model, ox.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)) and os.path.isfile(model):
        with open(model, "rb") as f:
            data = f.read()
    elif isinstance(model, (bytes, bytearray)):
        data = bytes(model)
    elif isinstance(model, str):
        data = model.encode("latin-1", errors="replace")
    else:
        raise PopartException(
            f"{what}: expected ONNX model bytes or a file name, got {type(model).__name__}"
        )
    proto = ox.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError
        shown = model if isinstance(model, str) else f"{len(data)} bytes"
        raise PopartException(
            f"{what}: {shown!s} is neither a file nor a serialized ONNX ModelProto ({err})"
        ) from None
    return proto


def to_array(tensor: Any) -> np.ndarray:
    """The value of an ONNX ``TensorProto`` (raw_data or typed fields; PopART's packed
    ``int32_data`` for FLOAT16 / 8- and 16-bit types is read as PopART writes it)."""
    ox = onnx()
    dtype = onnx_to_numpy(tensor.data_type, f"initializer {tensor.name!r}")
    packed = not tensor.raw_data and dtype.itemsize < 4 and len(tensor.int32_data)
    if packed:
        n = int(np.prod(tensor.dims, dtype=np.int64))
        data = np.asarray(tensor.int32_data, dtype=np.int32).tobytes()
        if len(tensor.int32_data) != n:  # PopART's memcpy packing: n * itemsize bytes
            return np.frombuffer(data, dtype=dtype, count=n).reshape(tuple(tensor.dims)).copy()
    return ox.numpy_helper.to_array(tensor)


def from_array(array: np.ndarray, name: str) -> Any:
    """An ONNX ``TensorProto`` holding ``array`` in ``raw_data``."""
    return onnx().numpy_helper.from_array(np.ascontiguousarray(array), name)


def elem_type(dtype: Any) -> int:
    """The ONNX element type of a NumPy dtype."""
    return BY_NUMPY[np.dtype(dtype)].onnx


def metadata(model: Any) -> dict[str, str]:
    """A model's ``metadata_props`` (the first entry of each key, as PopART reads them)."""
    out: dict[str, str] = {}
    for p in model.metadata_props:
        out.setdefault(p.key, p.value)
    return out


def value_shape(value_info: Any) -> tuple[int | str | None, ...] | None:
    """The shape of a ``ValueInfoProto`` (dims as ints, symbolic names, or None), None if it
    has no tensor type or shape."""
    t = value_info.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in t.tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)  # type: ignore[arg-type]
    return tuple(dims)


def onnx_elem_name(elem: int) -> str:
    """PopART's DataType name of an ONNX element type (``1`` -> ``"FLOAT"``)."""
    row = BY_ONNX.get(int(elem))
    if row is None:
        raise PopartException(f"ONNX element type {elem} is not supported by Tremula")
    return row.name


def onnx_to_numpy_type(elem: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type."""
    return onnx_to_numpy(elem, "initializer")


_GRAPH_ATTRIBUTE = 5  # onnx.AttributeProto.GRAPH


def outer_names(graph: Any, bound: Any = ()) -> list[str]:
    """The names an ONNX subgraph reads from the enclosing scope: inputs of its nodes (and
    of the graphs nested in them) that neither ``bound``, its inputs, its initialisers nor
    its nodes define, in order of first use."""
    defined = set(bound) | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    found: list[str] = []
    for n in graph.node:
        found += [r for r in node_reads(n) if r not in defined and r not in found]
        defined.update(n.output)
    return found


def node_reads(node: Any) -> list[str]:
    """The names a node reads: its inputs, and what its subgraphs (If's branches, Loop's
    body) read from the enclosing scope."""
    reads = [i for i in node.input if i]
    for a in node.attribute:
        if a.type == _GRAPH_ATTRIBUTE:
            reads += [r for r in outer_names(a.g) if r not in reads]
    return reads
