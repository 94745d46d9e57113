"""The reduction planner: a pure, deterministic function from (reduction shape, a summary of
the input's tile mapping, the outputs' tiles, the fan-in bound) to a multi-stage plan.

**Canonical form.** The input (dimensions in memory order) drops its size-1 dimensions and
merges neighbours of the same kind, leaving alternating kept (K) and reduced (R) dimensions.
The innermost ones form a *block* ``[G, O, N, I]`` (K, R, K, R; missing ones are 1) in which
output ``g * N + k`` reduces ``[g, a, k, c]`` over ``a, c``; outer dimensions enumerate
blocks, each with its first output (outer reduced dimensions make blocks share outputs).

**Stage 1** reduces on each tile what the tile holds. The input's tile runs are cut at block
boundaries; when rows (``N * I`` elements) are no longer than the pieces around a cut and
``O > 1``, the cut moves to the nearest row boundary (the few elements of the straddling row
are read from the neighbouring tile), so strided reductions see whole rows. Each piece is
decomposed like a mixed-radix interval into at most 7 *boxes*, again ``[G', O', N', I']``
blocks with consecutive outputs; each box is a vertex on its piece's tile writing
``G' * N'`` partials there, listed in flat order so that the vertices' inputs, concatenated,
are the input. A box that would only copy (``O' = I' = 1``) is skipped when the partials
have the input's type: its input elements are used as partials directly.

**Later stages** work on output *intervals*: the outputs are cut at every partial region's
ends and wherever the outputs' tile changes, so each stage-1 region splits into *pieces*,
one per interval it covers. While some interval has more than ``fan_in`` pieces, an
intermediate stage reduces chunks of ``fan_in`` of its pieces (sorted by tile) on the tile
of one member (rotated with the interval to spread the work); other pieces wait. The final
stage reduces each interval's pieces on the tile of its outputs. If every output has exactly
one stage-1 partial the plan is single-stage: stage 1 writes the outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.poplar.intervals import distinct

_I64 = np.int64


def _cumstart(sizes: np.ndarray) -> np.ndarray:
    """Exclusive cumulative sum (start offset of each size)."""
    out = np.zeros(sizes.size, dtype=_I64)
    if sizes.size > 1:
        np.cumsum(sizes[:-1], out=out[1:])
    return out


@dataclass(frozen=True)
class TileRuns:
    """A tensor's mapping in flat order: ``[starts[i], starts[i + 1])`` is on ``tiles[i]``
    (the last run ends at ``size``)."""

    starts: np.ndarray
    tiles: np.ndarray
    size: int

    @staticmethod
    def of(flat_tiles: np.ndarray) -> TileRuns:
        """Runs of an array giving the tile of every flat element."""
        t = np.asarray(flat_tiles, dtype=_I64).reshape(-1)
        if t.size == 0:
            return TileRuns(np.zeros(0, _I64), np.zeros(0, _I64), 0)
        starts = np.r_[0, np.flatnonzero(t[1:] != t[:-1]) + 1].astype(_I64)
        return TileRuns(starts, t[starts], int(t.size))


@dataclass(frozen=True)
class BlockStage:
    """Stage-1 boxes in flat order: box ``b`` on ``tiles[b]`` covers the
    ``groups * outer * outputs * inner`` input elements from flat ``start[b]``; its value
    ``g * outputs + k`` belongs to canonical output ``out_start + g * out_stride + k``.
    Boxes with ``computed`` are vertices; the others are copies whose elements serve as
    partials."""

    tiles: np.ndarray
    start: np.ndarray
    groups: np.ndarray
    outer: np.ndarray
    outputs: np.ndarray
    inner: np.ndarray
    out_start: np.ndarray
    out_stride: np.ndarray
    computed: np.ndarray

    @property
    def sizes(self) -> np.ndarray:
        return self.groups * self.outer * self.outputs * self.inner

    @property
    def values(self) -> np.ndarray:
        """Values (partials) each box yields."""
        return self.groups * self.outputs

    def select(self, mask: np.ndarray) -> BlockStage:
        return BlockStage(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))

    def value_outputs(self) -> np.ndarray:
        """The canonical output of every value, boxes in order."""
        per = self.values
        b = np.repeat(np.arange(per.size), per)
        j = np.arange(b.size, dtype=_I64) - np.repeat(_cumstart(per), per)
        n = self.outputs[b]
        return self.out_start[b] + (j // n) * self.out_stride[b] + j % n


@dataclass(frozen=True)
class GroupStage:
    """A later stage. Group ``i`` (on ``group_tiles[i]``) reduces ``group_counts[i]``
    pieces of ``group_lengths[i]`` elements into outputs ``[group_outputs[i],
    group_outputs[i] + group_lengths[i])``; its pieces start at the next
    ``group_counts[i]`` entries of ``piece_src`` (offsets into the stage's source tensor).
    Groups are sorted by tile; vertex ``v`` on ``vertex_tiles[v]`` takes the next
    ``vertex_groups[v]`` groups. An intermediate stage writes its groups' results one after
    another into a new partials tensor."""

    piece_src: np.ndarray
    group_outputs: np.ndarray
    group_lengths: np.ndarray
    group_counts: np.ndarray
    group_tiles: np.ndarray
    vertex_tiles: np.ndarray
    vertex_groups: np.ndarray
    final: bool

    def piece_elements(self) -> np.ndarray:
        """Offsets in the source of every element the stage reads, in field order."""
        lens = np.repeat(self.group_lengths, self.group_counts)
        within = np.arange(int(lens.sum()), dtype=_I64) - np.repeat(_cumstart(lens), lens)
        return np.repeat(self.piece_src, lens) + within

    @property
    def result_size(self) -> int:
        return int(self.group_lengths.sum())


@dataclass(frozen=True)
class ReducePlan:
    """Stage 1 then the later stages. The source of the first later stage is the stage-1
    partials (``num_partials`` values of the computed boxes, in box order) followed by the
    input (flat); the source of each next stage is the previous stage's results followed by
    the previous source."""

    num_outputs: int
    fan_in: int
    first: BlockStage
    stages: tuple[GroupStage, ...]

    @property
    def single_stage(self) -> bool:
        return not self.stages

    @property
    def vertices(self) -> BlockStage:
        return self.first.select(self.first.computed)

    @property
    def num_partials(self) -> int:
        return int(self.vertices.values.sum())


def canonical_block(
    shape: tuple[int, ...], reduced: tuple[bool, ...]
) -> tuple[list[int], list[bool], tuple[int, int, int, int]]:
    """``(prefix sizes, prefix kept flags, (G, O, N, I))`` of a reduction (see module)."""
    merged: list[list] = []
    for size, red in zip(shape, reduced):
        if size == 1:
            continue
        if merged and merged[-1][1] == red:
            merged[-1][0] *= size
        else:
            merged.append([size, red])
    if not merged:
        merged = [[1, False]]
    ends_reduced = bool(merged[-1][1])
    n = min(len(merged), 4 if ends_reduced else 3)
    suffix, prefix = merged[-n:], merged[:-n]
    slots = ["I", "N", "O", "G"] if ends_reduced else ["N", "O", "G"]
    block = {"G": 1, "O": 1, "N": 1, "I": 1}
    for slot, (size, _) in zip(slots, reversed(suffix)):
        block[slot] = int(size)
    dims4 = (block["G"], block["O"], block["N"], block["I"])
    return [int(s) for s, _ in prefix], [not r for _, r in prefix], dims4


def _block_bases(prefix: list[int], kept: list[bool]) -> np.ndarray:
    """Canonical output index (in units of ``G * N``) of every block's first output."""
    count = int(np.prod(prefix, dtype=_I64)) if prefix else 1
    kept_sizes = [s for s, k in zip(prefix, kept) if k]
    if not kept_sizes:
        return np.zeros(count, _I64)
    coords = np.unravel_index(np.arange(count, dtype=_I64), prefix)
    kept_coords = [c for c, k in zip(coords, kept) if k]
    return np.ravel_multi_index(kept_coords, kept_sizes).astype(_I64)


def decompose(
    lo: np.ndarray, hi: np.ndarray, dims4: tuple[int, int, int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Boxes of intervals ``[lo, hi)`` inside one block of shape ``dims4``.

    Returns ``(interval, level, box_lo, box_hi)`` in flat order: a box of level ``j`` spans
    whole units of ``prod(dims4[j+1:])`` elements inside one unit of level ``j - 1``.
    """
    _, O, N, I = dims4
    unit = [O * N * I, N * I, I, 1]
    cur = np.asarray(lo, dtype=_I64).copy()
    end = np.asarray(hi, dtype=_I64)
    steps = []

    def take(level: int, stop: np.ndarray) -> None:
        nonlocal cur
        mask = stop > cur
        new = np.where(mask, stop, cur)
        steps.append((mask, level, cur, new))
        cur = new

    for j in (3, 2, 1):
        bound = -(-cur // unit[j - 1]) * unit[j - 1]
        take(j, np.minimum(bound, end // unit[j] * unit[j]))
    take(0, end // unit[0] * unit[0])
    for j in (1, 2, 3):
        take(j, end // unit[j] * unit[j])
    mask = np.stack([s[0] for s in steps], axis=1)
    level = np.broadcast_to(np.array([s[1] for s in steps], dtype=_I64), mask.shape)
    blo = np.stack([s[2] for s in steps], axis=1)
    bhi = np.stack([s[3] for s in steps], axis=1)
    interval = np.broadcast_to(np.arange(cur.size, dtype=_I64)[:, None], mask.shape)
    return interval[mask], level[mask], blo[mask], bhi[mask]


def _align_rows(starts: np.ndarray, total: int, block: int, row: int) -> np.ndarray:
    """Move cuts inside a block to the nearest row boundary where both neighbouring pieces
    are at least a row long."""
    if starts.size < 2:
        return starts
    ends = np.r_[starts[1:], total]
    left = starts[1:] - starts[:-1]
    right = ends[1:] - starts[1:]
    inner = starts[1:] % block != 0
    move = inner & (left >= row) & (right >= row)
    moved = starts.copy()
    moved[1:] = np.where(move, (starts[1:] + row // 2) // row * row, starts[1:])
    return moved


def plan_first_stage(
    shape: tuple[int, ...],
    reduced: tuple[bool, ...],
    runs: TileRuns,
    copy_partials: bool = True,
) -> BlockStage:
    """Stage 1: boxes of each (tile run x block) piece (see the module docstring)."""
    prefix, kept, dims4 = canonical_block(shape, reduced)
    G, O, N, I = dims4
    B = G * O * N * I
    total = runs.size
    bases = _block_bases(prefix, kept) * (G * N)
    starts = (
        distinct(np.concatenate((runs.starts, np.arange(0, total, B, dtype=_I64))))
        if total
        else runs.starts
    )
    tiles = runs.tiles[np.searchsorted(runs.starts, starts, side="right") - 1]
    if O > 1 and N * I > 1:
        starts = _align_rows(starts, total, B, N * I)
    ends = np.r_[starts[1:], total].astype(_I64)
    block = starts // B
    seg, level, blo, bhi = decompose(starts - block * B, ends - block * B, dims4)
    unit = np.array([O * N * I, N * I, I, 1], dtype=_I64)[level]
    length = (bhi - blo) // unit
    g, n = blo // (O * N * I), (blo // I) % N
    one = np.ones_like(length)
    groups = np.where(level == 0, length, one)
    outer = np.select([level == 0, level == 1], [np.full_like(length, O), length], one)
    outputs = np.select([level <= 1, level == 2], [np.full_like(length, N), length], one)
    inner = np.where(level == 3, length, np.full_like(length, I))
    out_start = bases[block[seg]] + g * N + np.where(level >= 2, n, 0)
    computed = np.ones(length.size, dtype=bool)
    if copy_partials:
        computed = (outer > 1) | (inner > 1)
    return BlockStage(
        tiles[seg].astype(_I64),
        block[seg] * B + blo,
        groups,
        outer,
        outputs,
        inner,
        out_start.astype(_I64),
        np.full_like(length, N),
        computed,
    )


def _first_pieces(
    first: BlockStage, num_partials: int, out_tiles: np.ndarray, num_outputs: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Output intervals ``bounds`` and the pieces ``(interval, src, tile)`` of the stage-1
    regions."""
    reg_box, reg_out, reg_len = _regions(first)
    g = np.arange(reg_box.size, dtype=_I64) - np.repeat(_cumstart(first.groups), first.groups)
    part_off = np.where(first.computed, _cumstart(first.values * first.computed), 0)
    src = np.where(
        first.computed[reg_box],
        part_off[reg_box] + g * reg_len,
        num_partials + first.start[reg_box] + g * reg_len,
    )
    cuts = np.flatnonzero(out_tiles[1:] != out_tiles[:-1]) + 1
    bounds = distinct(np.r_[0, num_outputs, cuts, reg_out, reg_out + reg_len]).astype(_I64)
    i0 = np.searchsorted(bounds, reg_out)
    i1 = np.searchsorted(bounds, reg_out + reg_len)
    per = i1 - i0
    reg = np.repeat(np.arange(reg_out.size), per)
    iv = i0[reg] + np.arange(reg.size, dtype=_I64) - np.repeat(_cumstart(per), per)
    piece_src = src[reg] + bounds[iv] - reg_out[reg]
    return bounds, iv, piece_src, first.tiles[reg_box[reg]]


def _later_stage(
    iv: np.ndarray,
    src: np.ndarray,
    tile: np.ndarray,
    bounds: np.ndarray,
    out_tiles: np.ndarray,
    fan_in: int,
) -> tuple[GroupStage, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One later stage over the pieces; returns it and the pieces of the next stage."""
    n_iv = bounds.size - 1
    order = np.lexsort((tile, iv))
    siv, ssrc, stile = iv[order], src[order], tile[order]
    counts = np.bincount(iv, minlength=n_iv).astype(_I64)
    final = int(counts.max(initial=0)) <= fan_in
    lengths_iv = np.diff(bounds)
    if final:
        g_iv, g_count = np.arange(n_iv, dtype=_I64), counts
        g_tile = out_tiles[bounds[:-1]]
        members, carried = np.arange(siv.size), np.zeros(0, _I64)
    else:
        rank = np.arange(siv.size, dtype=_I64) - _cumstart(counts)[siv]
        chunks = np.where(counts > fan_in, -(-counts // fan_in), 0)
        chunk = np.where(counts[siv] > fan_in, _cumstart(chunks)[siv] + rank // fan_in, -1)
        size = np.bincount(chunk[chunk >= 0], minlength=int(chunks.sum())).astype(_I64)
        grouped = (chunk >= 0) & (size[np.maximum(chunk, 0)] > 1)
        members, carried = np.flatnonzero(grouped), np.flatnonzero(~grouped)
        keep = size > 1
        g_iv = np.repeat(np.arange(n_iv, dtype=_I64), chunks)[keep]
        g_count = size[keep]
        g_tile = stile[members][_cumstart(g_count) + g_iv % g_count]
    gorder = np.argsort(g_tile, kind="stable")
    starts = _cumstart(g_count)[gorder]
    pick = np.repeat(starts - _cumstart(g_count[gorder]), g_count[gorder])
    pick = members[pick + np.arange(pick.size, dtype=_I64)]
    g_iv, g_count, g_tile = g_iv[gorder], g_count[gorder], g_tile[gorder]
    cuts = np.r_[0, np.flatnonzero(g_tile[1:] != g_tile[:-1]) + 1] if g_tile.size else g_tile
    stage = GroupStage(
        ssrc[pick],
        bounds[g_iv],
        lengths_iv[g_iv],
        g_count,
        g_tile,
        g_tile[cuts],
        np.diff(np.r_[cuts, g_tile.size]).astype(_I64),
        final,
    )
    result = _cumstart(stage.group_lengths)
    nxt = (
        np.r_[g_iv, siv[carried]],
        np.r_[result, ssrc[carried] + stage.result_size],
        np.r_[g_tile, stile[carried]],
    )
    return stage, nxt


def plan_reduction(
    shape: tuple[int, ...],
    reduced: tuple[bool, ...],
    runs: TileRuns,
    out_tiles: np.ndarray,
    fan_in: int = 64,
    copy_partials: bool = True,
) -> ReducePlan:
    """Plan a reduction (pure and deterministic).

    Args:
        shape: the input's shape, dimensions in memory order.
        reduced: for each dimension, whether it is reduced.
        runs: the input's tile mapping in flat order.
        out_tiles: the tile of every output, in canonical order (row-major over the kept
            dimensions in the order of ``shape``).
        fan_in: the most pieces one group of a later stage reduces (>= 2).
        copy_partials: whether input elements may serve as partials (the partials have
            the input's type); otherwise every box is a vertex.
    """
    if fan_in < 2:
        raise ValueError(f"plan_reduction: fan_in must be >= 2, got {fan_in}")
    num_outputs = int(np.prod([s for s, r in zip(shape, reduced) if not r], dtype=_I64))
    out_tiles = np.asarray(out_tiles, dtype=_I64)
    first = plan_first_stage(shape, reduced, runs, copy_partials)
    if num_outputs and _single_partial(first, num_outputs):
        every = np.ones(first.tiles.size, dtype=bool)
        return ReducePlan(num_outputs, fan_in, _with_computed(first, every), ())
    num_partials = int((first.values * first.computed).sum())
    bounds, iv, src, tile = _first_pieces(first, num_partials, out_tiles, num_outputs)
    stages = []
    while True:
        stage, (iv, src, tile) = _later_stage(iv, src, tile, bounds, out_tiles, fan_in)
        stages.append(stage)
        if stage.final:
            break
    return ReducePlan(num_outputs, fan_in, first, tuple(stages))


def _regions(first: BlockStage) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(box, first output, length) of every region (one per group of each box)."""
    box = np.repeat(np.arange(first.tiles.size), first.groups)
    g = np.arange(box.size, dtype=_I64) - np.repeat(_cumstart(first.groups), first.groups)
    return box, first.out_start[box] + g * first.out_stride[box], first.outputs[box]


def _single_partial(first: BlockStage, num_outputs: int) -> bool:
    """Whether every output gets exactly one value from stage 1."""
    _, start, length = _regions(first)
    diff = np.bincount(start, minlength=num_outputs + 1) - np.bincount(
        start + length, minlength=num_outputs + 1
    )
    return bool(np.all(np.cumsum(diff)[:-1] == 1))


def _with_computed(first: BlockStage, computed: np.ndarray) -> BlockStage:
    fields = {f: getattr(first, f) for f in first.__dataclass_fields__}
    fields["computed"] = computed
    return BlockStage(**fields)
