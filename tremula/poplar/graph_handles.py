"""A graph's streams, remote buffers, host read/write handles, functions, function buffers and
host functions. Part of :class:`~tremula.poplar.graph.Graph`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tremula.errors import GraphError
from tremula.poplar.graph_core import GraphCore
from tremula.poplar.handles import (
    DataStream,
    Function,
    FunctionBuffer,
    HostFunction,
    HostFunctionArg,
    RemoteBuffer,
)
from tremula.poplar.program import Program
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import Type, as_type


class HandleMethods(GraphCore):
    """:class:`~tremula.poplar.graph.Graph`'s streams, remote buffers, host handles and
    functions."""

    # ---- streams, remote buffers, host handles ----
    def add_host_to_device_fifo(
        self, name: str, dtype: Type | str, num_elements: int, replication_mode: str = "replicate"
    ) -> DataStream:
        return self._add_stream(name, dtype, num_elements, "host_to_device", replication_mode)

    def add_device_to_host_fifo(
        self, name: str, dtype: Type | str, num_elements: int
    ) -> DataStream:
        return self._add_stream(name, dtype, num_elements, "device_to_host", "replicate")

    def _add_stream(
        self, name: str, dtype: Type | str, n: int, direction: str, mode: str
    ) -> DataStream:
        self._state.check_name(name, f"add stream {name!r}")
        if int(n) != n or n < 1:
            raise GraphError(f"stream {name!r}: num_elements must be a positive integer, got {n}")
        if mode not in ("replicate", "broadcast"):
            raise GraphError(
                f"stream {name!r}: replication_mode {mode!r} unknown; expected "
                f"'replicate' or 'broadcast'"
            )
        s = DataStream(name, as_type(dtype), int(n), direction, mode)
        self._state.streams[name] = s
        self._changed()
        return s

    def add_remote_buffer(
        self, name: str, dtype: Type | str, num_elements: int, repeats: int = 1
    ) -> RemoteBuffer:
        self._state.check_name(name, f"add_remote_buffer {name!r}")
        if int(num_elements) != num_elements or num_elements < 1 or repeats < 1:
            raise GraphError(
                f"remote buffer {name!r}: num_elements ({num_elements}) and "
                f"repeats ({repeats}) must be positive"
            )
        rb = RemoteBuffer(name, as_type(dtype), int(num_elements), int(repeats))
        self._state.remote_buffers[name] = rb
        self._changed()
        return rb

    def create_host_write(self, name: str, t: Tensor) -> None:
        """A handle through which ``Engine.write_tensor(name, data)`` writes ``t``."""
        self._own(t, f"create_host_write({name!r})")
        self._state.check_name(name, f"create_host_write {name!r}")
        self._state.host_writes[name] = t
        self._changed()

    def create_host_read(self, name: str, t: Tensor) -> None:
        """A handle through which ``Engine.read_tensor(name)`` reads ``t``."""
        self._own(t, f"create_host_read({name!r})")
        self._state.check_name(name, f"create_host_read {name!r}")
        self._state.host_reads[name] = t
        self._changed()

    # ---- functions ----
    def add_function(self, program: Program, name: str = "") -> Function:
        if not isinstance(program, Program):
            raise GraphError(f"add_function: expected a program, got {type(program).__name__}")
        st = self._state
        fn = Function(len(st.functions), program, name or f"function{len(st.functions)}")
        st.functions.append(fn)
        self._changed()
        return fn

    def add_function_buffer(self, fn: Function, mapping_type: str = "remote") -> FunctionBuffer:
        """Keep ``fn``'s code in streaming memory; ``Copy(buffer, fn)`` loads it."""
        if not isinstance(fn, Function) or fn.id >= len(self._state.functions):
            raise GraphError(f"add_function_buffer: {fn!r} is not a function of this graph")
        if fn.id in self._state.function_buffers:
            raise GraphError(f"add_function_buffer: {fn!r} already has a buffer")
        fb = FunctionBuffer(fn, mapping_type)
        self._state.function_buffers[fn.id] = fb
        self._changed()
        return fb

    def add_host_function(
        self,
        name: str,
        inputs: Sequence[tuple[Type | str, int]],
        outputs: Sequence[tuple[Type | str, int]],
    ) -> HostFunction:
        """A host function taking and returning flat arrays of the given (type, size)."""
        self._state.check_name(name, f"add_host_function {name!r}")
        hf = HostFunction(
            name,
            tuple(HostFunctionArg(as_type(d), int(n)) for d, n in inputs),
            tuple(HostFunctionArg(as_type(d), int(n)) for d, n in outputs),
        )
        self._state.host_functions[name] = hf
        self._changed()
        return hf
