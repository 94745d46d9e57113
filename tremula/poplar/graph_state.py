"""What a graph and its virtual graphs hold: the variables, the address space of each element
type with the tile of every element, and the :class:`GraphState` that the graph views share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.errors import GraphError
from tremula.poplar.codelet import CodeletRegistry
from tremula.poplar.handles import (
    ComputeSet,
    DataStream,
    Function,
    FunctionBuffer,
    HostFunction,
    RemoteBuffer,
)
from tremula.poplar.intervals import distinct
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import Type
from tremula.poplar.vertices import VertexGroup
from tremula.target import Target


@dataclass
class VariableInfo:
    id: int
    name: str
    dtype: Type
    shape: tuple[int, ...]
    start: int  # first address in the space of dtype
    constant: np.ndarray | None = None  # value of a constant (flat)
    addresses: np.ndarray | None = None  # the arange every view of the variable derives from

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_constant(self) -> bool:
        return self.constant is not None


class Space:
    """The address space of one element type: all variables of that type, end to end, with
    the tile of every element (-1 while unmapped)."""

    def __init__(self, dtype: Type) -> None:
        self.dtype = dtype
        self.size = 0
        self.tile_of = np.full(1024, -1, dtype=np.int32)
        self.var_starts: list[int] = []
        self.var_ids: list[int] = []

    def allocate(self, n: int, var_id: int) -> int:
        start = self.size
        if start + n > self.tile_of.size:
            grown = np.full(max(2 * self.tile_of.size, start + n), -1, dtype=np.int32)
            grown[:start] = self.tile_of[:start]
            self.tile_of = grown
        self.size += n
        self.var_starts.append(start)
        self.var_ids.append(var_id)
        return start

    def tiles(self) -> np.ndarray:
        return self.tile_of[: self.size]

    def variable_at(self, addresses: np.ndarray) -> np.ndarray:
        """The variable id owning each address."""
        pos = np.searchsorted(np.asarray(self.var_starts), addresses, side="right") - 1
        return np.asarray(self.var_ids, dtype=np.int64)[pos]


class GraphState:
    """Everything a graph and its virtual graphs hold."""

    def __init__(self, target: Target, replication_factor: int) -> None:
        self.target = target
        self.replication_factor = replication_factor
        self.spaces: dict[Type, Space] = {}
        self.variables: list[VariableInfo] = []
        self.compute_sets: list[ComputeSet] = []
        self.vertex_groups: list[list[VertexGroup]] = []  # per compute set
        self.num_vertices = 0
        self.codelets = CodeletRegistry()
        self.streams: dict[str, DataStream] = {}
        self.remote_buffers: dict[str, RemoteBuffer] = {}
        self.functions: list[Function] = []
        self.function_buffers: dict[int, FunctionBuffer] = {}
        self.host_functions: dict[str, HostFunction] = {}
        self.host_writes: dict[str, Tensor] = {}
        self.host_reads: dict[str, Tensor] = {}
        self.initial_values: list[tuple[Tensor, np.ndarray]] = []
        self.address_roots: dict[int, int] = {}  # id(variable arange) -> its first address
        self.generation = 0  # bumped on every change (a refused call leaves it as it was)

    def space(self, dtype: Type) -> Space:
        sp = self.spaces.get(dtype)
        if sp is None:
            sp = self.spaces[dtype] = Space(dtype)
        return sp

    def variable_names_of(self, t: Tensor) -> list[str]:
        if t.num_elements == 0:
            return []
        ids = distinct(self.space(t.dtype).variable_at(t.addresses.reshape(-1)))
        return [self.variables[int(i)].name for i in ids]

    def check_name(self, name: str, what: str) -> None:
        taken = (
            set(self.streams)
            | set(self.remote_buffers)
            | set(self.host_writes)
            | set(self.host_reads)
            | set(self.host_functions)
        )
        if not name:
            raise GraphError(f"{what}: a handle name must not be empty")
        if name in taken:
            raise GraphError(f"{what}: handle name {name!r} is already used in this graph")


__all__ = ["GraphState", "Space", "VariableInfo"]
