"""Geometry shared by the planner, the partitioner and the device program: partition
splits, processing nodes (PNs) and their buckets and tiles, the on-tile work split between
workers and the propagation order of buckets, as PopLibs' ``FullyConnectedUtils.cpp``,
``SparsePartitionerImpl.cpp`` and ``FullyConnected.cpp`` have them.

Conventions (forward-pass terms throughout):

* a dimension of ``size`` elements cut into ``parts`` partitions with a ``grain`` starts
  partition ``i`` at ``i * ceil(ceil(size / grain) / parts) * grain``; the last may be
  smaller, none is empty (the planner only picks such counts);
* PN / bucket ``b = (x * Py + y) * Pz + z``;
* a forward PN sits on tile ``(y * Pz + z) * Px + x``;
* sub-group id ``x * Py + y + 1`` (0 terminates a bucket's meta-info).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tremula.libs.popsparse.errors import PlanningError

#: Dimension names of mapping orders, slowest varying first.
DIMS = ("x", "y", "z")


def lex_order(*keys: np.ndarray) -> np.ndarray:
    """Stable order sorting by ``keys`` (non-negative integers), the first most significant:
    ``np.lexsort(keys[::-1])``, as one stable argsort of a combined int64 key (fast on
    nearly sorted input), or ``np.lexsort`` when the key would not fit 63 bits."""
    if not keys or keys[0].size == 0:
        return np.zeros(0, dtype=np.int64)
    tops = [int(k.max()) + 1 for k in keys]
    if (
        len(keys) > 1
        and keys[0].size > 1 << 16
        and max(tops) <= 1 << 16
        and (np.prod(tops, dtype=np.float64) > 1 << 16)
    ):  # LSD radix passes on 16-bit keys
        order = np.argsort(keys[-1].astype(np.uint16), kind="stable")
        for k in keys[-2::-1]:
            order = order[np.argsort(k[order].astype(np.uint16), kind="stable")]
        return order
    combined = np.zeros(keys[0].shape, dtype=np.int64)
    span = 1
    for k in keys:
        top = int(k.max()) + 1
        span *= top
        if span >= 2**62:
            return np.lexsort(keys[::-1])
        combined = combined * top + k
    if span <= 2**16:
        combined = combined.astype(np.uint16)  # radix sort
    return np.argsort(combined, kind="stable")


def run_starts(*keys: np.ndarray) -> np.ndarray:
    """Start index of each run of equal ``keys`` tuples (empty for empty keys)."""
    n = keys[0].size
    new = np.zeros(n, dtype=bool)
    new[:1] = True
    for k in keys:
        new[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(new)


def grains_per_partition(size: int, parts: int, grain: int) -> int:
    """Grains in every partition but possibly the last: ``ceil(ceil(size/grain)/parts)``."""
    grains = -(-size // grain)
    return -(-grains // parts)


def partition_starts(size: int, parts: int, grain: int) -> np.ndarray:
    """Start index (elements) of each of ``parts`` partitions of a dimension.

    Raises:
        PlanningError: more partitions than grains, or an empty partition.
    """
    grains = -(-size // grain)
    if parts < 1 or parts > grains:
        raise PlanningError(
            f"cannot split a dimension of {size} elements (grain {grain}) into {parts} parts"
        )
    starts = np.arange(parts, dtype=np.int64) * grains_per_partition(size, parts, grain) * grain
    if starts[-1] >= size:
        raise PlanningError(
            f"splitting {size} elements (grain {grain}) into {parts} parts leaves partition "
            f"{parts - 1} empty (it would start at {starts[-1]})"
        )
    return starts


def valid_partition_counts(grains: int, limit: int) -> np.ndarray:
    """Partition counts of a dimension of ``grains`` grains that leave no partition empty
    (``ceil(grains / ceil(grains / P)) == P``), up to ``limit``."""
    p = np.arange(1, min(grains, limit) + 1, dtype=np.int64)
    per = -(-grains // p)
    return p[-(-grains // per) == p]


def bucket_coordinates(partition: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, z)`` of every bucket ``b = (x * Py + y) * Pz + z``."""
    px, py, pz = partition
    b = np.arange(px * py * pz, dtype=np.int64)
    return b // (py * pz), b // pz % py, b % pz


def tile_of(
    mapping: Sequence[str], partition: Sequence[int], x: np.ndarray, y: np.ndarray, z: np.ndarray
) -> np.ndarray:
    """Tile of the PNs ``(x, y, z)`` under a mapping order (dims slowest first): the
    forward order ``("y", "z", "x")`` gives ``(y * Pz + z) * Px + x``."""
    coords = {"x": np.asarray(x), "y": np.asarray(y), "z": np.asarray(z)}
    sizes = dict(zip(DIMS, partition))
    tile = np.zeros_like(coords["x"])
    for dim in mapping:
        tile = tile * sizes[dim] + coords[dim]
    return tile


