"""The embedding's own vertices, with their cycle estimators ([proposal] figures: PopLibs has
no such vertices) and the functions that place them.

* ``tremula::EmbeddingUnique``: the distinct values of an index vector (sorted), each
  index's position among them (``inverse``) and their number; unused entries of ``unique``
  hold ``pad``. Deduplicates indices before a host exchange, and makes a remote buffer's
  read-add-write safe for repeated slots. One supervisor vertex: a sort on one tile.
* ``tremula::ReplicationIndex``: the replica's index (Poplar's replication-index constant).
* ``tremula::EmbeddingCheckIndices``: fails the run (``ApplicationRuntimeError``) on an
  index outside ``[0, limit)``, naming the embedding (for ``clip_indices=False`` lookups of
  remote-buffer embeddings; the host checks host embeddings' indices itself).
"""

from __future__ import annotations

import numpy as np

from tremula import poplar
from tremula.errors import ApplicationRuntimeError
from tremula.libs import util


def _unique_rows(idx: np.ndarray, capacity: int, pad: int) -> tuple[np.ndarray, ...]:
    """Per row of ``idx`` ``[R, n]``: (unique ``[R, capacity]`` padded with ``pad``, inverse
    ``[R, n]`` clipped below ``capacity``, count ``[R]``), without a loop over rows."""
    R, n = idx.shape
    if n == 0:
        return np.full((R, capacity), pad), np.zeros((R, 0), np.int64), np.zeros(R, np.int64)
    lo = int(idx.min())
    span = int(idx.max()) - lo + 1
    keys = (idx.astype(np.int64) - lo) + np.arange(R, dtype=np.int64)[:, None] * span
    u, inv = np.unique(keys.ravel(), return_inverse=True)
    rep = u // span
    count = np.bincount(rep, minlength=R)
    start = np.cumsum(count) - count
    slot = np.arange(u.size) - start[rep]
    unique = np.full((R, capacity), pad, dtype=np.int64)
    keep = slot < capacity
    unique[rep[keep], slot[keep]] = (u - rep * span + lo)[keep]
    inverse = inv.reshape(R, n) - start[:, None]
    return unique, np.minimum(inverse, capacity - 1), count


class EmbeddingUnique(poplar.Codelet):
    """Sorted distinct indices, the inverse map and the count (module docstring)."""

    name = "tremula::EmbeddingUnique"
    supervisor = True
    indices = poplar.Input(poplar.INT)
    unique = poplar.Output(poplar.INT)
    inverse = poplar.Output(poplar.INT)
    count = poplar.Output(poplar.INT, kind="scalar")
    pad = poplar.State(poplar.INT)

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        cap = int(v.lengths("unique")[0])
        unique, inverse, count = _unique_rows(np.asarray(v.indices), cap, int(v.pad[0]))
        v.unique = unique
        v.inverse = inverse
        v.count = count[:, None]

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        """A radix sort of (index, position) pairs and a pass over them: about
        ``n (2 ceil(log2 n) + 8) + 2 capacity + 60``."""
        n = v.lengths("indices").astype(np.int64)
        log = np.ceil(np.log2(np.maximum(n, 2))).astype(np.int64)
        return n * (2 * log + 8) + 2 * v.lengths("unique").astype(np.int64) + 60


class ReplicationIndex(poplar.Codelet):
    """``index`` = the replica's index."""

    name = "tremula::ReplicationIndex"
    index = poplar.Output(poplar.INT, kind="scalar")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        v.index = np.asarray(v.replica_ids, dtype=np.int32)[:, None]

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return np.full(v.n, 8)


class EmbeddingCheckIndices(poplar.Codelet):
    """Fail the run on an index outside ``[0, limit)``."""

    name = "tremula::EmbeddingCheckIndices"
    indices = poplar.Input(poplar.INT)
    limit = poplar.State(poplar.INT)
    what = poplar.State(poplar.UNSIGNED_CHAR, kind="vector")

    @staticmethod
    def compute(v: poplar.Batch) -> None:
        idx = np.asarray(v.indices)
        limit = int(v.limit[0])
        bad = (idx < 0) | (idx >= limit)
        if not bad.any():
            return
        r, i = (int(k) for k in np.argwhere(bad)[0])
        name = bytes(np.asarray(v.what[0], dtype=np.uint8)).decode()
        raise ApplicationRuntimeError(
            f"host embedding {name!r}: index {int(idx[r, i])} (replica "
            f"{int(v.replica_ids[r])}, position {i} of the flattened indices) is outside "
            f"[0, {limit}); lookups with clip_indices=True (the default) clamp indices into range"
        )

    @staticmethod
    def cycles(v: poplar.VertexInfo) -> np.ndarray:
        return 12 + 2 * v.lengths("indices").astype(np.int64)


CODELETS = (EmbeddingUnique, ReplicationIndex, EmbeddingCheckIndices)


def _int_variable(
    graph: poplar.Graph, shape: tuple[int, ...], tile: int, name: str
) -> poplar.Tensor:
    t = graph.add_variable(poplar.INT, shape, name)
    graph.set_tile_mapping(t, tile)
    return t


def unique(
    graph: poplar.Graph,
    indices: poplar.Tensor,
    capacity: int,
    pad: int,
    prog: poplar.Sequence,
    name: str,
    tile: int = 0,
) -> tuple[poplar.Tensor, poplar.Tensor, poplar.Tensor]:
    """The distinct values of ``indices`` ``[n]`` (INT): ``(unique [capacity], inverse [n],
    count [1])``, all on ``tile``."""
    util.ensure_codelets(graph, CODELETS)
    n = indices.num_elements
    uniq = _int_variable(graph, (capacity,), tile, f"{name}/unique")
    inv = _int_variable(graph, (n,), tile, f"{name}/inverse")
    count = _int_variable(graph, (1,), tile, f"{name}/count")
    cs = graph.add_compute_set(f"{name}/EmbeddingUnique")
    fields = {"indices": indices, "unique": uniq, "inverse": inv, "count": count[0], "pad": pad}
    graph.add_vertex(cs, EmbeddingUnique.name, fields, tile)
    prog.add(poplar.Execute(cs))
    return uniq, inv, count


def replication_index(graph: poplar.Graph, prog: poplar.Sequence, name: str) -> poplar.Tensor:
    """A ``[1]`` INT tensor holding the replica's index (on tile 0)."""
    util.ensure_codelets(graph, CODELETS)
    out = _int_variable(graph, (1,), 0, f"{name}/replicationIndex")
    cs = graph.add_compute_set(f"{name}/ReplicationIndex")
    graph.add_vertex(cs, ReplicationIndex.name, {"index": out[0]}, 0)
    prog.add(poplar.Execute(cs))
    return out


def check_indices(
    graph: poplar.Graph, indices: poplar.Tensor, limit: int, what: str, prog: poplar.Sequence
) -> None:
    """Fail the run if an element of ``indices`` is outside ``[0, limit)`` (naming ``what``)."""
    util.ensure_codelets(graph, CODELETS)
    tiles = graph.tiles_of(indices).reshape(-1)
    tile = max(int(tiles[0]), 0) if tiles.size else 0
    cs = graph.add_compute_set(f"{what}/CheckIndices")
    subject = np.frombuffer(what.encode(), dtype=np.uint8)
    fields = {"indices": indices.flatten(), "limit": int(limit), "what": subject}
    graph.add_vertex(cs, EmbeddingCheckIndices.name, fields, tile)
    prog.add(poplar.Execute(cs))


__all__ = ["CODELETS", "check_indices", "replication_index", "unique"]
