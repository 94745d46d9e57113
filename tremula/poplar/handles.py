"""Graph objects that are not tensors: streams, remote buffers, functions, host functions,
compute sets and vertex handles. Each is a small immutable value; the graph owns the state."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

from tremula.poplar.types import Type

if TYPE_CHECKING:
    from tremula.poplar.program import Program


@dataclass(frozen=True, eq=False)
class ComputeSet:
    """A set of vertices that run in parallel in one compute phase."""

    id: int
    name: str

    def __repr__(self) -> str:
        return f"ComputeSet({self.id}, {self.name!r})"


@dataclass(frozen=True, eq=False)
class Vertex:
    """A handle to one vertex: ``v["field"]`` names one of its fields."""

    compute_set: ComputeSet
    group: int
    index: int
    type_name: str

    def __getitem__(self, field_name: str) -> VertexField:
        return VertexField(self, field_name)

    def __repr__(self) -> str:
        return f"Vertex({self.type_name} in {self.compute_set.name!r})"


@dataclass(frozen=True, eq=False)
class Vertices(Sequence[Vertex]):
    """The handles of a group of vertices added at once (``Graph.add_vertices``), made on
    demand: a compute set of 1472 vertices costs one object until its handles are used."""

    compute_set: ComputeSet
    group: int
    size: int
    type_name: str

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, index: int) -> Vertex: ...

    @overload
    def __getitem__(self, index: slice) -> list[Vertex]: ...

    def __getitem__(self, index: int | slice) -> Vertex | list[Vertex]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.size))]
        i = int(index)
        if not -self.size <= i < self.size:
            raise IndexError(
                f"vertex {index} of a group of {self.size} {self.type_name} vertices in "
                f"{self.compute_set.name!r}"
            )
        return Vertex(self.compute_set, self.group, i % self.size, self.type_name)

    def __iter__(self) -> Iterator[Vertex]:
        return (Vertex(self.compute_set, self.group, i, self.type_name) for i in range(self.size))

    def __repr__(self) -> str:
        return f"Vertices({self.size} x {self.type_name} in {self.compute_set.name!r})"


@dataclass(frozen=True)
class VertexField:
    vertex: Vertex
    name: str


@dataclass(frozen=True, eq=False)
class DataStream:
    """A FIFO between host and device: ``direction`` is ``host_to_device`` or
    ``device_to_host``. ``replication_mode`` is ``replicate`` (one buffer per replica) or
    ``broadcast`` (one host buffer feeds every replica; host-to-device only)."""

    name: str
    dtype: Type
    num_elements: int
    direction: str
    replication_mode: str = "replicate"

    @property
    def is_host_to_device(self) -> bool:
        return self.direction == "host_to_device"

    def __repr__(self) -> str:
        return f"DataStream({self.name!r}, {self.dtype}, {self.num_elements}, {self.direction})"


@dataclass(frozen=True, eq=False)
class RemoteBuffer:
    """Storage outside tile memory (streaming memory): ``repeats`` rows of
    ``num_elements`` elements each, per replica."""

    name: str
    dtype: Type
    num_elements: int
    repeats: int = 1

    def __repr__(self) -> str:
        return (
            f"RemoteBuffer({self.name!r}, {self.dtype}, {self.num_elements}, "
            f"repeats={self.repeats})"
        )


@dataclass(frozen=True, eq=False)
class Function:
    """A program the graph compiles once and calls from many places with ``Call``."""

    id: int
    program: Program
    name: str = ""

    def __repr__(self) -> str:
        return f"Function({self.id}, {self.name!r})"


@dataclass(frozen=True, eq=False)
class FunctionBuffer:
    """Streaming-memory storage of a function's code; ``Copy(buffer, function)`` loads it.
    A function with a buffer has its code in tile memory only from a load to its last call."""

    function: Function
    mapping_type: str = "remote"


@dataclass(frozen=True)
class HostFunctionArg:
    dtype: Type
    num_elements: int


@dataclass(frozen=True, eq=False)
class HostFunction:
    """A Python callback the device calls with arrays: ``Call(hf, inputs, outputs)``; the
    engine connects the callback with ``connect_host_function(name, fn)``."""

    name: str
    inputs: tuple[HostFunctionArg, ...]
    outputs: tuple[HostFunctionArg, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"HostFunction({self.name!r})"
