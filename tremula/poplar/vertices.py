"""Vertex storage: vertices are kept structure-of-arrays, in groups of one vertex type.

``add_vertex`` makes a group of one vertex, the bulk ``add_vertices`` a group of many; the
engine concatenates the groups of a type within a compute set when it compiles. A field's
connection is the flat array of element addresses of all the group's vertices plus the
number of elements per vertex (and, for vector lists, per sub-vector).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.errors import CodeletError
from tremula.poplar.addresses import AddressList
from tremula.poplar.codelet import Field, VertexType
from tremula.poplar.handles import ComputeSet
from tremula.poplar.tensor import Tensor
from tremula.poplar.types import Type, as_type


@dataclass
class FieldConnection:
    """Where the field of each vertex of a group points: ``addrs`` lists all vertices'
    elements in vertex order (compactly, when the connection is a view of one variable)."""

    dtype: Type
    addrs: AddressList
    lengths: np.ndarray  # [n] elements per vertex
    sub_lengths: np.ndarray | None = None  # vector lists: flat sub-vector lengths
    sub_counts: np.ndarray | None = None  # vector lists: [n] sub-vectors per vertex
    bulk_view: bool = False  # connected to one tensor in bulk: ``addrs.source`` is its view

    @property
    def addresses(self) -> np.ndarray:
        """The flat address array (materialised on first use)."""
        return self.addrs.flat()

    @property
    def source(self) -> np.ndarray | None:
        """The connected tensor's N-d address view, for strided field views."""
        return self.addrs.source if self.bulk_view else None


@dataclass
class VertexGroup:
    compute_set: ComputeSet
    vertex_type: VertexType
    n: int
    tiles: np.ndarray  # [n] int32, -1 while unmapped
    edges: dict[str, FieldConnection] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)
    perf_estimates: np.ndarray | None = None  # [n] float, NaN where not set
    first_vertex_id: int = 0


def _where(vtype: VertexType, name: str) -> str:
    return f"vertex {vtype.name!r} field {name!r}"


def _check_tensor(t: Any, f: Field, vtype: VertexType, expected: Type | None) -> Tensor:
    if not isinstance(t, Tensor):
        raise CodeletError(f"{_where(vtype, f.name)}: expected a Tensor, got {type(t).__name__}")
    if expected is not None and t.dtype is not expected:
        raise CodeletError(
            f"{_where(vtype, f.name)}: expected type {expected}, got tensor of "
            f"type {t.dtype} (shape {t.shape})"
        )
    return t


def _check_lengths(lengths: np.ndarray, f: Field, vtype: VertexType) -> None:
    want = 1 if f.kind == "scalar" else f.size
    if want is not None and np.any(lengths != want):
        bad = int(np.flatnonzero(lengths != want)[0])
        raise CodeletError(
            f"{_where(vtype, f.name)}: expected {want} element(s) "
            f"({f.kind}), got {int(lengths[bad])} for vertex {bad} of the call"
        )


@dataclass(frozen=True)
class Segments:
    """A bulk connection without a tensor per vertex: vertex ``i`` gets the next
    ``lengths[i]`` elements of ``tensor`` (flattened, in order); for a vector-list field,
    ``sub_counts[i]`` sub-vectors of the next ``lengths`` (one length per sub-vector)."""

    tensor: Tensor
    lengths: Any
    sub_counts: Any = None


def _connect_segments(
    vtype: VertexType, f: Field, seg: Segments, n: int, expected: Type | None, roots: dict
) -> FieldConnection:
    t = _check_tensor(seg.tensor, f, vtype, expected)
    lengths = np.asarray(seg.lengths, dtype=np.int64).reshape(-1)
    if np.any(lengths < 0) or lengths.sum() != t.num_elements:
        raise CodeletError(
            f"{_where(vtype, f.name)}: segment lengths sum to "
            f"{int(lengths.sum())}, the tensor has {t.num_elements} elements"
        )
    addrs = AddressList(t.addresses, roots)
    if f.kind != "vector_list":
        if lengths.size != n:
            raise CodeletError(f"{_where(vtype, f.name)}: {lengths.size} segments for {n} vertices")
        _check_lengths(lengths, f, vtype)
        return FieldConnection(t.dtype, addrs, lengths, bulk_view=True)
    counts = np.asarray(seg.sub_counts, dtype=np.int64).reshape(-1)
    if counts.size != n or counts.sum() != lengths.size:
        raise CodeletError(
            f"{_where(vtype, f.name)}: sub_counts must have {n} entries summing "
            f"to the {lengths.size} sub-vector lengths"
        )
    per_vertex = _sum_per_vertex(lengths, counts)
    return FieldConnection(t.dtype, addrs, per_vertex, lengths, counts, bulk_view=True)


