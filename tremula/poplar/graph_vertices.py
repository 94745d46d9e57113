"""A graph's compute sets and vertices: adding them, connecting their fields, setting their
state and cycle estimates. Part of :class:`~tremula.poplar.graph.Graph`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tremula.errors import CodeletError, GraphError
from tremula.poplar.codelet import Codelet
from tremula.poplar.graph_core import GraphCore
from tremula.poplar.handles import ComputeSet, Vertex, VertexField, Vertices
from tremula.poplar.tensor import Tensor
from tremula.poplar.vertices import Segments, VertexGroup, connect_edge, connect_state


class VertexMethods(GraphCore):
    """:class:`~tremula.poplar.graph.Graph`'s compute sets and vertices."""

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
