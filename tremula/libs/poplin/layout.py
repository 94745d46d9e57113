"""Where a plan puts things: blocks, tiles, regions of equal blocks, and tile mappings.

Everything is in the planned frame (``A[G, M, K] @ B[G, K, N]``, ``M`` and ``N`` exchanged
when the plan swaps) and vectorised over blocks and elements.

* Output blocks ``(gi, mi, ni)`` are numbered with the pairing dimension innermost (``ni``,
  or ``mi`` when the plan's super-tile pairs share B blocks); the ``j``-th K tile of block
  ``b`` is tile ``j * blocks + b``, so the two tiles of a super-tile read one operand block.
* ``K`` is cut in chunks of ``step_k``; in serial step ``s`` the ``j``-th K tile of every
  block multiplies chunk ``s * blocks_k + j`` (if it exists).
* A *region* is a grid of equal blocks: along each dimension the full blocks form one
  :class:`Span` and a shorter last block another. All vertices of one region in one compute
  set are added together, so that their fields are strided views of the operands.
* Created operands and outputs are row-major variables of the planned frame; only their tile
  mappings follow the plan: an operand block is spread in equal pieces (flattened, row-major)
  over the tiles that read it; an output block is cut along ``split`` in ``blocks_k`` pieces,
  the ``j``-th reduced on the block's ``j``-th tile (stage 2), or lies on its only tile.
* The partials are one ``[blocks_k, G, M, N]`` variable; slice ``j`` of a block lies on the
  block's ``j``-th tile.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from tremula.libs.poplin.plan import Plan


@dataclass(frozen=True)
class Span:
    """``count`` equal parts of ``size`` elements along one dimension, the first starting at
    element ``start``; ``first`` is the index of the first part."""

    first: int
    count: int
    start: int
    size: int

    @property
    def stop(self) -> int:
        return self.start + self.count * self.size

    @property
    def index(self) -> np.ndarray:
        return np.arange(self.first, self.first + self.count, dtype=np.int64)


def spans(d: int, b: int) -> list[Span]:
    """Blocks of ``b`` elements covering ``[0, d)``: the full ones, then the shorter last."""
    full = d // b
    out = [Span(0, full, 0, b)] if full else []
    if d % b:
        out.append(Span(full, 1, full * b, d % b))
    return out


def piece_spans(d: int, parts: int) -> list[Span]:
    """``d`` elements cut in ``parts`` near-equal pieces (the larger first; empty pieces
    dropped): spans over the piece index, ``start`` the offset in the block."""
    q, a = divmod(d, parts)
    out = [Span(0, a, 0, q + 1)] if a else []
    if q:
        out.append(Span(a, parts - a, a * (q + 1), q))
    return out


def _piece_of(offset: np.ndarray, d: np.ndarray, parts: int) -> np.ndarray:
    """Piece (as in :func:`piece_spans`) of offset ``offset`` in a block of ``d``."""
    q, a = np.divmod(d, parts)
    cut = a * (q + 1)
    return np.where(offset < cut, offset // (q + 1), a + (offset - cut) // np.maximum(q, 1))


@dataclass(frozen=True)
class Region:
    """A grid of equal block products (or of equal stage-2 pieces): spans along ``G``,
    ``M``, ``N`` and ``K`` (K chunks, or pieces for stage 2)."""

    g: Span
    m: Span
    n: Span
    k: Span

    @property
    def grid(self) -> tuple[int, int, int, int]:
        return (self.g.count, self.m.count, self.n.count, self.k.count)

    @property
    def num_vertices(self) -> int:
        return int(np.prod(self.grid))


class Geometry:
    """The blocks, tiles and regions of a plan (see the module docstring)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.G, self.M, self.K, self.N = plan.dims
        self.g_spans = spans(self.G, plan.block_g)
        self.m_spans = spans(self.M, plan.block_m)
        self.n_spans = spans(self.N, plan.block_n)
        self.nk = plan.blocks_k
        self.blocks = plan.blocks_g * plan.blocks_m * plan.blocks_n

    def block(self, gi: np.ndarray, mi: np.ndarray, ni: np.ndarray) -> np.ndarray:
        """Block number (in tile order) of blocks ``(gi, mi, ni)`` (broadcast)."""
        p = self.plan
        if p.share == "b":
            return (gi * p.blocks_n + ni) * p.blocks_m + mi
        return (gi * p.blocks_m + mi) * p.blocks_n + ni

    def tile(self, gi: np.ndarray, mi: np.ndarray, ni: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Tile of the ``j``-th K tile of blocks ``(gi, mi, ni)`` (broadcast)."""
        return j * self.blocks + self.block(gi, mi, ni)

    def grid_tiles(self, r: Region) -> np.ndarray:
        """Tiles of a region's vertices in vertex order (row-major over ``g, m, n, k``)."""
        g, m, n, k = (s.index.reshape(sh) for s, sh in zip((r.g, r.m, r.n, r.k), _AXES))
        return self.tile(g, m, n, k).reshape(-1)

    # ---- regions ----
    def k_spans(self, s: int) -> list[Span]:
        """The K chunks of serial step ``s``, as spans over the K tile ``j``."""
        step, chunks = self.plan.step_k, self.plan.k_chunks
        lo, hi = s * self.nk, min(chunks, (s + 1) * self.nk)
        full = hi - 1 if (hi == chunks and self.K % step) else hi
        out = [Span(0, full - lo, lo * step, step)] if full > lo else []
        if full < hi:
            out.append(Span(full - lo, 1, full * step, self.K - full * step))
        return out

    def product_regions(self, s: int) -> list[Region]:
        """Regions of the block products of serial step ``s``."""
        grid = itertools.product(self.g_spans, self.m_spans, self.n_spans, self.k_spans(s))
        return [Region(*r) for r in grid]

    def reduce_regions(self) -> list[Region]:
        """Regions of the stage-2 pieces: ``k`` spans the pieces of a block (piece ``j``
        on the block's ``j``-th tile), cut along the plan's ``split``; its ``start`` is the
        offset in the block."""
        out = []
        for g, m, n in itertools.product(self.g_spans, self.m_spans, self.n_spans):
            d = m.size if self.plan.split == "m" else n.size
            out += [Region(g, m, n, p) for p in piece_spans(d, self.nk)]
        return out

    # ---- tile mappings (flat, row-major) ----
    def _blocks_of(self, d: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per element of a dimension: its block, its offset in it, its block's size."""
        e = np.arange(d, dtype=np.int64)
        i = e // b
        return i, e - i * b, np.minimum(b, d - i * b)

    def output_tiles(self, stage2: bool) -> np.ndarray:
        """``[G, M, N]``: the tile of every output element."""
        p = self.plan
        g, _, _ = self._blocks_of(self.G, p.block_g)
        m, om, dm = self._blocks_of(self.M, p.block_m)
        n, on, dn = self._blocks_of(self.N, p.block_n)
        j = np.zeros((1, 1, 1), dtype=np.int64)
        if stage2 and p.split == "m":
            j = _piece_of(om, dm, self.nk).reshape(1, -1, 1)
        elif stage2:
            j = _piece_of(on, dn, self.nk).reshape(1, 1, -1)
        return self.tile(g[:, None, None], m[None, :, None], n[None, None, :], j)

    def partials_tiles(self) -> np.ndarray:
        """``[blocks_k, G, M, N]``: slice ``j`` of a block on its ``j``-th tile."""
        base = self.output_tiles(stage2=False)
        j = np.arange(self.nk, dtype=np.int64).reshape(-1, 1, 1, 1)
        return j * self.blocks + base[None]

    def local_a_tiles(self) -> np.ndarray:
        """``[blocks_n, G, M, K]``: the copy of ``A`` that an ``"n"`` loop broadcasts
        before its steps, slice ``ni`` on the tiles of the ``ni``-th ``N`` blocks (one step
        of ``K``: chunk ``j`` on the ``j``-th K tile)."""
        p = self.plan
        g = self._blocks_of(self.G, p.block_g)[0].reshape(1, -1, 1, 1)
        m = self._blocks_of(self.M, p.block_m)[0].reshape(1, 1, -1, 1)
        j = self._blocks_of(self.K, p.step_k)[0].reshape(1, 1, 1, -1) % self.nk
        n = np.arange(p.blocks_n, dtype=np.int64).reshape(-1, 1, 1, 1)
        return self.tile(g, m, n, j)

    def operand_tiles(self, role: str) -> np.ndarray:
        """``[G, M, K]`` (``role`` "a") or ``[G, K, N]`` ("b"): the tile of every element
        of a created operand. A block (one K chunk of one row or column of blocks) is cut
        in equal pieces, flattened row-major, one per tile that reads it."""
        p = self.plan
        g, og, dg = (x.reshape(-1, 1, 1) for x in self._blocks_of(self.G, p.block_g))
        c, oc, dc = self._blocks_of(self.K, p.step_k)
        j = c % self.nk
        if role == "a":
            m, om, dm = (x.reshape(1, -1, 1) for x in self._blocks_of(self.M, p.block_m))
            oc, dc, j = (x.reshape(1, 1, -1) for x in (oc, dc, j))
            offset = (og * dm + om) * dc + oc
            holder = offset * p.blocks_n // (dg * dm * dc)
            return self.tile(g, m, holder, j)
        n, on, dn = (x.reshape(1, 1, -1) for x in self._blocks_of(self.N, p.block_n))
        oc, dc, j = (x.reshape(1, -1, 1) for x in (oc, dc, j))
        offset = (og * dc + oc) * dn + on
        holder = offset * p.blocks_m // (dg * dc * dn)
        return self.tile(g, holder, n, j)


#: Broadcast shapes of the g, m, n, k indices of a region's grid.
_AXES = ((-1, 1, 1, 1), (1, -1, 1, 1), (1, 1, -1, 1), (1, 1, 1, -1))
