"""Compiling a compute set: its vertex groups merged by type and compiled
(:mod:`tremula.engine.group`), the schedule of worker vertices on the 6 contexts of each
tile, and the exchanges the compute set needs before and after it runs.

Running it (:meth:`CompiledComputeSet.run`) is a few NumPy calls per vertex type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tremula.engine.exchange import Transfers
from tremula.engine.group import CompiledGroup, compile_group
from tremula.engine.plan import Gather
from tremula.engine.tilelayout import TileLayout
from tremula.errors import VerifyError
from tremula.poplar.codelet import Codelet
from tremula.poplar.graph import GraphState
from tremula.poplar.handles import ComputeSet
from tremula.poplar.intervals import cut_rank, distinct, runs, split_runs
from tremula.poplar.vertices import VertexGroup, concat_groups
from tremula.target import Target


@dataclass(eq=False)
class CompiledComputeSet:
    """A compute set ready to run, with its static costs."""

    id: int
    name: str
    groups: list[CompiledGroup]
    cycles_by_tile: np.ndarray  # [tile] int64
    active_cycles_by_tile: np.ndarray  # [tile] int64
    active_cycles_by_type: dict[str, int]
    thread_balance: float
    #: the moves before and after it; the step plan plans their exchanges as it compiles
    #: the compute set and then empties these (``StepPlan.cs_plans`` keeps the plans)
    pre: Transfers = field(default_factory=Transfers.empty)
    post: Transfers = field(default_factory=Transfers.empty)
    generated: bool = False

    def run(self, storage: dict, rsel: slice | np.ndarray, replica_ids: np.ndarray) -> None:
        for g in self.groups:
            g.run(storage, rsel, replica_ids)

    @cached_property
    def dynamic(self) -> bool:
        """Whether a vertex's cycles depend on the data (``Codelet.run_cycles``)."""
        return any(g.dynamic for g in self.groups)

    def live_schedule(self, target: Target) -> tuple[np.ndarray, np.ndarray, float]:
        """:func:`schedule` of the last run's cycles (``run_cycles`` where a group gave
        them, the estimates elsewhere)."""
        live = [g.cycles if g.live_cycles is None else g.live_cycles for g in self.groups]
        return schedule(target, self.groups, live)

    @property
    def num_vertices(self) -> int:
        return sum(g.n for g in self.groups)

    @property
    def flops(self) -> int | None:
        """Floating-point operations of one run: the sum of its vertices' codelet estimates
        (``Codelet.flops``), or None when no codelet of the compute set estimates them."""
        known = [g for g in self.groups if g.vertex_type.codelet.flops is not Codelet.flops]
        return round(sum(float(g.flops.sum()) for g in known)) if known else None


