"""Host and remote I/O ops: ``host_load``, ``host_store``, ``remote_load``, ``remote_store``,
``remote_code_load``."""

from __future__ import annotations

from typing import Any

from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import create_op, defop
from tremula.popxl.streams import DeviceToHostStream, HostToDeviceStream
from tremula.popxl.tensor import Tensor, TensorSpec

defop("HostLoad", lambda specs, a: [a["stream"].spec], differentiable=False)
defop("HostStore", lambda specs, a: [], differentiable=False)
defop(
    "RemoteLoad",
    lambda specs, a: [
        TensorSpec(a["buffer"].tensor_shape, a["buffer"].tensor_dtype, a["buffer"].meta_shape)
    ],
    differentiable=False,
)
defop("RemoteLoadInplace", lambda specs, a: [specs[0]], modifies=(0,), differentiable=False)
defop("RemoteStore", lambda specs, a: [], differentiable=False)
defop("RemoteCodeLoad", lambda specs, a: [], differentiable=False)


def host_load(h2d_stream: HostToDeviceStream, name: str | None = None) -> Tensor:
    """A tensor holding the next slice of ``h2d_stream``'s host buffer."""
    stream = h2d_stream
    if not isinstance(stream, HostToDeviceStream):
        raise TypeError(f"host_load: expected a HostToDeviceStream, got {type(stream).__name__}")
    (t,) = create_op("HostLoad", [], {"stream": stream}, [name or stream.tensor_id])
    return t


def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """Write ``t`` as the next slice of ``d2h_stream``'s host output."""
    stream = d2h_stream
    if not isinstance(stream, DeviceToHostStream):
        raise TypeError(f"host_store: expected a DeviceToHostStream, got {type(stream).__name__}")
    if t.shape != stream.shape or t.dtype != stream.dtype:
        raise ValueError(
            f"host_store: tensor {t.id!r} ({t.dtype} {t.shape}) does not match "
            f"stream {stream.tensor_id!r} ({stream.dtype} {stream.shape})"
        )
    create_op("HostStore", [t], {"stream": stream})


def _offset(offset: int | Tensor, buffer: Any, what: str) -> list[Tensor]:
    if isinstance(offset, Tensor):
        return [offset]
    if int(offset) != offset or not 0 <= offset < buffer.entries:
        raise ValueError(
            f"{what}: offset {offset!r} out of range for remote buffer "
            f"{buffer.remote_buffer_id} with {buffer.entries} entries"
        )
    return []


def remote_load(remote_buffer: Any, offset: int | Tensor, name: str | None = None) -> Tensor:
    """A tensor loaded from entry ``offset`` of a remote buffer."""
    extra = _offset(offset, remote_buffer, "remote_load")
    attrs = {"buffer": remote_buffer, "offset": None if extra else int(offset)}
    (t,) = create_op("RemoteLoad", extra, attrs, [name])
    return t


def remote_load_(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> Tensor:
    """Load entry ``offset`` of a remote buffer into ``t`` in place."""
    remote_buffer.validate_tensor_matches_buffer(t)
    extra = _offset(offset, remote_buffer, "remote_load_")
    attrs = {"buffer": remote_buffer, "offset": None if extra else int(offset)}
    (out,) = create_op("RemoteLoadInplace", [t, *extra], attrs)
    return out


def remote_store(remote_buffer: Any, offset: int | Tensor, t: Tensor) -> None:
    """Store ``t`` into entry ``offset`` of a remote buffer."""
    remote_buffer.validate_tensor_matches_buffer(t)
    extra = _offset(offset, remote_buffer, "remote_store")
    create_op(
        "RemoteStore",
        [t, *extra],
        {"buffer": remote_buffer, "offset": None if extra else int(offset)},
    )


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
