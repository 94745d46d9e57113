"""The multi-slice / multi-update planner: a pure function from (the tile of each table row,
the row size, the number of indices, the operation, the target) to a plan.

The table is split over tiles by rows. Its *natural partitions* are the runs of rows whose
first element is on one tile; the plan merges them into ``P`` consecutive partitions
(``P`` among ``natural, natural / 2, ..., 1``), each handled by vertices on its tiles:

* a multi-slice partition is served by ``J`` vertices, one per group of indices, on the
  first ``J`` tiles of the partition; each reads the partition's rows and its group's
  indices and writes that group's rows (a fill value where an index is elsewhere). With
  ``P > 1`` the partitions' results are combined by a reduction (``ADD`` of results filled
  with -0.0, exact; ``LOGICAL_OR`` for bool).
* a multi-update partition is one vertex on its first tile that reads every index and
  update row (a broadcast to the partitions), in ``S`` serial steps of index groups that
  bound what a tile receives at once.

``P`` (and ``J``) minimise the cycles of the busiest tile's exchange (the rows of its
partition held elsewhere, the indices and update rows it receives, the partial results it
sends) plus its compute, among the plans whose vertices' data fits in half a tile, under a
cap on the elements moved (the simulator models every element's exchange, so a plan
moving more would take long to compile; when no plan is under the cap, the one moving the
fewest elements).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_I64 = np.int64
#: Most elements (partition copies of indices and update rows, partial results) a plan may
#: move between partitions; beyond it fewer partitions are used.
BROADCAST_CAP = 1 << 24


@dataclass(frozen=True)
class MultiPlan:
    """Partition ``p`` holds rows ``[row_starts[p], row_starts[p + 1])``; its vertex ``j``
    (``j < groups``) runs on ``vertex_tiles[p, j]`` over indices
    ``[index_starts[j], index_starts[j + 1])``. For updates ``groups`` is the number of
    serial steps and ``vertex_tiles[:, j]`` is the partition's tile in every step."""

    row_starts: np.ndarray
    vertex_tiles: np.ndarray
    index_starts: np.ndarray
    kind: str

    @property
    def partitions(self) -> int:
        return int(self.row_starts.size - 1)

    @property
    def groups(self) -> int:
        return int(self.index_starts.size - 1)


def natural_partitions(row_tiles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row, tile) of each run of rows whose first element is on one tile."""
    t = np.asarray(row_tiles, dtype=_I64)
    if t.size == 0:
        return np.zeros(1, _I64), np.zeros(1, _I64)
    starts = np.r_[0, np.flatnonzero(t[1:] != t[:-1]) + 1].astype(_I64)
    return starts, t[starts]


def _split(count: int, parts: int) -> np.ndarray:
    """Boundaries of ``parts`` near-equal consecutive ranges of ``count`` items."""
    return (np.arange(parts + 1, dtype=_I64) * count) // parts


@dataclass(frozen=True)
class _Estimate:
    cycles: float  # the busiest tile's exchange and compute
    groups: int  # index groups (slice) or serial steps (update)
    moved: int  # elements broadcast to or combined from the partitions
    memory: int  # bytes one vertex receives or writes at once


def _cost(
    kind: str, P: int, J: int, span: int, rows: int, E: int, b: int, n: int, target: Any
) -> _Estimate:
    """Cost of ``P`` partitions of at most ``rows`` rows, each over ``span`` natural
    partitions (tiles), with ``J`` index groups (slice) per partition."""
    bpc = target.exchange_bytes_per_cycle
    remote = rows * E * (1 - 1 / span)  # elements of a partition held on other tiles
    vectors = -(-E // max(1, target.vector_width(b)))
    if kind == "slice":
        per = -(-n // J)
        recv = (remote + per * E * (P > 1)) * b + per * 4  # rows in, partial results out
        compute = per * (19 + 2 * vectors)
        moved = P * J * remote + (P * n * E if P > 1 else 0) + P * n
        return _Estimate(recv / bpc + compute, J, int(moved), int(recv + per * E * b))
    budget = target.memory_bytes_per_tile // 4
    S = min(max(1, -(-(n * (4 + E * b)) // budget)), max(n, 1))
    recv = 2 * remote * b + n * (4 + E * b)
    compute = n * (19 + 4 * vectors)
    step = -(-n // S) * (4 + E * b)
    moved = P * n * (E + 1) + 2 * P * remote
    return _Estimate(recv / bpc + compute, S, int(moved), int(remote * b + step))


def _halvings(count: int) -> list[int]:
    """``count, count // 2, ..., 1``."""
    out = [max(1, count)]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return out


def plan_multi(
    row_tiles: np.ndarray,
    row_elems: int,
    elem_bytes: int,
    num_indices: int,
    kind: str,
    target: Any,
) -> MultiPlan:
    """Plan a multi-slice (``kind="slice"``) or multi-update (``"update"``) of a table
    whose row ``r`` starts on tile ``row_tiles[r]`` (pure and deterministic).

    Candidates are ``P = natural, natural / 2, ..., 1`` partitions and, for a slice,
    ``J = 1, 2, 4, ...`` index groups up to the tiles of a partition. They rank by: the
    elements moved stay under ``BROADCAST_CAP`` (else: fewest moved), the vertices' data
    fits in half a tile, then the cycles of the busiest tile."""
    if kind not in ("slice", "update"):
        raise ValueError(f"plan_multi: kind must be 'slice' or 'update', got {kind!r}")
    num_rows = int(np.asarray(row_tiles).size)
    nat_starts, nat_tiles = natural_partitions(row_tiles)
    fits = target.memory_bytes_per_tile // 2
    best = None
    for P in _halvings(nat_starts.size):
        bounds = _split(nat_starts.size, P)
        row_b = np.r_[nat_starts, num_rows][bounds]
        rows = int(np.diff(row_b).max(initial=0))
        span = max(1, int(np.diff(bounds).min()))
        for J in _halvings(min(span, max(num_indices, 1))) if kind == "slice" else [1]:
            e = _cost(kind, P, J, span, rows, row_elems, elem_bytes, num_indices, target)
            over = e.moved > BROADCAST_CAP
            key = (over, e.moved if over else 0, e.memory > fits, e.cycles)
            if best is None or key < best[0]:
                best = (key, e.groups, bounds, row_b)
    assert best is not None  # P = 1 is always a candidate
    _, J, bounds, row_b = best
    if kind == "slice":
        pick = bounds[:-1, None] + np.arange(J)[None, :]
        tiles = nat_tiles[pick]
    else:
        tiles = np.repeat(nat_tiles[bounds[:-1], None], J, axis=1)
    return MultiPlan(row_b.astype(_I64), tiles.astype(_I64), _split(num_indices, J), kind)
