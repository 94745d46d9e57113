"""Helpers every library uses (PopLibs' poputil): splitting a tensor's elements into worker
vertices on the tiles that hold them, creating outputs mapped like inputs, and the shape of
PopLibs' cycle estimators.

Everything here is vectorised over vertices and tiles: building a compute set for a tensor
spread over 1472 tiles costs a few NumPy calls, not a Python loop per vertex.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError, TensorError


@dataclass(frozen=True)
class Partition:
    """Vertices over the elements of a tensor: vertex ``i`` runs on ``tiles[i]`` over the
    ``lengths[i]`` elements at flat positions ``order[offsets[i]:offsets[i + 1]]``."""

    order: np.ndarray  # flat positions of the tensor, grouped by vertex
    tiles: np.ndarray  # [vertices] tile of each vertex (the graph's numbering)
    lengths: np.ndarray  # [vertices] elements per vertex

    @property
    def num_vertices(self) -> int:
        return int(self.tiles.size)

    @property
    def offsets(self) -> np.ndarray:
        return np.r_[0, np.cumsum(self.lengths)]

    def view(self, t: poplar.Tensor) -> poplar.Tensor:
        """``t`` (shaped like the partitioned tensor, or broadcast to it) flattened and
        reordered by vertex."""
        return t.flatten()[self.order]

    @property
    def identity(self) -> bool:
        """True when vertices take the elements in the tensor's own flattened order (a
        linear mapping): connections can keep the tensor's shape (see ``segments``)."""
        return bool(np.all(self.order == np.arange(self.order.size)))

    def segments(self, t: poplar.Tensor) -> poplar.Segments:
        """A bulk connection giving each vertex its elements of ``t``. In identity order
        ``t`` keeps its shape, so codelets may view the field N-d (``Batch.view``)."""
        return poplar.Segments(t if self.identity else self.view(t), self.lengths)


