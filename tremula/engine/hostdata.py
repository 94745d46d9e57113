"""An engine's host data: streams and host functions connected to callbacks and buffers,
tensors written and read through host handles, and remote buffers moved whole or a repeat at
a time. :class:`HostData` is a base class of :class:`tremula.engine.engine.Engine`; every
method holds the engine's lock (:func:`locked`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from tremula.engine.plan import Gather
from tremula.engine.run import Runtime
from tremula.engine.streams import StreamConnection
from tremula.errors import EngineError, StreamError
from tremula.poplar.graph_state import GraphState
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import exact_cast

_F = TypeVar("_F", bound=Callable[..., Any])


def locked(method: _F) -> _F:
    """Make ``method`` run holding its object's ``lock`` (:attr:`Engine.lock`; a PopXL
    ``Session`` uses its engine's)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]


class HostData:
    """The host-data calls of an engine (Poplar's ``Engine`` methods of those names)."""

    lock: threading.RLock
    state: GraphState
    replicas: int

    if TYPE_CHECKING:

        @property
        def runtime(self) -> Runtime:
            """The loaded runtime (``Engine.runtime``; raises when not loaded)."""

    @locked
    def connect_stream(self, name: str, buffer_or_callback: Any) -> None:
        """Connect a stream to a host buffer (consumed or filled one transfer at a time,
        circularly) or to a callback called with one transfer's array."""
        stream = self.state.streams.get(name)
        if stream is None:
            raise StreamError(
                f"connect_stream: no stream named {name!r}; streams: {sorted(self.state.streams)}"
            )
        streams = self.runtime.streams
        conn = streams.get(name)
        if conn is not None and conn.rebind(buffer_or_callback):
            return  # the same stream again with a buffer of the same layout
        streams[name] = StreamConnection(stream, buffer_or_callback, self.replicas)

    @locked
    def connect_streams(self, buffers: Mapping[str, Any]) -> None:
        """:meth:`connect_stream` for each stream name and buffer of ``buffers``, in order
        (a PopXL session's streams before each run: one call, the lock taken once)."""
        streams = self.runtime.streams
        for name, buffer in buffers.items():
            conn = streams.get(name)
            if conn is None or not conn.rebind(buffer):
                self.connect_stream(name, buffer)

    @locked
    def connect_host_function(
        self, name: str, fn: Callable[..., Any], all_replicas: bool = False
    ) -> None:
        """Connect host function ``name`` to ``fn(inputs, outputs)``, which receives lists
        of arrays and fills ``outputs`` in place or returns them.

        Args:
            name: the host function.
            fn: the callback. It is called once per replica with flat arrays (Poplar's
                behaviour), or, with ``all_replicas``, once per call with ``[replica, n]``
                arrays of the replicas making the call (all of them, unless replicas took
                different branches), so that it can treat the replicas' data together
                (sum them, apply them at once). An exception it raises fails the run.
            all_replicas: see ``fn``.
        """
        if name not in self.state.host_functions:
            raise EngineError(
                f"connect_host_function: no host function named {name!r}; "
                f"host functions: {sorted(self.state.host_functions)}"
            )
        if not callable(fn):
            raise EngineError(f"connect_host_function({name!r}): {fn!r} is not callable")
        self.runtime.host_functions[name] = (fn, bool(all_replicas))

    def _handle(self, table: dict[str, Tensor], name: str, what: str) -> Tensor:
        t = table.get(name)
        if t is None:
            raise StreamError(f"{what}: no handle named {name!r}; handles: {sorted(table)}")
        return t

    @locked
    def write_tensor(self, name: str, data: Any) -> None:
        """Write a tensor through a ``create_host_write`` handle: data of the tensor's
        shape (every replica) or ``[replicas, *shape]``."""
        t = self._handle(self.state.host_writes, name, "write_tensor")
        arr = exact_cast(data, t.dtype, f"write_tensor({name!r})")
        R, n = self.replicas, t.num_elements
        if arr.size == n:
            rows = np.broadcast_to(arr.reshape(1, n), (R, n))
        elif arr.size == R * n and (R == 1 or arr.shape[0] == R):
            rows = arr.reshape(R, n)
        else:
            raise StreamError(
                f"write_tensor({name!r}): data of shape {arr.shape} ({arr.size} "
                f"elements); expected {t.shape} or ({R}, *{t.shape})"
            )
        Gather.of(t.dtype, t.addresses).write(self.runtime.storage, slice(None), rows)

    @locked
    def read_tensor(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Read a tensor through a ``create_host_read`` handle: the tensor's shape, with a
        leading replica axis when the graph is replicated."""
        t = self._handle(self.state.host_reads, name, "read_tensor")
        data = Gather.of(t.dtype, t.addresses).read(self.runtime.storage, slice(None))
        shape = t.shape if self.replicas == 1 else (self.replicas, *t.shape)
        if out is None:
            return data.reshape(shape).copy()
        what = f"read_tensor({name!r})"
        if not isinstance(out, np.ndarray):
            raise StreamError(
                f"{what}: the output buffer must be a NumPy array, got {type(out).__name__}"
            )
        checks = (
            (
                out.dtype != t.dtype.numpy,
                f"the output buffer is {out.dtype}; the tensor is {t.dtype} ({t.dtype.numpy})",
            ),
            (not out.flags.writeable, "the output buffer is read-only"),
            (not out.flags.c_contiguous, "the output buffer must be C-contiguous"),
            (
                out.size != data.size,
                f"output buffer has {out.size} elements, tensor has {data.size}",
            ),
        )
        problem = next((message for bad, message in checks if bad), "")
        if problem:
            raise StreamError(f"{what}: {problem}")
        out.reshape(shape)[...] = data.reshape(shape)
        return out

    def _replica(self, replica: int | None, what: str, name: str) -> int | slice:
        if replica is None:
            return slice(None)
        if not 0 <= replica < self.replicas:
            raise StreamError(
                f"{what}({name!r}): replica {replica} out of range; the graph has "
                f"{self.replicas} replica(s)"
            )
        return int(replica)

    def _remote(self, name: str, row: int, what: str) -> np.ndarray:
        buf = self.runtime.remote.get(name)
        if buf is None:
            raise StreamError(
                f"{what}: no remote buffer named {name!r}; remote buffers: "
                f"{sorted(self.runtime.remote)}"
            )
        if not 0 <= row < buf.shape[1]:
            raise StreamError(
                f"{what}({name!r}): repeat index {row} out of range [0, {buf.shape[1]})"
            )
        return buf

    @locked
    def copy_to_remote_buffer(
        self, name: str, data: Any, repeat_index: int = 0, replica: int | None = None
    ) -> None:
        buf = self._remote(name, repeat_index, "copy_to_remote_buffer")
        arr = exact_cast(
            data, self.state.remote_buffers[name].dtype, f"copy_to_remote_buffer({name!r})"
        )
        if arr.size != buf.shape[2]:
            raise StreamError(
                f"copy_to_remote_buffer({name!r}): {arr.size} elements, rows have {buf.shape[2]}"
            )
        buf[self._replica(replica, "copy_to_remote_buffer", name), repeat_index] = arr.reshape(-1)

    @locked
    def copy_from_remote_buffer(
        self, name: str, repeat_index: int = 0, replica: int = 0
    ) -> np.ndarray:
        buf = self._remote(name, repeat_index, "copy_from_remote_buffer")
        return buf[self._replica(replica, "copy_from_remote_buffer", name), repeat_index].copy()

    @locked
    def write_remote_buffer(self, name: str, data: Any, replica: int | None = None) -> None:
        """Write every repeat of remote buffer ``name`` at once: ``data`` is
        ``[repeats, elements]`` (any shape of that size), for one replica or, with
        ``replica=None``, for every replica (a Tremula extension of
        ``copy_to_remote_buffer``, which writes one repeat)."""
        buf = self._remote(name, 0, "write_remote_buffer")
        arr = exact_cast(
            data, self.state.remote_buffers[name].dtype, f"write_remote_buffer({name!r})"
        )
        if arr.size != buf.shape[1] * buf.shape[2]:
            raise StreamError(
                f"write_remote_buffer({name!r}): {arr.size} elements; the buffer holds "
                f"{buf.shape[1]} repeats of {buf.shape[2]}"
            )
        rows = self._replica(replica, "write_remote_buffer", name)
        buf[rows] = arr.reshape(buf.shape[1:])

    @locked
    def read_remote_buffer(self, name: str, replica: int = 0) -> np.ndarray:
        """Every repeat of remote buffer ``name`` of one replica, ``[repeats, elements]``
        (a copy)."""
        buf = self._remote(name, 0, "read_remote_buffer")
        return buf[self._replica(replica, "read_remote_buffer", name)].copy()
