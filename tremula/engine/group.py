"""A compute set's vertices of one type, compiled: gather plans for every field, per-vertex
cycle estimates and state sizes, and the views through which a codelet reads its fields.

Running it (:meth:`CompiledGroup.run`) is a few NumPy calls: gather, the codelet's batched
compute, scatter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from tremula.engine.fieldlayout import cover_layout, grid_layout, numeric_affine
from tremula.engine.plan import Gather
from tremula.engine.streams import ALL
from tremula.errors import CodeletError
from tremula.poplar import blocks
from tremula.poplar.batch import Batch, VertexInfo
from tremula.poplar.codelet import VertexType
from tremula.poplar.graph import GraphState
from tremula.poplar.tensor import affine_layout
from tremula.poplar.vertices import VertexGroup


@dataclass(eq=False)
class CompiledGroup:
    """All vertices of one type in one compute set."""

    vertex_type: VertexType
    n: int
    tiles: np.ndarray
    vertex_ids: np.ndarray
    gathers: dict[str, Gather]
    cycles: np.ndarray  # [n] estimator value (context cycles, tile cycles if supervisor)
    flops: np.ndarray
    state_bytes: np.ndarray  # [n] vertex instance state
    descriptor_bytes: np.ndarray  # [n] vector-list descriptors
    field_data_bytes: np.ndarray  # [n] variable-size state data
    edge_ptr_bytes: np.ndarray  # [n]
    batch: Batch
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    outputs_only: tuple[str, ...]
    sources: dict[str, np.ndarray] = field(default_factory=dict)  # N-d address views
    roots: dict[int, int] = field(default_factory=dict)  # variable aranges (GraphState)
    #: decided layouts: (field, shape), ("#cover", field), ("#grid", field, block) -> layout
    _layouts: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    _views: dict[tuple[str, tuple[int, ...]], Any] = field(default_factory=dict)
    _fast: Any = None  # the codelet's prepared closure (see Codelet.prepare)
    _fast_storage: Any = None
    #: the cycles of the last run for codelets that give ``run_cycles`` (None: the
    #: estimates ``cycles``; see Codelet's notes)
    live_cycles: np.ndarray | None = None
    #: checked cycles of the arrays run_cycles returned lately, by the array's id (the
    #: array kept beside them so that the id stays its own): a run that returns one of
    #: them again (a propagation step's buckets seen before) is not checked again
    _live_seen: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict)

    @cached_property
    def dynamic(self) -> bool:
        """Whether the vertices' cycles depend on the data (the codelet's ``run_cycles``)."""
        return getattr(self.vertex_type.codelet, "run_cycles", None) is not None

    def run(self, storage: dict, rsel: slice | np.ndarray, replica_ids: np.ndarray) -> None:
        """Run every vertex of the group on the replicas ``replica_ids`` (``rsel`` selects
        their rows: ``slice(None)`` when all replicas run). Fields are gathered when the
        codelet first touches them; output buffers that are not storage views are scattered
        back afterwards."""
        full = isinstance(rsel, slice)
        if full and self._fast_storage is not storage:
            self.prepared(storage, replica_ids)
        if full and self._fast is not None:
            self._fast()
            return
        batch = self.batch
        batch._begin(self, storage, rsel, replica_ids)
        codelet = self.vertex_type.codelet
        codelet.compute(batch)
        for name in batch._scatter:
            self.gathers[name].write(storage, rsel, batch._data[name])
        if self.dynamic:
            self.live_cycles = _run_cycles(self, batch)

    def prepared(self, storage: dict, replica_ids: np.ndarray) -> Any:
        """The codelet's prepared run of every vertex on all replicas of ``storage``
        (``Codelet.prepare``: a call without arguments), asked once per loaded storage;
        None when the codelet prepares none (or its cycles depend on the data): the group
        then runs through ``compute``."""
        if self._fast_storage is not storage:
            self._fast_storage = storage
            self._fast = None
            prepare = None if self.dynamic else getattr(self.vertex_type.codelet, "prepare", None)
            if prepare is not None:
                self.batch._begin(self, storage, ALL, replica_ids)
                self._fast = prepare(self.batch)
        return self._fast

    def materialize(
        self, name: str, storage: dict, rsel: slice | np.ndarray, replicas: int
    ) -> tuple[np.ndarray, bool]:
        """Field ``name`` of all vertices, ``[replica, element]``, and whether it must be
        scattered back after the compute (a buffer that is not a view of storage)."""
        g = self.gathers[name]
        direct = isinstance(rsel, slice) and g.is_view
        if name not in self.writes:
            arr = g.read(storage, rsel).view()
            arr.flags.writeable = False
            return arr, False
        if direct:
            return storage[g.dtype][:, g.index], False
        if name in self.outputs_only:
            return np.zeros((replicas, g.size), dtype=g.dtype.numpy), True
        return g.read(storage, rsel), True

    def addresses(self, name: str, positions: np.ndarray) -> np.ndarray:
        """The addresses of the elements at ``positions`` (``[k]``) of field ``name``."""
        index = self.gathers[name].index
        return index.start + positions if isinstance(index, slice) else index[positions]

    def at(self, name: str, positions: np.ndarray, storage: dict, rsel: slice | np.ndarray):
        """(storage array, row index, address index) of the elements at ``positions`` of
        field ``name`` (``[k]``, or ``[replica, k]`` per selected replica), for reading or
        writing those elements alone (no gather of the whole field)."""
        g = self.gathers[name]
        index = g.index
        addr = index.start + positions if isinstance(index, slice) else index[positions]
        arr = storage[g.dtype]
        rows = np.arange(arr.shape[0])[rsel][:, None]
        return arr, rows, addr if addr.ndim == 2 else addr[None, :]

    def strided(
        self, name: str, shape: tuple[int, ...], storage: dict, rsel: slice | np.ndarray
    ) -> np.ndarray | None:
        """Field ``name`` as ``[replica, *shape]``, a zero-copy strided view of storage,
        when the connected tensor's addresses reshape to ``shape`` as an affine view of one
        variable (decided once per shape); None otherwise. Views of a storage array are made
        once and reused by later runs (storage lives as long as the loaded engine)."""
        key = (name, shape)
        if key not in self._layouts:
            self._layouts[key] = self._affine(name, shape)
        layout = self._layouts[key]
        if layout is None or not isinstance(rsel, slice):
            return None
        arr = storage[self.gathers[name].dtype]
        cached = self._views.get(key)
        if cached is not None and cached[0] is arr:
            return cached[1]
        start, strides = layout
        item = arr.itemsize
        view = np.lib.stride_tricks.as_strided(
            arr[:, start:],
            shape=(arr.shape[0], *shape),
            strides=(arr.strides[0], *(s * item for s in strides)),
            writeable=name in self.writes,
        )
        self._views[key] = (arr, view)
        return view

    def repeated(
        self, name: str, shape: tuple[int, ...], storage: dict, rsel: slice | np.ndarray
    ) -> np.ndarray | None:
        """Read-only field ``name`` as ``[replica, *shape]`` when its addresses repeat along
        some axes of ``shape`` (an operand block that every vertex of a row or column of a
        grid reads): only the distinct elements are gathered, the repeats are zero strides
        of a read-only broadcast (decided once per shape); None when no axis repeats."""
        plan = self._repeat_plan(name, shape)
        if plan is None:
            return None
        index, reduced = plan
        arr = storage[self.gathers[name].dtype]
        if isinstance(rsel, slice):
            values = arr[rsel].take(index, axis=1)
        else:
            values = arr[rsel[:, None], index[None, :]]
        rows = values.shape[0]
        return np.broadcast_to(values.reshape(rows, *reduced), (rows, *shape))

    def stable_repeated(
        self, name: str, shape: tuple[int, ...], storage: dict
    ) -> tuple[np.ndarray, Any] | None:
        """:meth:`repeated` over a kept buffer of the distinct elements, refilled by the
        ``refresh()`` returned with the broadcast view (for a codelet's prepared run)."""
        plan = self._repeat_plan(name, shape)
        if plan is None:
            return None
        index, reduced = plan
        arr = storage[self.gathers[name].dtype]
        buf = np.empty((arr.shape[0], index.size), dtype=arr.dtype)
        refresh = blocks.gatherer(arr, index, buf)  # block copies where they pay, or a take
        rows = arr.shape[0]
        return np.broadcast_to(buf.reshape(rows, *reduced), (rows, *shape)), refresh

    def _repeat_plan(self, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, tuple] | None:
        """:meth:`_repeats` of ``(name, shape)``, decided once."""
        key = ("#repeat", name, shape)
        if key not in self._layouts:
            self._layouts[key] = self._repeats(name, shape)
        return self._layouts[key]

    def _repeats(self, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, tuple] | None:
        """(distinct addresses, their shape) of a read-only field whose addresses reshaped
        to ``shape`` do not change along some axes; None if none or not read-only."""
        g = self.gathers[name]
        if name in self.writes or g.is_view or g.size != int(np.prod(shape, dtype=np.int64)):
            return None
        index = np.asarray(g.index).reshape(shape)
        keep: list[slice] = []
        for axis, size in enumerate(shape):
            first = index.take([0], axis=axis)
            keep.append(
                slice(0, 1)
                if size > 1 and np.array_equal(np.broadcast_to(first, shape), index)
                else slice(None)
            )
        if all(k == slice(None) for k in keep):
            return None
        distinct = index[tuple(keep)]
        return np.ascontiguousarray(distinct).reshape(-1), distinct.shape

    def affine_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape under which field ``name``'s addresses step evenly along every axis
        (``(n,)`` for one stride, ``(rows, row)`` for e.g. a transposed matrix), so that
        :meth:`strided` serves it as a view; None if neither (decided once)."""
        if name not in self._shapes:
            self._shapes[name] = self._find_affine_shape(name)
        return self._shapes[name]

    def _find_affine_shape(self, name: str) -> tuple[int, ...] | None:
        source = self.sources.get(name)
        if source is None or source.size < 2:
            return None
        a = source.reshape(-1).astype(np.int64, copy=False)
        steps = np.diff(a)
        change = np.flatnonzero(steps != steps[0])
        if change.size == 0:
            shape: tuple[int, ...] = (a.size,)
        else:
            row = int(change[0]) + 1  # the first run of equal steps is one row
            if a.size % row:
                return None
            shape = (a.size // row, row)
        return shape if self._affine(name, shape) is not None else None

    def cover(
        self, name: str, storage: dict, rsel: slice | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Read-only field ``name`` whose addresses increase: ``(view, positions)``, the
        zero-copy ``[replica, span]`` view of storage from its first to its last address
        and each element's position in it; None when the addresses do not increase or
        the span is more than twice the field (decided once)."""
        key = ("#cover", name)
        if key not in self._layouts:
            self._layouts[key] = cover_layout(self.gathers[name])
        layout = self._layouts[key]
        if layout is None or not isinstance(rsel, slice) or name in self.writes:
            return None
        lo, span, positions = layout
        view = storage[self.gathers[name].dtype][:, lo : lo + span].view()
        view.flags.writeable = False
        return view, positions

    def permuted_grid(
        self, name: str, block: tuple[int, ...], storage: dict, rsel: slice | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int] | None:
        """Field ``name`` read as blocks of shape ``block`` that all have the same affine
        layout and whose first addresses form an affine grid in *some* order (e.g. a
        reduction's pieces listed tile by tile): ``(view, order, rank)`` where ``view`` is
        the zero-copy ``[replica, *grid, *block]`` strided view of storage (grid in address
        order, ``rank`` axes; the block's first axis may come split in two when its
        addresses step evenly only that way) and ``order[i]`` the grid position (flat) of
        the field's ``i``-th block; None otherwise (decided once). For read-only fields."""
        key = ("#grid", name, block)
        if key not in self._layouts:
            self._layouts[key] = grid_layout(self.sources.get(name), block)
        layout = self._layouts[key]
        if layout is None or not isinstance(rsel, slice) or name in self.writes:
            return None
        start, shape, strides, order, rank = layout
        arr = storage[self.gathers[name].dtype]
        item = arr.itemsize
        view = np.lib.stride_tricks.as_strided(
            arr[:, start:],
            shape=(arr.shape[0], *shape),
            strides=(arr.strides[0], *(s * item for s in strides)),
            writeable=False,
        )
        return view, order, rank

    def _affine(self, name: str, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
        source = self.sources.get(name)
        if source is None or int(np.prod(shape, dtype=np.int64)) != source.size:
            return None
        try:
            addresses = source.reshape(shape)  # a view when NumPy can, else a copy
        except ValueError:
            return None
        layout = affine_layout(addresses, self.roots)
        if layout is None:  # addresses gathered from pieces may still step evenly
            layout = numeric_affine(addresses, distinct=name in self.writes)
        return layout


def _edge_memory(vtype: VertexType, group: VertexGroup) -> tuple[np.ndarray, ...]:
    """(instance state, descriptors, field data, edge pointers) bytes per vertex.

    [proposal] A scalar edge is a 4-byte pointer; a vector edge a pointer and a size (8
    bytes, Poplar's Span layout); a vector list a pointer and count (8) plus 4 bytes of
    DeltaN descriptor per sub-vector; scalar state its size rounded up to 4; vector state a
    pointer and size (8) plus its data in vertexFieldData.
    """
    n = group.n
    inst = np.zeros(n, dtype=np.int64)
    desc = np.zeros(n, dtype=np.int64)
    data = np.zeros(n, dtype=np.int64)
    ptrs = np.zeros(n, dtype=np.int64)
    for name, f in vtype.codelet.fields.items():
        if f.is_edge:
            ptr = 4 if f.kind == "scalar" else 8
            inst += ptr
            ptrs += ptr
            counts = group.edges[name].sub_counts if name in group.edges else None
            if f.kind == "vector_list" and counts is not None:
                desc += 4 * counts
            continue
        dtype = vtype.field_dtype(f)
        size = dtype.size if dtype else 4
        if f.kind == "scalar":
            inst += max(4, size)
        else:
            inst += 8
            vals = group.state.get(name)
            if vals is not None:
                data += np.array([v.size for v in vals], dtype=np.int64) * size
    return inst, desc, data, ptrs


def _estimates(vtype: VertexType, info: VertexInfo, group: VertexGroup) -> np.ndarray:
    cyc = np.asarray(vtype.codelet.cycles(info), dtype=np.float64)
    cyc = np.broadcast_to(cyc, (group.n,)).copy() if cyc.ndim == 0 else cyc
    if cyc.shape != (group.n,):
        raise CodeletError(
            f"codelet {vtype.name!r}: cycles() returned shape {cyc.shape}, "
            f"expected ({group.n},) (one estimate per vertex)"
        )
    if group.perf_estimates is not None:
        fixed = ~np.isnan(group.perf_estimates)
        cyc[fixed] = group.perf_estimates[fixed]
    if np.any(cyc < 0) or not np.all(np.isfinite(cyc)):
        raise CodeletError(f"codelet {vtype.name!r}: cycle estimates must be finite and >= 0")
    return np.ceil(cyc).astype(np.int64)


#: How many distinct ``run_cycles`` results a group (and steps a compute set) keeps.
LIVE_KEPT = 64


def _run_cycles(g: CompiledGroup, batch: Batch) -> np.ndarray | None:
    """The codelet's ``run_cycles`` for this run, checked like the estimates (once per
    array the codelet returns: the same array again is the same cycles)."""
    got = g.vertex_type.codelet.run_cycles(batch)  # type: ignore[attr-defined]
    if got is None:
        return None
    seen = g._live_seen.get(id(got))
    if seen is not None and seen[0] is got:
        return seen[1]
    cyc = np.broadcast_to(np.asarray(got, dtype=np.float64), (g.n,))
    if np.any(cyc < 0) or not np.all(np.isfinite(cyc)):
        raise CodeletError(
            f"codelet {g.vertex_type.name!r}: run_cycles() must give finite cycles >= 0"
        )
    checked = np.ceil(cyc).astype(np.int64)
    if len(g._live_seen) >= LIVE_KEPT:
        g._live_seen.pop(next(iter(g._live_seen)))
    g._live_seen[id(got)] = (got, checked)
    return checked


def compile_group(state: GraphState, group: VertexGroup, vertex_ids: np.ndarray) -> CompiledGroup:
    vtype = group.vertex_type
    lengths = {name: c.lengths for name, c in group.edges.items()}
    subs: dict[str, np.ndarray] = {}
    for name, c in group.edges.items():
        if c.sub_lengths is not None and c.sub_counts is not None:
            subs[name] = c.sub_lengths
            subs[name + "#count"] = c.sub_counts
    states = dict(group.state)
    info = VertexInfo(vtype, group.n, lengths, subs, states, state.target)
    cycles = _estimates(vtype, info, group)
    flops = np.broadcast_to(
        np.asarray(vtype.codelet.flops(info), dtype=np.float64), (group.n,)
    ).copy()
    gathers = {name: Gather(c.dtype, c.addrs) for name, c in group.edges.items()}
    fields = vtype.codelet.fields
    reads = tuple(n for n in group.edges if fields[n].reads)
    writes = tuple(n for n in group.edges if fields[n].writes)
    outputs_only = tuple(n for n in writes if not fields[n].reads)
    inst, desc, data, ptrs = _edge_memory(vtype, group)
    custom = getattr(vtype.codelet, "state_bytes", None)
    if custom is not None:  # the codelet states its instance size (edge pointers included)
        inst = np.broadcast_to(np.asarray(custom(info), dtype=np.int64), (group.n,)).copy()
        if np.any(inst < ptrs):
            raise CodeletError(
                f"codelet {vtype.name!r}: state_bytes() is smaller than the {int(ptrs.max())} "
                f"bytes of edge pointers its fields need"
            )
    batch = Batch(vtype, group.n, lengths, subs, states, state.target, {}, state.replication_factor)
    return CompiledGroup(
        vtype,
        group.n,
        group.tiles.astype(np.int64),
        vertex_ids,
        gathers,
        cycles,
        flops,
        inst,
        desc,
        data,
        ptrs,
        batch,
        reads,
        writes,
        outputs_only,
        {name: c.source for name, c in group.edges.items() if c.source is not None},
        state.address_roots,
    )
