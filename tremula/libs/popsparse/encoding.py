"""Encoding placed blocks into the flat meta-info and nz tensors (PopLibs'
``SparsePartitionerImpl.cpp``, ``SparseMetaInfo.hpp``), vectorised over sub-groups, rows and
blocks; and the overflow info.

The word layouts are documented in ``OVERVIEW.md`` ("Meta-info"); every offset below is in
uint16 words from the start of the entry named, every nz offset in values of the data type
(element-wise) or as stated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.libs.popsparse.bucketing import WORKERS, Assignment
from tremula.libs.popsparse.errors import MetaInfoError, PopsparseError
from tremula.libs.popsparse.layout import (
    lex_order,
    num_overflow_info_elems,
    rectangle_split,
    run_starts,
)
from tremula.libs.popsparse.plan import Plan

UINT16_MAX = 0xFFFF


@dataclass
class _Groups:
    """Sub-groups, rows and blocks in their final (encoded) order."""

    bucket: np.ndarray  # per sub-group
    x: np.ndarray
    y: np.ndarray
    first_row: np.ndarray
    nrows: np.ndarray
    first_elem: np.ndarray
    nnz: np.ndarray
    row_sg: np.ndarray  # per row
    row_start: np.ndarray  # first block of the row (global final index)
    row_len: np.ndarray
    row_tile_row: np.ndarray  # grain row within the tile
    elem_row: np.ndarray  # per block: its row
    elem_col: np.ndarray  # grain column within the tile
    elem_value: np.ndarray  # input block index


def order_groups(plan: Plan, a: Assignment) -> _Groups:
    """Sub-groups by bucket then creation; inside, rows in home order, blocks by column."""
    py, pz = plan.partition.y, plan.partition.z
    n_sg = a.sg_bucket.size
    perm = np.lexsort((np.arange(n_sg), a.sg_bucket))
    rank = np.empty(n_sg, dtype=np.int64)
    rank[perm] = np.arange(n_sg)
    # a sub-group holds (parts of) rows of one PN, already in (row, column) home order
    f = lex_order(rank[a.elem_sg])
    f_sg, f_row = rank[a.elem_sg[f]], a.elem_row[f]
    row_start = run_starts(f_sg, f_row)
    row_len = np.diff(np.r_[row_start, f.size])
    row_sg = f_sg[row_start]
    nrows = np.bincount(row_sg, minlength=n_sg)
    nnz = np.bincount(f_sg, minlength=n_sg)
    pn = a.sg_pn[perm]
    return _Groups(
        bucket=a.sg_bucket[perm],
        x=pn // (py * pz),
        y=pn // pz % py,
        first_row=np.cumsum(nrows) - nrows,
        nrows=nrows,
        first_elem=np.cumsum(nnz) - nnz,
        nnz=nnz,
        row_sg=row_sg,
        row_start=row_start,
        row_len=row_len,
        row_tile_row=a.row_tile_row[f_row[row_start]],
        elem_row=np.repeat(np.arange(row_start.size), row_len),
        elem_col=a.elem_col[f],
        elem_value=a.order[f],
    )


# ---- work splits, vectorised over sub-groups (``splitTileBetweenWorkers``) ----


def worker_table(
    nrows: np.ndarray, row_sg: np.ndarray, row_len: np.ndarray, first_row: np.ndarray, z_grains: int
) -> tuple[np.ndarray, ...]:
    """Per worker that gets work: ``(sub-group, index in it, first row in the sub-group,
    rows, first Z grain, Z grains)``, ordered by sub-group then worker; and workers per
    sub-group. Splits as :func:`layout.worker_split`."""
    n_sg = nrows.size
    pieces = np.zeros((n_sg, WORKERS, 4), dtype=np.int64)
    big = nrows > 2 * WORKERS
    excl = np.cumsum(row_len) - row_len
    excl = excl - excl[first_row][row_sg]
    total = np.bincount(row_sg, weights=row_len, minlength=n_sg).astype(np.int64)
    starts = np.zeros((n_sg, WORKERS + 1), dtype=np.int64)
    for w in range(1, WORKERS + 1):
        hit = WORKERS * excl < w * total[row_sg]
        starts[:, w] = np.bincount(row_sg, weights=hit, minlength=n_sg)
    pieces[big, :, 0] = starts[big, :-1]
    pieces[big, :, 1] = np.diff(starts[big], axis=1)
    pieces[big, :, 3] = z_grains
    for rows in np.unique(nrows[~big]).tolist():
        if rows == 0:
            continue
        split = np.array(rectangle_split(rows, z_grains, WORKERS), dtype=np.int64)
        pieces[np.flatnonzero(~big & (nrows == rows)), : len(split)] = split
    sg, slot = np.nonzero(pieces[:, :, 1] > 0)  # workers without rows get no entry
    p = pieces[sg, slot]
    count = np.bincount(sg, minlength=n_sg)
    k = np.arange(sg.size) - (np.cumsum(count) - count)[sg]
    return sg, k, p[:, 0], p[:, 1], p[:, 2], p[:, 3], count


def grad_w_table(nnz: np.ndarray) -> tuple[np.ndarray, ...]:
    """The GradW split of each sub-group's blocks (``nz_range_split``): ``(sub-group, index
    in it, first block, blocks)`` per worker, and workers per sub-group."""
    q, r = nnz // WORKERS, nnz % WORKERS
    v = np.arange(WORKERS)
    sizes = q[:, None] + (v[None, :] < r[:, None])
    starts = np.cumsum(sizes, axis=1) - sizes
    sg, k = np.nonzero(sizes > 0)  # non-empty ranges are a prefix: k is the entry index
    return sg, k, starts[sg, k], sizes[sg, k], np.bincount(sg, minlength=nnz.size)


class _Words:
    """A flat int64 buffer of meta-info words with checked writes."""

    def __init__(self, size: int) -> None:
        self.words = np.zeros(size, dtype=np.int64)

    def put(self, positions: np.ndarray, values: np.ndarray, what: str) -> None:
        values = np.broadcast_to(np.asarray(values, dtype=np.int64), np.shape(positions))
        bad = np.flatnonzero((values < 0) | (values > UINT16_MAX))
        if bad.size:
            raise MetaInfoError(
                f"Metainfo bucket element exceeds type bound: {what} = {values[bad[0]]} at "
                f"meta-info word {positions[bad[0]]} does not fit 16 bits"
            )
        self.words[positions] = values


def _bucket_offsets(
    bucket: np.ndarray, size: np.ndarray, capacity: int, what: str, num_buckets: int
) -> np.ndarray:
    """Offset of each entry (sorted by bucket) inside its bucket; checks the fill (plus
    the 0 terminator) against ``capacity``."""
    cs = np.cumsum(size) - size
    first = np.searchsorted(bucket, bucket)
    fill = np.bincount(bucket, weights=size, minlength=num_buckets).astype(np.int64)
    over = np.flatnonzero(fill + 1 > capacity)
    if over.size:
        b = int(over[0])
        raise PopsparseError(
            f"Meta info exceeds specified bucket size: {what} bucket {b} needs {fill[b] + 1} "
            f"words, has {capacity} (internal error: the spiller's accounting is wrong)"
        )
    return cs - cs[first]


def encode_meta_info(plan: Plan, g: _Groups) -> np.ndarray:
    """The whole meta-info tensor: overflow info, then per bucket its forward meta-info
    and, for non-shared element-wise GradA, its GradA meta-info."""
    out = _Words(plan.meta_info_elems)
    oi = overflow_info(plan, g.bucket, g.x, g.y)
    out.put(np.arange(oi.size), oi, "overflow info")
    base = plan.num_overflow_info_elems + g.bucket * plan.meta_info_elems_per_bucket
    if plan.method.is_block:
        _encode_block(plan, g, out, base)
    else:
        _encode_element_wise(plan, g, out, base)
        if plan.has_grad_a_meta_info:
            _encode_grad_a(plan, g, out, base + plan.fwd_meta_info_elems_per_bucket)
    return out.words.astype(np.uint16)


def overflow_info(plan: Plan, bucket: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[xEnd, yEnd, zEnd, bitset...]``: the farthest (dx, dy), lexicographic,
    of any sub-group from its bucket's own tile, and the X distances present (2 bits per
    word, as PopLibs packs them)."""
    px, py, pz = plan.partition.xyz
    info = np.zeros(num_overflow_info_elems(px), dtype=np.int64)
    dx = (x - bucket // (py * pz)) % px
    dy = (y - bucket // pz % py) % py
    far = int((dx * py + dy).max()) if dx.size else 0
    x_end = far // py + 1
    info[:3] = x_end, (far % py + 1) if x_end == 1 else py, pz
    for d in np.unique(dx).tolist():
        info[3 + d // 2] |= 1 << (d % 2)
    return info


def _row_positions(
    g: _Groups, sg_pos: np.ndarray, r0: np.ndarray, words_per_elem: int
) -> np.ndarray:
    """Word position of each row entry: rows start ``r0`` words into their sub-group, each
    row takes 2 words plus ``words_per_elem`` per block."""
    j = np.arange(g.row_sg.size) - g.first_row[g.row_sg]
    excl = g.row_start - g.first_elem[g.row_sg]
    return sg_pos[g.row_sg] + r0[g.row_sg] + 2 * j + words_per_elem * excl


def _encode_element_wise(plan: Plan, g: _Groups, out: _Words, base: np.ndarray) -> None:
    """Forward sub-groups: 9-word header, 5 words per worker, the GradW split
    (1 + 4 words per worker) when GradW is planned, then the rows."""
    py, tf, z_tile = plan.partition.y, plan.type_factor, plan.z_tile
    zg = plan.z_grain
    wsg, wk, wr0, wnr, wz0, wnz, nw = worker_table(
        g.nrows, g.row_sg, g.row_len, g.first_row, z_tile // zg
    )
    grad_w = plan.options.do_grad_w_pass
    gsg, gk, gstart, glen, ngw = grad_w_table(g.nnz)
    r0 = 9 + 5 * nw + ((1 + 4 * ngw) if grad_w else 0)
    size = r0 + 2 * g.nrows + g.nnz
    pos = base + _bucket_offsets(
        g.bucket, size, plan.fwd_meta_info_elems_per_bucket, "forward", plan.num_buckets
    )
    header = [
        g.x * py + g.y + 1,
        g.x,
        g.y,
        g.nnz,
        size,
        np.full_like(size, z_tile),
        g.nrows - 1,
        r0,
        nw,
    ]
    for i, (value, what) in enumerate(zip(header, _EW_HEADER)):
        out.put(pos + i, value, what)
    row_pos = _row_positions(g, pos, r0, 1)
    row_excl = g.row_start - g.first_elem[g.row_sg]
    first = g.first_row[wsg] + wr0
    entry = pos[wsg] + 9 + 5 * wk
    for i, (value, what) in enumerate(
        zip([row_excl[first], wnz * zg, wz0 * zg, wnr - 1, row_pos[first] - entry], _EW_WORKER)
    ):
        out.put(entry + i, value, what)
    if grad_w:
        out.put(pos + 9 + 5 * nw, ngw, "numGradWWorkers")
        _put_grad_w(g, out, pos[gsg] + 10 + 5 * nw[gsg] + 4 * gk, gsg, gstart, glen, row_pos, 1)
    out.put(row_pos, g.row_tile_row, "offsetXInQ")
    out.put(row_pos + 1, g.row_len, "numY")
    elem_pos = row_pos[g.elem_row] + 2 + np.arange(g.elem_row.size) - g.row_start[g.elem_row]
    out.put(elem_pos, g.elem_col * tf * z_tile, "yOffset")


_EW_HEADER = (
    "sub-group id",
    "xPartition",
    "yPartition",
    "sparseElementCount",
    "offsetToNextSubGroup",
    "numZ",
    "numRows-1",
    "offsetToFirstOutputEntry",
    "numWorkers",
)
_EW_WORKER = (
    "worker sparseOffset",
    "worker numZ",
    "worker offsetZ",
    "worker numRows-1",
    "worker metaInfoOffset",
)


def _put_grad_w(
    g: _Groups,
    out: _Words,
    entry: np.ndarray,
    gsg: np.ndarray,
    gstart: np.ndarray,
    glen: np.ndarray,
    row_pos: np.ndarray,
    scale: int,
) -> None:
    """GradW worker entries: sparse offset (x ``scale``), words to the row holding the
    first block, position in that row, block count."""
    elem = g.first_elem[gsg] + gstart
    row = g.elem_row[elem]
    out.put(entry, gstart * scale, "GradW sparseOffset")
    out.put(entry + 1, row_pos[row] - entry, "GradW offsetToOutputEntry")
    out.put(entry + 2, elem - g.row_start[row], "GradW offsetIntoFirstRow")
    out.put(entry + 3, glen, "GradW totalNumY")


def _encode_block(plan: Plan, g: _Groups, out: _Words, base: np.ndarray) -> None:
    """Block sub-groups: 7-word header, GradW entries, then the block rows."""
    py = plan.partition.y
    bx, by = plan.block_dimensions
    area = bx * by
    grad_w = plan.options.do_grad_w_pass
    gsg, gk, gstart, glen, ngw = grad_w_table(g.nnz)
    ngw = ngw if grad_w else np.zeros_like(ngw)
    r0 = 7 + 4 * ngw
    size = r0 + 2 * g.nrows + g.nnz
    pos = base + _bucket_offsets(
        g.bucket, size, plan.fwd_meta_info_elems_per_bucket, "forward", plan.num_buckets
    )
    header = [g.x * py + g.y + 1, g.x, g.y, g.nnz * area, size, g.nrows - 1, ngw]
    names = (
        "sub-group id",
        "xPartition",
        "yPartition",
        "offsetToNextSubGroupSparseEntries",
        "offsetToNextSubGroupMetaInfo",
        "numBlockRows-1",
        "numGradWWorkers",
    )
    for i, (value, what) in enumerate(zip(header, names)):
        out.put(pos + i, value, what)
    row_pos = _row_positions(g, pos, r0, 1)
    if grad_w:
        _put_grad_w(g, out, pos[gsg] + 7 + 4 * gk, gsg, gstart, glen, row_pos, area)
    out.put(row_pos, g.row_tile_row * bx, "offsetXInQ")
    out.put(row_pos + 1, g.row_len - 1, "numBlocksInRow-1")
    elem_pos = row_pos[g.elem_row] + 2 + np.arange(g.elem_row.size) - g.row_start[g.elem_row]
    out.put(elem_pos, g.elem_col * by, "offsetYInS")


def _encode_grad_a(plan: Plan, g: _Groups, out: _Words, base: np.ndarray) -> None:
    """Non-shared GradA sub-groups, one per forward sub-group in the same order:
    the sub-group transposed (rows = forward columns, increasing), each block a pair
    (position in the forward sub-group x typeFactor, forward row offset x typeFactor x
    numZ); worker sparse offsets are 0."""
    py, tf, z_tile, zg = plan.partition.y, plan.type_factor, plan.z_tile, plan.z_grain
    n = g.elem_row.size
    sg = g.row_sg[g.elem_row]
    fwd_pos = np.arange(n) - g.first_elem[sg]
    t = lex_order(sg, g.elem_col, fwd_pos)
    t_sg, t_col = sg[t], g.elem_col[t]
    starts = run_starts(t_sg, t_col)
    tg = _Groups(
        bucket=g.bucket,
        x=g.x,
        y=g.y,
        first_row=np.zeros(0, np.int64),
        nrows=np.bincount(t_sg[starts], minlength=g.nnz.size),
        first_elem=g.first_elem,
        nnz=g.nnz,
        row_sg=t_sg[starts],
        row_start=starts,
        row_len=np.diff(np.r_[starts, n]),
        row_tile_row=t_col[starts],
        elem_row=np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n])),
        elem_col=t_col,
        elem_value=t,
    )
    tg.first_row = np.cumsum(tg.nrows) - tg.nrows
    wsg, wk, wr0, wnr, wz0, wnz, nw = worker_table(
        tg.nrows, tg.row_sg, tg.row_len, tg.first_row, z_tile // zg
    )
    r0 = 9 + 5 * nw
    size = r0 + 2 * tg.nrows + 2 * tg.nnz
    pos = base + _bucket_offsets(
        g.bucket, size, plan.grad_a_meta_info_elems_per_bucket, "GradA", plan.num_buckets
    )
    header = [
        g.x * py + g.y + 1,
        g.x,
        g.y,
        g.nnz,
        size,
        np.full_like(size, z_tile),
        tg.nrows - 1,
        r0,
        nw,
    ]
    for i, (value, what) in enumerate(zip(header, _EW_HEADER)):
        out.put(pos + i, value, "GradA " + what)
    row_pos = _row_positions(tg, pos, r0, 2)
    first = tg.first_row[wsg] + wr0
    entry = pos[wsg] + 9 + 5 * wk
    for i, (value, what) in enumerate(
        zip([np.zeros_like(wsg), wnz * zg, wz0 * zg, wnr - 1, row_pos[first] - entry], _EW_WORKER)
    ):
        out.put(entry + i, value, "GradA " + what)
    out.put(row_pos, tg.row_tile_row, "GradA offsetXInQ")
    out.put(row_pos + 1, tg.row_len, "GradA numY")
    k = np.arange(n) - tg.row_start[tg.elem_row]
    pair = row_pos[tg.elem_row] + 2 + 2 * k
    out.put(pair, fwd_pos[t] * tf, "GradA nz offset")
    out.put(pair + 1, g.row_tile_row[g.elem_row[t]] * tf * z_tile, "GradA yOffset")


def encode_nz(plan: Plan, g: _Groups, blocks: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """nz buckets: each bucket's blocks in sub-group, row, column order, each
    block row-major, zero padding to ``nzElemsPerBucket``."""
    area = blocks.shape[1] if blocks.ndim == 2 else 1
    nz = np.zeros(plan.nz_elems, dtype=dtype)
    sg = g.row_sg[g.elem_row]
    bucket = g.bucket[sg]
    first = np.searchsorted(bucket, np.arange(plan.num_buckets))
    rank = np.arange(bucket.size) - first[bucket]
    if rank.size and int(rank.max()) + 1 > plan.nz_elems_per_bucket // area:
        raise PopsparseError("NZ elements exceeds specified bucket size (internal error)")
    pos = (bucket * plan.nz_elems_per_bucket + rank * area)[:, None] + np.arange(area)
    nz[pos] = blocks[g.elem_value].reshape(-1, area)
    return nz
