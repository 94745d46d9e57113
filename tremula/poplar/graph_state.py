"""What a graph and its virtual graphs hold: the variables, the address space of each element
type with the tile of every element, and the :class:`GraphState` that the graph views share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.errors import GraphError
from tremula.poplar.addresses import AddressList
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
            capacity = max(self.tile_of.size * 3 // 2, start + n)
            try:  # in place where nothing views the table (a realloc: no copy)
                self.tile_of.resize(capacity, refcheck=True)
            except ValueError:
                grown = np.empty(capacity, dtype=np.int32)
                grown[:start] = self.tile_of[:start]
                self.tile_of = grown
        self.tile_of[start : start + n] = -1
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

    def variables_in(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The sorted distinct ids of the variables owning the addresses of the runs
        ``[start, start + length)`` (``length >= 1``): the variables from each run's first
        address's to its last's, empty ones passed over."""
        var_starts = np.asarray(self.var_starts, dtype=np.int64)
        sizes = np.diff(np.r_[var_starts, self.size])
        lo = np.searchsorted(var_starts, starts, side="right") - 1
        hi = np.searchsorted(var_starts, starts + lengths - 1, side="right") - 1
        count = hi - lo + 1
        pos = np.repeat(lo - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        return distinct(np.asarray(self.var_ids, dtype=np.int64)[pos[sizes[pos] > 0]])


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

    def variable_ids_of(self, t: Tensor) -> np.ndarray:
        """The sorted distinct ids of the variables holding ``t``'s elements (found from its
        runs of consecutive addresses)."""
        if t.num_elements == 0:
            return np.zeros(0, dtype=np.int64)
        starts, lengths = AddressList(t.addresses, self.address_roots).runs()
        return self.space(t.dtype).variables_in(starts, lengths)

    def index_of(self, t: Tensor) -> slice | np.ndarray:
        """``t``'s addresses as an index of its space's arrays: a slice (of the flat
        elements) where they are consecutive and their layout says so (no pass over them),
        else the addresses (shaped as ``t``)."""
        addrs = AddressList(t.addresses, self.address_roots)
        if addrs.layout is not None and t.num_elements and addrs.is_consecutive():
            first = addrs.first()
            return slice(first, first + t.num_elements)
        return t.addresses

    def variable_names_of(self, t: Tensor) -> list[str]:
        return [self.variables[int(i)].name for i in self.variable_ids_of(t)]

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