def _sum_per_vertex(sub_lengths: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Elements per vertex of a vector list: the sum of its sub-vector lengths."""
    ends = np.cumsum(np.r_[0, sub_lengths])
    bounds = np.r_[0, np.cumsum(counts)]
    return (ends[bounds[1:]] - ends[bounds[:-1]]).astype(np.int64)


def connect_edge(
    vtype: VertexType, f: Field, value: Any, n: int, bulk: bool, roots: dict | None = None
) -> FieldConnection:
    """Connect field ``f`` of ``n`` vertices to ``value`` (see ``Graph.add_vertices``);
    ``roots`` (the graph's variable aranges) lets views of one variable stay compact."""
    expected = vtype.field_dtype(f)
    roots = {} if roots is None else roots
    if isinstance(value, Segments):
        return _connect_segments(vtype, f, value, n, expected, roots)
    if f.kind == "vector_list":
        lists = [value] if not bulk else list(value)
        if len(lists) != n:
            raise CodeletError(f"{_where(vtype, f.name)}: {len(lists)} lists for {n} vertices")
        tensors = [[_check_tensor(t, f, vtype, expected) for t in lst] for lst in lists]
        flat = [t for lst in tensors for t in lst]
        dtype = expected or (flat[0].dtype if flat else None)
        if dtype is None:
            raise CodeletError(f"{_where(vtype, f.name)}: cannot infer the type of an empty list")
        if any(t.dtype is not dtype for t in flat):
            raise CodeletError(f"{_where(vtype, f.name)}: sub-vectors of different types")
        sub = np.array([t.num_elements for t in flat], dtype=np.int64)
        counts = np.array([len(lst) for lst in tensors], dtype=np.int64)
        addr = (
            np.concatenate([t.addresses.reshape(-1) for t in flat])
            if flat
            else np.zeros(0, np.int64)
        )
        per_vertex = _sum_per_vertex(sub, counts)
        return FieldConnection(dtype, AddressList.of(addr), per_vertex, sub, counts)
    if isinstance(value, Tensor):
        t = _check_tensor(value, f, vtype, expected)
        if bulk:
            if t.rank == 0 or t.shape[0] != n:
                raise CodeletError(
                    f"{_where(vtype, f.name)}: bulk connection needs a leading "
                    f"dimension of {n} (one row per vertex), got shape {t.shape}"
                )
            per = t.num_elements // n if n else 0
            lengths = np.full(n, per, dtype=np.int64)
        else:
            lengths = np.array([t.num_elements], dtype=np.int64)
        _check_lengths(lengths, f, vtype)
        return FieldConnection(t.dtype, AddressList(t.addresses, roots), lengths, bulk_view=True)
    if bulk and isinstance(value, Sequence) and not isinstance(value, str):
        items = [_check_tensor(t, f, vtype, expected) for t in value]
        if len(items) != n:
            raise CodeletError(f"{_where(vtype, f.name)}: {len(items)} tensors for {n} vertices")
        dtype = expected or (items[0].dtype if items else None)
        if dtype is None:
            raise CodeletError(f"{_where(vtype, f.name)}: cannot infer the type of an empty list")
        if any(t.dtype is not dtype for t in items):
            raise CodeletError(f"{_where(vtype, f.name)}: tensors of different types")
        lengths = np.array([t.num_elements for t in items], dtype=np.int64)
        _check_lengths(lengths, f, vtype)
        addr = (
            np.concatenate([t.addresses.reshape(-1) for t in items])
            if items
            else np.zeros(0, np.int64)
        )
        return FieldConnection(dtype, AddressList.of(addr), lengths)
    raise CodeletError(
        f"{_where(vtype, f.name)}: expected a Tensor"
        f"{' or a list of tensors' if bulk else ''}, got {type(value).__name__}"
    )


def connect_state(vtype: VertexType, f: Field, value: Any, n: int, bulk: bool) -> np.ndarray:
    """Values of state field ``f`` for ``n`` vertices: ``[n]`` for scalars; for vector state
    an object array of ``n`` 1-D arrays."""
    dtype = as_type(vtype.field_dtype(f) or np.asarray(value).dtype).numpy
    try:
        if f.kind == "scalar":
            arr = np.asarray(value)
            if bulk:
                return np.broadcast_to(arr.astype(dtype), (n,)).copy()
            if arr.size != 1:
                raise CodeletError(
                    f"{_where(vtype, f.name)}: scalar state needs one value, got shape {arr.shape}"
                )
            return arr.reshape(1).astype(dtype)
        rows = list(value) if bulk else [value]
        if len(rows) != n:
            raise CodeletError(f"{_where(vtype, f.name)}: {len(rows)} values for {n} vertices")
        out = np.empty(n, dtype=object)
        for i, r in enumerate(rows):
            out[i] = np.asarray(r, dtype=dtype).reshape(-1)
        return out
    except (TypeError, ValueError) as err:
        raise CodeletError(f"{_where(vtype, f.name)}: bad state value {value!r}: {err}") from None


def _concat_present(arrays: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """The arrays joined, or None for a field that has none (not a vector list)."""
    present = [a for a in arrays if a is not None]
    return np.concatenate(present) if present and len(present) == len(arrays) else None


def concat_groups(groups: Sequence[VertexGroup]) -> VertexGroup:
    """One group holding the vertices of ``groups`` (same compute set and type) in order."""
    if len(groups) == 1:
        return groups[0]
    g0 = groups[0]
    edges = {}
    for name in g0.edges:
        conns = [g.edges[name] for g in groups]
        edges[name] = FieldConnection(
            conns[0].dtype,
            AddressList.of(np.concatenate([c.addresses for c in conns])),
            np.concatenate([c.lengths for c in conns]),
            _concat_present([c.sub_lengths for c in conns]),
            _concat_present([c.sub_counts for c in conns]),
        )
    state = {name: np.concatenate([g.state[name] for g in groups]) for name in g0.state}
    perf = None
    if any(g.perf_estimates is not None for g in groups):
        perf = np.concatenate(
            [
                g.perf_estimates if g.perf_estimates is not None else np.full(g.n, np.nan)
                for g in groups
            ]
        )
    return VertexGroup(
        g0.compute_set,
        g0.vertex_type,
        sum(g.n for g in groups),
        np.concatenate([g.tiles for g in groups]),
        edges,
        state,
        perf,
        g0.first_vertex_id,
    )