def schedule(
    target: Target, groups: list[CompiledGroup], counts: list[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """Tile cycles, active cycles and thread balance of a compute set (of the groups'
    estimates, or of ``counts``, one array of cycles per group).

    Worker vertices are sorted by decreasing estimate on each tile and dealt round-robin to
    the worker contexts; the tile takes ``W x`` the busiest context's cycles, plus its
    supervisor vertices one after another, plus the compute-set launch overhead.
    """
    T, W = target.num_tiles, target.num_worker_contexts
    sup = np.zeros(T, dtype=np.int64)
    w_tiles, w_cyc = [], []
    per_group = [g.cycles for g in groups] if counts is None else counts
    for g, g_cycles in zip(groups, per_group):
        if g.vertex_type.codelet.supervisor:
            sup += np.bincount(g.tiles, weights=g_cycles, minlength=T).astype(np.int64)
        else:
            w_tiles.append(g.tiles)
            w_cyc.append(g_cycles)
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


#: Fields of at most this many elements find their remote pieces element by element
#: (:func:`_pieces_by_element`): a few passes over arrays of the field's size, faster than
#: splitting its runs when they are short (operands read in strides).
PER_ELEMENT_MAX = 1 << 20


def _remote_pieces(
    state: GraphState,
    g: CompiledGroup,
    name: str,
    gather: Gather,
    cuts: tuple[np.ndarray, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Pieces of field ``name`` (runs of consecutive addresses within one vertex and one
    tile) whose tile is not their vertex's: ``(start, length, element tile, vertex tile)``,
    or None when every vertex's elements are on its own tile. ``cuts``: the addresses of the
    field's space where the tile changes, with their rank table or None
    (:meth:`TileLayout.cuts`). A field whose vertices take whole rows of its layout
    (:func:`_row_pieces`) gives its pieces row by row, in address order within a row and
    each address of a row once: the same moves, which is all the exchange planner asks."""
    if gather.size == 0:
        return None
    offsets = g.batch.offsets(name)
    tile_of = state.space(gather.dtype).tile_of
    vertex_tiles = g.tiles.astype(tile_of.dtype)  # (32-bit, as the elements' tiles)
    found = _row_pieces(gather, offsets, tile_of, vertex_tiles, cuts)
    if found is not None:
        addr, length, elem, vtile = found
    else:
        addr, length, elem, vtile = _field_pieces(gather, offsets, tile_of, vertex_tiles, cuts)
    remote = elem != vtile
    if not remote.any():
        return None
    return addr[remote], length[remote], elem[remote], vtile[remote]


def _row_pieces(
    gather: Gather,
    offsets: np.ndarray,
    tile_of: np.ndarray,
    vertex_tiles: np.ndarray,
    cuts: tuple[np.ndarray, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """The pieces of a field with an affine layout whose vertex boundaries all fall on the
    rows of a trailing block of its axes: every row's addresses are the row's base plus
    one set of offsets (the block's, each once: a broadcast block reads its elements
    once), so the block's runs of consecutive offsets are found once and laid on every
    row, then split where the tile changes. None where the layout has no such block or
    its runs are not fewer than half the field's elements (a weight matrix read in
    strides by each of many vertices: a few long runs a row, not one-element ones)."""
    layout = gather.addrs.layout
    if layout is None:
        return None
    first, strides = layout
    shape = gather.addrs.source.shape
    bounds = offsets[1:-1]
    axis, block = len(shape), 1  # the block: the axes from ``axis`` on
    while axis > 0 and not np.any(bounds % (block * shape[axis - 1])):
        axis -= 1
        block *= shape[axis]
    if block == 1:
        return None
    grid = np.zeros(1, dtype=np.int64)
    for n, stride in zip(shape[axis:], strides[axis:]):
        if n > 1 and stride != 0:
            grid = (grid[:, None] + np.arange(n, dtype=np.int64) * stride).ravel()
    run_start, run_end = runs(distinct(grid))
    rows = gather.size // block
    if 2 * rows * run_start.size > gather.size:
        return None
    base = np.full(1, first, dtype=np.int64)
    for n, stride in zip(shape[:axis], strides[:axis]):
        base = (base[:, None] + np.arange(n, dtype=np.int64) * stride).ravel()
    row_vertex = np.searchsorted(offsets, np.arange(rows) * block, side="right") - 1
    start = (base[:, None] + run_start).ravel()
    length = np.tile(run_end - run_start, rows)
    addr, length, run = split_runs(start, length, *cuts)
    vtile = np.repeat(vertex_tiles[row_vertex], run_start.size)[run]
    return addr, length, tile_of[addr], vtile


def _field_pieces(
    gather: Gather,
    offsets: np.ndarray,
    tile_of: np.ndarray,
    vertex_tiles: np.ndarray,
    cuts: tuple[np.ndarray, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every piece of a field, in field order: ``(start, length, element tile, vertex
    tile)``."""
    starts, lengths = gather.runs()
    total = int(offsets[-1])
    if starts.size == total:  # runs of one element (a strided view): nothing to split
        addr, length = starts, lengths
        vtile = np.repeat(vertex_tiles, np.diff(offsets))
        elem = tile_of[addr]
    elif total <= PER_ELEMENT_MAX:
        addr, length, elem, vtile = _pieces_by_element(
            starts, lengths, offsets, tile_of, vertex_tiles
        )
    else:
        flat = np.r_[0, np.cumsum(lengths)[:-1]]
        inner = offsets[1:-1]  # non-decreasing: its distinct values without a sort
        inner = inner[np.r_[True, inner[1:] != inner[:-1]]] if inner.size else inner
        pflat, plen, run = split_runs(flat, lengths, inner, cut_rank(inner, total))
        paddr = starts[run] + (pflat - flat[run])
        addr, length, piece = split_runs(paddr, plen, *cuts)
        qflat = pflat[piece] + (addr - paddr[piece])
        vertex_of = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))  # of each element
        vtile = vertex_tiles[vertex_of[qflat]]
        elem = tile_of[addr]
    return addr, length, elem, vtile


def _pieces_by_element(
    starts: np.ndarray,
    lengths: np.ndarray,
    offsets: np.ndarray,
    tile_of: np.ndarray,
    vertex_tiles: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every piece of a field (runs ``starts``, ``lengths`` of addresses, vertex ``v``'s
    elements ``offsets[v]:offsets[v + 1]``): ``(start, length, element tile, vertex
    tile)``. A piece begins at each run's first element, each vertex's, and each element
    whose tile is not the one before it (the pieces the runs split at vertices and tile
    changes would give). Addresses are 32-bit integers where the space's are."""
    total = int(offsets[-1])
    flat = np.cumsum(lengths) - lengths  # each run's first element
    dtype = np.int32 if tile_of.size < 1 << 31 else np.int64
    addr = np.repeat((starts - flat).astype(dtype), lengths)
    addr += np.arange(total, dtype=dtype)
    tiles = tile_of[addr]
    head = np.empty(total, dtype=bool)
    head[0] = True
    np.not_equal(tiles[1:], tiles[:-1], out=head[1:])
    head[flat] = True
    inner = offsets[1:-1]
    head[inner[inner < total]] = True  # (vertices without elements at the end)
    first = np.flatnonzero(head)
    vtile = vertex_tiles[np.searchsorted(offsets, first, side="right") - 1]  # (sorted)
    length = np.empty_like(first)
    np.subtract(first[1:], first[:-1], out=length[:-1])
    length[-1] = total - first[-1]
    return addr[first], length, tiles[first], vtile


def _transfers(
    state: GraphState, groups: list[CompiledGroup], space_ids: dict, layout: TileLayout
) -> tuple[Transfers, Transfers]:
    pre: list[tuple] = []
    post: list[tuple] = []
    for g in groups:
        for name, gather in g.gathers.items():
            f = g.vertex_type.codelet.fields[name]
            sid = space_ids[gather.dtype]
            found = _remote_pieces(state, g, name, gather, layout.cuts(sid))
            if found is None:
                continue
            part = (found, sid, gather.dtype.size)
            if f.reads:
                pre.append(part)
            if f.writes:
                post.append(part)
    return _joined(pre, inward=True), _joined(post, inward=False)


def _joined(parts: list[tuple], inward: bool) -> Transfers:
    """The remote pieces of several fields (``(pieces, space id, element size)``) as one
    set of moves: from the elements' tiles to their vertices' (``inward``) or back."""
    if not parts:
        return Transfers.empty()
    columns = [np.concatenate(c) if len(parts) > 1 else c[0] for c in zip(*(p[0] for p in parts))]
    start, length, elem, vtile = columns
    counts = [p[0][0].size for p in parts]
    ids, sizes = (np.array([p[k] for p in parts], dtype=np.int64) for k in (1, 2))
    if np.all(ids == ids[0]) and np.all(sizes == sizes[0]):  # one space: read-only views
        space = np.broadcast_to(ids[0], (start.size,))
        size = np.broadcast_to(sizes[0], (start.size,))
    else:
        space, size = np.repeat(ids, counts), np.repeat(sizes, counts)
    src, dst = (elem, vtile) if inward else (vtile, elem)
    return Transfers(src, dst, start, length, space, size)


def compile_compute_set(
    state: GraphState, cs: ComputeSet, space_ids: dict, layout: TileLayout
) -> CompiledComputeSet:
    """Merge the compute set's vertex groups by type (first-appearance order) and compile;
    ``space_ids`` numbers the spaces as ``layout`` (the graph's tile layout) does."""
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
    pre, post = _transfers(state, groups, space_ids, layout)
    return CompiledComputeSet(
        cs.id, cs.name, groups, cycles, active, by_type_active, balance, pre, post
    )
