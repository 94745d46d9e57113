"""Host and remote I/O ops: ``host_load``, ``host_store``, ``remote_load``, ``remote_store``,
``remote_code_load``."""

from __future__ import annotations

from typing import Any

import numpy as np

from tremula.popxl import dtypes
from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import create_op, definplace, defop
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream
from tremula.popxl.tensor import Tensor, TensorSpec, constant


def _host_load_spec(specs: Any, a: dict[str, Any]) -> list[TensorSpec]:
    if specs and (specs[0].shape, specs[0].dtype) != (a["stream"].shape, a["stream"].dtype):
        raise ValueError(
            f"host_load: the destination {specs[0].dtype} {specs[0].shape} does not match "
            f"stream {a['stream'].tensor_id!r} ({a['stream'].dtype} {a['stream'].shape})"
        )
    return [a["stream"].spec]


# HostLoad: input 0 is the destination, an init("undef") tensor (as PopXL builds it)
defop("HostLoad", _host_load_spec, differentiable=False)
defop("HostStore", lambda specs, a: [], differentiable=False)
# RemoteLoad (remote_load): input 0 is the destination's layout, an init("undef") tensor,
# and the output a new tensor; RemoteLoadInplace (remote_load_) writes input 0 (PopART's two)
defop("RemoteLoad", lambda specs, a: [specs[0]], differentiable=False)
definplace("RemoteLoadInplace", "RemoteLoad", modifies=(0,))
defop("RemoteStore", lambda specs, a: [], differentiable=False)
defop("RemoteCodeLoad", lambda specs, a: [], differentiable=False, graphs="code_load")


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """A tensor holding the next slice of ``h2d_stream``'s host buffer."""
    from tremula.popxl.ops.tensor_ops import init

    stream = h2d_stream
    if not isinstance(stream, HostToDeviceStream):
        raise TypeError(f"host_load: expected a HostToDeviceStream, got {type(stream).__name__}")
    _check_stream_ir(stream, "host_load")
    name = name or stream.tensor_id
    dest = init(stream.shape, stream.dtype, f"{name}_init", "undef")
    (t,) = create_op("HostLoad", [dest], {"stream": stream}, [name])
    return t


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Write ``t`` as the next slice of ``d2h_stream``'s host output."""
    check_tensor(t, "host_store")
    stream = d2h_stream
    if not isinstance(stream, DeviceToHostStream):
        raise TypeError(f"host_store: expected a DeviceToHostStream, got {type(stream).__name__}")
    _check_stream_ir(stream, "host_store")
    if t.shape != stream.shape or t.dtype != stream.dtype:
        raise ValueError(
            f"host_store: tensor {t.id!r} ({t.dtype} {t.shape}) does not match "
            f"stream {stream.tensor_id!r} ({stream.dtype} {stream.shape})"
        )
    create_op("HostStore", [t], {"stream": stream})


def _check_stream_ir(stream: Any, what: str) -> None:
    """``ValueError`` unless ``stream`` is a stream of the Ir of the graph in context (its
    tensor is in that Ir's main graph)."""
    ir = get_current_graph().ir
    if stream._tensor is None or stream._tensor.graph is not ir.main_graph:
        raise ValueError(
            f"{what}: stream {stream.tensor_id!r} is not in the main graph of the current "
            f"Ir ({ir!r}): make the stream in the Ir that uses it"
        )


def _offset(
    offset: int | Tensor, buffer: Any, what: str, **tensors: Tensor
) -> tuple[Tensor, int | None]:
    """The offset as a tensor (an int becomes a uint32 constant named "offset", as in
    PopXL) and its value when it is known while building (the lowering then uses it),
    after PopXL's input checks of the offset and the op's other ``tensors``.

    An int offset is checked against the buffer's entries when the program is lowered,
    not here: as in PopXL, entries may still grow (``buffer.entries = ...``) after the op
    is made.

    Raises:
        TypeError: an offset that is neither an int nor a Tensor (PopXL's
            ``check_in_graph``: "The input `offset` is not a Tensor").
        ValueError: a negative int offset; a tensor of another graph; tensors on
            different IPUs or tile sets.
    """
    graph = get_current_graph()
    if isinstance(offset, (int, np.integer)):
        check_in_graph(graph, **tensors)
        if offset < 0:
            raise ValueError(
                f"{what}: offset {offset!r} into remote buffer {buffer.remote_buffer_id} "
                f"must be a non-negative integer"
            )
        check_tensor_ipu_and_tile_set(**tensors)
        return constant(int(offset), dtypes.uint32, "offset"), int(offset)
    check_in_graph(graph, offset=offset, **tensors)
    check_tensor_ipu_and_tile_set(offset=offset, **tensors)
    return offset, None


def remote_load(remote_buffer: Any, offset: int | Tensor, name: str | None = None) -> Tensor:
    """A tensor loaded from entry ``offset`` of a remote buffer (PopXL: a ``RemoteLoad`` op
    whose input 0 is an ``init("undef")`` tensor of the buffer's shape)."""
    from tremula.popxl.ops.tensor_ops import init

    off, value = _offset(offset, remote_buffer, "remote_load")
    b = remote_buffer
    dest = init(b.tensor_shape, b.tensor_dtype, f"{name}_init" if name else None, "undef",
                b.meta_shape)  # fmt: skip
    attrs = {"buffer": remote_buffer, "offset": value}
    (t,) = create_op("RemoteLoad", [dest, off], attrs, [name])
    return t


def remote_load_(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load entry ``offset`` of a remote buffer into ``t`` in place."""
    check_tensor(t, "remote_load_")
    remote_buffer.validate_tensor_matches_buffer(t)
    off, value = _offset(offset, remote_buffer, "remote_load_", t=t)
    attrs = {"buffer": remote_buffer, "offset": value}
    (out,) = create_op("RemoteLoadInplace", [t, off], attrs)
    return out


def remote_store(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> None:
    """Store ``t`` into entry ``offset`` of a remote buffer."""
    check_tensor(t, "remote_store")
    remote_buffer.validate_tensor_matches_buffer(t)
    off, value = _offset(offset, remote_buffer, "remote_store", t=t)
    create_op("RemoteStore", [t, off], {"buffer": remote_buffer, "offset": value})


def remote_code_load(graph: Graph, destination: str) -> None:
    """Load ``graph``'s code from streaming memory: no effect on values; the code occupies
    tile memory from here to the graph's last call (see the memory profile)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"remote_code_load: expected a Graph, got {type(graph).__name__}")
    if graph is get_current_graph():
        raise ValueError(f"remote_code_load: cannot load the code of {graph.name!r} from inside it")
    if destination != "executable":
        raise NotImplementedError(
            f"remote_code_load: loading the code of {graph.name!r} to destination "
            f"{destination!r} is not implemented; only 'executable' is"
        )
    create_op("RemoteCodeLoad", [], {"graphs": (graph,), "destination": destination})
