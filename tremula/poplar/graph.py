"""The graph: variables and constants mapped onto tiles, compute sets of vertices, streams,
remote buffers, functions and host functions.

A :class:`Graph` is a view of a :class:`GraphState` over a range of tiles: the top-level
graph covers every tile of its (per-replica) target; ``create_virtual_graph`` gives a view of
a sub-range whose tile numbers start at 0, as in Poplar. All views share one state.

Its methods live in parts by responsibility: the view and its checks (``graph_core.py``),
variables, constants and tile mapping (here), compute sets and vertices
(``graph_vertices.py``), streams, remote buffers, host handles and functions
(``graph_handles.py``); what the views share is ``graph_state.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tremula.errors import GraphError, OutOfMemoryError, VerifyError, format_bytes
from tremula.poplar.graph_handles import HandleMethods
from tremula.poplar.graph_state import GraphState, Space, VariableInfo
from tremula.poplar.graph_vertices import VertexMethods
from tremula.poplar.handles import Vertex, VertexField
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import Type, as_type


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


class Graph(VertexMethods, HandleMethods):
    """A Poplar graph (or a virtual graph over a sub-range of tiles)."""

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
            tiles = mapping.reshape(t.shape).astype(np.int64, copy=False)
            if tiles.size and (tiles.min() < 0 or tiles.max() >= self.num_tiles):
                bad = int(tiles.max() if tiles.max() >= self.num_tiles else tiles.min())
                raise GraphError(
                    f"set_tile_mapping({t!r}): tile {bad} is out of range: this "
                    f"graph has {self.num_tiles} tiles"
                )
            index = self._state.index_of(t)
            tiles = tiles + self._lo if self._lo else tiles
            space.tile_of[index] = tiles.reshape(-1) if isinstance(index, slice) else tiles
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
        index = self._state.index_of(t)  # (a slice where t is one run: no gather)
        tiles = self._state.space(t.dtype).tiles()[index].astype(np.int64).reshape(t.shape)
        if self._lo == 0:  # (the table holds -1 or a tile)
            return tiles
        return np.where(tiles >= 0, tiles - self._lo, -1)

    def first_unmapped(self, t: Tensor) -> int | None:
        """The first flat element of ``t`` that :meth:`tiles_of` gives a negative tile
        (unmapped, or on a tile below this graph's), or None: read from the tile table
        in place (through a slice where ``t`` is one run)."""
        raw = self._state.space(t.dtype).tiles()[self._state.index_of(t)].reshape(-1)
        below = raw < self._lo
        return int(np.argmax(below)) if below.any() else None

    # ---- checking ----
    def verify(self) -> None:
        """Check the graph: every element and vertex mapped, every field connected, no
        compute set writing an element twice or reading what it writes. Raises
        :class:`VerifyError` naming the first problems found."""
        from tremula.poplar.verify import verify_graph

        verify_graph(self._state)


__all__ = ["Graph", "GraphState", "Space", "VariableInfo", "VerifyError"]
