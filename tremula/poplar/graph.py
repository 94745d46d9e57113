"""The graph: variables and constants mapped onto tiles, compute sets of vertices, streams,
remote buffers, functions and host functions.

A :class:`Graph` is a view of a :class:`GraphState` over a range of tiles: the top-level
graph covers every tile of its (per-replica) target; ``create_virtual_graph`` gives a view of
a sub-range whose tile numbers start at 0, as in Poplar. All views share one state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula.errors import CodeletError, GraphError, OutOfMemoryError, VerifyError, format_bytes
from tremula.poplar.codelet import Codelet, CodeletRegistry
from tremula.poplar.handles import (
    ComputeSet,
    DataStream,
    Function,
    FunctionBuffer,
    HostFunction,
    HostFunctionArg,
    RemoteBuffer,
    Vertex,
    VertexField,
    Vertices,
)
from tremula.poplar.program import Program
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import Type, as_type
from tremula.poplar.vertices import Segments, VertexGroup, connect_edge, connect_state
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
        ids = np.unique(self.space(t.dtype).variable_at(t.addresses.reshape(-1)))
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


def _shape(shape: Sequence[int] | int, where: str) -> tuple[int, ...]:
    """A shape as a tuple of ints: whole numbers >= 0 (an int is a 1-D shape)."""
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, str | bytes) or not isinstance(shape, Iterable):
        raise GraphError(
            f"{where}: the shape must be a sequence of whole numbers, got "
            f"{type(shape).__name__} {shape!r}"
        )
    shape = tuple(shape)
    for s in shape:
        number = isinstance(s, int | float | np.integer | np.floating) and not isinstance(s, bool)
        if not number or int(s) != s or s < 0:
            raise GraphError(f"{where}: invalid shape {shape}: {s!r} is not a whole number >= 0")
    return tuple(int(s) for s in shape)


class Graph:
    """A Poplar graph (or a virtual graph over a sub-range of tiles)."""

    def __init__(
        self,
        target: Target,
        replication_factor: int = 1,
        *,
        _state: GraphState | None = None,
        _tiles: tuple[int, int] | None = None,
    ) -> None:
        if _state is None:
            if int(replication_factor) != replication_factor or replication_factor < 1:
                raise GraphError(
                    f"Graph: replication_factor must be a positive integer, got "
                    f"{replication_factor!r}"
                )
            target = _per_replica_target(target, int(replication_factor))
            _state = GraphState(target, int(replication_factor))
        self._state = _state
        self._lo, self._hi = (0, _state.target.num_tiles) if _tiles is None else _tiles
        self.target = self._view_target()

    def _view_target(self) -> Target:
        full = self._state.target
        n = self._hi - self._lo
        if n == full.num_tiles:
            return full
        if self._lo % full.tiles_per_ipu == 0 and n % full.tiles_per_ipu == 0:
            return full.with_overrides(num_ipus=n // full.tiles_per_ipu)
        return full.with_overrides(num_ipus=1, tiles_per_ipu=n, relative_sync_delay_by_tile=None)

    # ---- basic properties ----
    @property
    def state(self) -> GraphState:
        return self._state

    @property
    def replication_factor(self) -> int:
        return self._state.replication_factor

    @property
    def num_tiles(self) -> int:
        return self._hi - self._lo

    @property
    def tile_range(self) -> tuple[int, int]:
        """``[lo, hi)`` of this graph's tiles in the top-level graph's numbering."""
        return self._lo, self._hi

    def get_target(self) -> Target:
        return self.target

    def create_virtual_graph(self, lower_tile: int, upper_tile: int) -> Graph:
        """A graph over tiles ``[lower_tile, upper_tile)`` of this graph, numbered from 0."""
        if not 0 <= lower_tile < upper_tile <= self.num_tiles:
            raise GraphError(
                f"create_virtual_graph: tiles [{lower_tile}, {upper_tile}) outside "
                f"this graph's {self.num_tiles} tiles"
            )
        return Graph(
            self.target, _state=self._state, _tiles=(self._lo + lower_tile, self._lo + upper_tile)
        )

    def get_ipu_graph(self, ipu: int) -> Graph:
        """The virtual graph of IPU ``ipu`` on a multi-IPU target."""
        per = self._state.target.tiles_per_ipu
        if self.num_tiles % per or not 0 <= ipu < self.num_tiles // per:
            raise GraphError(
                f"get_ipu_graph: IPU {ipu} outside this graph's {self.num_tiles // per} IPU(s)"
            )
        return self.create_virtual_graph(ipu * per, (ipu + 1) * per)

    def _tile(self, tile: int | np.integer, what: str) -> int:
        if int(tile) != tile or not 0 <= tile < self.num_tiles:
            raise GraphError(
                f"{what}: tile {tile} is out of range: this graph has "
                f"{self.num_tiles} tiles (0..{self.num_tiles - 1})"
            )
        return int(tile) + self._lo

    def _own(self, t: Tensor, what: str) -> Tensor:
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t.graph is not self._state:
            raise GraphError(f"{what}: tensor {t!r} belongs to another graph")
        return t

    def _changed(self) -> None:
        self._state.generation += 1

    # ---- variables and constants ----
    def add_variable(
        self,
        dtype: Type | str,
        shape: Sequence[int] | int,
        name: str = "",
        mapping: str | None = None,
    ) -> Tensor:
        """A new variable; ``mapping="linear"`` maps it with ``map_tensor_linearly``."""
        dtype = as_type(dtype)
        shape = _shape(shape, f"add_variable {name!r}")
        self._refuse_oversize(dtype, shape, name, "add_variable")
        return self._new_variable(dtype, shape, name, None, mapping)

    def _refuse_oversize(self, dtype: Type, shape: tuple[int, ...], name: str, what: str) -> None:
        """A variable larger than the whole target's memory cannot fit however it is mapped:
        refuse it from its size, before its per-element tables are allocated on the host
        (Poplar would refuse it when compiling; holding it first could exhaust the host)."""
        need = math.prod(shape) * dtype.size
        target = self._state.target
        have = target.total_memory
        if need <= have or target.is_cpu:
            return
        st = self._state
        sizes = sorted(((v.size * v.dtype.size, v.name) for v in st.variables), reverse=True)
        others = ", ".join(f"{n!r} {format_bytes(b)}" for b, n in sizes[:3])
        raise OutOfMemoryError(
            f"{what} {name!r}: out of memory: {shape} {dtype.name} needs {format_bytes(need)} "
            f"({need:,} B) but the target holds {format_bytes(have)} in all "
            f"({target.num_tiles:,} tiles x {format_bytes(target.memory_bytes_per_tile)}): "
            f"all {target.num_tiles:,} tiles would overflow, with at least "
            f"{format_bytes(-(-need // target.num_tiles))} each even spread evenly. "
            + (f"Largest variables so far: {others}. " if others else "")
            + "Split it, shrink it, keep it in a remote buffer, or use more IPUs."
        )

    def _new_variable(
        self,
        dtype: Type,
        shape: tuple[int, ...],
        name: str,
        constant: np.ndarray | None,
        mapping: str | None,
    ) -> Tensor:
        st = self._state
        vid = len(st.variables)
        n = int(np.prod(shape, dtype=np.int64))
        start = st.space(dtype).allocate(n, vid)
        root = np.arange(start, start + n, dtype=np.int64)
        st.address_roots[id(root)] = start
        st.variables.append(
            VariableInfo(vid, name or f"var{vid}", dtype, shape, start, constant, root)
        )
        t = Tensor(st, dtype, root.reshape(shape))
        self._changed()
        if mapping == "linear":
            from tremula.poplar.mapping import map_tensor_linearly

            map_tensor_linearly(self, t)
        elif mapping is not None:
            raise GraphError(f"add_variable {name!r}: mapping {mapping!r} unknown; use 'linear'")
        return t

    def add_constant(
        self, dtype: Type | str, shape: Sequence[int] | int, value: Any, name: str = ""
    ) -> Tensor:
        """A constant of ``shape`` holding ``value`` (broadcast to the shape)."""
        dtype = as_type(dtype)
        shape = _shape(shape, f"add_constant {name!r}")
        self._refuse_oversize(dtype, shape, name or "constant", "add_constant")
        try:
            data = np.broadcast_to(np.asarray(value, dtype=dtype.numpy), shape)
        except ValueError:
            raise GraphError(
                f"add_constant {name!r}: value of shape {np.shape(value)} does "
                f"not broadcast to {shape}"
            ) from None
        return self._new_variable(dtype, shape, name or "constant", data.reshape(-1).copy(), None)

    def clone(self, t: Tensor, name: str = "") -> Tensor:
        """A new variable with ``t``'s type and shape, mapped like ``t``."""
        self._own(t, "clone")
        out = self.add_variable(t.dtype, t.shape, name)
        tiles = self._state.space(t.dtype).tiles()[t.addresses]
        if np.all(tiles >= 0):
            self._state.space(t.dtype).tile_of[out.addresses] = tiles
        return out

    def set_initial_value(self, target: Tensor | VertexField, value: Any) -> None:
        """Initial contents of a variable (applied at ``Engine.load``) or a vertex's state."""
        if isinstance(target, VertexField):
            self._set_state(target, value)
            return
        t = self._own(target, "set_initial_value")
        try:
            data = np.broadcast_to(np.asarray(value, dtype=t.dtype.numpy), t.shape).copy()
        except ValueError:
            raise GraphError(
                f"set_initial_value: value of shape {np.shape(value)} does not fit "
                f"tensor of shape {t.shape}"
            ) from None
        self._state.initial_values.append((t, data))

    # ---- tile mapping ----
    def set_tile_mapping(self, target: Tensor | Vertex, mapping: Any) -> None:
        """Map a tensor or vertex: ``mapping`` is a tile, an array of tiles shaped like the
        tensor, or Poplar's per-tile list of ``(begin, end)`` intervals of the flat tensor."""
        if isinstance(target, Vertex):
            tile = self._tile(mapping, f"set_tile_mapping({target!r})")
            group = self._state.vertex_groups[target.compute_set.id][target.group]
            group.tiles[target.index] = tile
            self._changed()
            return
        t = self._own(target, "set_tile_mapping")
        space = self._state.space(t.dtype)
        if isinstance(mapping, (int, np.integer)):
            space.tile_of[t.addresses] = self._tile(mapping, f"set_tile_mapping({t!r})")
        elif isinstance(mapping, np.ndarray):
            if mapping.size != t.num_elements:
                raise GraphError(
                    f"set_tile_mapping({t!r}): an array of tiles must have one "
                    f"entry per element ({t.num_elements}), got shape "
                    f"{mapping.shape}"
                )
            tiles = mapping.reshape(t.shape).astype(np.int64)
            if tiles.size and (tiles.min() < 0 or tiles.max() >= self.num_tiles):
                bad = int(tiles.max() if tiles.max() >= self.num_tiles else tiles.min())
                raise GraphError(
                    f"set_tile_mapping({t!r}): tile {bad} is out of range: this "
                    f"graph has {self.num_tiles} tiles"
                )
            space.tile_of[t.addresses] = tiles + self._lo
        else:
            self._set_interval_mapping(t, space, mapping)
        self._changed()

    def _set_interval_mapping(self, t: Tensor, space: Space, mapping: Any) -> None:
        flat = t.addresses.reshape(-1)
        tiles = np.full(flat.size, -1, dtype=np.int64)
        if len(mapping) > self.num_tiles:
            raise GraphError(
                f"set_tile_mapping({t!r}): mapping lists {len(mapping)} tiles, "
                f"graph has {self.num_tiles}"
            )
        for tile, intervals in enumerate(mapping):
            for begin, end in intervals:
                if not 0 <= begin <= end <= flat.size:
                    raise GraphError(
                        f"set_tile_mapping({t!r}): interval [{begin}, {end}) on "
                        f"tile {tile} outside the tensor's {flat.size} elements"
                    )
                tiles[begin:end] = tile + self._lo
        space.tile_of[flat[tiles >= 0]] = tiles[tiles >= 0]

    def get_tile_mapping(
        self, t: Tensor, check_complete: bool = True
    ) -> list[list[tuple[int, int]]]:
        """Poplar's mapping of ``t``: for each tile of this graph, the ``(begin, end)``
        intervals of the flattened tensor it holds."""
        t = self._own(t, "get_tile_mapping")
        tiles = self._state.space(t.dtype).tiles()[t.addresses.reshape(-1)].astype(np.int64)
        if check_complete and np.any(tiles < 0):
            bad = int(np.flatnonzero(tiles < 0)[0])
            raise GraphError(f"get_tile_mapping({t!r}): element {bad} (flat index) is not mapped")
        out: list[list[tuple[int, int]]] = [[] for _ in range(self.num_tiles)]
        if tiles.size == 0:
            return out
        cuts = np.flatnonzero(np.diff(tiles)) + 1
        starts = np.r_[0, cuts]
        ends = np.r_[cuts, tiles.size]
        for b, e in zip(starts.tolist(), ends.tolist()):
            tile = int(tiles[b]) - self._lo
            if 0 <= tile < self.num_tiles:
                out[tile].append((b, e))
        return out

    def tiles_of(self, t: Tensor) -> np.ndarray:
        """The tile of every element of ``t`` (this graph's numbering; -1 if unmapped)."""
        tiles = self._state.space(t.dtype).tiles()[t.addresses].astype(np.int64)
        return np.where(tiles >= 0, tiles - self._lo, -1)

    # ---- compute sets and vertices ----
    def add_compute_set(self, name: str = "") -> ComputeSet:
        st = self._state
        cs = ComputeSet(len(st.compute_sets), name or f"cs{len(st.compute_sets)}")
        st.compute_sets.append(cs)
        st.vertex_groups.append([])
        self._changed()
        return cs

    def add_codelets(self, codelets: type[Codelet] | Iterable[type[Codelet]] | Any) -> None:
        """Register codelet classes (a class, a list of classes or a module)."""
        self._state.codelets.add(codelets)

    def add_vertex(
        self,
        cs: ComputeSet,
        vertex_type: str,
        fields: dict[str, Any] | None = None,
        tile: int | None = None,
    ) -> Vertex:
        """Add one vertex; ``fields`` connects edges to tensors and sets state values."""
        group = self._add_group(
            cs, vertex_type, 1, fields or {}, bulk=False, tiles=None if tile is None else [tile]
        )
        return Vertex(cs, len(self._state.vertex_groups[cs.id]) - 1, 0, group.vertex_type.name)

    def add_vertices(
        self,
        cs: ComputeSet,
        vertex_type: str,
        fields: dict[str, Any],
        tiles: Sequence[int] | np.ndarray,
    ) -> Vertices:
        """Add ``len(tiles)`` vertices at once. Each edge value is a tensor with a leading
        dimension of one row per vertex, a list of one tensor per vertex (one list of
        tensors per vertex for vector lists), or :class:`Segments` (consecutive parts of one
        tensor); state values are one per vertex or one for all. Returns their handles
        (:class:`Vertices`, made on demand)."""
        tiles = np.asarray(tiles, dtype=np.int64).reshape(-1)
        group = self._add_group(cs, vertex_type, tiles.size, fields, bulk=True, tiles=tiles)
        gid = len(self._state.vertex_groups[cs.id]) - 1
        return Vertices(cs, gid, group.n, group.vertex_type.name)

    def _add_group(
        self,
        cs: ComputeSet,
        vertex_type: str,
        n: int,
        fields: dict[str, Any],
        bulk: bool,
        tiles: Any,
    ) -> VertexGroup:
        st = self._state
        if (
            not isinstance(cs, ComputeSet)
            or cs.id >= len(st.compute_sets)
            or st.compute_sets[cs.id] is not cs
        ):
            raise GraphError(
                f"add_vertex({vertex_type!r}): {cs!r} is not a compute set of this graph"
            )
        vtype = st.codelets.resolve(vertex_type)
        declared = vtype.codelet.fields
        unknown = sorted(set(fields) - set(declared))
        if unknown:
            raise CodeletError(
                f"vertex {vtype.name!r}: unknown field(s) {unknown}; declared: {sorted(declared)}"
            )
        tile_arr = np.full(n, -1, dtype=np.int32)
        if tiles is not None:
            given = np.asarray(tiles).reshape(-1)
            bad = (given < 0) | (given >= self.num_tiles) | (given != np.round(given))
            if bad.any():  # the first offender gets the usual message
                self._tile(given[np.flatnonzero(bad)[0]].item(), f"add_vertex({vtype.name!r})")
            tile_arr[: given.size] = given.astype(np.int64) + self._lo
        group = VertexGroup(cs, vtype, n, tile_arr, first_vertex_id=st.num_vertices)
        for name, value in fields.items():
            f = declared[name]
            if f.is_edge:
                group.edges[name] = connect_edge(
                    vtype, f, self._owned_value(value), n, bulk, self._state.address_roots
                )
            else:
                group.state[name] = connect_state(vtype, f, value, n, bulk)
        for name, f in declared.items():
            if not f.is_edge and name not in group.state and f.default is not None:
                group.state[name] = connect_state(vtype, f, f.default, n, True)
        st.vertex_groups[cs.id].append(group)
        st.num_vertices += n
        self._changed()
        return group

    def _owned_value(self, value: Any) -> Any:
        if isinstance(value, Segments):
            self._own(value.tensor, "add_vertex")
            return value
        items = value if isinstance(value, (list, tuple)) else [value]
        for t in items:
            if isinstance(t, Tensor):
                self._own(t, "add_vertex")
            elif isinstance(t, (list, tuple)):
                self._owned_value(t)
        return value

    def connect(self, vf: VertexField, value: Any) -> None:
        """Connect a field of an added vertex (Poplar's ``graph.connect(v["in"], t)``)."""
        group = self._group_of(vf)
        f = group.vertex_type.codelet.fields.get(vf.name)
        if f is None:
            raise CodeletError(f"vertex {group.vertex_type.name!r} has no field {vf.name!r}")
        if not f.is_edge:
            self._set_state(vf, value)
            return
        if group.n != 1:
            raise GraphError("connect: use add_vertices' fields to connect bulk-added vertices")
        group.edges[vf.name] = connect_edge(
            group.vertex_type, f, self._owned_value(value), 1, False
        )
        self._changed()

    def _group_of(self, vf: VertexField) -> VertexGroup:
        if not isinstance(vf, VertexField):
            raise GraphError(f"expected a vertex field like v['in'], got {type(vf).__name__}")
        v = vf.vertex
        return self._state.vertex_groups[v.compute_set.id][v.group]

    def _set_state(self, vf: VertexField, value: Any) -> None:
        group = self._group_of(vf)
        f = group.vertex_type.codelet.fields.get(vf.name)
        if f is None or f.is_edge:
            raise CodeletError(
                f"vertex {group.vertex_type.name!r}: {vf.name!r} is not a state field"
            )
        vals = connect_state(group.vertex_type, f, value, 1, False)
        if vf.name not in group.state:
            group.state[vf.name] = connect_state(
                group.vertex_type, f, vals[0] if f.kind == "scalar" else [vals[0]], group.n, True
            )
        group.state[vf.name][vf.vertex.index] = vals[0]
        self._changed()

    def set_perf_estimate(self, v: Vertex, cycles: int) -> None:
        """Fix the cycle estimate of one vertex, overriding its codelet's estimator."""
        group = self._state.vertex_groups[v.compute_set.id][v.group]
        if group.perf_estimates is None:
            group.perf_estimates = np.full(group.n, np.nan)
        if cycles < 0:
            raise GraphError(f"set_perf_estimate({v!r}): cycles must be >= 0, got {cycles}")
        group.perf_estimates[v.index] = float(cycles)
        self._changed()

    def set_field_size(self, vf: VertexField, size: int) -> None:
        raise GraphError(
            "set_field_size: vector fields take their size from the connected "
            "tensor in Tremula; connect a tensor of the wanted size"
        )

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

    # ---- checking ----
    def verify(self) -> None:
        """Check the graph: every element and vertex mapped, every field connected, no
        compute set writing an element twice or reading what it writes. Raises
        :class:`VerifyError` naming the first problems found."""
        from tremula.poplar.verify import verify_graph

        verify_graph(self._state)


def _per_replica_target(target: Target, replicas: int) -> Target:
    if not isinstance(target, Target):
        raise GraphError(f"Graph: expected a Target (device.target), got {type(target).__name__}")
    if replicas == 1 or target.num_ipus == 1:
        return target
    if target.num_ipus % replicas:
        raise GraphError(
            f"Graph: replication_factor {replicas} does not divide the target's "
            f"{target.num_ipus} IPUs"
        )
    return target.with_overrides(num_ipus=target.num_ipus // replicas)


__all__ = ["Graph", "GraphState", "Space", "VariableInfo", "VerifyError"]
