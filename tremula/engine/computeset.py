"""Compiling a compute set: vertex groups merged by type, gather plans for every field,
per-vertex cycle estimates, the schedule of worker vertices on the 6 contexts of each tile,
and the exchanges the compute set needs before and after it runs.

Running it (:meth:`CompiledComputeSet.run`) is a few NumPy calls per vertex type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tremula.engine.exchange import LOOKUP_TABLE_MAX, Transfers
from tremula.engine.plan import Gather
from tremula.errors import CodeletError, VerifyError
from tremula.poplar.batch import Batch, VertexInfo
from tremula.poplar.codelet import Codelet, VertexType
from tremula.poplar.graph import GraphState
from tremula.poplar.handles import ComputeSet
from tremula.poplar.tensor import affine_layout
from tremula.poplar.vertices import VertexGroup, concat_groups
from tremula.target import Target


@dataclass
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

    def run(self, storage: dict, rsel: slice | np.ndarray, replica_ids: np.ndarray) -> None:
        """Run every vertex of the group on the replicas ``replica_ids`` (``rsel`` selects
        their rows: ``slice(None)`` when all replicas run). Fields are gathered when the
        codelet first touches them; output buffers that are not storage views are scattered
        back afterwards."""
        full = isinstance(rsel, slice)
        if full and self._fast is not None and self._fast_storage is storage:
            self._fast()
            return
        batch = self.batch
        batch._begin(self, storage, rsel, replica_ids)
        prepare = getattr(self.vertex_type.codelet, "prepare", None)
        if full and prepare is not None and self._fast_storage is not storage:
            self._fast_storage = storage  # asked once per loaded storage
            self._fast = prepare(batch)
            if self._fast is not None:
                self._fast()
                return
        self.vertex_type.codelet.compute(batch)
        for name in batch._scatter:
            self.gathers[name].write(storage, rsel, batch._data[name])

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
            self._layouts[key] = _cover_layout(self.gathers[name])
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
            self._layouts[key] = _grid_layout(self.sources.get(name), block)
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


def _cover_layout(gather: Gather) -> tuple[int, int, np.ndarray] | None:
    starts, lengths = gather.runs()
    if starts.size == 0 or np.any(starts[1:] < starts[:-1] + lengths[:-1]):
        return None
    lo = int(starts[0])
    span = int(starts[-1] + lengths[-1]) - lo
    if span > 2 * gather.size:
        return None
    within = np.arange(gather.size, dtype=np.int64) - np.repeat(
        np.cumsum(lengths) - lengths, lengths
    )
    return lo, span, np.repeat(starts - lo, lengths) + within


def _grid_layout(source: np.ndarray | None, block: tuple[int, ...]) -> Any:
    """``(first, grid + block shape, strides, order, grid rank)`` of
    :meth:`CompiledGroup.permuted_grid`, or None."""
    size = int(np.prod(block, dtype=np.int64))
    if source is None or size == 0 or source.size % size or source.size == size:
        return None
    a = source.reshape(-1, size).astype(np.int64, copy=False)
    bases = a[:, 0]
    rel = a[0] - bases[0]
    if not np.all(a - bases[:, None] == rel):
        return None
    inner = _affine_block(rel.reshape(block))
    if inner is None:
        return None
    sorted_bases = np.sort(bases)
    if np.any(sorted_bases[1:] == sorted_bases[:-1]):
        return None
    grid = _first_run_shape(sorted_bases)
    if grid is None:
        return None
    outer = numeric_affine(sorted_bases.reshape(grid))
    if outer is None:
        return None
    order = np.searchsorted(sorted_bases, bases)
    shape, strides = inner
    return int(sorted_bases[0]), (*grid, *shape), (*outer[1], *strides), order, len(grid)


def _first_run_shape(a: np.ndarray) -> tuple[int, ...] | None:
    """``(n,)`` when ``a`` steps evenly, else ``(n // row, row)`` with ``row`` the length of
    the first run of equal steps (None when it does not divide ``n``)."""
    if a.size < 3:
        return (a.size,)
    steps = np.diff(a)
    change = np.flatnonzero(steps != steps[0])
    if change.size == 0:
        return (a.size,)
    row = int(change[0]) + 1
    return (a.size // row, row) if a.size % row == 0 else None


def _affine_block(rel: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape, strides) of a block's relative addresses: its own shape when affine, else
    with its first axis split in two (e.g. pieces from two planes of memory)."""
    found = numeric_affine(rel)
    if found is not None:
        return rel.shape, found[1]
    split = _first_run_shape(rel.reshape(rel.shape[0], -1)[:, 0])
    if split is None or len(split) < 2:
        return None
    shape = (*split, *rel.shape[1:])
    found = numeric_affine(rel.reshape(shape))
    return None if found is None else (shape, found[1])


def numeric_affine(
    addresses: np.ndarray, distinct: bool = False
) -> tuple[int, tuple[int, ...]] | None:
    """``(first address, element strides)`` when ``addresses[i, j, ...] == first + i*s0 +
    j*s1 + ...`` holds for every element (checked in full), else None; with ``distinct``,
    also None when two elements share an address (a written view must not alias)."""
    if addresses.size == 0:
        return None
    a = addresses.astype(np.int64, copy=False)
    first = int(a.flat[0])
    strides = []
    expected = np.full((1,) * a.ndim, first, dtype=np.int64)
    for axis, n in enumerate(a.shape):
        step = 0
        if n > 1:
            step = int(a[(0,) * axis + (1,) + (0,) * (a.ndim - axis - 1)]) - first
        strides.append(step)
        shape = [1] * a.ndim
        shape[axis] = n
        expected = expected + (np.arange(n, dtype=np.int64) * step).reshape(shape)
    if not np.array_equal(expected, a):
        return None
    if distinct and not _injective(a.shape, strides) and np.unique(a).size != a.size:
        return None
    return first, tuple(strides)


def _injective(shape: tuple[int, ...], strides: list[int]) -> bool:
    """True when an affine map of ``shape`` with ``strides`` never repeats an address: each
    axis (by increasing stride) steps past everything the smaller ones reach (sufficient;
    the caller counts distinct addresses otherwise)."""
    reach = 0
    for step, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True


@dataclass
class CompiledComputeSet:
    """A compute set ready to run, with its static costs."""

    id: int
    name: str
    groups: list[CompiledGroup]
    cycles_by_tile: np.ndarray  # [tile] int64
    active_cycles_by_tile: np.ndarray  # [tile] int64
    active_cycles_by_type: dict[str, int]
    thread_balance: float
    pre: Transfers = field(default_factory=Transfers.empty)
    post: Transfers = field(default_factory=Transfers.empty)
    generated: bool = False

    def run(self, storage: dict, rsel: slice | np.ndarray, replica_ids: np.ndarray) -> None:
        for g in self.groups:
            g.run(storage, rsel, replica_ids)

    @property
    def num_vertices(self) -> int:
        return sum(g.n for g in self.groups)

    @property
    def flops(self) -> int | None:
        """Floating-point operations of one run: the sum of its vertices' codelet estimates
        (``Codelet.flops``), or None when no codelet of the compute set estimates them."""
        known = [g for g in self.groups if g.vertex_type.codelet.flops is not Codelet.flops]
        return round(sum(float(g.flops.sum()) for g in known)) if known else None


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


def schedule(target: Target, groups: list[CompiledGroup]) -> tuple[np.ndarray, np.ndarray, float]:
    """Tile cycles, active cycles and thread balance of a compute set.

    Worker vertices are sorted by decreasing estimate on each tile and dealt round-robin to
    the worker contexts; the tile takes ``W x`` the busiest context's cycles, plus its
    supervisor vertices one after another, plus the compute-set launch overhead.
    """
    T, W = target.num_tiles, target.num_worker_contexts
    sup = np.zeros(T, dtype=np.int64)
    w_tiles, w_cyc = [], []
    for g in groups:
        if g.vertex_type.codelet.supervisor:
            sup += np.bincount(g.tiles, weights=g.cycles, minlength=T).astype(np.int64)
        else:
            w_tiles.append(g.tiles)
            w_cyc.append(g.cycles)
    load = np.zeros((T, W), dtype=np.int64)
    if w_tiles:
        tiles, cyc = np.concatenate(w_tiles), np.concatenate(w_cyc)
        order = np.lexsort((-cyc, tiles))
        ts, cs = tiles[order], cyc[order]
        rank = np.arange(ts.size) - np.searchsorted(ts, ts, side="left")
        load = np.bincount(ts * W + rank % W, weights=cs, minlength=T * W)
        load = load.astype(np.int64).reshape(T, W)
    used = np.zeros(T, dtype=bool)
    for g in groups:
        used[g.tiles] = True
    maxload = load.max(axis=1)
    cycles = W * maxload + sup + np.where(used, target.compute_set_launch_cycles, 0)
    active = load.sum(axis=1) + sup
    with np.errstate(invalid="ignore", divide="ignore"):
        tb = np.where(maxload > 0, load.sum(axis=1) / (W * np.maximum(maxload, 1)), 1.0)
    balance = float(tb[used].mean()) if used.any() else 1.0
    return cycles.astype(np.int64), active.astype(np.int64), balance


def split_runs(
    pos: np.ndarray, length: np.ndarray, cuts: np.ndarray, rank: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals ``[pos, pos + length)`` (``length >= 1``) at the sorted ``cuts``: the
    pieces' starts, lengths, and the interval each comes from. ``rank`` (:func:`cut_rank`),
    when given, looks each interval's cuts up instead of searching for them."""
    if cuts.size == 0 or pos.size == 0:
        return pos, length, np.arange(pos.size)
    end = pos + length
    if rank is None:
        lo = np.searchsorted(cuts, pos, side="right")
        hi = np.searchsorted(cuts, end, side="left")
    else:
        lo, hi = rank[pos], rank[end - 1]
    if np.array_equal(lo, hi):  # no interval crosses a cut
        return pos, length, np.arange(pos.size)
    pieces = np.maximum(hi - lo, 0) + 1
    run = np.repeat(np.arange(pos.size), pieces)
    j = np.arange(run.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    last = cuts.size - 1
    begin = np.where(j == 0, pos[run], cuts[np.minimum(lo[run] + j - 1, last)])
    stop = np.where(j == pieces[run] - 1, end[run], cuts[np.minimum(lo[run] + j, last)])
    return begin, stop - begin, run


def cut_rank(cuts: np.ndarray, size: int) -> np.ndarray:
    """``rank[p]``, the number of the sorted, distinct ``cuts`` at or below ``p`` for ``0 <=
    p < size``: a run's cuts by lookup (one table per axis, built in one pass)."""
    mark = np.zeros(size, dtype=np.int32 if size < 2**31 else np.int64)
    mark[cuts[cuts < size]] = 1
    return np.cumsum(mark, dtype=mark.dtype)


def tile_cuts(state: GraphState, dtype: Any, cache: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """Addresses of a space where the tile changes, with their :func:`cut_rank` table when
    the space has at most ``LOOKUP_TABLE_MAX`` elements (computed once per compile)."""
    found = cache.get(dtype)
    if found is None:
        tiles = state.space(dtype).tiles()
        cuts = np.flatnonzero(tiles[1:] != tiles[:-1]).astype(np.int64) + 1
        rank = cut_rank(cuts, tiles.size) if tiles.size <= LOOKUP_TABLE_MAX else None
        found = cache[dtype] = (cuts, rank)
    return found


def _remote_pieces(
    state: GraphState, g: CompiledGroup, name: str, gather: Gather, cache: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Pieces of field ``name`` (runs of consecutive addresses within one vertex and one
    tile) whose tile is not their vertex's: ``(start, length, element tile, vertex tile)``,
    or None when every vertex's elements are on its own tile."""
    starts, lengths = gather.runs()
    if starts.size == 0:
        return None
    flat = np.r_[0, np.cumsum(lengths)[:-1]]
    offsets = g.batch.offsets(name)
    inner = offsets[1:-1]  # non-decreasing: its distinct values without a sort
    inner = inner[np.r_[True, inner[1:] != inner[:-1]]] if inner.size else inner
    total = int(offsets[-1])
    pflat, plen, run = split_runs(flat, lengths, inner, cut_rank(inner, total))
    paddr = starts[run] + (pflat - flat[run])
    addr, length, piece = split_runs(paddr, plen, *tile_cuts(state, gather.dtype, cache))
    qflat = pflat[piece] + (addr - paddr[piece])
    elem = state.space(gather.dtype).tile_of[addr].astype(np.int64)
    vertex_of = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))  # of each element
    vtile = g.tiles[vertex_of[qflat]]
    remote = elem != vtile
    if not remote.any():
        return None
    return addr[remote], length[remote], elem[remote], vtile[remote]


def _transfers(
    state: GraphState, groups: list[CompiledGroup], space_ids: dict, cache: dict
) -> tuple[Transfers, Transfers]:
    pre, post = [], []
    for g in groups:
        for name, gather in g.gathers.items():
            f = g.vertex_type.codelet.fields[name]
            found = _remote_pieces(state, g, name, gather, cache)
            if found is None:
                continue
            start, length, elem, vtile = found
            sid = np.full(start.size, space_ids[gather.dtype], dtype=np.int64)
            size = np.full(start.size, gather.dtype.size, dtype=np.int64)
            if f.reads:
                pre.append(Transfers(elem, vtile, start, length, sid, size))
            if f.writes:
                post.append(Transfers(vtile, elem, start, length, sid, size))
    return Transfers.concat(pre), Transfers.concat(post)


def compile_compute_set(
    state: GraphState, cs: ComputeSet, space_ids: dict, cache: dict | None = None
) -> CompiledComputeSet:
    """Merge the compute set's vertex groups by type (first-appearance order) and compile."""
    by_type: dict[str, list[VertexGroup]] = {}
    for g in state.vertex_groups[cs.id]:
        by_type.setdefault(g.vertex_type.name, []).append(g)
    groups = []
    for glist in by_type.values():
        ids = np.concatenate([np.arange(g.first_vertex_id, g.first_vertex_id + g.n) for g in glist])
        merged = concat_groups(glist)
        if np.any(merged.tiles < 0):
            raise VerifyError(
                f"compute set {cs.name!r}: a vertex of type "
                f"{merged.vertex_type.name!r} is not mapped to a tile"
            )
        groups.append(compile_group(state, merged, ids))
    cycles, active, balance = schedule(state.target, groups)
    by_type_active = {g.vertex_type.name: int(g.cycles.sum()) for g in groups}
    pre, post = _transfers(state, groups, space_ids, {} if cache is None else cache)
    return CompiledComputeSet(
        cs.id, cs.name, groups, cycles, active, by_type_active, balance, pre, post
    )