def num_overflow_info_elems(px: int) -> int:
    """Length of the overflow info at the head of the meta-info: ``3 + ceil(Px / 2)``."""
    return 3 + -(-px // 2)


# ---- the work split of a sub-group between workers (``splitTileBetweenWorkers``) ----


@functools.lru_cache(maxsize=4096)
def rectangle_split(
    rows: int, z_grains: int, workers: int
) -> tuple[tuple[int, int, int, int], ...]:
    """Split a ``rows x z_grains`` rectangle into at most ``workers`` pieces
    ``(row_start, num_rows, z_start, num_z_grains)``.

    Starting from the whole rectangle, the largest piece (by area; the first of equals) is
    halved along its longer side (rows when equal), the first half taking the odd one,
    and the halves replace it in place, until there are ``workers`` pieces or every piece
    is a single row x single grain.
    """
    pieces = [(0, rows, 0, z_grains)]
    while len(pieces) < workers:
        areas = [p[1] * p[3] for p in pieces]
        i = areas.index(max(areas))
        r0, nr, z0, nz = pieces[i]
        if nr == 1 and nz == 1:
            break
        if nr >= nz:
            a = (nr + 1) // 2
            halves = [(r0, a, z0, nz), (r0 + a, nr - a, z0, nz)]
        else:
            a = (nz + 1) // 2
            halves = [(r0, nr, z0, a), (r0, nr, z0 + a, nz - a)]
        pieces[i : i + 1] = halves
    return tuple(pieces)


def row_range_starts(row_nnz: np.ndarray, workers: int) -> np.ndarray:
    """Contiguous row ranges balanced on the nnz prefix sums (rows > 2 x workers): worker
    ``w`` starts at the number of rows whose exclusive prefix sum ``e`` has
    ``workers * e < w * total``. Returns ``workers + 1`` starts; empty ranges are
    possible (those workers get no entry)."""
    excl = np.cumsum(row_nnz) - row_nnz
    total = int(row_nnz.sum())
    w = np.arange(workers + 1)
    starts = np.searchsorted(workers * excl, w * total, side="left")
    starts[-1] = row_nnz.size
    return starts


def worker_split(
    row_nnz: np.ndarray, z_grains: int, workers: int
) -> list[tuple[int, int, int, int]]:
    """The work split of one sub-group (``splitTileBetweenWorkers``): ``(row_start,
    num_rows, z_start, num_z_grains)`` per worker that gets work, in worker order."""
    rows = int(row_nnz.size)
    if rows > 2 * workers:
        s = row_range_starts(row_nnz, workers)
        return [(int(a), int(b - a), 0, z_grains) for a, b in itertools.pairwise(s) if b > a]
    return list(rectangle_split(rows, z_grains, workers))


def nz_range_split(count: int, workers: int) -> list[tuple[int, int]]:
    """The GradW work split: ``count`` nz values in at most ``workers`` near-equal
    ranges ``(start, length)``, the first ``count % workers`` one longer; empty ranges
    dropped."""
    q, r = divmod(count, workers)
    sizes = [q + (w < r) for w in range(workers)]
    starts = np.cumsum([0, *sizes[:-1]])
    return [(int(s), n) for s, n in zip(starts, sizes) if n > 0]


# ---- propagation ----


@dataclass(frozen=True)
class PropagationStep:
    """One step of the propagation phase: the buffers are first shifted along ``shift``
    (``"x"``, ``"y"``, ``"z"`` or ``None`` for the initial fill), then every tile computes on
    its buffer if ``compute``. ``offset`` is the actual ``(dx, dy, dz)``: the tile of PN
    ``(x, y, z)`` then holds the bucket of PN ``(x - dx, y - dy, z - dz)`` (modulo the
    partition counts). ``index`` is the loop index of the pseudo-code."""

    shift: str | None
    compute: bool
    offset: tuple[int, int, int]
    index: tuple[int, int, int]


def propagation_steps(partition: Sequence[int], overflow_info: np.ndarray) -> list[PropagationStep]:
    """The propagation schedule the device runs for an overflow info, as a host
    reference: starting just after what the distribution phase covered, X outermost, then Y,
    Z innermost, bounded by the triplet ``(xEnd, yEnd, zEnd)``, skipping the compute of X
    distances whose bit is clear (the X shift still happens). Empty when the pattern stayed
    within its Z groups."""
    px, py, pz = (int(p) for p in partition)
    end = [int(v) for v in overflow_info[:3]]
    bits = overflow_info[3:]
    remaining = end[0] * end[1] * end[2] - pz
    if remaining <= 0:
        return []
    idx = [0, 1, 0] if py > 1 else [1, 0, 0]
    offset = list(idx)
    steps = [PropagationStep(None, False, _triple(offset), _triple(idx))]
    sizes = (px, py, pz)

    def shift(dim: int) -> None:
        offset[dim] = (offset[dim] + 1) % sizes[dim]
        steps.append(PropagationStep(DIMS[dim], False, _triple(offset), _triple(idx)))

    def compute() -> None:
        last = steps[-1]
        steps[-1] = PropagationStep(last.shift, True, last.offset, _triple(idx))

    while idx[0] < end[0] and remaining:
        if int(bits[idx[0] // 2]) >> (idx[0] % 2) & 1:
            while idx[1] < end[1] and remaining:
                while idx[2] < end[2] and remaining:
                    compute()
                    remaining -= 1
                    if remaining:
                        idx[2] += 1
                        shift(2)
                if remaining:
                    idx[1] += 1
                    idx[2] = 0
                    shift(1)
        else:
            remaining -= (end[1] - idx[1]) * (end[2] - idx[2])
        if remaining:
            idx[0] += 1
            idx[1] = 0
            shift(0)
    return steps


def _triple(v: list[int]) -> tuple[int, int, int]:
    return v[0], v[1], v[2]
