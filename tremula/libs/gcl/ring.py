"""Building blocks of the ring collectives: chunk layouts and ring steps.

A :class:`Layout` places ``C`` columns on tiles; a chunk ``[C]`` and a work buffer of ``G``
chunks (column ``j`` of all of them on one tile) follow it, so that a replica-dependent
choice of chunk never moves data between tiles. A
:class:`RingBuilder` appends the steps of one collective: compute sets of the ring vertices
over the layout's columns, ``CrossReplicaCopy`` programs whose single replica map covers
every group at once, and copies in and out of work buffers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tremula import poplar
from tremula.libs import util
from tremula.libs.gcl.codelets import CODELETS, type_arg
from tremula.libs.gcl.grouping import ReplicaGrouping
from tremula.libs.gcl.operators import CollectiveOperator


def block_size(dtype: poplar.Type) -> int:
    """Columns per block of a work buffer: 64 bytes of chunk data (a cache line of the
    host running the model, so that picking one chunk reads only its own lines)."""
    return max(1, 64 // dtype.size)


def spread_blocks(graph: poplar.Graph, t: poplar.Tensor, blocks: int) -> np.ndarray:
    """The tiles of ``blocks`` blocks spread in even consecutive runs over the tiles holding
    ``t``, in tile order."""
    tiles = graph.tiles_of(t).reshape(-1)
    used = np.flatnonzero(np.bincount(tiles, minlength=graph.num_tiles))
    if used.size == 0:
        used = np.zeros(1, dtype=np.int64)
    return used[(np.arange(blocks, dtype=np.int64) * used.size) // max(blocks, 1)]


@dataclass(frozen=True)
class Fragments:
    """A tensor's elements split, tile by tile, into ``G`` fragments where they lie (GCL
    splits a tensor into fragments spread over the tiles holding it, so a ring step moves
    no data between tiles): on a tile holding ``m`` elements, the first
    ``G * floor(m / (G L)) * L`` (in flattened order) are ``G`` runs of whole blocks, run
    ``k`` in chunk ``k``; the rest (fewer than ``G L`` per tile) form a small remainder
    that goes round the ring through a work buffer."""

    main: np.ndarray  # [G, blocks, L] flat positions of the in-place blocks
    tiles: np.ndarray  # [blocks] tile of each in-place block
    rest: np.ndarray  # flat positions of the remainder, in flattened order

    @classmethod
    def of(cls, graph: poplar.Graph, t: poplar.Tensor, G: int, L: int) -> Fragments:
        tiles = graph.tiles_of(t).reshape(-1).astype(np.int64)
        if tiles.size < 2 or np.all(tiles[1:] >= tiles[:-1]):  # a linear mapping
            order = np.arange(tiles.size, dtype=np.int64)
        else:  # positions grouped by tile, in flattened order on each
            order = np.argsort(tiles, kind="stable")
        counts = np.bincount(tiles, minlength=graph.num_tiles)
        on = np.flatnonzero(counts)
        nb = counts[on] // (G * L)  # in-place blocks per chunk on each tile
        first = (np.cumsum(counts) - counts)[on]  # each tile's first place in ``order``
        # block j of chunk k on tile i: order[first_i + (k nb_i + j) L + l]
        block_of = np.repeat(np.arange(on.size), nb)
        j = np.arange(block_of.size) - np.repeat(np.cumsum(nb) - nb, nb)
        base = first[block_of] + j * L  # [blocks] chunk 0's block start
        k = np.arange(G, dtype=np.int64)[:, None, None]
        pos = base[None, :, None] + k * (nb[block_of] * L)[None, :, None]
        main = order[pos + np.arange(L, dtype=np.int64)[None, None, :]]
        keep = np.ones(tiles.size, dtype=bool)
        keep[main.reshape(-1)] = False
        return cls(main, on[block_of], np.flatnonzero(keep))

    @property
    def blocks(self) -> int:
        return int(self.tiles.size)


@dataclass(frozen=True)
class Layout:
    """``C`` columns in blocks of ``L`` on tiles, and the worker vertices covering them.

    A chunk is ``[C]``. A work buffer holds ``G`` chunks as ``[G, ceil(C / L), L]``: block
    ``b`` of every chunk (columns ``[b L, (b + 1) L)``) lies on one tile, so choosing a
    chunk by replica never moves data between tiles. The buffer is chunk-major, so a
    flattened tensor of ``G C`` elements is its chunks in order (copies in and out are
    single runs) and a vertex reads its columns of one chunk as one run. The vertices'
    fields see it block-major (:meth:`blocks`): a vertex covers whole blocks of every
    chunk (only the last vertex ends in a partial block).
    """

    columns: int
    group_size: int
    block: int
    block_tiles: np.ndarray  # [blocks] tile of each block
    part: util.Partition  # vertices over the columns, in column order

    @classmethod
    def spread(cls, graph: poplar.Graph, t: poplar.Tensor, columns: int, group_size: int) -> Layout:
        """Blocks in even consecutive runs over the tiles holding ``t``, in tile order."""
        L = block_size(t.dtype)
        tiles = spread_blocks(graph, t, -(-columns // L))
        return cls.of_blocks(graph, tiles, columns, group_size, L)

    @classmethod
    def of_blocks(
        cls, graph: poplar.Graph, block_tiles: np.ndarray, columns: int, group_size: int, L: int
    ) -> Layout:
        """``columns`` in blocks of ``L`` on ``block_tiles``; each run of blocks on one tile
        is split into at most one worker vertex per context."""
        block_tiles = np.asarray(block_tiles, dtype=np.int64)
        counts = np.full(block_tiles.size, L, dtype=np.int64)
        if block_tiles.size:
            counts[-1] = columns - L * (block_tiles.size - 1)
        first = np.r_[True, block_tiles[1:] != block_tiles[:-1]] if block_tiles.size else []
        starts = np.flatnonzero(first)
        run_columns = np.add.reduceat(counts, starts) if starts.size else counts
        owner, sizes = util.split_counts(run_columns, graph.target.num_worker_contexts, L)
        part = util.Partition(np.arange(columns, dtype=np.int64), block_tiles[starts][owner], sizes)
        return cls(columns, group_size, L, block_tiles, part)

    @property
    def blocks(self) -> int:
        return int(self.block_tiles.size)

    def chunk(self, graph: poplar.Graph, dtype: poplar.Type, name: str) -> poplar.Tensor:
        """A new ``[C]`` variable, each column on its block's tile."""
        t = graph.add_variable(dtype, (self.columns,), name)
        graph.set_tile_mapping(t, np.repeat(self.block_tiles, self.block)[: self.columns])
        return t

    def work(self, graph: poplar.Graph, dtype: poplar.Type, name: str) -> poplar.Tensor:
        """A new work buffer ``[G, blocks, L]``."""
        shape = (self.group_size, self.blocks, self.block)
        t = graph.add_variable(dtype, shape, name)
        graph.set_tile_mapping(t, np.broadcast_to(self.block_tiles[None, :, None], shape))
        return t

    def chunks(self, work: poplar.Tensor) -> poplar.Tensor:
        """The ``[G, C]`` view of a work buffer: row ``k`` is chunk ``k``."""
        G = self.group_size
        return work.reshape((G, self.blocks * self.block))[:, : self.columns]

    @staticmethod
    def blocks_view(work: poplar.Tensor) -> poplar.Tensor:
        """The ``[blocks, G, L]`` view of a work buffer the ring vertices' fields cover
        (block ``b`` of every chunk, as the vertices' columns are)."""
        return work.dim_shuffle([1, 0, 2])

    def work_lengths(self) -> np.ndarray:
        """Elements of a work buffer per vertex (whole blocks of all chunks)."""
        return -(-self.part.lengths // self.block) * self.group_size * self.block


@dataclass
class RingBuilder:
    """Appends the programs of one collective over ``grouping`` to ``programs``.

    Shifts are logical (``+1``: the next replica of the group); ``direction`` ``-1``
    mirrors every shift (an anticlockwise ring).
    """

    graph: poplar.Graph
    grouping: ReplicaGrouping
    layout: Layout
    dtype: poplar.Type
    prefix: str
    direction: int = 1
    programs: list[poplar.Program] = field(default_factory=list)

    def __post_init__(self) -> None:
        util.ensure_codelets(self.graph, CODELETS)

    @property
    def G(self) -> int:
        return self.grouping.group_size

    def _state(self, shift: int) -> dict[str, int]:
        rg = self.grouping
        return {
            "num_replicas": rg.num_replicas,
            "stride": rg.stride,
            "group_size": rg.group_size,
            "block": self.layout.block,
            "shift": self.direction * shift,
        }

    def _compute(self, tag: str, vertex_type: str, fields: dict, shift: int) -> None:
        part = self.layout.part
        if part.num_vertices == 0:
            return
        cs = self.graph.add_compute_set(f"{self.prefix}/{tag}")
        self.graph.add_vertices(cs, vertex_type, {**fields, **self._state(shift)}, part.tiles)
        self.programs.append(poplar.Execute(cs))

    def _work(self, work: poplar.Tensor) -> poplar.Segments:
        return poplar.Segments(Layout.blocks_view(work).flatten(), self.layout.work_lengths())

    def _chunk(self, chunk: poplar.Tensor) -> poplar.Segments:
        return poplar.Segments(chunk, self.layout.part.lengths)

    def select(
        self, work: poplar.Tensor, out: poplar.Tensor, op: CollectiveOperator, shift: int, tag: str
    ) -> None:
        """``out = pre(work[:, index + shift])`` on every replica."""
        vtype = f"gcl::SelectChunk<{op.name},{type_arg(self.dtype)}>"
        fields = {"work": self._work(work), "out": self._chunk(out)}
        self._compute(tag, vtype, fields, shift)

    def combine(
        self,
        work: poplar.Tensor,
        acc: poplar.Tensor,
        op: CollectiveOperator,
        shift: int,
        scale: float,
        tag: str,
    ) -> None:
        """``acc = combine(acc, pre(work[:, index + shift])) * scale``, in place."""
        vtype = f"gcl::CombineChunk<{op.name},{type_arg(self.dtype)}>"
        fields = {"work": self._work(work), "acc": self._chunk(acc), "scale": scale}
        self._compute(tag, vtype, fields, shift)

    def place(self, work: poplar.Tensor, chunk: poplar.Tensor, shift: int, tag: str) -> None:
        """``work[:, index + shift] = chunk``."""
        vtype = f"gcl::PlaceChunk<{type_arg(self.dtype)}>"
        fields = {"work": self._work(work), "chunk": self._chunk(chunk)}
        self._compute(tag, vtype, fields, shift)

    def replica_map(self, shift: int) -> dict[int, int]:
        """Every replica to the replica ``shift`` places further round its group."""
        dest = self.grouping.shifted(self.direction * shift)
        return {int(r): int(d) for r, d in enumerate(dest.tolist()) if r != d}

    def cross(self, src: poplar.Tensor, dst: poplar.Tensor, shift: int, tag: str) -> None:
        """``src`` of every replica to ``dst`` of the replica ``shift`` further round."""
        mapping = self.replica_map(shift)
        if mapping and src.num_elements:
            self.programs.append(
                poplar.CrossReplicaCopy(src, dst, mapping, name=f"{self.prefix}/{tag}")
            )

    def copy(self, src: poplar.Tensor, dst: poplar.Tensor, tag: str) -> None:
        if src.num_elements:
            self.programs.append(poplar.Copy(src, dst, name=f"{self.prefix}/{tag}"))

    def to_work(
        self, flat: poplar.Tensor, work: poplar.Tensor, tag: str, layout: Layout | None = None
    ) -> None:
        """Copy ``flat`` (``n <= C * G`` elements) into ``work`` (of ``layout``, by default
        the builder's) chunk by chunk (chunk ``k`` holds elements ``[k C, (k + 1) C)``),
        zero-padding the tail."""
        dst = (layout or self.layout).chunks(work).flatten()
        pad = dst.num_elements - flat.num_elements
        src = flat
        if pad:
            zeros = self.graph.add_constant(self.dtype, (pad,), 0, f"{self.prefix}/padding")
            self.graph.set_tile_mapping(zeros, self.graph.tiles_of(dst[flat.num_elements :]))
            src = poplar.concat([flat, zeros])
        self.copy(src, dst, tag)

    def from_work(
        self, work: poplar.Tensor, flat: poplar.Tensor, tag: str, layout: Layout | None = None
    ) -> None:
        """Copy the first ``flat.num_elements`` elements of ``work``'s chunks to ``flat``."""
        chunks = (layout or self.layout).chunks(work)
        self.copy(chunks.flatten()[: flat.num_elements], flat, tag)

    def flush(self, prog: poplar.Sequence) -> None:
        for p in self.programs:
            prog.add(p)
        self.programs = []