def split_counts(
    counts: np.ndarray, max_parts: int | np.ndarray, grain: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``counts[i]`` elements into at most ``max_parts`` parts whose sizes are
    multiples of ``grain`` (but the last), as even as possible.

    Returns ``(owner, sizes)``: for each part, the index of the count it belongs to and
    its size. Zero counts give no parts.
    """
    counts = np.asarray(counts, dtype=np.int64)
    grains = -(-counts // grain)
    parts = np.minimum(grains, max_parts)
    owner = np.repeat(np.arange(counts.size), parts)
    first = np.repeat(np.cumsum(parts) - parts, parts)
    j = np.arange(owner.size) - first
    base = np.repeat(grains // np.maximum(parts, 1), parts)
    extra = np.repeat(grains % np.maximum(parts, 1), parts)
    sizes = (base + (j < extra)) * grain
    last = np.cumsum(parts) - 1
    sizes[last[parts > 0]] -= (grains * grain - counts)[parts > 0]
    return owner, sizes


def partition(
    graph: poplar.Graph, t: poplar.Tensor, grain: int = 1, workers: int | None = None
) -> Partition:
    """Worker vertices on every tile holding elements of ``t``, each taking a part (a
    multiple of ``grain`` elements) of its tile's elements.

    When the elements form few runs of one tile in ``t``'s flattened order (a linear or a
    blocked mapping), vertices take the runs in that order (each run split into at most
    ``workers // runs on its tile`` parts), so the connections keep ``t``'s order and
    codelets can view fields N-d without gathering. Otherwise (interleaved mappings) each
    tile's elements are gathered together and split into at most ``workers`` parts."""
    tiles = graph.tiles_of(t).reshape(-1)
    if tiles.size and tiles.min() < 0:
        first = int(np.flatnonzero(tiles < 0)[0])
        raise GraphError(f"partition: element {first} (flat) of {t!r} is not mapped to a tile")
    workers = workers or graph.target.num_worker_contexts
    starts = np.r_[0, np.flatnonzero(tiles[1:] != tiles[:-1]) + 1] if tiles.size else tiles
    run_tiles = tiles[starts]
    per_tile = np.bincount(run_tiles, minlength=graph.num_tiles)
    if starts.size and starts.size <= 4 * workers * np.count_nonzero(per_tile):
        lengths = np.diff(np.r_[starts, tiles.size])
        parts = np.maximum(1, workers // per_tile[run_tiles])
        owner, sizes = split_counts(lengths, parts, grain)
        return Partition(np.arange(tiles.size), run_tiles[owner], sizes)
    order = np.argsort(tiles, kind="stable")
    counts = np.bincount(tiles, minlength=graph.num_tiles)
    used = np.flatnonzero(counts)
    owner, sizes = split_counts(counts[used], workers, grain)
    return Partition(order, used[owner], sizes)


def map_like(
    graph: poplar.Graph, out: poplar.Tensor, like: poplar.Tensor | None, grain: int = 1
) -> None:
    """Map ``out`` element for element like ``like`` when it has the same shape and is
    mapped, else linearly with ``grain``."""
    if like is not None and like.shape == out.shape:
        tiles = graph.tiles_of(like)
        if tiles.size == 0 or tiles.min() >= 0:
            graph.set_tile_mapping(out, tiles)
            return
    poplar.map_tensor_linearly(graph, out, grain_size=grain)


def _address_range(t: poplar.Tensor) -> tuple[int, int]:
    a = t.addresses
    return (int(a.min()), int(a.max())) if a.size else (0, -1)


def overlaps(a: poplar.Tensor, b: poplar.Tensor) -> bool:
    """Whether ``a`` and ``b`` share an element (address ranges first: cheap)."""
    if a.dtype is not b.dtype or a.graph is not b.graph:
        return False
    a_lo, a_hi = _address_range(a)
    b_lo, b_hi = _address_range(b)
    if a_hi < b_lo or b_hi < a_lo:
        return False
    if a.is_contiguous() and b.is_contiguous():
        return True
    return a.intersects_with(b)


def refuse_aliased(
    t: poplar.Tensor, what: str, error: type[Exception] = TensorError, role: str = ""
) -> None:
    """Raise ``error`` when ``t``, a tensor about to be written, has aliased elements (a
    broadcast view, a concatenation of one tensor with itself): one element would be
    written twice."""
    if not t.is_contiguous() and t.contains_aliases():
        raise error(
            f"{what}: {role + ' ' if role else ''}{t!r} has aliased elements (a broadcast view?): "
            f"one element would be written twice"
        )


def unaliased(
    graph: poplar.Graph,
    t: poplar.Tensor,
    written: poplar.Tensor,
    prog: poplar.Sequence,
    name: str,
    like: poplar.Tensor | None = None,
) -> poplar.Tensor:
    """``t``, or, when it shares an element with ``written`` (the tensor an in-place
    operation writes), a copy of it made first in ``prog`` and mapped like ``like`` (else
    like ``t``): a compute set may not read what it writes, and the operation reads ``t``'s
    values from before the write.
    """
    if not overlaps(t, written):
        return t
    copy = graph.add_variable(t.dtype, t.shape, name)
    map_like(graph, copy, t if like is None else like)
    prog.add(poplar.Copy(t, copy))
    return copy


def create_output(
    graph: poplar.Graph,
    dtype: poplar.Type,
    shape: Sequence[int],
    name: str,
    like: poplar.Tensor | None = None,
    grain: int = 1,
) -> poplar.Tensor:
    """A new variable for an operation's result, mapped like ``like`` when possible."""
    out = graph.add_variable(dtype, tuple(shape), name)
    map_like(graph, out, like, grain)
    return out


def ensure_codelets(graph: poplar.Graph, codelets: Sequence[type[poplar.Codelet]]) -> None:
    """Register a library's codelets in ``graph`` once (PopLibs' ``addCodelets``)."""
    registry = graph.state.codelets
    missing = [c for c in codelets if c.name not in registry]
    if missing:
        graph.add_codelets(missing)


def multi_vertex_cycles(
    target: Any,  # a Target, or anything with num_worker_contexts
    n: np.ndarray,
    vector_width: int,
    cycles_per_vector: float,
    worker_overhead: float,
    supervisor_overhead: float = 11,
) -> np.ndarray:
    """PopLibs' supervisor (MultiVertex) shape, in tile cycles:
    ``supervisor + W * (worker + ceil(ceil(n / W) / vw) * cycles_per_vector)``."""
    W = target.num_worker_contexts
    per_worker = -(-np.asarray(n, dtype=np.int64) // W)
    vectors = -(-per_worker // vector_width)
    return supervisor_overhead + W * (worker_overhead + vectors * cycles_per_vector)


def worker_cycles(
    n: np.ndarray, vector_width: int, cycles_per_vector: float, overhead: float
) -> np.ndarray:
    """PopLibs' worker (2D/1D-per-worker) shape, in context cycles:
    ``overhead + ceil(n / vw) * cycles_per_vector``."""
    vectors = -(-np.asarray(n, dtype=np.int64) // vector_width)
    return overhead + vectors * cycles_per_vector
