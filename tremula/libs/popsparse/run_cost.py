"""The cycles of the Fwd / GradA product vertices on the buckets they actually read
(a compute set takes as long as its slowest tile; a PN without a matching sub-group pays
only the supervisor's walk, about 33 cycles per skipped sub-group).

The planner, and the vertices' static estimates, assume a uniform pattern: one matching
sub-group per bucket, the plan's rows and blocks in each. On the device a
vertex's time follows the meta-info it walks, which is written at run time. Here every
vertex is costed from the decoded meta-info with the same estimator terms (PopLibs'
``PerformanceEstimation.hpp``):

* the supervisor walks each bucket it reads: a bucket with no sub-group of the vertex's id
  costs ``skip`` per sub-group (a PN of the propagation phase without a matching sub-group
  pays only this); a bucket with one costs ``search x (position of the first match + 1) +
  found``;
* each matching sub-group then costs its work: for the element-wise Fwd / GradA vertices
  ``W x`` the slowest of the workers the meta-info's worker entries describe (their rows,
  non-zeros and Z slice), for the shared-bucket ``Transpose`` vertex its non-zeros divided
  over the workers, for the AMP block vertices its blocks and block rows
  (:func:`estimators.block_fwd_sub_group`).

Everything is vectorised over sub-groups, workers and vertices (a few NumPy calls per
distinct meta-info content; the product vertices cache the result by content).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels
from tremula.target import Target

#: The supervisor walk of each product vertex: (constant, search, found, skip).
WALK = {
    "Forward": (30, 47, 46, 32),
    "GradA": (46, 47, 46, 32),
    "Transpose": (68, 44, 0, 32),
    "block": (40, est.BLOCK_WALK["search"], est.BLOCK_WALK["found"], est.BLOCK_WALK["skip"]),
}


@dataclass(frozen=True)
class VertexKind:
    """What a product vertex is, for its cycles: ``method`` (``Forward``, ``GradA``,
    ``Transpose`` or ``block``), the input and partials type sizes, the Z columns of its
    tile, the block edge (block methods) and whether the worker runs as the Fwd assembly
    does (:func:`estimators.ew_fwd_terms`)."""

    method: str
    sizes: tuple[int, int]
    z: int
    edge: int = 1
    assembly: bool = False


def vertex_cycles(
    target: Target,
    kind: VertexKind,
    words: np.ndarray,
    fmt: kernels.BucketFormat,
    vertex_row: np.ndarray,
    vertex_sid: np.ndarray,
) -> np.ndarray:
    """Cycles of each vertex: vertex ``v`` reads the buckets of row ``vertex_row[v]`` of
    ``words`` (``[m, buckets x fmt.words]``, meta-info the product already decoded without
    error) and processes the sub-groups of id ``vertex_sid[v]``."""
    m = words.shape[0]
    nb = words.shape[1] // fmt.words if m else 0
    w = np.asarray(words).reshape(-1, fmt.words).astype(np.int64)
    sg = kernels.sub_groups(w, fmt)
    const, search, found, skip = WALK[kind.method]
    per_bucket = np.bincount(sg["bucket"], minlength=m * nb)
    per_row = per_bucket.reshape(m, nb).sum(axis=1) if m else np.zeros(0, np.int64)
    vrow = np.asarray(vertex_row, dtype=np.int64)
    vsid = np.asarray(vertex_sid, dtype=np.int64)
    cycles = const + skip * per_row[vrow] if vrow.size else np.zeros(0, np.int64)
    if not sg["sid"].size:
        return np.asarray(cycles, dtype=np.int64)
    work = _sub_group_work(target, kind, w, sg, fmt)
    rank = _rank_in_bucket(sg["bucket"])
    vert, g = _matches(sg["bucket"] // max(nb, 1), sg["sid"], vrow, vsid)
    if not vert.size:
        return np.asarray(cycles, dtype=np.int64)
    cycles = cycles + np.bincount(vert, weights=work[g], minlength=vrow.size).astype(np.int64)
    # per (vertex, bucket) with a match: the walk to its first match instead of the skips
    pair = vert * (m * nb) + sg["bucket"][g]
    order = np.lexsort((rank[g], pair))
    first = np.r_[True, pair[order][1:] != pair[order][:-1]]
    hit = order[first]
    walked = search * (rank[g][hit] + 1) + found - skip * per_bucket[sg["bucket"][g][hit]]
    cycles = cycles + np.bincount(vert[hit], weights=walked, minlength=vrow.size).astype(np.int64)
    return np.asarray(cycles, dtype=np.int64)


def _rank_in_bucket(bucket: np.ndarray) -> np.ndarray:
    """The position of each sub-group in its bucket (``sub_groups`` lists every bucket's
    first sub-groups, then their second ones, ...)."""
    order = np.argsort(bucket, kind="stable")
    b = bucket[order]
    rank = np.empty_like(bucket)
    rank[order] = np.arange(b.size) - np.searchsorted(b, b, side="left")
    return rank


def _matches(
    sg_row: np.ndarray, sg_sid: np.ndarray, vrow: np.ndarray, vsid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(vertex, sub-group)`` pairs: the sub-groups of each vertex's row and id."""
    key = sg_row * 65536 + sg_sid
    order = np.argsort(key, kind="stable")
    keys = key[order]
    want = vrow * 65536 + vsid
    lo = np.searchsorted(keys, want, side="left")
    cnt = np.searchsorted(keys, want, side="right") - lo
    vert = np.repeat(np.arange(want.size), cnt)
    within = np.arange(vert.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return vert, order[np.repeat(lo, cnt) + within]


def _sub_group_work(
    target: Target,
    kind: VertexKind,
    w: np.ndarray,
    sg: dict[str, np.ndarray],
    fmt: kernels.BucketFormat,
) -> np.ndarray:
    """What each sub-group costs the vertex that processes it, beyond the walk."""
    nw = target.num_worker_contexts
    if kind.method == "block":
        blocks = sg["values"] // fmt.area
        return est.block_fwd_sub_group(target, kind.edge, kind.sizes, kind.z, blocks, sg["rows"])
    if kind.method == "Transpose":
        count = sg["values"] // fmt.area
        worker = est.ew_transpose_worker(kind.sizes[0], kind.z, est.cdiv(count, nw))
        return nw * worker
    return nw * _slowest_worker(kind, w, sg, kernels.row_entries(w, sg, fmt))


def _slowest_worker(
    kind: VertexKind, w: np.ndarray, sg: dict[str, np.ndarray], rows: dict[str, np.ndarray]
) -> np.ndarray:
    """The slowest worker of each element-wise sub-group, from its worker entries
    (``numZ`` at word 1, ``numRows - 1`` at word 3, ``metaInfoOffset`` at word 4, from
    the entry to the worker's first row), each costed on its own rows, non-zeros and Z."""
    b, pos = sg["bucket"], sg["pos"]
    workers = w[b, pos + 8]
    g = np.repeat(np.arange(b.size), workers)
    k = np.arange(g.size) - np.repeat(np.cumsum(workers) - workers, workers)
    entry = pos[g] + 9 + 5 * k
    bg = b[g]
    num_z, num_rows = w[bg, entry + 1], w[bg, entry + 3] + 1
    first = entry + w[bg, entry + 4]
    span = w.shape[1] + 1
    row_key = rows["sg"] * span + rows["pos"]
    r0 = np.searchsorted(row_key, g * span + first)
    done = np.r_[0, np.cumsum(rows["n"])]
    r1 = np.minimum(r0 + num_rows, rows["n"].size)
    nz = done[r1] - done[np.minimum(r0, r1)]
    overhead, per_row, per_nz = est.ew_fwd_terms(kind.sizes[0], num_z, kind.assembly)
    cost = overhead + num_rows * per_row + per_nz * nz
    slowest = np.zeros(b.size, dtype=np.int64)
    np.maximum.at(slowest, g, cost)
    return slowest
