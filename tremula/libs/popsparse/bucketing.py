"""Placing a pattern's grain blocks into buckets (PopLibs' ``SparsePartitionerImpl.cpp``).

Input: the grain blocks of the pattern, sorted row-major, as grain-row and grain-column
indices. Output (:class:`Assignment`): for every block its *home* row (a row of its home
PN's piece) and the sub-group it ends up in, and for every sub-group its bucket, its home
PN and its place among the bucket's sub-groups.

1. Tile pieces: the blocks of each (x, y) tile, concatenated row by row in row order,
   are cut into ``Pz`` near-equal pieces (the first ``n % Pz`` one block longer; a row may
   be cut); piece ``z`` belongs to PN ``(x Py + y) Pz + z``. Inside a PN the rows are
   ordered by decreasing length, ties by increasing row.
2. Strip: a PN whose piece does not fit its bucket (all PNs under
   ``forceBucketSpills``) keeps the longest prefix of its rows that fits (none under
   ``forceBucketSpills``); the other rows become its *overflow*.
3. Spill: over the PN ranges ``Pz`` (same x, y), ``Py Pz`` (same x) and all PNs
   (the last two swapped under ``forceBucketSpills``), each run twice (whole rows, then
   also part of a row, taken from the row's end), overflows in decreasing size (ties by PN)
   are offered to candidate PNs of their range: with ``optimiseForSpeed`` the PN itself
   (not under ``forceBucketSpills``) then the PNs behind it cyclically, else the PNs in
   increasing fill (nz blocks, ties by index). Each candidate takes the longest prefix of
   the remaining rows (plus a part of the next row in the second run) that fits as a new
   sub-group. Under ``forceBucketSpills``, rows that no other PN has room for finally go
   back to their own PN (as a new sub-group), so that the test mode never fails a pattern
   the normal mode places.
4. What is left raises :class:`BucketOverflowError` ("Overflow in buckets").

Bucket accounting, in uint16 words, per sub-group of ``r`` rows and ``n`` grain
blocks: element-wise ``9 + 5 W + (1 + 4 Wg if GradW) + 2 r + n`` with ``W = Wg = 6``
(with ``useActualWorkerSplitCosts`` the workers that get work); block
``7 + (4 x 6 if GradW) + 2 r + n``; non-shared GradA meta-info ``9 + 5 x 6 + 2 c + 2 n``
(``c`` distinct columns). A bucket fits when each meta-info part is at most its size - 1
(room for the 0 terminator) and ``n`` at most ``nzElemsPerBucket / blockArea``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tremula.libs.popsparse.errors import BucketOverflowError
from tremula.libs.popsparse.layout import (
    grains_per_partition,
    lex_order,
    nz_range_split,
    run_starts,
    worker_split,
)
from tremula.libs.popsparse.plan import Plan

WORKERS = 6


@dataclass
class Assignment:
    """Where every grain block goes. Arrays ``elem_*`` are in *home order* (by home PN,
    then home row, then column); ``order`` maps home order to the input block index."""

    order: np.ndarray
    elem_row: np.ndarray  # home row id of each block (index into row_*)
    row_pn: np.ndarray  # home PN of each home row
    row_tile_row: np.ndarray  # grain row within the tile
    elem_col: np.ndarray  # grain column within the tile
    elem_sg: np.ndarray  # sub-group of each block
    sg_bucket: np.ndarray  # bucket of each sub-group, sub-groups in creation order
    sg_pn: np.ndarray  # home PN of each sub-group


class _Costing:
    """Meta-info words and nz blocks of a sub-group (the accounting above)."""

    def __init__(self, plan: Plan) -> None:
        opts = plan.options
        self.block = plan.method.is_block
        self.grad_w = opts.do_grad_w_pass
        self.grad_a = plan.has_grad_a_meta_info
        self.actual = opts.use_actual_worker_split_costs and not self.block
        self.z_grains = plan.z_tile // plan.z_grain
        area = plan.block_dimensions[0] * plan.block_dimensions[1]
        self.caps = np.array(
            [
                plan.fwd_meta_info_elems_per_bucket - 1,
                max(plan.grad_a_meta_info_elems_per_bucket - 1, 0),
                plan.nz_elems_per_bucket // area,
            ]
        )

    @property
    def additive(self) -> bool:
        """The cost is ``base + 2 rows + nz`` (no distinct columns, fixed workers)."""
        return not (self.grad_a or self.actual)

    @property
    def base(self) -> int:
        """Forward words of an empty sub-group when :attr:`additive`."""
        if self.block:
            return 7 + (4 * WORKERS if self.grad_w else 0)
        return 9 + 5 * WORKERS + (1 + 4 * WORKERS if self.grad_w else 0)

    def cost(self, lens: np.ndarray, distinct: int) -> np.ndarray:
        """``[fwd words, GradA words, nz blocks]`` of a sub-group with rows of ``lens``."""
        rows, n = lens.size, int(lens.sum())
        if self.block:
            fwd = 7 + (4 * WORKERS if self.grad_w else 0) + 2 * rows + n
        else:
            w = len(worker_split(lens, self.z_grains, WORKERS)) if self.actual else WORKERS
            wg = len(nz_range_split(n, WORKERS)) if self.actual else WORKERS
            fwd = 9 + 5 * w + (1 + 4 * wg if self.grad_w else 0) + 2 * rows + n
        grad_a = 9 + 5 * WORKERS + 2 * distinct + 2 * n if self.grad_a else 0
        return np.array([fwd, grad_a, n])


@dataclass
class _Overflow:
    """The rows a PN could not keep: home rows ``[lo, hi)``; of row ``lo`` only its first
    ``head`` blocks remain (parts of its end were placed already)."""

    pn: int
    lo: int
    hi: int
    head: int
    nz: int = field(default=0)


class Bucketing:
    """State of the placement: the home pieces, bucket fills and sub-groups."""

    def __init__(self, plan: Plan, rows_g: np.ndarray, cols_g: np.ndarray) -> None:
        self.plan = plan
        self.costing = _Costing(plan)
        self._pieces(rows_g, cols_g)
        nb = plan.num_buckets
        self.used = np.zeros((nb, 3), dtype=np.int64)
        self.sg_bucket: list[int] = []
        self.sg_pn: list[int] = []
        self.elem_sg = np.full(self.order.size, -1, dtype=np.int64)

    # ---- 1. tile pieces and the Z split ----
    def _pieces(self, rows_g: np.ndarray, cols_g: np.ndarray) -> None:
        p = self.plan
        px, py, pz = p.partition.xyz
        x, y, _ = p.params.shape
        bx, by = p.block_dimensions
        per_x = grains_per_partition(x, px, bx)
        per_y = grains_per_partition(y, py, by)
        xp, yp = rows_g // per_x, cols_g // per_y
        group = xp * py + yp
        stream = lex_order(group)  # the input is row-major: (tile, row, column)
        group = group[stream]
        pn = group * pz + self._z_split(group, px * py, pz)
        tile_row = (rows_g - xp * per_x)[stream]
        seg_start = run_starts(pn, tile_row)
        seg_len = np.diff(np.r_[seg_start, stream.size])
        seg_pn = pn[seg_start]
        longest = seg_len.max(initial=0) - seg_len
        rank = lex_order(seg_pn, longest, tile_row[seg_start])  # longest rows first
        lens = seg_len[rank]
        starts = seg_start[rank]
        home = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(stream.size)
        self.order = stream[home]
        self.row_len = lens
        self.row_pn = seg_pn[rank]
        self.row_tile_row = tile_row[starts]
        self.row_start = np.cumsum(lens) - lens
        self.elem_row = np.repeat(np.arange(lens.size), lens)
        self.elem_col = (cols_g - yp * per_y)[self.order]
        nb = p.num_buckets
        self.pn_rows = np.searchsorted(self.row_pn, np.arange(nb + 1))  # rows of PN b

    @staticmethod
    def _z_split(group: np.ndarray, groups: int, pz: int) -> np.ndarray:
        """Z piece of each block of a (tile-sorted) stream: each tile's ``n`` blocks in
        ``pz`` pieces, the first ``n % pz`` of them one longer."""
        if pz == 1:
            return np.zeros_like(group)
        counts = np.bincount(group, minlength=groups)
        pos = np.arange(group.size) - (np.cumsum(counts) - counts)[group]
        q, r = counts[group] // pz, counts[group] % pz
        return np.where(
            pos < r * (q + 1),
            pos // np.maximum(q + 1, 1),
            r + (pos - r * (q + 1)) // np.maximum(q, 1),
        )

    # ---- costs of prefixes of an overflow's rows ----
    def _lens(self, o: _Overflow) -> np.ndarray:
        lens = self.row_len[o.lo : o.hi].copy()
        if lens.size:
            lens[0] = o.head
        return lens

    def _elements(self, o: _Overflow, k: int, j: int) -> list[tuple[int, int]]:
        """Home-order ranges of the first ``k`` remaining rows and the last ``j`` blocks
        of the next one."""
        out = []
        if k:
            s = int(self.row_start[o.lo])
            out.append((s, s + o.head))
        if k > 1:
            out.append(
                (
                    int(self.row_start[o.lo + 1]),
                    int(self.row_start[o.lo + k - 1] + self.row_len[o.lo + k - 1]),
                )
            )
        if j:
            r = o.lo + k
            end = int(self.row_start[r]) + (o.head if k == 0 else int(self.row_len[r]))
            out.append((end - j, end))
        return out

    def _distinct(self, ranges: list[tuple[int, int]]) -> int:
        if not self.costing.grad_a:
            return 0
        if not ranges:
            return 0
        return int(np.unique(np.concatenate([self.elem_col[a:b] for a, b in ranges])).size)

    def _chunk_cost(self, o: _Overflow, k: int, j: int) -> np.ndarray:
        lens = self._lens(o)[:k]
        if j:
            lens = np.r_[lens, j]
        return self.costing.cost(lens, self._distinct(self._elements(o, k, j)))

    def _largest_fit(self, o: _Overflow, free: np.ndarray, partial: bool) -> tuple[int, int]:
        """``(k, j)``: the most whole rows ``k`` and then blocks ``j`` from the end of the
        next row (``partial`` only) that fit ``free`` as a new sub-group."""

        if self.costing.additive:
            return self._largest_fit_additive(o, int(free[0]), int(free[2]), partial)

        def fits(k: int, j: int) -> bool:
            return bool(np.all(self._chunk_cost(o, k, j) <= free))

        k = _last_true(lambda k: fits(k, 0), o.hi - o.lo)
        j = 0
        if partial and o.lo + k < o.hi:
            cur = o.head if k == 0 else int(self.row_len[o.lo + k])
            j = _last_true(lambda j: fits(k, j), cur - 1)
        return k, j

    def _largest_fit_additive(
        self, o: _Overflow, words: int, blocks: int, partial: bool
    ) -> tuple[int, int]:
        """:meth:`_largest_fit` in closed form for an additive cost: ``k`` rows holding
        ``c(k)`` blocks fit when ``base + 2 k + c(k) <= words`` and ``c(k) <= blocks``."""
        base, start, length = self.costing.base, self.row_start, self.row_len

        def blocks_in(k: int) -> int:  # blocks of the first k remaining rows
            if k <= 1:
                return o.head * k
            return o.head + int(start[o.lo + k - 1] + length[o.lo + k - 1] - start[o.lo + 1])

        def fits(k: int) -> bool:
            c = blocks_in(k)
            return base + 2 * k + c <= words and c <= blocks

        k = _last_true(fits, o.hi - o.lo)
        j = 0
        if partial and o.lo + k < o.hi:
            cur = o.head if k == 0 else int(length[o.lo + k])
            c = blocks_in(k)
            j = max(0, min(cur - 1, blocks - c, words - base - 2 * (k + 1) - c))
        return k, j

    # ---- placement ----
    def _new_sub_group(
        self, bucket: int, pn: int, ranges: list[tuple[int, int]], cost: np.ndarray
    ) -> None:
        sg = len(self.sg_bucket)
        self.sg_bucket.append(bucket)
        self.sg_pn.append(pn)
        for a, b in ranges:
            self.elem_sg[a:b] = sg
        self.used[bucket] += cost

    def _place(self, o: _Overflow, bucket: int, partial: bool) -> None:
        """Move the largest fitting prefix of ``o`` into ``bucket`` (maybe nothing)."""
        free = self.costing.caps - self.used[bucket]
        k, j = self._largest_fit(o, free, partial)
        if k == 0 and j == 0:
            return
        ranges = self._elements(o, k, j)
        self._new_sub_group(bucket, o.pn, ranges, self._chunk_cost(o, k, j))
        o.nz -= sum(b - a for a, b in ranges)
        if o.nz == 0:
            o.lo = o.hi
            return
        nxt = o.lo + k
        cur = o.head if k == 0 else int(self.row_len[nxt])
        o.lo, o.head = nxt, cur - j

    def home(self) -> list[_Overflow]:
        """Keep each PN's piece, or its longest fitting prefix; return the overflows.

        Pieces that fit whole (the common case) are kept in one vectorised step; only the
        others are stripped row by row."""
        nb = self.plan.num_buckets
        rows = np.diff(self.pn_rows)
        nz = np.bincount(self.row_pn, weights=self.row_len, minlength=nb).astype(np.int64)
        whole = np.zeros(nb, dtype=bool)
        if not self.plan.options.force_bucket_spills:
            whole = (rows > 0) & np.all(self._piece_costs(rows, nz) <= self.costing.caps, axis=1)
        keep = np.flatnonzero(whole)
        sg_of_pn = np.full(nb, -1, dtype=np.int64)
        sg_of_pn[keep] = np.arange(keep.size)
        self.sg_bucket.extend(keep.tolist())
        self.sg_pn.extend(keep.tolist())
        self.elem_sg = sg_of_pn[self.row_pn][self.elem_row]
        self.used[keep] = self._piece_costs(rows, nz)[keep]
        if self.costing.actual:  # the actual workers of each kept piece
            for b in keep.tolist():
                lens = self.row_len[self.pn_rows[b] : self.pn_rows[b + 1]]
                self.used[b, 0] = self.costing.cost(lens, 0)[0]
        overflows = []
        for b in np.flatnonzero(~whole & (rows > 0)).tolist():
            lo, hi = int(self.pn_rows[b]), int(self.pn_rows[b + 1])
            o = _Overflow(b, lo, hi, int(self.row_len[lo]), int(nz[b]))
            if not self.plan.options.force_bucket_spills:
                self._place(o, b, partial=False)
            overflows.append(o)
        return overflows

    def _piece_costs(self, rows: np.ndarray, nz: np.ndarray) -> np.ndarray:
        """``[PN, 3]`` costs of every whole piece with 6 workers (an upper bound of the
        cost with the actual workers, which only the stripped PNs use)."""
        c = self.costing
        if c.block:
            fwd = 7 + (4 * WORKERS if c.grad_w else 0) + 2 * rows + nz
        else:
            fwd = 9 + 5 * WORKERS + (1 + 4 * WORKERS if c.grad_w else 0) + 2 * rows + nz
        grad_a = np.zeros_like(fwd)
        if c.grad_a:
            pairs = np.unique(self.row_pn[self.elem_row] * (1 << 32) + self.elem_col)
            distinct = np.bincount(pairs >> 32, minlength=rows.size)
            grad_a = 9 + 5 * WORKERS + 2 * distinct + 2 * nz
        return np.stack([fwd, grad_a, nz], axis=1)

    def spill(self, overflows: list[_Overflow]) -> None:
        """Offer the overflows to other PNs, range by range (step 3 above)."""
        p = self.plan
        px, py, pz = p.partition.xyz
        opts = p.options
        ranges = [pz, py * pz, px * py * pz]
        if opts.force_bucket_spills:
            ranges[1], ranges[2] = ranges[2], ranges[1]
        for size in ranges:
            for partial in (False, True):
                active = sorted((o for o in overflows if o.nz), key=lambda o: (-o.nz, o.pn))
                for o in active:
                    for c in self._candidates(o, size, partial):
                        self._place(o, c, partial)
                        if not o.nz:
                            break
        if opts.force_bucket_spills:  # last resort: rows no other PN has room for go home
            for o in overflows:
                if o.nz:
                    self._place(o, o.pn, partial=True)
        left = [o for o in overflows if o.nz]
        if left:
            raise BucketOverflowError(self._overflow_message(left))

    def _candidates(self, o: _Overflow, size: int, partial: bool) -> list[int]:
        """Candidate buckets of a range, in order, with room for the first remaining row
        (or one block of it when ``partial``)."""
        start = o.pn // size * size
        skip_self = self.plan.options.force_bucket_spills
        if self.plan.options.optimise_for_speed:
            cands = start + (o.pn - start - np.arange(size)) % size
        else:
            pool = np.arange(start, start + size)
            cands = pool[np.lexsort((pool, self.used[pool, 2]))]
        if skip_self:
            cands = cands[cands != o.pn]
        smallest = self._chunk_cost(o, 0, 1) if partial else self._chunk_cost(o, 1, 0)
        room = np.all(self.costing.caps - self.used[cands] >= smallest, axis=1)
        return [int(c) for c in cands[room]]

    def _overflow_message(self, left: list[_Overflow]) -> str:
        p = self.plan
        caps = self.costing.caps
        nb = p.num_buckets
        need = np.zeros(3, dtype=np.int64)
        for o in left:
            need += self._chunk_cost(o, o.hi - o.lo, 0)
        where = ", ".join(
            f"PN {o.pn} (x={o.pn // (p.partition.y * p.partition.z)}, "
            f"y={o.pn // p.partition.z % p.partition.y}, z={o.pn % p.partition.z}): "
            f"{o.nz} blocks"
            for o in left[:4]
        )
        more = f" and {len(left) - 4} more PNs" if len(left) > 4 else ""
        return (
            f"Overflow in buckets: {sum(o.nz for o in left)} of {self.order.size} non-zero "
            f"blocks could not be placed (overflow metainfo {int(need[0])}/"
            f"{int((caps[0] - self.used[:, 0]).sum())} words free of {caps[0] * nb}, nz values "
            f"{int(need[2])}/{int((caps[2] - self.used[:, 2]).sum())} blocks free of "
            f"{caps[2] * nb}); left over from {where}{more}. Raise "
            f"metaInfoBucketOversizeProportion (now "
            f"{p.options.meta_info_bucket_oversize_proportion}) or plan for a higher density"
        )

    def result(self) -> Assignment:
        return Assignment(
            self.order,
            self.elem_row,
            self.row_pn,
            self.row_tile_row,
            self.elem_col,
            self.elem_sg,
            np.array(self.sg_bucket, dtype=np.int64),
            np.array(self.sg_pn, dtype=np.int64),
        )


def _last_true(pred, n: int) -> int:
    """Largest ``k`` in ``[0, n]`` with ``pred(k)`` for a predicate true at 0 and monotone
    (true then false); binary search."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def assign(plan: Plan, rows_g: np.ndarray, cols_g: np.ndarray) -> Assignment:
    """Place the grain blocks (sorted row-major) into buckets: pieces, strip, spill."""
    state = Bucketing(plan, rows_g, cols_g)
    state.spill(state.home())
    return state.result()
